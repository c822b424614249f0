//! Prints simulated figures at default timings: failover after a leader crash (p50/p99, in
//! units of T) and messages per heartbeat interval as the cluster grows.
//!
//! `cargo run --release --example sim-figures [runs]`

use std::time::Duration;

use pilot_election::election::Timings;
use pilot_election::sim::scenario::{failover_time, traffic_per_interval};

fn main() {
    let runs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let t = Timings::default();
    let te = t.election_timeout.as_secs_f64();
    println!(
        "default timings: h={:?} L={:?} T={:?} S={:?}",
        t.heartbeat, t.lease, t.election_timeout, t.stagger
    );
    // A 101-node world is a hundred times the work of a small one per simulated second.
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
