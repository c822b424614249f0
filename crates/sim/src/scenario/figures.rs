//! Single runs for the figures the documents quote (failover times, traffic, the quiet run);
//! `examples/sim-figures.rs` prints them.

use super::*;

/// Under 2 % loss and no other fault, once a leader is agreed it must never change.
pub fn quiet_violations(scenario: &Scenario, factory: Factory) -> Vec<Violation> {
    let t = scenario.envelope();
    let (mut w, _) = world_for(scenario, factory);
    w.net.loss = 0.02;
    let start = t.election_timeout * 4 + t.stagger * scenario.size as u32;
    w.run_until(start);
    // Preemption may still move leadership once, to the top-ranked node.
    w.run_until(start + t.preempt_after.max(t.election_timeout) * 2);
    let Some((leader, term)) = w.agreed_leader() else {
        return vec![Violation {
            at: w.now(),
            what: format!("quiet run: no leader after {start:?}: {}", w.describe()),
        }];
    };
    let seen = w.transitions.len();
    // Twenty of the leader's own election timeouts (the same share of its heartbeats whatever
    // the other nodes run).
    w.run_until(w.now() + w.timings_of(leader).election_timeout * 20);
    let mut v = w.checker.violations.clone();
    if let Some((at, i, tr)) = w.transitions.get(seen) {
        v.push(Violation {
            at: Duration::from_nanos(*at),
            what: format!(
                "quiet run under 2% loss: leader {} (term {term}) changed at node {}: {:?}",
                w.id(leader),
                w.id(*i),
                tr
            ),
        });
    }
    v
}

/// A scenario of `size` nodes at `timings` without faults, for the measurements below.
fn plain(seed: u64, size: usize, timings: Timings) -> Scenario {
    Scenario {
        seed,
        family: Family::Chaos,
        size,
        timings,
        faults_until: Duration::ZERO,
        quiet: false,
        target: Target::Leader,
        second: None,
        node_timings: Vec::new(),
    }
}

/// Simulated failover: true time from the crash of a stable leader until every survivor agrees on
/// a new leader that holds its lease. `None` if none within a minute.
pub fn failover_time(seed: u64, size: usize, timings: Timings) -> Option<Duration> {
    let (mut w, mut rng) = world_for(&plain(seed, size, timings), core_factory());
    let settle = timings.election_timeout * 4 + Duration::from_millis(rng.below(1000));
    w.run_until(settle);
    let (leader, _) = w.agreed_leader()?;
    w.crash(leader);
    run_until_cond(
        &mut w,
        Duration::from_secs(60),
        Duration::from_millis(5),
        |w| w.agreed_leader().is_some(),
    )
}

/// Publishes per heartbeat interval in a steady cluster of `size`, and deliveries (each publish
/// reaches every other node).
pub fn traffic_per_interval(size: usize, timings: Timings) -> (f64, f64) {
    let (mut w, _) = world_for(&plain(size as u64, size, timings), core_factory());
    let warm = timings.election_timeout * 4;
    w.run_until(warm);
    let (p0, d0) = (w.stats.published, w.stats.delivered);
    let window = Duration::from_secs(10);
    w.run_until(warm + window);
    let intervals = window.as_secs_f64() / timings.heartbeat.as_secs_f64();
    (
        (w.stats.published - p0) as f64 / intervals,
        (w.stats.delivered - d0) as f64 / intervals,
    )
}

/// The persistent-fault family at default timings for figures: leaderless share per fault.
pub fn persistent_figure(seed: u64, size: usize, fault: Fault, target: Target) -> SeedReport {
    let scenario = Scenario {
        family: Family::Persistent(fault),
        target,
        ..plain(seed, size, Timings::default())
    };
    run_persistent(scenario, fault, core_factory())
}

/// The rolling family at default timings for figures: leaderless time per leader restart.
pub fn rolling_figure(seed: u64, size: usize, plan: RollingPlan) -> SeedReport {
    let scenario = Scenario {
        family: Family::Rolling(plan.clone()),
        ..plain(seed, size, Timings::default())
    };
    run_rolling(scenario, plan, core_factory())
}
