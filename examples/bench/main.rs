//! Measured figures with real processes on this machine, for BENCHMARKS.md. Not a test: it runs
//! for minutes and only prints what it saw (long benchmarks must stay out of `cargo test`).
//!
//! ```sh
//! cargo build --release --workspace --examples   # the nodes, pilot-devnet and bare-axum
//! cargo run --release --example bench -- failover  --nodes 3 --transport http  --runs 30
//! cargo run --release --example bench -- failover  --nodes 5 --transport http  --runs 30
//! cargo run --release --example bench -- failover  --nodes 3 --transport pilot --runs 30
//! cargo run --release --example bench -- failover  --nodes 5 --transport pilot --runs 30
//! cargo run --release --example bench -- step-down --runs 30
//! cargo run --release --example bench -- sigterm   --runs 30
//! cargo run --release --example bench -- rolling   --nodes 3 --transport http  --runs 30
//! cargo run --release --example bench -- rolling   --nodes 5 --transport pilot --runs 30
//! cargo run --release --example bench -- idle      --nodes 3 --transport http --secs 30
//! cargo run --release --example bench -- idle      --nodes 3 --transport pilot --secs 30
//! cargo run --release --example bench -- api       --secs 10 --rounds 3   # needs wrk
//! cargo run --release --example bench -- stability --nodes 25 --transport pilot --secs 60
//! cargo run --release --example bench -- attack    --secs 10              # needs wrk
//! cargo run --release --example bench -- tls       --secs 10 --rounds 3   # needs wrk
//! cargo run --release --example bench -- faults    --transport http  --secs 60 --runs 1
//! cargo run --release --example bench -- faults    --transport pilot --secs 60 --runs 1
//! cargo run --release --example bench -- watchers  --watchers 100 --changes 10
//! cargo run --release --example bench -- observers --transport http  --secs 20
//! cargo run --release --example bench -- observers --transport pilot --secs 20
//! cargo run --release --example bench -- groups    --groups 1,10,100,1000 --secs 20
//! cargo run --release --example bench -- side-by-side --groups 100,300 --secs 20
//! ```
//!
//! Nodes run at default timings (h 500 ms, L 2 s, T 3 s) with `--preempt-after 0s`, so that a
//! restarted higher-ranked node does not take leadership back in the middle of the next run
//! (`faults` excepted: it keeps every default, as its tests do, and starts a fresh cluster per
//! run); the pilot transport needs the real pilotctl (`scripts/fetch-pilotctl.sh`).

use support::app;
mod attack;
mod faults;
mod groups;
mod observers;
mod tls;
mod watchers;
use support::devnet;
use support::flood;
use support::pilot_cluster;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio::time::Instant;

use app::{bin, children_of, free_port, wait_ready, wait_up, Cluster, T, TOKEN};
use devnet::Devnet;
use support::watch::{Round, Watcher};

/// Generous bound on one failover: far above the goal, so that a slow run is measured rather
/// than lost.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);
const STARTUP_LIMIT: Duration = Duration::from_secs(30);

#[derive(Clone)]
struct Opts {
    scenario: String,
    nodes: usize,
    transport: String,
    runs: usize,
    secs: u64,
    rounds: usize,
    /// Whether `--runs` and `--secs` were given: `faults` has defaults of its own (a run is
    /// minutes long, and the issue states its figure over 60 s).
    runs_given: bool,
    secs_given: bool,
    /// rolling: what each pass changes (`none`, `timings` 2 s/3 s <-> 10 s/16 s, `upgrade` from
    /// the previous release and back).
    change: String,
    /// kernel-deaf: which build the nodes run (`current`, or `previous`: the release before).
    build: String,
    /// kernel-deaf: what happens first (`nothing`, or `cut`: the first leader cut off both
    /// ways for 10 s and healed, then the next leader made deaf).
    before: String,
    /// watchers: how many `/events` streams, and how many leader changes they see.
    watchers: usize,
    changes: usize,
    /// observers: the counts measured one after the other.
    observers: Vec<usize>,
    /// groups: the numbers of groups measured one after the other.
    groups: Vec<usize>,
}

