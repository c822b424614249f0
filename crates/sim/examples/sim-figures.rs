//! Prints simulated figures at default timings: failover after a leader crash (p50/p99, in
//! units of T), messages per heartbeat interval as the cluster grows, the leaderless share of a
//! connected quorum while one node has a persistent fault, and the leaderless gaps of rolling
//! restarts.
//!
//! `cargo run --release -p pilot-election-sim --example sim-figures [runs] [section...]`, the
//! sections being `failover`, `traffic`, `persistent` and `rolling` (all when none is named), so
//! that one table can be refreshed without the minutes the others take.

use std::time::Duration;

use pilot_election_core::Timings;
use pilot_election_sim::scenario::{
    failover_time, persistent_figure, rolling_figure, traffic_per_interval, Change, Fault,
    RollingPlan, Target,
};

fn main() {
    let runs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let sections: Vec<String> = std::env::args().skip(2).collect();
    let want = |s: &str| sections.is_empty() || sections.iter().any(|x| x == s);
    let t = Timings::default();
    println!(
        "default timings: h={:?} L={:?} T={:?} S={:?}",
        t.heartbeat, t.lease, t.election_timeout, t.stagger
    );
    // A 101-node world is a hundred times the work of a small one per simulated second.
    let runs_for = |n: usize| if n <= 9 { runs } else { (runs / 10).max(1) };
    if want("failover") {
        failover(runs, t);
    }
    if want("traffic") {
        traffic(t);
    }
    if want("persistent") {
        persistent(runs_for(25));
    }
    if want("rolling") {
        rolling(runs_for(25));
    }
}

/// Failover after the crash of a stable leader, in units of `T`.
fn failover(runs: u64, t: Timings) {
    let te = t.election_timeout.as_secs_f64();
    let runs_for = |n: usize| if n <= 9 { runs } else { (runs / 10).max(1) };
    println!(
        "\nfailover after kill of a stable leader ({runs} seeded runs for N <= 9, {} above):",
        runs_for(25)
    );
    println!(
        "{:>4} {:>10} {:>10} {:>10} {:>8}",
        "N", "p50", "p99", "max", "failed"
    );
    for n in [3usize, 5, 9, 25, 51, 101] {
        let mut times: Vec<Duration> = Vec::new();
        let mut failed = 0;
        for seed in 0..runs_for(n) {
            match failover_time(seed, n, t) {
                Some(d) => times.push(d),
                None => failed += 1,
            }
        }
        times.sort();
        let p = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() / te;
        println!(
            "{n:>4} {:>9.2}T {:>9.2}T {:>9.2}T {failed:>8}",
            p(0.5),
            p(0.99),
            times.last().unwrap().as_secs_f64() / te
        );
    }
}

/// Publishes and deliveries per heartbeat interval in a steady cluster.
fn traffic(t: Timings) {
    println!("\nsteady-state traffic per heartbeat interval:");
    println!(
        "{:>5} {:>10} {:>12} {:>10}",
        "N", "publishes", "deliveries", "per node"
    );
    for n in [3usize, 5, 9, 25, 51, 101] {
        let (p, d) = traffic_per_interval(n, t);
        println!("{n:>5} {p:>10.1} {d:>12.1} {:>10.2}", p / n as f64);
    }
}

/// Share of the observed time (after the fault, over the scenario's window) that the connected
/// quorum had no agreed leader, per fault and target, 3 and 5 nodes.
fn persistent(runs: u64) {
    println!("\nleaderless share of the connected quorum under one node's persistent fault ({runs} seeded runs each):");
    println!(
        "{:>4} {:<34} {:<10} {:>8} {:>8} {:>8} {:>6}",
        "N", "fault", "target", "mean", "p99", "max", "viol"
    );
    let faults = [
        Fault::Deaf,
        Fault::Mute,
        Fault::OneWayOut,
        Fault::Flapping {
            up: 2.5 / 3.0,
            down: 0.5 / 3.0,
        },
        Fault::Flapping {
            up: 8.0 / 3.0,
            down: 1.0 / 3.0,
        },
        Fault::Flapping {
            up: 8.0 / 3.0,
            down: 4.0 / 3.0,
        },
        Fault::LossyLinks(0.3),
    ];
    for n in [3usize, 5] {
        for fault in faults {
            for target in [Target::Leader, Target::TopRanked, Target::Follower] {
                let mut shares = Vec::new();
                let mut violations = 0;
                for seed in 0..runs {
                    let r = persistent_figure(seed, n, fault, target);
                    violations += r.violations.len();
                    shares.push(r.leaderless_share.unwrap_or(1.0));
                }
                shares.sort_by(f64::total_cmp);
                let mean = shares.iter().sum::<f64>() / shares.len() as f64;
                let p99 = shares[((shares.len() - 1) as f64 * 0.99) as usize];
                println!(
                    "{n:>4} {:<34} {:<10} {:>7.1}% {:>7.1}% {:>7.1}% {violations:>6}",
                    fault.name(),
                    format!("{target:?}"),
                    mean * 100.0,
                    p99 * 100.0,
                    shares.last().copied().unwrap_or(0.0) * 100.0
                );
            }
        }
    }
}

/// Leaderless time after each restart of the leader during rolling restarts (2 passes): from the
/// moment the old leader stopped answering as leader to the moment another node did, as the
/// checker sees the claims at every event (no sampling step to round it up).
fn rolling(runs: u64) {
    println!("\nrolling restarts, 2 passes, leaderless time per restart of the leader ({runs} seeded runs each):");
    println!(
        "{:>4} {:<28} {:>8} {:>8} {:>8} {:>6}",
        "N", "plan", "p50", "p99", "max", "viol"
    );
    for n in [3usize, 5] {
        for (name, kill_share, readiness) in [
            ("SIGTERM, readiness-driven", 0.0, true),
            ("kill -9, readiness-driven", 1.0, true),
        ] {
            let plan = RollingPlan {
                passes: 2,
                change: Change::Nothing,
                kill_share,
                readiness,
                loss: 0.0,
                overlaps: false,
            };
            let mut gaps = Vec::new();
            let mut violations = 0;
            for seed in 0..runs {
                let r = rolling_figure(seed, n, plan.clone());
                violations += r.violations.len();
                gaps.extend(r.leader_restart_gaps);
            }
            gaps.sort();
            let p = |q: f64| {
                gaps.get(((gaps.len().max(1) - 1) as f64 * q) as usize)
                    .map_or(0, |d| d.as_millis())
            };
            println!(
                "{n:>4} {name:<28} {:>6}ms {:>6}ms {:>6}ms {violations:>6}",
                p(0.5),
                p(0.99),
                gaps.last().map_or(0, |d| d.as_millis())
            );
        }
    }
}
