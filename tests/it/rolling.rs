//! Rolling restarts (docs/guide/operations.md "Rolling restarts"): every node in turn gets SIGTERM
//! (a leader hands over first), starts again with the same arguments and data dir, and the next
//! goes only once the restarted node's `/readyz` answers 200 (or, in one test, as soon as it
//! answers at all, still inside its start-up guard). Watched every 20 ms: never two leaders, and
//! every leaderless gap under a second.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::agree::{agree, agreed};
use crate::app::{free_port, serial, wait_for, wait_ready, wait_up, App, Cluster, T};
use crate::devnet::Devnet;
use crate::membership::{leading, logs, member_args, new_node, restart_as, FAILOVER_BOUND};
use crate::pilot_cluster::pilot_cluster;
use crate::proxy::Proxy;
use crate::watch::{Report, Watcher};

/// Start-up takes `T` plus staggers; generous for a loaded machine.
const FIRST_LEADER: Duration = Duration::from_secs(20);
/// A restarted node is ready within its start-up guard `T` (sooner when it follows the
/// leader), plus a heartbeat or two.
const READY_WITHIN: Duration = Duration::from_secs(3 * 3);
/// Every leaderless gap of a rolling restart stays under this (a handover, not a failover).
const GAP_BOUND: Duration = Duration::from_secs(1);
const PASSES: usize = 2;

/// What the roll waits for before it takes the next node down.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// `/readyz` 200: the restarted node can vote again (what docs/guide/operations.md asks for).
    Ready,
    /// Only that the restarted node answers HTTP and that some node leads (no handover is
    /// still in flight): the restarted node may still be inside its start-up guard, so the next
    /// leader to stop hands over while a voter is booting (rule 8 lets that leader's resign end
    /// the guard). Without the leader check the roll would stop a successor before it won,
    /// which is two faults, not a restart (the voters then keep their promise to it for `T`).
    Up,
}

/// `PASSES` passes over `nodes` in order; the watch's report.
async fn roll(nodes: &mut [App], label: &str) -> Report {
    roll_gated(nodes, label, Gate::Ready).await
}

async fn roll_gated(nodes: &mut [App], label: &str, gate: Gate) -> Report {
    roll_changing(nodes, label, gate, READY_WITHIN, &|_, n| {
        (n.args.clone(), n.binary.clone())
    })
    .await
}

/// What a roll restarts a node with, by pass (1, 2) and node: its arguments and its binary
/// (`None`: this build's).
pub(crate) type Change<'a> = &'a dyn Fn(usize, &App) -> (Vec<String>, Option<PathBuf>);

