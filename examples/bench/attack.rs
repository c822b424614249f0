//! `bench attack`: `GET /leader` on the leader of a 3-node http cluster, quiet and then while
//! each flood below runs against that leader, with its RSS at the caps. The nodes run at
//! an open-file limit of 1024 (soft and hard) and default connection limits, with a cluster key.
//!
//! Floods (each for warm-up + `--secs`):
//! - slowloris: 1100 clients, each sending a partial request head and coming back as soon as
//!   the node closes it (evicted at the cap or timed out);
//! - events: 500 clients subscribing to `/events` again and again; a stream is held to the end,
//!   a refusal is retried at once;
//! - posts: 8 clients sending unauthenticated `POST /step-down` and `/candidacy` and unsigned
//!   forged peer messages as fast as the node answers.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;
use tokio::time::Instant;

use super::{current_leader, http, rss_kib, wrk, Opts, Wrk};
use crate::app::{wait_up, Cluster, TempDir};
use crate::flood::{self, Attempt, Post};

/// How long a flood runs before wrk starts, to reach the caps.
const WARM_UP: Duration = Duration::from_secs(3);
const OPEN_FILES: u64 = 1024;
const HALF_OPEN: usize = 1100;
const SUBSCRIBERS: usize = 500;
const POSTERS: usize = 8;

pub async fn attack(o: &Opts) {
    let ours = flood::raise_open_files();
    assert!(
        ours >= 4096,
        "the bench needs a few thousand sockets; hard limit {ours}"
    );
    let keys = TempDir::new("bench-keys");
    let kf = keys.0.join("cluster.key");
    std::fs::write(&kf, "k1=0123456789abcdef0123456789abcdef\n").expect("key file");
    let kf = kf.display().to_string();
    println!(
        "wrk -t2 -c32 -d{}s --latency on the leader's GET /leader, quiet then under each flood",
        o.secs
    );
    // A fresh cluster per flood: RSS at the caps of one flood is not the allocator's memory of
    // the previous one.
    Target::start(&kf, o.secs)
        .await
        .round("slowloris", |t, until| slowloris(t.addr, until))
        .await;
    Target::start(&kf, o.secs)
        .await
        .round("events", |t, until| subscribers(t.addr, until))
        .await;
    Target::start(&kf, o.secs)
        .await
        .round("posts", |t, until| posts(t.url.clone(), t.term, until))
        .await;
}

/// The leader of a fresh 3-node cluster, to attack.
struct Target {
    c: Cluster,
    leader: String,
    term: u64,
    url: String,
    addr: SocketAddr,
    pid: u32,
    secs: u64,
}

impl Target {
    async fn start(key_file: &str, secs: u64) -> Target {
        let c = Cluster::start_with_open_files(
            3,
            &["--preempt-after", "0s", "--cluster-key-file", key_file],
            Some(OPEN_FILES),
        );
        for n in &c.nodes {
            wait_up(n).await;
        }
        let (leader, term) = current_leader(&http(), &c, &[0, 1, 2]).await;
        let li = c.index(&leader);
        let pid = c.nodes[li].child.as_ref().expect("running").id();
        println!(
            "leader {leader} (term {term}), pid {pid}, open-file limit {:?}",
            flood::open_files_of(pid)
        );
        Target {
            url: c.nodes[li].url(),
            addr: SocketAddr::from(([127, 0, 0, 1], c.nodes[li].port)),
            c,
            leader,
            term,
            pid,
            secs,
        }
    }

    /// wrk quiet, then while `flood` runs (given the target and when to stop; it says what it
    /// did); reports both, then checks that the node settles with the same leader and term.
    async fn round<F>(&self, name: &str, flood: impl FnOnce(&Target, Instant) -> F)
    where
        F: Future<Output = String> + Send + 'static,
    {
        let quiet = measure(&self.url, self.secs).await;
        report("quiet", &quiet, self.pid, "");
        let run = WARM_UP + Duration::from_secs(self.secs + 1);
        let hostile = tokio::spawn(flood(self, pilot_election::clock::now() + run));
        let w = measure(&self.url, self.secs).await;
        report(name, &w, self.pid, &hostile.await.expect("the flood"));
        settle(&self.c, &self.leader, self.term, &self.url).await;
    }
}

/// wrk on `GET /leader` after the warm-up (off the async threads: wrk blocks).
async fn measure(url: &str, secs: u64) -> Wrk {
    tokio::time::sleep(WARM_UP).await;
    let target = format!("{url}/leader");
    tokio::task::spawn_blocking(move || wrk(&target, secs))
        .await
        .expect("wrk")
}

