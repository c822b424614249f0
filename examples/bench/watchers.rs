//! `bench watchers`: N `GET /events` streams through the Rust client (`pilot_election_client`)
//! on a 3-node http cluster, all in this process.
//!
//! - Watcher `w` is a `Client` of all three members in the order rotated by `w % 3` (w = 0:
//!   n1 n2 n3, w = 1: n2 n3 n1, ...): a client asks its first member first, so each node
//!   serves about N/3 streams. Which node each stream is on is read from the changes it yields
//!   (`LeaderChange::answered_by`) and checked against each node's
//!   `pilot_election_event_subscribers`.
//! - Cost: RSS (VmRSS) and CPU (utime + stime, and the threads' nanosecond counts from
//!   schedstat, finer than the 10 ms ticks) of each node over an idle 10 s window (only
//!   heartbeats and the streams' keep-alives) with no watcher, then with the N connected; the
//!   difference divided by the streams that node serves.
//! - Latency: `--changes` planned handovers (`POST /step-down` naming the next node), one at a
//!   time, each once every watcher has seen the one before. Per watcher and change: from the
//!   202 answer to the watcher yielding the successor's (term, leader).

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use pilot_election::clock;
use pilot_election_client::Client;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{clk_tck, cpu_ticks, current_leader, http, rss_kib, settle, Opts};
use crate::app::{self, bin, wait_up, Cluster, TOKEN};

/// The idle windows over which the cost is measured.
const IDLE: Duration = Duration::from_secs(10);
/// How long every watcher has to see a change before the missing ones are counted.
const SEE_LIMIT: Duration = Duration::from_secs(10);

/// A change one watcher yielded, stamped when it was yielded.
struct Seen {
    watcher: usize,
    term: u64,
    leader: String,
    answered_by: String,
    at: Instant,
}

/// One node over an idle window.
struct Cost {
    /// VmRSS at the end of the window.
    rss_kib: u64,
    /// utime + stime over the window, in ms per second (clock ticks: 10 ms each at 100 Hz).
    cpu: f64,
    /// The same from the scheduler's nanosecond count of each thread
    /// (`/proc/PID/task/TID/schedstat`, first field), in ms per second; threads that started or
    /// ended within the window are left out.
    sched: f64,
}