fn parse() -> Opts {
    let mut a = std::env::args().skip(1);
    let mut o = Opts {
        scenario: a.next().unwrap_or_else(|| usage("no scenario")),
        nodes: 3,
        transport: "http".into(),
        runs: 30,
        secs: 30,
        rounds: 2,
        runs_given: false,
        secs_given: false,
        change: "none".into(),
        build: "current".into(),
        before: "nothing".into(),
        watchers: 100,
        changes: 10,
        observers: vec![0, 50, 200],
        groups: vec![1, 10, 100, 1000],
    };
    while let Some(flag) = a.next() {
        let v = a.next().unwrap_or_else(|| usage("flag without value"));
        match flag.as_str() {
            "--nodes" => o.nodes = v.parse().unwrap_or_else(|_| usage("--nodes")),
            "--transport" => o.transport = v,
            "--runs" => {
                o.runs = v.parse().unwrap_or_else(|_| usage("--runs"));
                o.runs_given = true;
            }
            "--secs" => {
                o.secs = v.parse().unwrap_or_else(|_| usage("--secs"));
                o.secs_given = true;
            }
            "--rounds" => o.rounds = v.parse().unwrap_or_else(|_| usage("--rounds")),
            "--change" if ["none", "timings", "upgrade"].contains(&v.as_str()) => o.change = v,
            "--build" if ["current", "previous"].contains(&v.as_str()) => o.build = v,
            "--before" if ["nothing", "cut"].contains(&v.as_str()) => o.before = v,
            "--watchers" => o.watchers = v.parse().unwrap_or_else(|_| usage("--watchers")),
            "--changes" => o.changes = v.parse().unwrap_or_else(|_| usage("--changes")),
            "--observers" => {
                o.observers = v
                    .split(',')
                    .map(|n| n.trim().parse().unwrap_or_else(|_| usage("--observers")))
                    .collect()
            }
            "--groups" => {
                o.groups = v
                    .split(',')
                    .map(|n| n.trim().parse().unwrap_or_else(|_| usage("--groups")))
                    .collect()
            }
            _ => usage(&flag),
        }
    }
    o
}

fn usage(what: &str) -> ! {
    eprintln!(
        "bench: {what}\nusage: bench failover|step-down|sigterm|rolling|idle|api|stability|attack|faults|kernel-deaf|watchers|observers|tls|groups|side-by-side|consistent [--nodes N] \
         [--transport http|pilot|pilot-pilotctl (idle: a comma list)] [--runs N] [--secs S] [--rounds R] [--change none|timings|upgrade (rolling)] [--build current|previous (kernel-deaf)] [--before nothing|cut (kernel-deaf)] \
         [--watchers N] [--changes N] (watchers) [--observers 0,50,200] (observers) [--groups 1,10,100,1000] (groups, side-by-side)"
    );
    std::process::exit(64)
}

/// A cluster and, over pilot, the emulated network under it; the cluster is dropped (its nodes
/// killed) before the network.
struct Bed {
    c: Cluster,
    net: Option<Devnet>,
}

/// The node flags a bench transport stands for: `pilot` is the default way over Pilot (the
/// daemon's socket), `pilot-pilotctl` the process-per-message path (`--pilot-io pilotctl`).
pub fn pilot_io_args(transport: &str) -> &'static [&'static str] {
    match transport {
        "pilot-pilotctl" => &["--pilot-io", "pilotctl"],
        _ => &[],
    }
}

async fn start(transport: &str, n: usize) -> Bed {
    // Each says how to build it if it is missing.
    let _ = (bin(), devnet::devnet_bin());
    let mut extra = vec!["--preempt-after", "0s"];
    extra.extend_from_slice(pilot_io_args(transport));
    let bed = match transport {
        "http" => Bed {
            c: Cluster::start(n, &extra),
            net: None,
        },
        "pilot" | "pilot-pilotctl" => {
            // Daemons n1..nN for the nodes and one more as the broker.
            let net = Devnet::start(n as u32 + 1);
            Bed {
                c: pilot_cluster::pilot_cluster_of(&net, n, &extra),
                net: Some(net),
            }
        }
        other => usage(&format!("unknown transport {other}")),
    };
    for node in &bed.c.nodes {
        wait_up(node).await;
    }
    bed
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .expect("client")
}

async fn leader_of(client: &reqwest::Client, url: &str) -> Option<(String, u64)> {
    let resp = client.get(format!("{url}/leader")).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let v: Value = resp.json().await.ok()?;
    Some((v["leader"].as_str()?.to_string(), v["term"].as_u64()?))
}

/// Polls every node in `urls` at once, every 5 ms, until all name the same leader accepted by
/// `accept`; returns it with the time from `since` to the answer that completed the agreement.
async fn agree(
    client: &reqwest::Client,
    urls: &[String],
    since: Instant,
    within: Duration,
    accept: impl Fn(&str, u64) -> bool,
) -> Option<(String, u64, Duration)> {
    let left = within.saturating_sub(pilot_election::clock::since(since));
    let ask = || join_all(urls.iter().map(|u| leader_of(client, u)));
    let (l, t) = support::agree::wait_every(left, Duration::from_millis(5), ask, accept)
        .await
        .ok()?;
    Some((l, t, pilot_election::clock::since(since)))
}

fn urls(c: &Cluster, which: &[usize]) -> Vec<String> {
    which.iter().map(|i| c.nodes[*i].url()).collect()
}

/// Whoever all of `which` agree leads now, however long start-up or a rejoin takes.
async fn current_leader(client: &reqwest::Client, c: &Cluster, which: &[usize]) -> (String, u64) {
    match agree(
        client,
        &urls(c, which),
        pilot_election::clock::now(),
        STARTUP_LIMIT,
        |_, _| true,
    )
    .await
    {
        Some((l, t, _)) => (l, t),
        None => panic!(
            "nodes {which:?} agreed on no leader within {STARTUP_LIMIT:?}\n{}",
            c.logs()
        ),
    }
}

