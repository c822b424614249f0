//! A cluster in transition (docs/protocol.md, rules 5, 6, 8 and 15; docs/guide/operations.md
//! "Changing the timings" and "Upgrading"): nodes with different timings, a rolling timing change
//! there and back, and a rolling upgrade from the previous release (built from git history by
//! `scripts/build-previous.sh`) and back, over http and over pilot. Every node's `/role/leader` is
//! polled every 20 ms throughout: never two 200s.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::agree::{agree, agreed};
use crate::app::{free_port, get_json, previous_bin, serial, wait_up, App, Cluster, T};
use crate::devnet::Devnet;
use crate::membership::{logs, member_args, new_node};
use crate::pilot_cluster::pilot_cluster;
use crate::proxy::{Mode, Proxy};
use crate::rolling::{roll_changing, Gate};
use crate::watch::Watcher;

/// The timings a node is changed to, and back from: ten times the default lease.
const LONG: [&str; 4] = ["--lease", "10s", "--election-timeout", "16s"];
/// A long node's election timeout.
const LONG_T: Duration = Duration::from_secs(16);
/// Generous for a loaded machine: start-up takes `T` plus staggers.
const FIRST_LEADER: Duration = Duration::from_secs(25);
/// A restarted node is ready once it follows the leader (sooner than its start-up guard, which
/// may be a long node's 16 s); three long timeouts is the deadline.
const READY_WITHIN: Duration = Duration::from_secs(3 * 16);

/// The arguments of `node` with `LONG` appended (`long`) or without it.
fn with_timings(node: &App, long: bool) -> Vec<String> {
    let mut args: Vec<String> = node.args.clone();
    if let Some(at) = args.iter().position(|a| a == LONG[0]) {
        args.drain(at..at + LONG.len());
    }
    if long {
        args.extend(LONG.iter().map(|s| s.to_string()));
    }
    args
}

/// Item 1 of the mixed-timings issue, measured before rules 5 and 6 covered it: n1 runs a
/// 10 s lease and a 16 s timeout among two nodes on the defaults (2 s, 3 s), leads (it has the
/// highest priority), and is then cut off from both peers by dropping what crosses the links
/// (its API stays reachable). It answers as leader until its lease runs out; the others keep
/// the 16 s promise their acks made and elect only after it. Never two 200s on `/role/leader`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lease_leader_cut_off_from_short_timed_peers_never_leads_beside_their_new_leader() {
    let _serial = serial().await;
    let (_token, tf) = crate::membership::token_file();
    let ids = ["n1", "n2", "n3"];
    let ports: BTreeMap<&str, u16> = ids.iter().map(|id| (*id, free_port())).collect();
    let mut links: BTreeMap<(&str, &str), Proxy> = BTreeMap::new();
    for from in ids {
        for to in ids.iter().filter(|m| **m != from) {
            links.insert((from, *to), Proxy::start(ports[to]).await);
        }
    }
    let mut nodes: Vec<App> = ids
        .iter()
        .zip([900, 200, 100])
        .map(|(id, priority)| {
            new_node(id, ports[id], |data| {
                let mut a = member_args(id, ports[id], data, &ids, |m| links[&(*id, m)].port, &tf);
                a.extend(["--priority".to_string(), priority.to_string()]);
                if *id == "n1" {
                    a.extend(LONG.iter().map(|s| s.to_string()));
                }
                a
            })
        })
        .collect();
    for n in &mut nodes {
        n.start();
    }
    let all: Vec<&App> = nodes.iter().collect();
    let (_, term) = agree(&all, FIRST_LEADER, |l, _| l == "n1", || logs(nodes.iter())).await;
    // The others show the mix, and n1's announced timings.
    let (_, status) = get_json(&format!("{}/status", nodes[1].url())).await;
    assert_eq!(status["mixed_timings"], true, "{status}");
    let n1 = status["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["id"] == "n1"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(n1["timings"]["election_timeout_ms"], 16_000, "{status}");
    assert_eq!(status["protocol"]["writes"], 3, "{status}");

    let w = Watcher::start(nodes.iter().map(|n| (n.id.clone(), n.url())).collect());
    assert!(w.seen_leader(T).await, "the watch saw no leader");
    w.mark("cut n1 off (held links both ways)");
    let cut = pilot_election::clock::now();
    for other in ["n2", "n3"] {
        links[&("n1", other)].set(Mode::Hold);
        links[&(other, "n1")].set(Mode::Hold);
    }
    let rest: Vec<&App> = nodes[1..].iter().collect();
    // Their promise to n1 (16 s on their clocks) must run out first; then an election.
    let within = LONG_T + Duration::from_secs(10);
    let new = agreed(&rest, within, |l, t| l != "n1" && t > term).await;
    let took = pilot_election::clock::now() - cut;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = w.stop().await;
    let label = "long-lease leader cut off";
    report.assert_single_leader(label, || logs(nodes.iter()));
    let Some((new, new_term)) = new else {
        panic!(
            "{label}: n2, n3 did not elect within {within:?}\n{}",
            logs(nodes.iter())
        );
    };
    println!("{label}: {new} leads in term {new_term}, {took:?} after the cut");
    // Not before the promise to n1 ran out (16 s, on a clock up to 5 % fast).
    assert!(
        took >= LONG_T.mul_f64(1.0 / 1.05) - Duration::from_millis(100),
        "{label}: a new leader {took:?} after the cut, before the promise to n1 ran out\n{}",
        logs(nodes.iter())
    );
    for other in ["n2", "n3"] {
        links[&("n1", other)].set(Mode::Pass);
        links[&(other, "n1")].set(Mode::Pass);
    }
    // Healed: n1 follows the new leader in its term (it is ready to vote again).
    agree(
        &all,
        FIRST_LEADER,
        |_, t| t >= new_term,
        || logs(nodes.iter()),
    )
    .await;
}

