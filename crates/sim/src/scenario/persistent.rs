//! The persistent family: one node (or, with five and seven, two) keeps a fault; the connected
//! quorum must have a leader within a bound and keep one.

use super::*;

/// Leaderless stretches of `group`, sampled: the share of the time without an agreed leader
/// and the longest stretch.
struct Watch {
    step: Duration,
    leaderless: Duration,
    observed: Duration,
    current: Duration,
    longest: Duration,
}

impl Watch {
    fn new(step: Duration) -> Watch {
        Watch {
            step,
            leaderless: Duration::ZERO,
            observed: Duration::ZERO,
            current: Duration::ZERO,
            longest: Duration::ZERO,
        }
    }

    fn sample(&mut self, has_leader: bool) {
        self.observed += self.step;
        if has_leader {
            self.current = Duration::ZERO;
        } else {
            self.leaderless += self.step;
            self.current += self.step;
            self.longest = self.longest.max(self.current);
        }
    }

    fn share(&self) -> f64 {
        self.leaderless.as_secs_f64() / self.observed.as_secs_f64().max(1e-9)
    }
}

/// A leader that answers as leader and is followed by a quorum of the members (itself
/// included), all in its term: the cluster works, whatever a faulty node sees.
fn quorum_leader(w: &World) -> Option<usize> {
    let n = w.size();
    (0..n).find(|&l| {
        if !w.claims_leadership(l) {
            return false;
        }
        let Some(lv) = w.view(l) else {
            return false;
        };
        let followers = (0..n)
            .filter(|&i| w.is_up(i) && !w.is_paused(i))
            .filter_map(|i| w.view(i))
            .filter(|v| v.term == lv.term && v.leader.as_deref() == Some(lv.node_id.as_str()))
            .count();
        followers >= w.config(l).members.quorum()
    })
}