/// A node that restarted neither votes nor campaigns for `T`; runs start after that, with the
/// leader's view of its members refreshed by a few heartbeats.
async fn settle(up_since: Instant) {
    let ready = up_since + T + Duration::from_secs(1);
    pilot_election::clock::sleep_until(ready).await;
}

struct Stats {
    name: String,
    times: Vec<Duration>,
    terms: Vec<u64>,
    failed: usize,
}

impl Stats {
    fn new(name: String) -> Stats {
        Stats {
            name,
            times: Vec::new(),
            terms: Vec::new(),
            failed: 0,
        }
    }

    fn print(&mut self) {
        self.times.sort();
        let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
        let p = |q: f64| {
            let rank = ((q * self.times.len() as f64).ceil() as usize).max(1);
            ms(&self.times[rank - 1])
        };
        if self.times.is_empty() {
            println!("{}: no successful run ({} failed)", self.name, self.failed);
            return;
        }
        let terms = match self.terms.iter().max() {
            Some(max) => format!(
                " term+/change mean={:.2} max={max}",
                self.terms.iter().sum::<u64>() as f64 / self.terms.len() as f64
            ),
            None => String::new(),
        };
        println!(
            "{}: runs={} failed={} p50={:.0}ms p95={:.0}ms p99={:.0}ms min={:.0}ms max={:.0}ms{terms}",
            self.name,
            self.times.len(),
            self.failed,
            p(0.50),
            p(0.95),
            p(0.99),
            ms(&self.times[0]),
            ms(self.times.last().unwrap()),
        );
    }
}

/// `kill -9` of the leader, then (mode "sigterm") SIGTERM instead; the time is until every
/// survivor names the same new leader with a higher term.
async fn crash_loop(o: &Opts, sigterm: bool) {
    let mut bed = start(&o.transport, o.nodes).await;
    let c = &mut bed.c;
    let client = http();
    let all: Vec<usize> = (0..o.nodes).collect();
    let (mut leader, mut term) = current_leader(&client, c, &all).await;
    let mut up_since = pilot_election::clock::now();
    let what = if sigterm { "sigterm" } else { "kill -9" };
    let mut stats = Stats::new(format!("{what} {}-node {}", o.nodes, o.transport));
    for run in 1..=o.runs {
        settle(up_since).await;
        let li = c.index(&leader);
        let survivors: Vec<usize> = all.iter().copied().filter(|i| *i != li).collect();
        let t0 = pilot_election::clock::now();
        if sigterm {
            c.nodes[li].sigterm();
        } else {
            c.nodes[li].kill9();
        }
        let old = (leader.clone(), term);
        match agree(&client, &urls(c, &survivors), t0, FAILOVER_LIMIT, |l, t| {
            l != old.0 && t > old.1
        })
        .await
        {
            Some((l, t, d)) => {
                println!(
                    "run {run}: {} (term {}) -> {l} (term {t}) in {d:?}",
                    old.0, old.1
                );
                stats.times.push(d);
                stats.terms.push(t - old.1);
            }
            None => {
                println!("run {run}: no agreed new leader within {FAILOVER_LIMIT:?}");
                stats.failed += 1;
            }
        }
        if sigterm {
            let status = c.nodes[li].wait_exit(Duration::from_secs(10)).await;
            assert!(status.success(), "SIGTERM exit status {status:?}");
        }
        c.nodes[li].start();
        wait_up(&c.nodes[li]).await;
        up_since = pilot_election::clock::now();
        let (l, t) = current_leader(&client, c, &all).await;
        (leader, term) = (l, t);
    }
    stats.print();
}

