//! Rolling restarts (README "Rolling restarts"): every node in turn gets SIGTERM (a leader hands
//! over first), starts again with the same arguments and data dir, and the next goes only once
//! the restarted node's `/readyz` answers 200. Watched every 20 ms: never two leaders, and every
//! leaderless gap under a second.

use std::time::Duration;

use crate::app::{serial, wait_up, App, Cluster, T};
use crate::devnet::Devnet;
use crate::membership::{agreed, assert_single_leader, logs, restart_with, wait_ready};
use crate::pilot_cluster::pilot_cluster;
use crate::watch::{Report, Watcher};

/// Start-up takes `T` plus staggers; generous for a loaded machine.
const FIRST_LEADER: Duration = Duration::from_secs(20);
/// A restarted node is ready within its start-up guard `T` (sooner when it follows the
/// leader), plus a heartbeat or two.
const READY_WITHIN: Duration = Duration::from_secs(3 * 3);
/// Every leaderless gap of a rolling restart stays under this (a handover, not a failover).
const GAP_BOUND: Duration = Duration::from_secs(1);
const PASSES: usize = 2;

/// `PASSES` passes over `nodes` in order; the watch's report.
async fn roll(nodes: &mut [App], label: &str) -> Report {
    let started = pilot_election::clock::now();
    {
        let all: Vec<&App> = nodes.iter().collect();
        if agreed(&all, FIRST_LEADER, |_, _| true).await.is_none() {
            panic!("{label}: no first leader\n{}", logs(nodes.iter()));
        }
    }
    let w = Watcher::start(nodes.iter().map(|n| (n.id.clone(), n.url())).collect());
    let mut ready_after = Vec::new();
    for pass in 1..=PASSES {
        for i in 0..nodes.len() {
            let id = nodes[i].id.clone();
            w.mark(format!("pass {pass}: restart {id}"));
            let sent = pilot_election::clock::now();
            let args = nodes[i].args.clone();
            restart_with(&mut nodes[i], args).await;
            if let Err(body) = wait_ready(&nodes[i].url(), READY_WITHIN).await {
                panic!(
                    "{label}: {id} not ready within {READY_WITHIN:?} of its restart: {body}\n{}",
                    logs(nodes.iter())
                );
            }
            ready_after.push(sent.elapsed());
            println!(
                "{label}: pass {pass}: {id} ready {:?} after its SIGTERM",
                sent.elapsed()
            );
        }
    }
    {
        let all: Vec<&App> = nodes.iter().collect();
        if agreed(&all, T * 2, |_, _| true).await.is_none() {
            panic!(
                "{label}: no agreed leader at the end\n{}",
                logs(nodes.iter())
            );
        }
    }
    let report = w.stop().await;
    ready_after.sort();
    println!(
        "{label}: {} restarts in {:?}; ready after SIGTERM: min {:?}, median {:?}, max {:?}",
        ready_after.len(),
        started.elapsed(),
        ready_after[0],
        ready_after[ready_after.len() / 2],
        ready_after[ready_after.len() - 1]
    );
    assert_single_leader(&report, label, || logs(nodes.iter()));
    assert!(
        report.gaps.iter().all(|g| g.len < GAP_BOUND),
        "{label}: a leaderless gap of {:?} (bound {GAP_BOUND:?})\n{}",
        report.max_gap(),
        logs(nodes.iter())
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rolling_restarts_of_three_nodes_never_show_two_leaders_or_a_gap_of_a_second() {
    let _serial = serial().await;
    let mut c = Cluster::start(3, &[]);
    roll(&mut c.nodes, "rolling http, 3 nodes").await;
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