/// Nanoseconds on a CPU so far, per thread of `pid`.
fn thread_ns(pid: u32) -> BTreeMap<u64, u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return BTreeMap::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let tid: u64 = e.file_name().to_str()?.parse().ok()?;
            let text = std::fs::read_to_string(e.path().join("schedstat")).ok()?;
            Some((tid, text.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

/// What each node costs over an idle window of `IDLE`.
async fn idle_window(pids: &[u32]) -> Vec<Cost> {
    let hz = clk_tck();
    let ticks0: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    let ns0: Vec<BTreeMap<u64, u64>> = pids.iter().map(|p| thread_ns(*p)).collect();
    let t0 = clock::now();
    tokio::time::sleep(IDLE).await;
    let secs = clock::since(t0).as_secs_f64();
    pids.iter()
        .zip(ticks0.iter().zip(&ns0))
        .map(|(p, (t0, ns0))| {
            let ms = (cpu_ticks(*p) - t0) as f64 / hz * 1000.0;
            let ns: u64 = thread_ns(*p)
                .iter()
                .filter_map(|(tid, ns)| Some(ns.saturating_sub(*ns0.get(tid)?)))
                .sum();
            Cost {
                rss_kib: rss_kib(*p),
                cpu: ms / secs,
                sched: ns as f64 / 1e6 / secs,
            }
        })
        .collect()
}

/// Receives what the watchers yield until every one of them has yielded a change accepted by
/// `want`, or `within` has passed; returns the first such change per watcher (None: missing).
async fn collect(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    n: usize,
    within: Duration,
    want: impl Fn(&Seen) -> bool,
) -> Vec<Option<Seen>> {
    let mut got: Vec<Option<Seen>> = (0..n).map(|_| None).collect();
    let mut left = n;
    let deadline = clock::now() + within;
    while left > 0 {
        let wait = deadline.saturating_duration_since(clock::now());
        match tokio::time::timeout(wait, rx.recv()).await {
            Ok(Some(s)) => {
                if got[s.watcher].is_none() && want(&s) {
                    let w = s.watcher;
                    got[w] = Some(s);
                    left -= 1;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    got
}

/// `POST /step-down` naming `successor` on node `li`, retried while the leader answers 422
/// (the successor not yet known live); returns when the 202 answer arrived.
async fn step_down(client: &reqwest::Client, c: &Cluster, li: usize, successor: &str) -> Instant {
    let deadline = clock::now() + Duration::from_secs(10);
    loop {
        let resp = client
            .post(format!("{}/step-down", c.nodes[li].url()))
            .bearer_auth(TOKEN)
            .json(&json!({ "successor": successor }))
            .send()
            .await
            .expect("step-down request");
        let answered = clock::now();
        match resp.status().as_u16() {
            202 => return answered,
            422 if clock::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            s => panic!(
                "step-down answered {s}: {}",
                resp.text().await.unwrap_or_default()
            ),
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The nearest-rank percentile `q` of sorted samples.
fn pct(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub async fn watchers(o: &Opts) {
    let n = o.watchers;
    // As `start("http", 3)`, without asking for pilot-devnet, which the http transport does not
    // use (so that only the example and the node need to be built).
    let _ = bin();
    let cluster = Cluster::start(3, &["--preempt-after", "0s"]);
    for node in &cluster.nodes {
        wait_up(node).await;
    }
    let c = &cluster;
    let client = http();
    let all = [0, 1, 2];
    let (mut leader, mut term) = current_leader(&client, c, &all).await;
    settle(clock::now()).await;
    let pids: Vec<u32> = c
        .nodes
        .iter()
        .map(|node| node.child.as_ref().unwrap().id())
        .collect();
    let member_urls: Vec<String> = c.nodes.iter().map(|node| node.url()).collect();
    let node_of = |url: &str| member_urls.iter().position(|u| u == url);

    // Cost, 1: no watcher.
    let before = idle_window(&pids).await;

    // The watchers, each with its own client (its own connection pool).
    let (tx, mut rx) = mpsc::unbounded_channel::<Seen>();
    let started = clock::now();
    let tasks: Vec<_> = (0..n)
        .map(|w| {
            let members: Vec<String> = (0..3).map(|k| member_urls[(w + k) % 3].clone()).collect();
            let watcher = Client::new(members).expect("a client of the three members");
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut changes = watcher.watch();
                while let Some(ch) = changes.next().await {
                    let seen = Seen {
                        watcher: w,
                        term: ch.term,
                        leader: ch.leader,
                        answered_by: ch.answered_by,
                        at: clock::now(),
                    };
                    if tx.send(seen).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let first = collect(&mut rx, n, Duration::from_secs(30), |s| {
        s.term == term && s.leader == leader
    })
    .await;
    let connected = first.iter().filter(|s| s.is_some()).count();
    let took = first
        .iter()
        .flatten()
        .map(|s| s.at.saturating_duration_since(started))
        .max()
        .unwrap_or_default();
    // Streams per node: where each watcher's stream was when it yielded the current leader.
    let mut per_node = [0usize; 3];
    for s in first.iter().flatten() {
        if let Some(i) = node_of(&s.answered_by) {
            per_node[i] += 1;
        }
    }
    // A few seconds for the connections to settle (allocations, the first keep-alives).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut subscribers = [0f64; 3];
    for (i, url) in member_urls.iter().enumerate() {
        let text = client
            .get(format!("{url}/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .unwrap_or_default();
        subscribers[i] = app::metric(&text, "pilot_election_event_subscribers");
    }

    // Cost, 2: the N streams open, nothing happening but heartbeats and keep-alives.
    let after = idle_window(&pids).await;

    // Latency of each change to each watcher.
    let mut samples: Vec<Duration> = Vec::new();
    let mut missing = 0usize;
    let mut early = 0usize;
    // Per change: from the first watcher to yield it to the last.
    let mut spreads: Vec<Duration> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    for k in 1..=o.changes {
        let li = c.index(&leader);
        let successor = c.nodes[(li + 1) % 3].id.clone();
        let answered = step_down(&client, c, li, &successor).await;
        let old = term;
        let got = collect(&mut rx, n, SEE_LIMIT, |s| {
            s.leader == successor && s.term > old
        })
        .await;
        let mut these: Vec<Duration> = Vec::new();
        let mut terms: BTreeMap<u64, usize> = BTreeMap::new();
        for s in got.iter().flatten() {
            // A watcher may hear the successor before this process has read the 202.
            if s.at < answered {
                early += 1;
            }
            these.push(s.at.saturating_duration_since(answered));
            *terms.entry(s.term).or_default() += 1;
        }
        let lost = n - these.len();
        missing += lost;
        these.sort();
        let new_term = terms.keys().next_back().copied().unwrap_or(old);
        lines.push(if these.is_empty() {
            format!("change {k}: {leader} (term {old}) -> {successor}: seen by no watcher")
        } else {
            format!(
                "change {k}: {leader} (term {old}) -> {successor} (term {new_term}): \
                 min={:.1}ms p50={:.1}ms p99={:.1}ms max={:.1}ms missing={lost}{}",
                ms(these[0]),
                ms(pct(&these, 0.50)),
                ms(pct(&these, 0.99)),
                ms(*these.last().unwrap()),
                if terms.len() > 1 {
                    format!(" terms seen {terms:?}")
                } else {
                    String::new()
                }
            )
        });
        println!("{}", lines.last().unwrap());
        if let (Some(first), Some(last)) = (these.first(), these.last()) {
            spreads.push(*last - *first);
        }
        samples.extend(these);
        // The nodes agree on who leads now (the next change starts from it).
        (leader, term) = current_leader(&client, c, &all).await;
        if leader != successor {
            println!("  the nodes agree on {leader} (term {term}), not {successor}");
        }
        // Not measured: a few heartbeats so that the next successor is known live.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for t in &tasks {
        t.abort();
    }
    samples.sort();
    spreads.sort();

    let hz = clk_tck();
    println!();
    println!(
        "watchers 3-node http: {n} watchers (pilot_election_client::Client::watch, members rotated per watcher), {} changes (POST /step-down to the next node)",
        o.changes
    );
    println!(
        "  connected: {connected}/{n} yielded the current leader within {:.2}s of the first watch(); streams per node {} (node gauge pilot_election_event_subscribers {})",
        took.as_secs_f64(),
        per_node.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("/"),
        subscribers.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join("/"),
    );
    if samples.is_empty() {
        println!("  202 -> watcher yields the new (term, leader): no sample, missing={missing}");
    } else {
        println!(
            "  202 -> watcher yields the new (term, leader): samples={} missing={missing} p50={:.1}ms p99={:.1}ms max={:.1}ms min={:.1}ms (yielded before the 202 was read: {early}, counted as 0)",
            samples.len(),
            ms(pct(&samples, 0.50)),
            ms(pct(&samples, 0.99)),
            ms(*samples.last().unwrap()),
            ms(samples[0]),
        );
        println!(
            "  first to last watcher within a change: median {:.1}ms, max {:.1}ms",
            ms(pct(&spreads, 0.50)),
            ms(*spreads.last().unwrap()),
        );
    }
    println!(
        "  cost per node over {}s idle (heartbeats and keep-alives only); utime+stime resolution {:.1} ms/s per node:",
        IDLE.as_secs(),
        1000.0 / hz / IDLE.as_secs_f64()
    );
    println!(
        "  {:>4} {:>7} {:>9} {:>9} {:>11} {:>11} {:>11} {:>13} {:>13}",
        "node",
        "streams",
        "RSS 0",
        "RSS N",
        "KiB/watcher",
        "CPU 0 ms/s",
        "CPU N ms/s",
        "ms/s/watcher",
        "sched ms/s/w"
    );
    for i in 0..3 {
        let (b, a) = (&before[i], &after[i]);
        let per = per_node[i].max(1) as f64;
        println!(
            "  {:>4} {:>7} {:>5.1} MiB {:>5.1} MiB {:>11.1} {:>11.2} {:>11.2} {:>13.3} {:>13.4}",
            c.nodes[i].id,
            per_node[i],
            b.rss_kib as f64 / 1024.0,
            a.rss_kib as f64 / 1024.0,
            (a.rss_kib as f64 - b.rss_kib as f64) / per,
            b.cpu,
            a.cpu,
            (a.cpu - b.cpu) / per,
            (a.sched - b.sched) / per,
        );
    }
    let sum = |f: fn(&Cost) -> f64| -> f64 { (0..3).map(|i| f(&after[i]) - f(&before[i])).sum() };
    let w = n.max(1) as f64;
    println!(
        "  all nodes: {:.1} KiB RSS, {:.3} ms/s CPU (utime+stime), {:.4} ms/s CPU (schedstat) per watcher; \
         schedstat 0 -> N watchers {} ms/s",
        sum(|x| x.rss_kib as f64) / w,
        sum(|x| x.cpu) / w,
        sum(|x| x.sched) / w,
        (0..3)
            .map(|i| format!("{:.2}->{:.2}", before[i].sched, after[i].sched))
            .collect::<Vec<_>>()
            .join(" ")
    );
}