/// Rolling restarts as an orchestrator does them: every node in turn, highest index first (as a
/// StatefulSet), SIGTERM, wait for its exit, start it again with the same data, and take the
/// next only once its `/readyz` answers 200; passes until `runs` of the restarts hit the
/// leader. Measured per restart of the leader: the leaderless time, from the first poll in
/// which no node answered 200 on `/role/leader` to the next poll in which one did (0 when no
/// poll caught a gap; `support::watch` polls every 5 ms here, so that is the resolution).
async fn rolling(o: &Opts) {
    let mut bed = start(&o.transport, o.nodes).await;
    let c = &mut bed.c;
    let client = http();
    let all: Vec<usize> = (0..o.nodes).collect();
    // Every other pass changes what the restarted node runs, the passes between change it back.
    let long = ["--lease", "10s", "--election-timeout", "16s"];
    let previous = (o.change == "upgrade").then(support::app::previous_bin);
    if let Some(p) = &previous {
        for n in &mut c.nodes {
            n.kill9();
            n.binary = Some(p.clone());
            n.start();
        }
        for n in &c.nodes {
            wait_up(n).await;
        }
    }
    current_leader(&client, c, &all).await;
    settle(pilot_election::clock::now()).await;
    let nodes = all
        .iter()
        .map(|&i| (c.nodes[i].id.clone(), c.nodes[i].url()))
        .collect();
    let watcher = Watcher::start_every(nodes, Duration::from_millis(5));
    // (index restarted, when its SIGTERM went out, whether it led then)
    let mut restarts: Vec<(usize, Duration, bool)> = Vec::new();
    let mut not_ready = 0;
    'passes: loop {
        for i in (0..o.nodes).rev() {
            let led = leader_of(&client, &c.nodes[i].url())
                .await
                .is_some_and(|(l, _)| l == c.nodes[i].id);
            let at = watcher.elapsed();
            c.nodes[i].sigterm();
            let status = c.nodes[i].wait_exit(Duration::from_secs(10)).await;
            assert!(status.success(), "SIGTERM exit status {status:?}");
            let forth = (restarts.len() / o.nodes) % 2 == 0;
            match o.change.as_str() {
                "timings" => {
                    let args = &mut c.nodes[i].args;
                    if let Some(at) = args.iter().position(|a| a == long[0]) {
                        args.drain(at..at + long.len());
                    }
                    if forth {
                        args.extend(long.iter().map(|s| s.to_string()));
                    }
                }
                "upgrade" => c.nodes[i].binary = (!forth).then(|| previous.clone()).flatten(),
                _ => {}
            }
            c.nodes[i].start();
            wait_up(&c.nodes[i]).await;
            if wait_ready(&c.nodes[i].url(), Duration::from_secs(20))
                .await
                .is_err()
            {
                not_ready += 1;
                println!("{} not ready within 20 s of its restart", c.nodes[i].id);
            }
            restarts.push((i, at, led));
            if restarts.iter().filter(|r| r.2).count() >= o.runs {
                break 'passes;
            }
        }
    }
    // A last stretch, so that the final restart's gap is closed in the samples.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let samples = watcher.rounds();
    let two = watcher.stop().await.overlaps.len();
    let mut stats = Stats::new(format!(
        "rolling {}-node {}{}",
        o.nodes,
        o.transport,
        match o.change.as_str() {
            "timings" => ", changing timings 2s/3s <-> 10s/16s",
            "upgrade" => ", upgrading from the previous release and back",
            _ => "",
        }
    ));
    for (n, (i, at, led)) in restarts.iter().enumerate() {
        if !led {
            continue;
        }
        // The window of this restart: until the next restart's SIGTERM.
        let end = restarts.get(n + 1).map_or(Duration::MAX, |r| r.1);
        let window: Vec<&Round> = samples
            .iter()
            .filter(|s| s.at >= *at && s.at < end)
            .collect();
        let gap_start = window.iter().position(|s| s.leaders.is_empty());
        let gap = match gap_start {
            None => Duration::ZERO,
            Some(k) => match window[k..].iter().find(|s| !s.leaders.is_empty()) {
                Some(back) => back.at - window[k].at,
                None => {
                    println!(
                        "restart {n} ({}): no leader again before the next restart",
                        c.nodes[*i].id
                    );
                    stats.failed += 1;
                    continue;
                }
            },
        };
        println!(
            "restart {n} of {} (the leader): leaderless {gap:?}",
            c.nodes[*i].id
        );
        stats.times.push(gap);
    }
    println!(
        "{} restarts, {} of the leader; {} polls, {} with two nodes answering as leader; {} not ready in time",
        restarts.len(),
        restarts.iter().filter(|r| r.2).count(),
        samples.len(),
        two,
        not_ready
    );
    stats.print();
}

/// A leader whose kernel drops every packet its peers send, while it still sends (three nodes
/// in network namespaces, an nftables rule: `support::netns`, the test's own code): per run,
/// the time from the fault until the other two agree on a new leader. Needs root.
async fn kernel_deaf(o: &Opts) {
    let binary = (o.build == "previous").then(support::app::previous_bin);
    let before = if o.before == "cut" {
        support::netns::Before::ACut
    } else {
        support::netns::Before::Nothing
    };
    let mut stats = Stats::new(format!(
        "kernel-deaf leader, 3-node http, {} build, before: {}",
        o.build, o.before
    ));
    let mut two = 0;
    for run in 1..=o.runs {
        let r = support::netns::deaf_leader(binary.clone(), before).await;
        two += r.report.overlaps.len();
        match r.took {
            Some(t) => {
                println!("run {run}: agreed new leader {t:?} after the fault");
                stats.times.push(t);
            }
            None => {
                println!("run {run}: no agreed leader within 4T");
                stats.failed += 1;
            }
        }
    }
    println!("rounds with two nodes answering as leader: {two}");
    stats.print();
}

