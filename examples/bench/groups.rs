//! `bench groups`: many elections in one process. For each count of `--groups` (default
//! 1,10,100,1000): three http nodes at default timings, each in that many groups (the default
//! group and `shard-NNNN`s). Once every group has a leader: each node's RSS, CPU and messages
//! published per second over a `--secs` window; then a kill -9 of the node that leads the most
//! groups, and how long each group it led took to have a new leader that both survivors name
//! (p50, p99 and max over those groups), polling `GET /groups` on both every 20 ms; then, the
//! node back, a rolling restart of all three (each restarted node ready before the next is
//! stopped) and each group's longest leaderless stretch
//! during it (p50, p99 and max over all groups). With `--runs N` the kill -9 and the rolling
//! restart are done N times, and a last line pools every group of every run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::Value;

use super::{
    children_of, clk_tck, cpu_ticks, http, pilot_cluster, publishes, reaped_ticks, rss_kib, settle,
    Bed, Devnet, Opts,
};
use crate::app::{wait_for, wait_ready, wait_up, Cluster};

/// A thousand elections' first campaigns, with a persisted vote each, on a loaded machine.
const ELECTED_WITHIN: Duration = Duration::from_secs(120);
const FAILED_OVER_WITHIN: Duration = Duration::from_secs(60);

/// `group -> (leader, term)` as `url` can vouch for now.
async fn leaders(
    client: &reqwest::Client,
    url: &str,
) -> Option<BTreeMap<String, (Option<String>, u64)>> {
    let resp = client.get(format!("{url}/groups")).send().await.ok()?;
    let body: Value = resp.json().await.ok()?;
    let list = body["groups"].as_array()?;
    Some(
        list.iter()
            .map(|g| {
                let name = g["group"].as_str().unwrap_or_default().to_string();
                (
                    name,
                    (
                        g["leader"].as_str().map(str::to_string),
                        g["term"].as_u64().unwrap_or(0),
                    ),
                )
            })
            .collect(),
    )
}

/// Once every node in `urls` names the same leader in the same term for each of `count` groups:
/// `group -> (leader, term)`.
async fn all_agree(
    client: &reqwest::Client,
    urls: &[String],
    count: usize,
    within: Duration,
) -> Option<BTreeMap<String, (Option<String>, u64)>> {
    wait_for(within, || async {
        let views = join_all(urls.iter().map(|u| leaders(client, u))).await;
        let views: Vec<_> = views.into_iter().collect::<Option<Vec<_>>>()?;
        let first = &views[0];
        let agreed = first.len() == count
            && first.iter().all(|(g, (l, t))| {
                l.is_some()
                    && views[1..]
                        .iter()
                        .all(|v| v.get(g) == Some(&(l.clone(), *t)))
            });
        agreed.then(|| first.clone())
    })
    .await
}

