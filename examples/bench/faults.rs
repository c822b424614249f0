//! `bench faults`: issue 11's persistent faults on 3 real nodes at default timings, measured over
//! the window the issue states (60 s after the fault by default; `--secs`). Each run is a fresh
//! cluster settled on its top-ranked node; then one node keeps the fault for the whole window
//! (deaf leader, deaf follower, mute leader, top-ranked node crash-looping 2.5 s up / 0.5 s down)
//! while every node is asked `GET /leader` and `GET /role/leader` every 50 ms. The faults, the
//! sampling and the judging are `support::faults`, the same code `tests/it/faults.rs` asserts
//! with, so the figures here are what the tests check on a shorter window.
//!
//! Per fault: the time from the fault to the first round in which the two connected nodes agree
//! on one of themselves as leader, the share of rounds with an agreed leader over the window
//! counted from the fault and counted from that first leader, and the rounds in which two nodes
//! answered 200 on `/role/leader` (any, from the baseline before the fault on).

use std::time::Duration;

use support::faults::{Bed, Fault, Observed, Via};

use super::{load_average, usage, Opts};

/// One fault's runs.
#[derive(Default)]
struct Tally {
    to_leader: Vec<Option<Duration>>,
    from_fault: Vec<f64>,
    after: Vec<f64>,
    two_leaders: usize,
    rounds: usize,
}

impl Tally {
    fn add(&mut self, seen: &Observed) {
        let v = &seen.verdict;
        self.to_leader.push(v.to_leader);
        self.from_fault.push(v.from_fault.1);
        self.after.push(v.after.1);
        self.two_leaders += v.two_leaders.len();
        self.rounds += seen.rounds.len();
    }
}

fn label(fault: Fault) -> &'static str {
    match fault {
        Fault::DeafLeader => "deaf leader",
        Fault::DeafFollower => "deaf follower",
        Fault::MuteLeader => "mute leader",
        Fault::CrashLoopTopRanked => "top node crash-looping",
    }
}

/// `min-max`, or one value.
fn range(xs: &[f64], unit: &str, digits: usize) -> String {
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if xs.is_empty() {
        "-".into()
    } else if (max - min).abs() < 10f64.powi(-(digits as i32)) {
        format!("{min:.digits$}{unit}")
    } else {
        format!("{min:.digits$}-{max:.digits$}{unit}")
    }
}

pub async fn faults(o: &Opts, runs: usize, secs: u64) {
    let via = match o.transport.as_str() {
        "http" => Via::Http,
        "pilot" => Via::Pilot,
        other => usage(&format!("unknown transport {other}")),
    };
    if o.nodes != 3 {
        usage("faults runs on 3 nodes (one faulty, a connected pair)");
    }
    let window = Duration::from_secs(secs);
    let mut tallies = Vec::new();
    for fault in Fault::ALL {
        let mut tally = Tally::default();
        for run in 1..=runs {
            let mut bed = Bed::start(via).await;
            let seen = bed.run(fault, window).await;
            println!("run {run}: {}; load {}", seen.summary(), load_average());
            if fault == Fault::DeafFollower {
                // The fault took: the deaf follower lost the leader it no longer hears.
                println!(
                    "run {run}: {} stopped naming {} {:?} after the fault",
                    seen.ids[seen.target],
                    seen.before.0,
                    seen.target_lost_leader()
                );
            }
            tally.add(&seen);
            bed.heal().await;
        }
        tallies.push((fault, tally));
    }
    println!(
        "faults 3-node {}: {runs} run(s) per fault, {secs} s watched after each fault, every node \
         sampled every 50 ms (default timings)",
        o.transport
    );
    println!(
        "{:<24} {:>22} {:>18} {:>18} {:>18}",
        "fault", "first agreed leader", "share from fault", "after 1st leader", "two-leader rounds"
    );
    for (fault, t) in &tallies {
        let reached: Vec<f64> = t
            .to_leader
            .iter()
            .flatten()
            .map(|d| d.as_secs_f64())
            .collect();
        let never = t.to_leader.len() - reached.len();
        let first = match never {
            0 => range(&reached, " s", 2),
            n => format!("{} ({n} never)", range(&reached, " s", 2)),
        };
        let pct = |xs: &[f64]| range(&xs.iter().map(|x| x * 100.0).collect::<Vec<_>>(), " %", 1);
        let two = format!("{} of {}", t.two_leaders, t.rounds);
        println!(
            "{:<24} {:>22} {:>18} {:>18} {:>18}",
            label(*fault),
            first,
            pct(&t.from_fault),
            pct(&t.after),
            two
        );
    }
}