/// Planned handover: `POST /step-down` naming the next node; the time is from the accepted
/// request to every node naming the successor.
async fn step_down_loop(o: &Opts) {
    let bed = start(&o.transport, o.nodes).await;
    let c = &bed.c;
    let client = http();
    let all: Vec<usize> = (0..o.nodes).collect();
    let all_urls = urls(c, &all);
    let (mut leader, mut term) = current_leader(&client, c, &all).await;
    settle(pilot_election::clock::now()).await;
    let mut stats = Stats::new(format!("step-down {}-node {}", o.nodes, o.transport));
    for run in 1..=o.runs {
        let li = c.index(&leader);
        let successor = c.nodes[(li + 1) % o.nodes].id.clone();
        let deadline = pilot_election::clock::now() + Duration::from_secs(10);
        let t0 = loop {
            let t0 = pilot_election::clock::now();
            let resp = client
                .post(format!("{}/step-down", c.nodes[li].url()))
                .bearer_auth(TOKEN)
                .json(&json!({"successor": successor}))
                .send()
                .await
                .expect("step-down request");
            match resp.status().as_u16() {
                202 => break t0,
                // The successor is not yet known live and eligible: the leader says so.
                422 if pilot_election::clock::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                s => panic!(
                    "step-down answered {s}: {}",
                    resp.text().await.unwrap_or_default()
                ),
            }
        };
        match agree(&client, &all_urls, t0, FAILOVER_LIMIT, |l, t| {
            l == successor && t > term
        })
        .await
        {
            Some((l, t, d)) => {
                println!("run {run}: {leader} (term {term}) -> {l} (term {t}) in {d:?}");
                stats.times.push(d);
                stats.terms.push(t - term);
                (leader, term) = (l, t);
            }
            None => {
                println!("run {run}: {successor} never led everywhere");
                stats.failed += 1;
                let (l, t) = current_leader(&client, c, &all).await;
                (leader, term) = (l, t);
            }
        }
        // Not measured: a few heartbeats so that the next successor is known live.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stats.print();
}

fn clk_tck() -> f64 {
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("getconf");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(100.0)
}

/// Fields of /proc/PID/stat after the command name (which is in parentheses and may contain
/// spaces): field k of the whole line is index k - 3 here.
fn stat_fields(pid: u32) -> Vec<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    rest.split_whitespace()
        .map(|s| s.parse().unwrap_or(0))
        .collect()
}

/// utime + stime (fields 14, 15) of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    stat_fields(pid).get(11..13).map_or(0, |f| f.iter().sum())
}