/// The rolling timing change of docs/guide/operations.md "Changing the timings": 2 s / 3 s to
/// 10 s / 16 s on every node, one at a time, and back; each restart waits for `/readyz`.
async fn timing_change(nodes: &mut [App], label: &str) {
    // The roll asserts one leader at most and every gap under a second.
    roll_changing(nodes, label, Gate::Ready, READY_WITHIN, &|pass, n| {
        (with_timings(n, pass == 1), None)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_timing_change_there_and_back_never_shows_two_leaders() {
    let _serial = serial().await;
    let mut c = Cluster::start(3, &[]);
    timing_change(&mut c.nodes, "timing change http, 3 nodes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_timing_change_there_and_back_over_pilot_never_shows_two_leaders() {
    let _serial = serial().await;
    let net = Devnet::start(4);
    let mut c = pilot_cluster(&net, &[]);
    for n in &c.nodes {
        wait_up(n).await;
    }
    timing_change(&mut c.nodes, "timing change pilot, 3 nodes").await;
}

/// docs/guide/operations.md "Upgrading": every node starts on the previous release (wire protocol
/// version 2 only), is upgraded to this build one at a time, then rolled back the same way. Each
/// restart waits for `/readyz`; the previous build's `/readyz` answers the same way.
async fn upgrade(mut nodes: Vec<App>, label: &str) {
    let previous = previous_bin();
    for n in &mut nodes {
        n.kill9();
        n.binary = Some(previous.clone());
        n.start();
    }
    for n in &nodes {
        wait_up(n).await;
    }
    // The roll asserts one leader at most and every gap under a second.
    roll_changing(&mut nodes, label, Gate::Ready, READY_WITHIN, &|pass, n| {
        let binary = (pass == 2).then(|| previous.clone());
        (n.args.clone(), binary)
    })
    .await;
}

/// Every node of `c` on this build writes `want` within a few heartbeats.
async fn writes_version(nodes: &[App], want: u64) {
    for n in nodes {
        let url = format!("{}/status", n.url());
        let seen = crate::app::wait_for(T, || {
            let url = url.clone();
            async move {
                let (_, s) = get_json(&url).await;
                (s["protocol"]["writes"] == want).then_some(())
            }
        })
        .await;
        assert!(seen.is_some(), "{} does not write version {want}", n.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_the_previous_release_and_back_never_shows_two_leaders() {
    let _serial = serial().await;
    let c = Cluster::start(3, &[]);
    let nodes = c.nodes;
    upgrade(nodes, "upgrade http, 3 nodes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_the_previous_release_over_pilot_never_shows_two_leaders() {
    let _serial = serial().await;
    let net = Devnet::start(4);
    let c = pilot_cluster(&net, &[]);
    upgrade(c.nodes, "upgrade pilot, 3 nodes").await;
}

/// Once every member runs this build, everyone writes version 3; while one runs the previous
/// release, everyone writes version 2 (which it reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_writes_version_3_only_once_every_member_speaks_it() {
    let _serial = serial().await;
    let mut c = Cluster::start(3, &[]);
    let all: Vec<&App> = c.nodes.iter().collect();
    agree(&all, FIRST_LEADER, |_, _| true, || logs(c.nodes.iter())).await;
    writes_version(&c.nodes, 3).await;
    let args = c.nodes[2].args.clone();
    crate::membership::restart_as(&mut c.nodes[2], args, Some(previous_bin())).await;
    wait_up(&c.nodes[2]).await;
    writes_version(&c.nodes[..2], 2).await;
    let all: Vec<&App> = c.nodes.iter().collect();
    agree(&all, FIRST_LEADER, |_, _| true, || logs(c.nodes.iter())).await;
    let args = c.nodes[2].args.clone();
    crate::membership::restart_as(&mut c.nodes[2], args, None).await;
    wait_up(&c.nodes[2]).await;
    writes_version(&c.nodes, 3).await;
}