/// The groups `url` says it leads now, with their terms (`is_self` in `GET /groups`).
async fn led_by(client: &reqwest::Client, url: &str) -> Vec<(String, u64)> {
    let Ok(resp) = client.get(format!("{url}/groups")).send().await else {
        return Vec::new();
    };
    let Ok(body) = resp.json::<Value>().await else {
        return Vec::new();
    };
    body["groups"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter(|g| g["is_self"].as_bool() == Some(true))
                .map(|g| {
                    (
                        g["group"].as_str().unwrap_or_default().to_string(),
                        g["term"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One poll of every node: when, the groups some node said it leads, and how many groups two
/// nodes said they lead in the same term.
struct Round {
    at: Duration,
    led: BTreeSet<String>,
    two: usize,
}

/// A rolling restart as an operator does one: each node in turn gets SIGTERM, is started again
/// and the next waits until all three name the same leader for every group. Meanwhile every
/// node's `GET /groups` is polled, one node after the other: per group, the longest stretch in
/// which no node said it leads it (from the first round without a claim to the first with one).
async fn rolling_restart(
    c: &mut Cluster,
    client: &reqwest::Client,
    count: usize,
) -> Result<(Vec<Duration>, usize, usize, Duration), String> {
    let urls: Vec<String> = c.nodes.iter().map(|n| n.url()).collect();
    let stop = tokio_util::sync::CancellationToken::new();
    let poller = {
        let (client, urls, stop) = (client.clone(), urls.clone(), stop.clone());
        tokio::spawn(async move {
            let start = pilot_election::clock::now();
            let mut rounds: Vec<Round> = Vec::new();
            // Until told to stop and a round has seen every group claimed (a handover may be
            // in flight at the last moment), or 30 s more.
            let mut every: BTreeSet<String> = BTreeSet::new();
            let mut stopped_at = None;
            loop {
                if stop.is_cancelled() {
                    let at = *stopped_at.get_or_insert_with(pilot_election::clock::now);
                    let all = rounds.last().is_some_and(|r| r.led.len() >= every.len());
                    if all || pilot_election::clock::since(at) > Duration::from_secs(30) {
                        break;
                    }
                }
                let at = pilot_election::clock::since(start);
                let mut claims: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
                let mut two = 0;
                for url in &urls {
                    for (g, term) in led_by(&client, url).await {
                        if !claims.entry(g).or_default().insert(term) {
                            two += 1;
                        }
                    }
                }
                let led: BTreeSet<String> = claims.into_keys().collect();
                every.extend(led.iter().cloned());
                rounds.push(Round { at, led, two });
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            rounds
        })
    };
    let began = pilot_election::clock::now();
    for i in 0..c.nodes.len() {
        c.nodes[i].sigterm();
        let status = c.nodes[i].wait_exit(Duration::from_secs(30)).await;
        if !status.success() {
            stop.cancel();
            return Err(format!("{} exited {status:?} on SIGTERM", c.nodes[i].id));
        }
        c.nodes[i].start();
        wait_up(&c.nodes[i]).await;
        // As the documented procedure has it: the next node only once this one is ready (it
        // can vote again, past its start-up guard). Without the gate a node stopped while the
        // previous one cannot vote yet leaves two members of which one cannot vote: no quorum
        // for up to `T`, which is the operator's doing, not the election's.
        if let Err(last) = wait_ready(&urls[i], ELECTED_WITHIN).await {
            stop.cancel();
            return Err(format!(
                "{} not ready after its restart: {last}",
                c.nodes[i].id
            ));
        }
        if all_agree(client, &urls, count, ELECTED_WITHIN)
            .await
            .is_none()
        {
            stop.cancel();
            return Err(format!(
                "not every group agreed within {ELECTED_WITHIN:?} of {}'s restart",
                c.nodes[i].id
            ));
        }
    }
    let took = pilot_election::clock::since(began);
    stop.cancel();
    let rounds = poller.await.expect("the poller");
    let mut worst: BTreeMap<String, Duration> = BTreeMap::new();
    let mut since: BTreeMap<String, Duration> = BTreeMap::new();
    let every: BTreeSet<String> = rounds.iter().flat_map(|r| r.led.iter().cloned()).collect();
    for r in &rounds {
        for g in &every {
            if r.led.contains(g) {
                if let Some(from) = since.remove(g) {
                    let gap = worst.entry(g.clone()).or_default();
                    *gap = (*gap).max(r.at - from);
                }
            } else {
                since.entry(g.clone()).or_insert(r.at);
            }
        }
    }
    if !since.is_empty() {
        return Err(format!(
            "{} groups without a leader at the end",
            since.len()
        ));
    }
    let mut gaps: Vec<Duration> = every
        .iter()
        .map(|g| worst.get(g).copied().unwrap_or_default())
        .collect();
    gaps.sort();
    let two = rounds.iter().map(|r| r.two).sum();
    // The group that waited longest, when that was more than a handover: what its members'
    // histories say happened, to tell a handover to a node that went away from a slow one.
    if let Some((g, gap)) = worst.iter().max_by_key(|(_, d)| **d) {
        if *gap > Duration::from_secs(1) {
            println!(
                "       longest: {g}, {:.2}s without a leader; its transitions:",
                gap.as_secs_f64()
            );
            for url in &urls {
                let Ok(resp) = client.get(format!("{url}/groups/{g}/history")).send().await else {
                    continue;
                };
                let Ok(body) = resp.json::<Value>().await else {
                    continue;
                };
                let list = body["transitions"].as_array().cloned().unwrap_or_default();
                let tail: Vec<String> = list
                    .iter()
                    .rev()
                    .take(6)
                    .rev()
                    .map(|t| {
                        format!(
                            "t{} {} {} ({})",
                            t["term"],
                            t["leader"].as_str().unwrap_or("-"),
                            t["reason"].as_str().unwrap_or("-"),
                            t["at"].as_str().unwrap_or("-")
                        )
                    })
                    .collect();
                println!("         {url}: {}", tail.join("; "));
            }
        }
    }
    Ok((gaps, rounds.len(), two, took))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Three nodes over `transport`, each in `count` groups (the default one and `shard-NNNN`s), up.
async fn in_groups(count: usize, transport: &str) -> Bed {
    let names: Vec<String> = (1..count).map(|i| format!("shard-{i:04}")).collect();
    let max = count.max(1).to_string();
    // Default timings, preemption included: a restarted node takes back the groups it ranks
    // first in once it is steady again (rule 12), which is how the leaders spread again.
    let mut args: Vec<&str> = vec!["--max-groups", &max];
    for n in &names {
        args.extend(["--group", n.as_str()]);
    }
    args.extend_from_slice(crate::pilot_io_args(transport));
    let bed = match transport {
        "pilot" | "pilot-pilotctl" => {
            // Daemons n1..n3 for the nodes and n4 as the broker.
            let net = Devnet::start(4);
            Bed {
                c: pilot_cluster::pilot_cluster_of(&net, 3, &args),
                net: Some(net),
            }
        }
        _ => Bed {
            c: Cluster::start(3, &args),
            net: None,
        },
    };
    for n in &bed.c.nodes {
        wait_up(n).await;
    }
    bed
}

/// A node's CPU ticks with its children's: the `pilotctl` processes it runs over pilot, those
/// alive now and those that ended and were waited for.
fn ticks_with_children(pid: u32) -> u64 {
    cpu_ticks(pid) + reaped_ticks(pid) + children_of(pid).iter().map(|k| cpu_ticks(*k)).sum::<u64>()
}

/// A node's RSS with its live children's, in KiB.
fn rss_with_children(pid: u32) -> u64 {
    rss_kib(pid) + children_of(pid).iter().map(|k| rss_kib(*k)).sum::<u64>()
}

pub async fn groups(o: &Opts) {
    let client = http();
    println!(
        "groups: 3 nodes over {} at default timings, {}s windows (a node's RSS and CPU include its pilotctl processes)",
        o.transport, o.secs
    );
    println!(
        "{:>6} {:>6} {:>8} {:>9} {:>10} {:>11} {:>9}",
        "groups", "node", "leads", "RSS MiB", "CPU %core", "publish/s", "elected"
    );
    for &count in &o.groups {
        let started = pilot_election::clock::now();
        let mut bed = in_groups(count, &o.transport).await;
        let c = &mut bed.c;
        let urls: Vec<String> = c.nodes.iter().map(|n| n.url()).collect();
        let elected = all_agree(&client, &urls, count, ELECTED_WITHIN).await;
        let Some(led) = elected else {
            println!("{count:>6}: not every group elected within {ELECTED_WITHIN:?}");
            continue;
        };
        let elected_in = pilot_election::clock::since(started);
        // The first leaders are not all the ones that rank first: the others hand over once
        // their wait (P to 2P per group) is up. The cost is measured once that has settled.
        let led = match steady(&client, &urls, count).await {
            Some(now) => now,
            None => {
                println!("{count:>6}: the leaders did not settle within {SPREAD_WITHIN:?}");
                led
            }
        };
        settle(pilot_election::clock::now()).await;
        let pids: Vec<u32> = c
            .nodes
            .iter()
            .map(|n| n.child.as_ref().unwrap().id())
            .collect();
        let ticks0: Vec<u64> = pids.iter().map(|p| ticks_with_children(*p)).collect();
        let pubs0 = join_all(urls.iter().map(|u| publishes(&client, u.clone()))).await;
        let t0 = pilot_election::clock::now();
        tokio::time::sleep(Duration::from_secs(o.secs)).await;
        let secs = pilot_election::clock::since(t0).as_secs_f64();
        let pubs1 = join_all(urls.iter().map(|u| publishes(&client, u.clone()))).await;
        let hz = clk_tck();
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for (l, _) in led.values() {
            *per_node.entry(l.clone().unwrap_or_default()).or_default() += 1;
        }
        for (i, n) in c.nodes.iter().enumerate() {
            let cpu =
                ticks_with_children(pids[i]).saturating_sub(ticks0[i]) as f64 / hz / secs * 100.0;
            println!(
                "{count:>6} {:>6} {:>8} {:>9.1} {:>9.2}% {:>11.1} {:>8.1}s",
                n.id,
                per_node.get(&n.id).copied().unwrap_or(0),
                rss_with_children(pids[i]) as f64 / 1024.0,
                cpu,
                (pubs1[i] - pubs0[i]) / secs,
                elected_in.as_secs_f64()
            );
        }

        // `--runs` rounds of a kill -9 of the node that leads the most groups and, the node
        // back, a rolling restart of all three; the figures pool every group of every round.
        let runs = if o.runs_given { o.runs.max(1) } else { 1 };
        let mut led = led;
        let mut failovers: Vec<Duration> = Vec::new();
        let mut expected = 0;
        let mut gaps_all: Vec<Duration> = Vec::new();
        let mut twos = 0;
        for run in 1..=runs {
            if run > 1 {
                // The restarted nodes take back the groups they rank first in, each group
                // after its own wait (P to 2P): the next kill waits until that has settled, so
                // that it takes down a node that leads about a third of the groups.
                let since = pilot_election::clock::now();
                match steady(&client, &urls, count).await {
                    Some(now) => {
                        println!(
                            "{count:>6} leaders settled {:.1}s after the rolling restart (no change for the last 11 s): {}",
                            pilot_election::clock::since(since).as_secs_f64(),
                            leads_per_node(&now)
                        );
                        led = now;
                    }
                    None => {
                        println!("{count:>6}: the leaders did not settle within {SPREAD_WITHIN:?}");
                        break;
                    }
                }
            }
            let Some(times) = kill_busiest(c, &client, &urls, &led, count).await else {
                break;
            };
            expected += times.0;
            failovers.extend(times.1);
            match rolling_restart(c, &client, count).await {
                Ok((gaps, rounds, two, took)) => {
                    println!(
                        "{count:>6} rolling restart {run}/{runs} in {:.1}s: longest leaderless stretch per group p50 {:.2}s, p99 {:.2}s, max {:.2}s; {rounds} polls of all three nodes, {two} claims of a group in a term another node claimed too",
                        took.as_secs_f64(),
                        percentile(&gaps, 0.5).as_secs_f64(),
                        percentile(&gaps, 0.99).as_secs_f64(),
                        gaps.last().copied().unwrap_or_default().as_secs_f64()
                    );
                    gaps_all.extend(gaps);
                    twos += two;
                }
                Err(e) => {
                    println!("{count:>6} rolling restart {run}/{runs}: {e}");
                    break;
                }
            }
        }
        if runs > 1 {
            failovers.sort();
            gaps_all.sort();
            println!(
                "{count:>6} over {runs} runs: kill -9, {} of {expected} groups failed over, p50 {:.2}s, p99 {:.2}s, max {:.2}s; rolling restarts, {} group stretches, p50 {:.2}s, p99 {:.2}s, max {:.2}s, {twos} double claims",
                failovers.len(),
                percentile(&failovers, 0.5).as_secs_f64(),
                percentile(&failovers, 0.99).as_secs_f64(),
                failovers.last().copied().unwrap_or_default().as_secs_f64(),
                gaps_all.len(),
                percentile(&gaps_all, 0.5).as_secs_f64(),
                percentile(&gaps_all, 0.99).as_secs_f64(),
                gaps_all.last().copied().unwrap_or_default().as_secs_f64(),
            );
        }
        if let Some(net) = &bed.net {
            let stats = net.status().await["stats"].clone();
            println!(
                "{count:>6} broker: {} events published, {} delivered, {} rate-limited, {} dropped",
                stats["published"], stats["delivered"], stats["rate_limited"], stats["dropped"]
            );
        }
        drop(bed);
    }
}

/// kill -9 of the node that leads the most groups in `led`; once each group it led has a new
/// leader that both survivors name, or after [`FAILED_OVER_WITHIN`], the node is started again
/// and every group has a leader all three name. How many groups it led, and how long each
/// took; `None` when the node did not rejoin.
async fn kill_busiest(
    c: &mut Cluster,
    client: &reqwest::Client,
    urls: &[String],
    led: &BTreeMap<String, (Option<String>, u64)>,
    count: usize,
) -> Option<(usize, Vec<Duration>)> {
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for (l, _) in led.values() {
        *per_node.entry(l.clone().unwrap_or_default()).or_default() += 1;
    }
    let (victim, _) = per_node
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(v, n)| (v.clone(), *n))
        .unwrap();
    let vi = c.nodes.iter().position(|n| n.id == victim).unwrap();
    let its: BTreeSet<String> = led
        .iter()
        .filter(|(_, (l, _))| l.as_deref() == Some(victim.as_str()))
        .map(|(g, _)| g.clone())
        .collect();
    let survivors: Vec<String> = (0..3)
        .filter(|i| *i != vi)
        .map(|i| urls[i].clone())
        .collect();
    c.nodes[vi].kill9();
    let killed = pilot_election::clock::now();
    let mut new_leader_at: BTreeMap<String, Duration> = BTreeMap::new();
    while new_leader_at.len() < its.len()
        && pilot_election::clock::since(killed) < FAILED_OVER_WITHIN
    {
        let views = join_all(survivors.iter().map(|u| leaders(client, u))).await;
        if let [Some(a), Some(b)] = &views[..] {
            let now = pilot_election::clock::since(killed);
            for g in &its {
                if new_leader_at.contains_key(g) {
                    continue;
                }
                let (Some((la, ta)), Some((lb, tb))) = (a.get(g), b.get(g)) else {
                    continue;
                };
                if la.is_some() && la == lb && ta == tb && la.as_deref() != Some(victim.as_str()) {
                    new_leader_at.insert(g.clone(), now);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut times: Vec<Duration> = new_leader_at.values().copied().collect();
    times.sort();
    println!(
        "{count:>6} kill -9 of {victim} (leading {}): {} of them have a new leader; p50 {:.2}s, p99 {:.2}s, max {:.2}s",
        its.len(),
        times.len(),
        percentile(&times, 0.5).as_secs_f64(),
        percentile(&times, 0.99).as_secs_f64(),
        times.last().copied().unwrap_or_default().as_secs_f64()
    );

    c.nodes[vi].start();
    wait_up(&c.nodes[vi]).await;
    if all_agree(client, urls, count, ELECTED_WITHIN)
        .await
        .is_none()
    {
        println!("{count:>6}: {victim} did not rejoin every group within {ELECTED_WITHIN:?}");
        return None;
    }
    Some((its.len(), times))
}

/// How long the leaders may take to settle after a start or a rolling restart: every group's
/// preemption wait (up to 2P) and the handovers after it, on a loaded machine.
const SPREAD_WITHIN: Duration = Duration::from_secs(180);

/// `n1 337, n2 301, n3 362`: how many groups each node leads.
fn leads_per_node(led: &BTreeMap<String, (Option<String>, u64)>) -> String {
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for (l, _) in led.values() {
        *per_node.entry(l.as_deref().unwrap_or("none")).or_default() += 1;
    }
    per_node
        .iter()
        .map(|(n, k)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Once no group has changed leader for `2P` plus a second (P is 5 s, and a group's own wait
/// at most `2P`): `group -> (leader, term)`.
async fn steady(
    client: &reqwest::Client,
    urls: &[String],
    count: usize,
) -> Option<BTreeMap<String, (Option<String>, u64)>> {
    let quiet = Duration::from_secs(11);
    let deadline = pilot_election::clock::now() + SPREAD_WITHIN;
    let mut last = all_agree(client, urls, count, ELECTED_WITHIN).await?;
    let mut since = pilot_election::clock::now();
    while pilot_election::clock::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = all_agree(client, urls, count, Duration::from_secs(5)).await?;
        if now != last {
            (last, since) = (now, pilot_election::clock::now());
        } else if pilot_election::clock::since(since) >= quiet {
            return Some(last);
        }
    }
    None
}

/// What one process costs when each election is a cluster of its own, measured with room to
/// spare: processes beyond what `MemAvailable` holds at this much each are not started.
const PROCESS_BUDGET_KIB: u64 = 16 * 1024;

fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Proportional set size: pages shared between processes (the binary's text, which a thousand
/// processes of one build share) counted once in all, so that a sum over processes is what they
/// take from the machine; RSS would count the shared pages in every process.
fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Per node (the sum over its processes): PSS in MiB and CPU in % of one core over `secs`.
async fn cost(pids: &[Vec<u32>], secs: u64) -> Vec<(f64, f64)> {
    let ticks0: Vec<u64> = pids
        .iter()
        .map(|p| p.iter().map(|p| cpu_ticks(*p)).sum())
        .collect();
    let t0 = pilot_election::clock::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let elapsed = pilot_election::clock::since(t0).as_secs_f64();
    let hz = clk_tck();
    pids.iter()
        .zip(ticks0)
        .map(|(p, t0)| {
            let ticks: u64 = p.iter().map(|p| cpu_ticks(*p)).sum();
            let pss: u64 = p.iter().map(|p| pss_kib(*p)).sum();
            (
                pss as f64 / 1024.0,
                (ticks - t0) as f64 / hz / elapsed * 100.0,
            )
        })
        .collect()
}

fn print_cost(way: &str, count: usize, per_node: usize, elected: Duration, cost: &[(f64, f64)]) {
    for (i, (pss, cpu)) in cost.iter().enumerate() {
        println!(
            "{count:>9} {way:>10} {:>6} {per_node:>10} {pss:>9.1} {cpu:>9.2}% {:>8.1}s",
            format!("n{}", i + 1),
            elected.as_secs_f64()
        );
    }
}

/// `bench side-by-side`: for each count of `--groups`, that many elections on three nodes over
/// http at default timings, two ways in one run: first as that many three-node clusters of
/// today's one-election process (or as many as the machine's free memory holds), then as one
/// process per node in that many groups. Per node, the sum of its processes' PSS and CPU over a
/// `--secs` window once every election has a leader, and how long that took. When the processes
/// do not all elect (the machine's cores run out before its memory does), how many did, and the
/// groups are measured all the same.
pub async fn side_by_side(o: &Opts) {
    let client = http();
    println!(
        "side by side: elections on 3 nodes over http at default timings, {}s windows",
        o.secs
    );
    println!(
        "{:>9} {:>10} {:>6} {:>10} {:>9} {:>10} {:>9}",
        "elections", "way", "node", "processes", "PSS MiB", "CPU %core", "elected"
    );
    for &asked in &o.groups {
        let fit = (mem_available_kib() / PROCESS_BUDGET_KIB / 3) as usize;
        let count = asked.min(fit);
        if count < asked {
            println!(
                "{asked:>9}: {} processes would not fit in {} MiB available; {count} elections as processes",
                asked * 3,
                mem_available_kib() / 1024
            );
        }

        // Today's way: a cluster per election, each node its own process.
        let mut per_process = None;
        let started = pilot_election::clock::now();
        let mut clusters = Vec::with_capacity(count);
        for _ in 0..count {
            let c = Cluster::start(3, &["--preempt-after", "0s"]);
            for n in &c.nodes {
                wait_up(n).await;
            }
            clusters.push(c);
        }
        let elected = wait_for(ELECTED_WITHIN * 3, || async {
            for c in &clusters {
                let urls: Vec<String> = c.nodes.iter().map(|n| n.url()).collect();
                all_agree(&client, &urls, 1, Duration::ZERO).await?;
            }
            Some(())
        })
        .await;
        if elected.is_some() {
            let elected_in = pilot_election::clock::since(started);
            settle(pilot_election::clock::now()).await;
            let pids: Vec<Vec<u32>> = (0..3)
                .map(|i| {
                    clusters
                        .iter()
                        .map(|c| c.nodes[i].child.as_ref().unwrap().id())
                        .collect()
                })
                .collect();
            per_process = Some(cost(&pids, o.secs).await);
            print_cost(
                "processes",
                count,
                count,
                elected_in,
                per_process.as_deref().unwrap_or_default(),
            );
        } else {
            let mut with_leader = 0;
            for c in &clusters {
                let urls: Vec<String> = c.nodes.iter().map(|n| n.url()).collect();
                with_leader +=
                    usize::from(all_agree(&client, &urls, 1, Duration::ZERO).await.is_some());
            }
            println!(
                "{count:>9} processes: {with_leader} of {count} clusters had a leader all three named {:?} after the last start (load average {})",
                ELECTED_WITHIN * 3,
                super::load_average()
            );
        }
        drop(clusters);

        // Groups: one process per node.
        let started = pilot_election::clock::now();
        let bed = in_groups(count, "http").await;
        let c = &bed.c;
        let urls: Vec<String> = c.nodes.iter().map(|n| n.url()).collect();
        if all_agree(&client, &urls, count, ELECTED_WITHIN)
            .await
            .is_none()
        {
            println!("{count:>9}: not every group elected within {ELECTED_WITHIN:?}");
            continue;
        }
        let elected_in = pilot_election::clock::since(started);
        settle(pilot_election::clock::now()).await;
        let pids: Vec<Vec<u32>> = c
            .nodes
            .iter()
            .map(|n| vec![n.child.as_ref().unwrap().id()])
            .collect();
        let per_group = cost(&pids, o.secs).await;
        print_cost("groups", count, 1, elected_in, &per_group);
        if let Some(per_process) = per_process {
            let sum = |v: &[(f64, f64)]| v.iter().fold((0.0, 0.0), |a, x| (a.0 + x.0, a.1 + x.1));
            let (mp, cp) = sum(&per_process);
            let (mg, cg) = sum(&per_group);
            println!(
                "{count:>9}: groups take {:.1}x less memory and {:.1}x less CPU than processes",
                mp / mg.max(0.001),
                cp / cg.max(0.001)
            );
        }
    }
}