/// cutime + cstime (fields 16, 17): children that exited and were waited for, which is where
/// every short-lived `pilotctl publish` ends up.
fn reaped_ticks(pid: u32) -> u64 {
    stat_fields(pid).get(13..15).map_or(0, |f| f.iter().sum())
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Messages published (each one a `pilotctl publish` process over pilot, one POST per peer
/// over http): delivered plus given up, from `/metrics`.
async fn publishes(client: &reqwest::Client, url: String) -> f64 {
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap_or_default();
    text.lines()
        .filter(|l| {
            l.starts_with("pilot_election_publish_latency_seconds_count")
                || l.starts_with("pilot_election_publish_failures_total")
        })
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

/// RSS and CPU per node over `secs` of steady state at default timings; `--transport a,b,c`
/// measures each in turn, side by side in one run.
async fn idle(o: &Opts) {
    for transport in o.transport.split(',') {
        let one = Opts {
            transport: transport.to_string(),
            ..o.clone()
        };
        idle_one(&one).await;
    }
}

async fn idle_one(o: &Opts) {
    let bed = start(&o.transport, o.nodes).await;
    let c = &bed.c;
    let client = http();
    let all: Vec<usize> = (0..o.nodes).collect();
    current_leader(&client, c, &all).await;
    // Past start-up: the first T, the election and the first member exchanges.
    settle(pilot_election::clock::now()).await;
    let pids: Vec<u32> = c
        .nodes
        .iter()
        .map(|n| n.child.as_ref().unwrap().id())
        .collect();
    let ticks0: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    let reaped0: Vec<u64> = pids.iter().map(|p| reaped_ticks(*p)).collect();
    let kids0: Vec<u64> = pids
        .iter()
        .map(|p| children_of(*p).iter().map(|k| cpu_ticks(*k)).sum())
        .collect();
    let pubs0 = join_all(c.nodes.iter().map(|n| publishes(&client, n.url()))).await;
    let t0 = pilot_election::clock::now();
    tokio::time::sleep(Duration::from_secs(o.secs)).await;
    let secs = pilot_election::clock::since(t0).as_secs_f64();
    let pubs1 = join_all(c.nodes.iter().map(|n| publishes(&client, n.url()))).await;
    let hz = clk_tck();
    println!(
        "idle {}-node {} over {secs:.1}s (default timings):",
        o.nodes, o.transport
    );
    println!(
        "{:>6} {:>8} {:>9} {:>10} {:>12} {:>14} {:>12} {:>12}",
        "node",
        "role",
        "RSS MiB",
        "CPU %core",
        "publish/s",
        "children RSS",
        "children CPU",
        "exited CPU"
    );
    for (i, n) in c.nodes.iter().enumerate() {
        let pid = pids[i];
        let cpu = (cpu_ticks(pid) - ticks0[i]) as f64 / hz / secs * 100.0;
        let kids = children_of(pid);
        let kids_rss: u64 = kids.iter().map(|k| rss_kib(*k)).sum();
        let kids_ticks: u64 = kids.iter().map(|k| cpu_ticks(*k)).sum();
        // Children that ended in between took their ticks with them: a lower bound.
        let kids_cpu = kids_ticks.saturating_sub(kids0[i]) as f64 / hz / secs * 100.0;
        let reaped_cpu = (reaped_ticks(pid) - reaped0[i]) as f64 / hz / secs * 100.0;
        let (s, _) = app::get_json(&format!("{}/role/leader", n.url())).await;
        println!(
            "{:>6} {:>8} {:>9.1} {:>9.2}% {:>12.2} {:>10.1} MiB {:>11.2}% {:>11.2}%",
            n.id,
            if s == 200 { "leader" } else { "follower" },
            rss_kib(pid) as f64 / 1024.0,
            cpu,
            (pubs1[i] - pubs0[i]) / secs,
            kids_rss as f64 / 1024.0,
            kids_cpu,
            reaped_cpu
        );
    }
}

/// What one node answered to `GET /leader` in a stability poll.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    Leader(String, u64),
    NoLeader,
    /// No answer within the client's timeout (a node too busy to answer is not leaderless).
    Silent,
}

async fn probe(client: &reqwest::Client, url: &str) -> Probe {
    let Ok(resp) = client.get(format!("{url}/leader")).send().await else {
        return Probe::Silent;
    };
    if !resp.status().is_success() {
        return Probe::NoLeader;
    }
    match resp.json::<Value>().await {
        Ok(v) => match (v["leader"].as_str(), v["term"].as_u64()) {
            (Some(l), Some(t)) => Probe::Leader(l.to_string(), t),
            _ => Probe::NoLeader,
        },
        Err(_) => Probe::Silent,
    }
}

/// Sums one metric over every node (0 where a node does not answer).
async fn metric_sum(client: &reqwest::Client, c: &Cluster, series: &str) -> f64 {
    let texts = join_all(c.nodes.iter().map(|n| async move {
        match client.get(format!("{}/metrics", n.url())).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }))
    .await;
    texts.iter().map(|t| app::metric(t, series)).sum()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// N nodes at default timings left alone for `secs`: every node is asked who leads every
/// 250 ms. Stable means one leader and one term throughout, every node agreeing, no
/// subscription restarts and (over pilot) nothing lost at the broker.
async fn stability(o: &Opts) {
    let started = pilot_election::clock::now();
    let bed = start(&o.transport, o.nodes).await;
    let c = &bed.c;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .expect("client");
    let all: Vec<usize> = (0..o.nodes).collect();
    let (leader, term) = current_leader(&client, c, &all).await;
    println!(
        "stability {}-node {}: first leader {leader} in term {term}, all agreeing {:.1}s after the start; load {}",
        o.nodes,
        o.transport,
        pilot_election::clock::since(started).as_secs_f64(),
        load_average()
    );
    settle(pilot_election::clock::now()).await;
    let restarts0 = metric_sum(&client, c, "pilot_election_subscription_restarts_total").await;
    let failures0 = metric_sum(&client, c, "pilot_election_publish_failures_total").await;
    let net0 = match &bed.net {
        Some(net) => Some(net.status().await["stats"].clone()),
        None => None,
    };
    let (mut rounds, mut agreed, mut no_leader, mut silent) = (0u64, 0u64, 0u64, 0u64);
    let mut seen: Vec<(String, u64)> = vec![(leader.clone(), term)];
    let node_urls = urls(c, &all);
    // CPU of the nodes with their pilotctl children (live and exited), and of the emulator.
    let pids: Vec<u32> = c
        .nodes
        .iter()
        .map(|n| n.child.as_ref().unwrap().id())
        .collect();
    let cluster_ticks = || -> u64 {
        pids.iter()
            .map(|p| {
                cpu_ticks(*p)
                    + reaped_ticks(*p)
                    + children_of(*p).iter().map(|k| cpu_ticks(*k)).sum::<u64>()
            })
            .sum()
    };
    let devnet_pid = bed.net.as_ref().map(|n| n.child.id());
    let cluster0 = cluster_ticks();
    let devnet0 = devnet_pid.map(cpu_ticks).unwrap_or(0);
    let t0 = pilot_election::clock::now();
    while pilot_election::clock::since(t0) < Duration::from_secs(o.secs) {
        let tick = pilot_election::clock::now();
        let answers = join_all(node_urls.iter().map(|u| probe(&client, u))).await;
        rounds += 1;
        no_leader += answers.iter().filter(|a| **a == Probe::NoLeader).count() as u64;
        silent += answers.iter().filter(|a| **a == Probe::Silent).count() as u64;
        if answers.iter().all(|a| *a == answers[0]) && matches!(answers[0], Probe::Leader(..)) {
            agreed += 1;
        }
        for a in &answers {
            if let Probe::Leader(l, t) = a {
                if !seen.contains(&(l.clone(), *t)) {
                    seen.push((l.clone(), *t));
                }
            }
        }
        pilot_election::clock::sleep_until(tick + Duration::from_millis(250)).await;
    }
    let secs = pilot_election::clock::since(t0).as_secs_f64();
    let restarts = metric_sum(&client, c, "pilot_election_subscription_restarts_total").await;
    let failures = metric_sum(&client, c, "pilot_election_publish_failures_total").await;
    println!(
        "  over {secs:.0}s: {rounds} poll rounds, all {} nodes agreeing in {agreed} ({:.1}%); \
         node answers without a leader {no_leader}, without an answer within 1 s {silent}; \
         leaders/terms seen {seen:?}",
        o.nodes,
        agreed as f64 * 100.0 / rounds.max(1) as f64
    );
    let hz = clk_tck();
    let core = |ticks: u64| ticks as f64 / hz / secs * 100.0;
    println!(
        "  subscription restarts {}, publish failures {}; CPU: nodes with their pilotctl \
         processes {:.0}% of a core, pilot-devnet {:.0}%; load {}",
        restarts - restarts0,
        failures - failures0,
        core(cluster_ticks().saturating_sub(cluster0)),
        core(
            devnet_pid
                .map(cpu_ticks)
                .unwrap_or(0)
                .saturating_sub(devnet0)
        ),
        load_average()
    );
    if let (Some(net), Some(before)) = (&bed.net, net0) {
        let after = net.status().await["stats"].clone();
        let d = |k: &str| after[k].as_u64().unwrap_or(0) - before[k].as_u64().unwrap_or(0);
        println!(
            "  broker: {:.1} events/s published, {:.1} deliveries/s; rate-limited {}, retried {}, \
             failed deliveries {}, subscribers dropped {}, queue overflows {}",
            d("published") as f64 / secs,
            d("delivered") as f64 / secs,
            d("rate_limited"),
            d("retried"),
            d("delivery_failures"),
            d("subscribers_dropped"),
            d("overflowed")
        );
    }
}

struct Wrk {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    non_2xx: bool,
    /// wrk's "Socket errors" line, if it printed one.
    socket_errors: Option<String>,
}

impl Wrk {
    /// What went wrong in the run, for the end of a line of figures (empty when nothing did).
    fn trouble(&self) -> String {
        let non_2xx = if self.non_2xx {
            " (non-2xx answers!)"
        } else {
            ""
        };
        let errors = self.socket_errors.as_ref().map(|e| format!(" ({e})"));
        format!("{non_2xx}{}", errors.unwrap_or_default())
    }
}

fn wrk(url: &str, secs: u64) -> Wrk {
    let out = Command::new("wrk")
        .args(["-t2", "-c32", &format!("-d{secs}s"), "--latency", url])
        .stderr(Stdio::inherit())
        .output()
        .expect("wrk (apt-get install -y wrk)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("wrk printed no {prefix}:\n{text}"))
    };
    let ms = |p: String| {
        let (num, unit) = p.split_at(p.find(|c: char| c.is_alphabetic()).unwrap_or(p.len()));
        let scale = match unit {
            "us" => 0.001,
            "ms" => 1.0,
            "s" => 1000.0,
            "m" => 60_000.0,
            _ => panic!("wrk latency unit {unit}"),
        };
        num.parse::<f64>().expect("a latency") * scale
    };
    Wrk {
        rps: field("Requests/sec:").parse().expect("rps"),
        p50_ms: ms(field("50%")),
        p99_ms: ms(field("99%")),
        non_2xx: text.contains("Non-2xx"),
        socket_errors: text
            .lines()
            .find(|l| l.trim().starts_with("Socket errors"))
            .map(|l| l.trim().to_string()),
    }
}

/// `GET /leader` on the leader of a 3-node cluster against the bare axum baseline, alternated
/// so that both see the same background load.
async fn api(o: &Opts) {
    let bare_bin = app::built("examples/bare-axum");
    let bed = start("http", 3).await;
    let c = &bed.c;
    let client = http();
    let (leader, _) = current_leader(&client, c, &[0, 1, 2]).await;
    let node_url = format!("{}/leader", c.nodes[c.index(&leader)].url());
    let port = free_port();
    let mut bare = Command::new(&bare_bin)
        .arg(format!("127.0.0.1:{port}"))
        .spawn()
        .expect("bare-axum");
    let bare_url = format!("http://127.0.0.1:{port}/leader");
    let up = app::wait_for(Duration::from_secs(10), || {
        let u = bare_url.clone();
        async move { (app::get_json(&u).await.0 == 200).then_some(()) }
    })
    .await;
    assert!(up.is_some(), "bare-axum did not come up");
    let mut results: HashMap<&str, Vec<Wrk>> = HashMap::new();
    for round in 1..=o.rounds {
        for (name, url) in [("node", &node_url), ("bare", &bare_url)] {
            let w = wrk(url, o.secs);
            println!(
                "round {round} {name:>4}: {:.0} req/s, p99 {:.2} ms{}",
                w.rps,
                w.p99_ms,
                if w.non_2xx { " (non-2xx answers!)" } else { "" }
            );
            results.entry(name).or_default().push(w);
        }
    }
    let _ = bare.kill();
    let _ = bare.wait();
    let mean = |k: &str, f: fn(&Wrk) -> f64| {
        let v = &results[k];
        v.iter().map(f).sum::<f64>() / v.len() as f64
    };
    let (nr, br) = (mean("node", |w| w.rps), mean("bare", |w| w.rps));
    println!(
        "GET /leader: node {nr:.0} req/s (p99 {:.2} ms), bare axum {br:.0} req/s (p99 {:.2} ms), \
         ratio {:.0}% (wrk -t2 -c32, {}s x {} rounds each)",
        mean("node", |w| w.p99_ms),
        mean("bare", |w| w.p99_ms),
        nr / br * 100.0,
        o.secs,
        o.rounds
    );
}

/// Consistent reads (issue 39, item 4) against plain ones on the leader of a 3-node cluster:
/// the latency of single requests one after another (`--runs` each, both kinds interleaved),
/// then wrk's throughput of each (`--rounds` of `--secs`, http only: wrk speaks no pilot).
async fn consistent(o: &Opts) {
    let bed = start(&o.transport, 3).await;
    let c = &bed.c;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let (leader, term) = current_leader(&client, c, &[0, 1, 2]).await;
    let base = c.nodes[c.index(&leader)].url();
    let plain_url = format!("{base}/leader");
    let consistent_url = format!("{base}/leader?consistent=true");
    let mut times: HashMap<&str, Vec<Duration>> = HashMap::new();
    let mut failed = 0;
    for _ in 0..o.runs {
        for (name, url) in [("plain", &plain_url), ("consistent", &consistent_url)] {
            let t0 = pilot_election::clock::now();
            let answer = client.get(url).send().await;
            let took = pilot_election::clock::since(t0);
            let ok = match answer {
                Ok(r) if r.status().is_success() => {
                    let v: Value = r.json().await.unwrap_or_default();
                    v["term"] == term && v["consistent"] == (name == "consistent")
                }
                _ => false,
            };
            if ok {
                times.entry(name).or_default().push(took);
            } else {
                failed += 1;
            }
        }
    }
    for name in ["plain", "consistent"] {
        let v = times.entry(name).or_default();
        v.sort();
        let ms = |q: f64| {
            let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
            v.get(rank - 1)
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
        };
        println!(
            "{} GET /leader {name}: runs={} p50={:.2}ms p99={:.2}ms max={:.2}ms",
            o.transport,
            v.len(),
            ms(0.5),
            ms(0.99),
            ms(1.0)
        );
    }
    println!("failed answers (wrong term or kind, or not 200): {failed}");
    if o.transport != "http" {
        return;
    }
    let mut rps: HashMap<&str, Vec<Wrk>> = HashMap::new();
    for round in 1..=o.rounds {
        for (name, url) in [("plain", &plain_url), ("consistent", &consistent_url)] {
            let w = wrk(url, o.secs);
            println!(
                "round {round} {name:>10}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms{}",
                w.rps,
                w.p50_ms,
                w.p99_ms,
                w.trouble()
            );
            rps.entry(name).or_default().push(w);
        }
    }
    let mean = |k: &str, f: fn(&Wrk) -> f64| {
        let v = &rps[k];
        v.iter().map(f).sum::<f64>() / v.len() as f64
    };
    let (p, q) = (mean("plain", |w| w.rps), mean("consistent", |w| w.rps));
    println!(
        "GET /leader throughput: plain {p:.0} req/s (p99 {:.2} ms), consistent {q:.0} req/s \
         (p99 {:.2} ms), ratio {:.0}% (wrk -t2 -c32, {}s x {} rounds each)",
        mean("plain", |w| w.p99_ms),
        mean("consistent", |w| w.p99_ms),
        q / p * 100.0,
        o.secs,
        o.rounds
    );
}

#[tokio::main]
async fn main() {
    let o = parse();
    match o.scenario.as_str() {
        "failover" => crash_loop(&o, false).await,
        "sigterm" => crash_loop(&o, true).await,
        "step-down" => step_down_loop(&o).await,
        "rolling" => rolling(&o).await,
        "idle" => idle(&o).await,
        "api" => api(&o).await,
        "consistent" => consistent(&o).await,
        "stability" => stability(&o).await,
        "attack" => attack::attack(&o).await,
        "kernel-deaf" => kernel_deaf(&o).await,
        "watchers" => watchers::watchers(&o).await,
        "observers" => observers::observers(&o).await,
        "groups" => groups::groups(&o).await,
        "side-by-side" => groups::side_by_side(&o).await,
        "tls" => tls::tls(&o).await,
        "faults" => {
            let runs = if o.runs_given { o.runs } else { 1 };
            let secs = if o.secs_given { o.secs } else { 60 };
            faults::faults(&o, runs, secs).await
        }
        other => usage(&format!("unknown scenario {other}")),
    }
}