/// `PASSES` passes over `nodes` in order, each restart with what `change` says (new flags, a
/// new binary); the next node goes only once `gate` holds, within `ready_within`.
pub(crate) async fn roll_changing(
    nodes: &mut [App],
    label: &str,
    gate: Gate,
    ready_within: Duration,
    change: Change<'_>,
) -> Report {
    let started = pilot_election::clock::now();
    {
        let all: Vec<&App> = nodes.iter().collect();
        agree(&all, FIRST_LEADER, |_, _| true, || logs(nodes.iter())).await;
    }
    let w = Watcher::start(nodes.iter().map(|n| (n.id.clone(), n.url())).collect());
    assert!(w.seen_leader(T).await, "{label}: the watch saw no leader");
    let mut ready_after = Vec::new();
    for pass in 1..=PASSES {
        for i in 0..nodes.len() {
            let id = nodes[i].id.clone();
            w.mark(format!("pass {pass}: restart {id}"));
            let sent = pilot_election::clock::now();
            let (args, binary) = change(pass, &nodes[i]);
            restart_as(&mut nodes[i], args, binary).await;
            if gate == Gate::Up {
                wait_up(&nodes[i]).await;
                let led = wait_for(FAILOVER_BOUND, || leading(nodes.iter())).await;
                assert!(
                    led.is_some(),
                    "{label}: nobody led after {id}'s restart\n{}",
                    logs(nodes.iter())
                );
                ready_after.push(pilot_election::clock::since(sent));
                continue;
            }
            if let Err(body) = wait_ready(&nodes[i].url(), ready_within).await {
                panic!(
                    "{label}: {id} not ready within {ready_within:?} of its restart: {body}\n{}",
                    logs(nodes.iter())
                );
            }
            ready_after.push(pilot_election::clock::since(sent));
            println!(
                "{label}: pass {pass}: {id} ready {:?} after its SIGTERM",
                pilot_election::clock::since(sent)
            );
        }
    }
    {
        let all: Vec<&App> = nodes.iter().collect();
        agree(&all, T * 2, |_, _| true, || logs(nodes.iter())).await;
    }
    let report = w.stop().await;
    ready_after.sort();
    println!(
        "{label}: {} restarts in {:?}; ready after SIGTERM: min {:?}, median {:?}, max {:?}",
        ready_after.len(),
        pilot_election::clock::since(started),
        ready_after[0],
        ready_after[ready_after.len() / 2],
        ready_after[ready_after.len() - 1]
    );
    report.assert_single_leader(label, || logs(nodes.iter()));
    report.assert_gaps_under(GAP_BOUND, label, || logs(nodes.iter()));
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rolling_restarts_of_three_nodes_never_show_two_leaders_or_a_gap_of_a_second() {
    let _serial = serial().await;
    let mut c = Cluster::start(3, &[]);
    roll(&mut c.nodes, "rolling http, 3 nodes").await;
}

/// Not waiting for readiness: the next node goes down as soon as the restarted one answers and
/// some node leads, so every leader restart after the first finds a voter still in its start-up
/// guard. The handover
/// must still be fast (docs/protocol.md, rule 8: the leader's resign ends the guard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restarts_that_do_not_wait_for_readiness_still_hand_over_within_a_second() {
    let _serial = serial().await;
    let mut c = Cluster::start(3, &[]);
    roll_gated(&mut c.nodes, "rolling http, 3 nodes, not gated", Gate::Up).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rolling_restarts_of_five_nodes_never_show_two_leaders_or_a_gap_of_a_second() {
    let _serial = serial().await;
    let mut c = Cluster::start(5, &[]);
    roll(&mut c.nodes, "rolling http, 5 nodes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rolling_restarts_of_three_nodes_over_pilot_never_show_two_leaders_or_a_gap_of_a_second(
) {
    let _serial = serial().await;
    let net = Devnet::start(4);
    let mut c = pilot_cluster(&net, &[]);
    for n in &c.nodes {
        wait_up(n).await;
    }
    roll(&mut c.nodes, "rolling pilot, 3 nodes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rolling_restarts_of_five_nodes_over_pilot_never_show_two_leaders_or_a_gap_of_a_second()
{
    let _serial = serial().await;
    let net = Devnet::start(6);
    let mut c = crate::pilot_cluster::pilot_cluster_of(&net, 5, &[]);
    for n in &c.nodes {
        wait_up(n).await;
    }
    roll(&mut c.nodes, "rolling pilot, 5 nodes").await;
}

/// A handover in a rolling restart when the stopping leader's messages reach some followers
/// later than its successor's do (a slower path, as between racks): n1 leads (highest
/// priority), n2 is its successor (next highest), and every link from n1 to n3, n4, n5 holds
/// messages back 50 ms. The successor's pre-vote requests can then reach n3..n5 before n1's
/// resign does. Watched: one leader at most, and the handover's gap stays under a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_whose_resign_reaches_the_voters_after_the_successor_stays_under_a_second() {
    let _serial = serial().await;
    let (_token, tf) = crate::membership::token_file();
    let ids = ["n1", "n2", "n3", "n4", "n5"];
    let ports: BTreeMap<&str, u16> = ids.iter().map(|id| (*id, free_port())).collect();
    let mut links: BTreeMap<(&str, &str), Proxy> = BTreeMap::new();
    for from in ids {
        for to in ids.iter().filter(|m| **m != from) {
            links.insert((from, *to), Proxy::start(ports[to]).await);
        }
    }
    let mut nodes: Vec<App> = ids
        .iter()
        .zip([500, 400, 300, 200, 100])
        .map(|(id, priority)| {
            new_node(id, ports[id], |data| {
                let mut a = member_args(id, ports[id], data, &ids, |m| links[&(*id, m)].port, &tf);
                a.extend(["--priority".to_string(), priority.to_string()]);
                a
            })
        })
        .collect();
    for n in &mut nodes {
        n.start();
    }
    let all: Vec<&App> = nodes.iter().collect();
    let (_, term) = agree(&all, FIRST_LEADER, |l, _| l == "n1", || logs(nodes.iter())).await;
    for to in ["n3", "n4", "n5"] {
        links[&("n1", to)].delay(Duration::from_millis(50));
    }
    // Steady with the delay for a while: n1 keeps its lease, every node is ready.
    tokio::time::sleep(T).await;
    for n in &nodes {
        if let Err(body) = wait_ready(&n.url(), T).await {
            panic!("{} not ready: {body}\n{}", n.id, logs(nodes.iter()));
        }
    }
    assert_eq!(
        agreed(&all, T, |_, _| true).await,
        Some(("n1".to_string(), term))
    );

    let w = Watcher::start(nodes.iter().map(|n| (n.id.clone(), n.url())).collect());
    assert!(w.seen_leader(T).await, "the watch saw no leader");
    w.mark("SIGTERM n1");
    nodes[0].sigterm();
    let status = nodes[0].wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "n1 exited with {status:?}");
    let rest: Vec<&App> = nodes[1..].iter().collect();
    let new = agreed(&rest, FAILOVER_BOUND, |l, t| l != "n1" && t > term).await;
    // A little longer, so that the watch has rounds after the new leader.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = w.stop().await;
    let label = "handover, resign slower than the successor";
    report.assert_single_leader(label, || logs(nodes.iter()));
    let Some((new, new_term)) = new else {
        panic!("nobody took over\n{}", logs(nodes.iter()));
    };
    println!("{label}: {new} leads in term {new_term}");
    report.assert_gaps_under(GAP_BOUND, label, || logs(nodes.iter()));
}