/// Faults that stay: one node's, a second node's in clusters of five and more, or a minority
/// cut off. The rest, a quorum connected both ways, must elect within a bound and keep a leader.
pub fn run_persistent(scenario: Scenario, fault: Fault, factory: Factory) -> SeedReport {
    let t = scenario.envelope();
    let te = t.election_timeout;
    let (mut w, mut rng) = world_for(&scenario, factory);
    w.runtime = RuntimeModel {
        fsync_max: Duration::from_millis(2),
        ..RuntimeModel::default()
    };
    let n = w.size();
    let mut trace = Trace(String::new());
    trace.log(&w, scenario.summary());
    let mut report = SeedReport::new(scenario.clone());
    let step = sample_step(&t);
    if run_until_cond(&mut w, te * 4 + t.stagger * n as u32, step, |w| {
        w.agreed_leader().is_some()
    })
    .is_none()
    {
        w.checker.violate(
            w.now().as_nanos() as u64,
            "no first leader before the fault",
        );
    }
    // Let preemption settle so that the leader is usually the top-ranked node too.
    w.run_until(w.now() + t.preempt_after.max(te) * 2);
    let leader = w.agreed_leader().map(|(i, _)| i);
    let top = (0..n).find(|&i| w.is_top_ranked(i));
    let target = match scenario.target {
        Target::Leader => leader.or(top),
        Target::TopRanked => top,
        Target::Follower => (0..n).find(|&i| Some(i) != leader),
    }
    .unwrap_or(0);
    // Every faulty node with its fault.
    let mut faulty: Vec<(usize, Fault)> = vec![(target, fault)];
    if fault == Fault::MinorityCut {
        let mut others: Vec<usize> = (0..n).filter(|&i| i != target).collect();
        shuffle(&mut others, &mut rng);
        let minority = (n - 1) / 2;
        faulty.extend(others.iter().take(minority - 1).map(|&i| (i, fault)));
    }
    if let Some(second) = scenario.second {
        let others: Vec<usize> = (0..n).filter(|&i| i != target).collect();
        faulty.push((others[rng.below(others.len() as u64) as usize], second));
    }
    let is_faulty = |i: usize| faulty.iter().any(|&(j, _)| j == i);
    let group: Vec<usize> = (0..n).filter(|&i| !is_faulty(i)).collect();
    let fault_at = w.now();
    if fault == Fault::MinorityCut {
        let side: Vec<usize> = faulty.iter().map(|&(i, _)| i).collect();
        w.partition(&side);
    }
    for &(i, f) in &faulty {
        match f {
            Fault::Deaf | Fault::KernelDeaf { .. } => w.deafen(i),
            Fault::Mute => w.mute(i),
            Fault::OneWayOut => {
                // It hears one member that does not hear it.
                let other = group[rng.below(group.len() as u64) as usize];
                w.block(i, other);
            }
            Fault::LossyLinks(p) => {
                for j in (0..n).filter(|&j| j != i) {
                    w.net.link_loss.insert((i, j), p);
                    w.net.link_loss.insert((j, i), p);
                }
            }
            Fault::MinorityCut | Fault::Flapping { .. } | Fault::FlappingLinks { .. } => {}
        }
    }
    trace.log(
        &w,
        format!(
            "{} on nodes {:?}",
            fault.name(),
            faulty
                .iter()
                .map(|&(i, f)| (i, f.name()))
                .collect::<Vec<_>>()
        ),
    );
    // Bound for the first leader after the fault: the target's lease (if it led), the
    // followers' guard, a round; plus the stagger of every rank. A lossy node may cost a
    // bounded veto (T) and a lost round more (as in the failover check below).
    let lossy = faulty
        .iter()
        .any(|(_, f)| matches!(f, Fault::LossyLinks(_)));
    let extra = if lossy { te * 2 } else { Duration::ZERO };
    let first_bound = t.lease + te * 2 + t.stagger * n as u32 + t.heartbeat * 2 + extra;
    // Then no stretch without a leader longer than a failover.
    let gap_bound = first_bound;
    // Long enough that the one failover the fault itself may cost is a small share, also when
    // the stagger (the service's fixed 250 ms) dwarfs T.
    let observe = (te * 20).max(gap_bound * 10);
    let mut watch = Watch::new(step);
    let mut first: Option<Duration> = None;
    // Per faulty node: when its flapping fault turns next, and whether it is whole now.
    let mut flips: Vec<(Duration, bool)> = faulty.iter().map(|_| (fault_at, true)).collect();
    let mut last_leader = None;
    let mut drained = vec![false; faulty.len()];
    // SIM_VERBOSE: the state every T/4 in the trace, for replays.
    let verbose = std::env::var_os("SIM_VERBOSE").is_some();
    let mut seen_transitions = w.transitions.len();
    while w.now() < fault_at + observe {
        for (k, &(i, f)) in faulty.iter().enumerate() {
            if let Fault::KernelDeaf { drain } = f {
                if !drained[k] && w.now() >= fault_at + t.lease.mul_f64(drain) {
                    // The connections it still sent on have timed out: nothing of it arrives.
                    w.mute(i);
                    drained[k] = true;
                    trace.log(&w, format!("node {i}'s sends stop arriving"));
                }
            }
        }
        for (k, &(i, f)) in faulty.iter().enumerate() {
            let (next_flip, whole) = flips[k];
            let (u, d) = match f {
                Fault::Flapping { up, down } | Fault::FlappingLinks { up, down } => (up, down),
                _ => continue,
            };
            if w.now() < next_flip {
                continue;
            }
            let what = match (f, whole) {
                (Fault::Flapping { .. }, true) => {
                    w.crash(i);
                    "crash"
                }
                (Fault::Flapping { .. }, false) => {
                    w.restart(i);
                    "restart"
                }
                (_, true) => {
                    w.partition(&[i]);
                    "cut the links of"
                }
                (_, false) => {
                    for j in (0..n).filter(|&j| j != i) {
                        w.unblock(i, j);
                        w.unblock(j, i);
                    }
                    "restore the links of"
                }
            };
            let next = w.now() + te.mul_f64(if whole { d } else { u });
            flips[k] = (next, !whole);
            trace.log(&w, format!("{what} node {i}"));
        }
        let next = w.now() + step;
        w.run_until(next);
        if verbose {
            if (w.now() - fault_at).as_nanos() % (te.as_nanos() / 4).max(1) < step.as_nanos() {
                trace.log(&w, "(every T/4)");
            }
            for (at, i, tr) in &w.transitions[seen_transitions..] {
                let what = format!("at {:.3}s node {i}: {tr:?}", *at as f64 / 1e9);
                trace.0.push_str(&format!("           {what}\n"));
            }
            seen_transitions = w.transitions.len();
        }
        let now_leader = quorum_leader(&w);
        if now_leader != last_leader {
            trace.log(&w, format!("leader now {now_leader:?}"));
            last_leader = now_leader;
        }
        let has = now_leader.is_some();
        if first.is_none() {
            if has {
                first = Some(w.now() - fault_at);
            } else if w.now() - fault_at > first_bound {
                let what = format!(
                    "{}: no leader agreed by the connected quorum {first_bound:?} after the fault: {}",
                    fault.name(),
                    w.describe()
                );
                w.checker.violate(w.now().as_nanos() as u64, what);
                break;
            }
            continue;
        }
        watch.sample(has);
        if watch.current > gap_bound {
            let what = format!(
                "{}: the connected quorum was without a leader for {:?}: {}",
                fault.name(),
                watch.current,
                w.describe()
            );
            w.checker.violate(w.now().as_nanos() as u64, what);
            break;
        }
    }
    trace.log(&w, "observed");
    report.leaderless_share = Some(watch.share());
    let flapping = faulty.iter().any(|(_, f)| f.flaps());
    // A flapping node may cost the others one failover per flap window, not one per flap.
    // With mixed timings a failover costs the slowest node's promise (rule 5) while faster
    // nodes rank by their own windows, so there the bound is one failover of the slowest
    // configuration per flap cycle (a node's `up + down`).
    let share_bound = if scenario.node_timings.is_empty() {
        0.15
    } else {
        let cycle = faulty
            .iter()
            .filter_map(|(_, f)| match f {
                Fault::Flapping { up, down } | Fault::FlappingLinks { up, down } => {
                    Some(te.mul_f64(up + down))
                }
                _ => None,
            })
            .min()
            .unwrap_or(te);
        let failover = te + t.stagger * n as u32 + t.heartbeat * 2;
        (failover.as_secs_f64() / cycle.as_secs_f64() + 0.05).max(0.15)
    };
    if flapping && watch.share() > share_bound {
        let what = format!(
            "{}: the connected quorum was without a leader {:.0}% of the time (bound {:.0}%)",
            fault.name(),
            watch.share() * 100.0,
            share_bound * 100.0
        );
        w.checker.violate(w.now().as_nanos() as u64, what);
    }
    report.leader_after_heal = first;
    // A second failure while the faults stay: the leader (not a faulty node) crashes. When the
    // others still form a quorum without the faulty nodes, they elect as fast as without the
    // faults: the faulty nodes must not hold them up (rule 11).
    if let Some(l) = quorum_leader(&w).filter(|&l| !is_faulty(l)) {
        let enough = n - faulty.len() > quorum_of(n);
        if !flapping && enough && w.checker.violations.is_empty() {
            w.crash(l);
            // The followers' guard (T on a clock that may run slow by r), every rank's stagger,
            // a few rounds. A lossy top-ranked node may hold the others up for one bounded
            // veto (T) more.
            // Lost messages cost retries: a lossy node gets a wider bound (still a bound).
            let guards = if lossy { 6 } else { 1 };
            let bound = te.mul_f64(guards as f64 / (1.0 - t.max_drift))
                + t.stagger * n as u32
                + t.heartbeat * 3 * guards;
            let took = run_until_cond(&mut w, bound * 3, step, |w| quorum_leader(w).is_some());
            trace.log(&w, format!("leader {l} crashed; new leader after {took:?}"));
            if took.is_none_or(|d| d > bound) {
                let what = format!(
                    "{}: failover with the fault in place took {took:?}, more than {bound:?}: {}",
                    fault.name(),
                    w.describe()
                );
                w.checker.violate(w.now().as_nanos() as u64, what);
            }
        }
    }
    report.violations = w.checker.violations.clone();
    report.events = w.stats.events;
    report.firings = w.firings_run();
    report.observed = w.stats.observed;
    report.trace = trace.0;
    report
}