/// One line of figures; RSS and peak RSS are read at the end of the wrk run, under the flood.
fn report(name: &str, w: &Wrk, pid: u32, what: &str) {
    println!(
        "{name:>9}: GET /leader p50 {:.2} ms, p99 {:.2} ms, {:.0} req/s{}; leader RSS {:.1} MiB (peak {:.1} MiB){}{what}",
        w.p50_ms,
        w.p99_ms,
        w.rps,
        w.trouble(),
        rss_kib(pid) as f64 / 1024.0,
        status_kib(pid, "VmHWM:") as f64 / 1024.0,
        if what.is_empty() { "" } else { "; " },
    );
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// After a flood: the node drains its connections and nobody started an election.
async fn settle(c: &Cluster, leader: &str, term: u64, url: &str) {
    let quiet = crate::app::wait_for(Duration::from_secs(30), || {
        let url = url.to_string();
        async move {
            let m = crate::app::metrics_text(&url).await;
            (flood::sample(&m, r#"pilot_election_connections_open{pool="api"}"#) <= 4.0)
                .then_some(m)
        }
    })
    .await;
    let m = quiet.expect("the leader's connections drain after the flood");
    let counters: Vec<&str> = m
        .lines()
        .filter(|l| {
            [
                "refused_total",
                "timed_out_total",
                "evicted_total",
                "outcome=\"unsigned\"",
            ]
            .iter()
            .any(|k| l.contains(k))
        })
        .collect();
    println!("           leader counters: {}", counters.join(", "));
    let (l, t) = current_leader(&http(), c, &[0, 1, 2]).await;
    assert_eq!(
        (l.as_str(), t),
        (leader, term),
        "a flood changed the leader or the term"
    );
}

/// [`HALF_OPEN`] clients each sending a partial head, waiting to be closed, and coming back at
/// once.
async fn slowloris(addr: SocketAddr, until: Instant) -> String {
    let from = pilot_election::clock::now();
    let clients = (0..HALF_OPEN).map(|_| async move {
        let mut opened = 0u64;
        while pilot_election::clock::now() < until {
            let conns = flood::half_open(addr, 1, 1).await;
            if conns.is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            opened += 1;
            flood::closing_times(
                conns,
                until.saturating_duration_since(pilot_election::clock::now()),
            )
            .await;
        }
        opened
    });
    let opened: u64 = join_all(clients).await.into_iter().sum();
    format!(
        "{HALF_OPEN} clients opened {opened} half-open connections ({:.0}/s)",
        opened as f64 / pilot_election::clock::since(from).as_secs_f64()
    )
}

/// [`SUBSCRIBERS`] clients subscribing again and again: a stream is held to `until`, a refusal
/// retried at once.
async fn subscribers(addr: SocketAddr, until: Instant) -> String {
    let from = pilot_election::clock::now();
    // Attempts stop a second before the streams are let go, so that none takes a slot that a
    // leaving holder has just freed (that would count a stream twice).
    let last_attempt = until - Duration::from_secs(1);
    let clients = (0..SUBSCRIBERS).map(|_| async move {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        while pilot_election::clock::now() < last_attempt {
            let key = match flood::subscribe(addr).await {
                Attempt::Streaming(s) => {
                    pilot_election::clock::sleep_until(until).await;
                    drop(s);
                    "200".to_string()
                }
                Attempt::Answered { status, .. } => status.to_string(),
                Attempt::Unanswered => "unanswered".to_string(),
            };
            *seen.entry(key).or_default() += 1;
        }
        seen
    });
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for seen in join_all(clients).await {
        for (k, v) in seen {
            *tally.entry(k).or_default() += v;
        }
    }
    let attempts: usize = tally.values().sum();
    format!(
        "{SUBSCRIBERS} clients made {attempts} subscription attempts ({:.0}/s): {tally:?}",
        attempts as f64 / pilot_election::clock::since(from).as_secs_f64()
    )
}

/// [`POSTERS`] clients sending unauthenticated mutations and unsigned forged peer messages (a
/// coup in a far term).
async fn posts(url: String, term: u64, until: Instant) -> String {
    let from = pilot_election::clock::now();
    use pilot_election::election::{Announced, Timings, Versions, PROTOCOL_VERSION};
    let coup = json!({"v": PROTOCOL_VERSION, "group": "it", "from": "mallory",
                      "term": term + 100, "seq": 1, "members": "00000000",
                      "speaks": Versions::OURS, "timings": Announced::of(&Timings::default()),
                      "ts": 0, "type": "leader", "leader": "mallory", "elected_at": 0});
    let post = |path: &str, body: String, bearer: Option<&str>| Post {
        path: path.into(),
        body,
        bearer: bearer.map(String::from),
    };
    let posts = vec![
        post("/step-down", json!({}).to_string(), None),
        post(
            "/candidacy",
            json!({"eligible": false}).to_string(),
            Some("wrong"),
        ),
        post("/peer/messages", coup.to_string(), None),
    ];
    let statuses = flood::post_flood(&url, posts, POSTERS, until).await;
    let sent: u64 = statuses.values().sum();
    format!(
        "{POSTERS} clients sent {sent} POSTs ({:.0}/s), answers by status {statuses:?}",
        sent as f64 / pilot_election::clock::since(from).as_secs_f64()
    )
}
