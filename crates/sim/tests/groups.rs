//! Many groups on every node (src/groups.rs): groups added and removed one node at a time
//! while nodes crash, restart and partition, every group's invariants checked after every
//! event, and every broken variant of the multiplexing caught.
//!
//! `SIM_GROUPS_SEEDS=N` runs N seeds (default 300); `SIM_GROUPS_SEED=S` replays one with its
//! trace.

use pilot_election_sim::{run_groups, run_groups_seed, GroupsReport, Mix};

fn violated(r: &GroupsReport) -> String {
    format!(
        "seed {} ({}) violated:\n  {}\n  replay: {}",
        r.seed,
        r.summary,
        r.violations
            .iter()
            .map(|(g, v)| format!("group {g}: {v}"))
            .collect::<Vec<_>>()
            .join("\n  "),
        r.replay_command()
    )
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn many_group_seeds_hold_every_invariant() {
    let n = env_u64("SIM_GROUPS_SEEDS", 300);
    let first = env_u64("SIM_GROUPS_FIRST_SEED", 0);
    let mut failed = Vec::new();
    let mut healed = Vec::new();
    let (mut wire, mut carried) = (0u64, 0u64);
    for seed in first..first + n {
        let r = run_groups_seed(seed);
        wire += r.wire_messages;
        carried += r.election_messages;
        if let Some(d) = r.elected_after_heal {
            healed.push(d);
        }
        if !r.violations.is_empty() {
            eprintln!("{}", violated(&r));
            failed.push(seed);
        }
    }
    healed.sort();
    let pct = |p: f64| healed[((healed.len() - 1) as f64 * p) as usize];
    println!(
        "groups simulation: {n} seeds, {} violating; every group elected after healing: p50 {:?}, p99 {:?}, max {:?}; {carried} election messages in {wire} wire messages",
        failed.len(),
        pct(0.5),
        pct(0.99),
        healed.last().unwrap()
    );
    assert!(failed.is_empty(), "violating seeds: {failed:?}");
    // The batching is at work: fewer wire messages than election messages.
    assert!(
        wire < carried,
        "{wire} wire messages for {carried} election messages"
    );
}

/// Each broken variant of the multiplexing is caught within a few seeds.
#[test]
fn the_checkers_catch_every_mix_up_of_two_groups() {
    for mix in [
        Mix::SendBeforeFsync,
        Mix::OneGroupPerFsync,
        Mix::CrossedBook,
        Mix::ForgetOnRemove,
    ] {
        let caught = (0..200).map(|seed| run_groups(seed, mix)).find(|r| {
            // A liveness failure alone is not what these variants break.
            r.violations
                .iter()
                .any(|(_, v)| !v.what.starts_with("no agreed leader"))
        });
        let r = caught.unwrap_or_else(|| panic!("{mix:?}: no seed of 200 caught it"));
        println!("{mix:?}: seed {} caught it: {}", r.seed, r.violations[0].1);
    }
}

/// Replays `SIM_GROUPS_SEED` with its trace (seed 0 when unset, so that it always checks).
#[test]
fn replay() {
    let seed = env_u64("SIM_GROUPS_SEED", 0);
    let r = run_groups_seed(seed);
    println!("{}", r.trace);
    println!(
        "seed {seed}: {}, elected after heal {:?}",
        r.summary, r.elected_after_heal
    );
    for (g, v) in &r.violations {
        println!("VIOLATION group {g}: {v}");
    }
    assert!(r.violations.is_empty(), "{}", violated(&r));
}
