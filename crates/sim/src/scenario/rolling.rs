//! The rolling family: every node restarted in turn, graceful and `kill -9` mixed, gated on
//! `/readyz` or not, some handovers overlapped by other faults; timing changes and upgrades.

use super::*;

/// The leader that every running node of `group` names, if it answers as leader (it may be
/// outside the group).
fn leader_seen_by(w: &World, group: &[usize]) -> Option<usize> {
    let mut named: Option<(String, u64)> = None;
    for &i in group {
        if !w.is_up(i) || w.is_paused(i) {
            continue;
        }
        let v = w.view(i)?;
        let l = (v.leader.clone()?, v.term);
        match &named {
            None => named = Some(l),
            Some(n) if *n == l => {}
            Some(_) => return None,
        }
    }
    let (leader, _) = named?;
    let idx = (0..w.size()).find(|&i| w.id(i) == leader)?;
    w.claims_leadership(idx).then_some(idx)
}

/// Every node restarted in turn; leaderless time per leader restart. With `plan.overlaps`, some
/// restarts of the leader overlap a handover in flight: an operator step-down comes first, a
/// second voter is killed or stopped before the old leader is gone, and the operator names the
/// node that just resigned (still cooling) as the next successor.
pub fn run_rolling(scenario: Scenario, plan: RollingPlan, factory: Factory) -> SeedReport {
    let t = scenario.envelope();
    let te = t.election_timeout;
    let (mut w, mut rng) = world_for(&scenario, factory);
    w.runtime = RuntimeModel {
        fsync_max: Duration::from_millis(3),
        ..RuntimeModel::default()
    };
    let n = w.size();
    let mut trace = Trace(String::new());
    trace.log(&w, scenario.summary());
    let mut report = SeedReport::new(scenario.clone());
    let step = sample_step(&t);
    let all: Vec<usize> = (0..n).collect();
    if run_until_cond(&mut w, te * 4 + t.stagger * n as u32, step, |w| {
        w.agreed_leader().is_some()
    })
    .is_none()
    {
        w.checker.violate(
            w.now().as_nanos() as u64,
            "no first leader before the restarts",
        );
    }
    if let Change::Timings(new) = &plan.change {
        // Timely for the new timings too.
        let tight = NetConfig::timely(new);
        if tight.max_delay < w.net.max_delay {
            w.net = tight;
        }
    }
    let fast = handover_bound(&w);
    w.net.loss = plan.loss;
    // Nodes an overlapping fault took down, and when the orchestrator brings them back.
    let mut pending: Vec<(Duration, usize)> = Vec::new();
    let grace = w.runtime.handover_grace + te;
    for pass in 0..plan.passes {
        // Highest id first (a StatefulSet), lowest first, or shuffled.
        let mut order: Vec<usize> = all.clone();
        match rng.below(3) {
            0 => order.sort_by(|a, b| w.id(*b).cmp(w.id(*a))),
            1 => order.sort_by(|a, b| w.id(*a).cmp(w.id(*b))),
            _ => {
                shuffle(&mut order, &mut rng);
            }
        }
        for i in order {
            let was_leader = w.claims_leadership(i);
            let kill = rng.chance(plan.kill_share);
            let step_down = plan.overlaps && was_leader && !kill && rng.chance(0.3);
            let overlap = plan.overlaps && was_leader && !kill && rng.chance(0.4);
            let stopped_at = w.now();
            if kill {
                w.crash(i);
            } else if step_down {
                let successor = rng
                    .chance(0.6)
                    .then(|| w.id(rng.below(n as u64) as usize).to_string());
                let r = w.command(
                    i,
                    Input::StepDown {
                        successor: successor.clone(),
                        expected_term: None,
                    },
                );
                trace.log(
                    &w,
                    format!(
                        "pass {pass}: operator step-down of {i}, successor {successor:?}: {r:?}"
                    ),
                );
            } else {
                w.stop(i);
            }
            if overlap {
                overlap_fault(&mut w, &mut rng, i, &mut pending, &mut trace);
            }
            if step_down {
                let limit = te * 3 + t.stagger * n as u32;
                roll_until(&mut w, limit, step, &mut pending, |w| {
                    w.current_leader().is_some_and(|l| l != i)
                });
                // Rule 10: a named successor campaigns at once even while it cools down.
                if let Some(l) = w.current_leader().filter(|&l| l != i && rng.chance(0.5)) {
                    let back = Some(w.id(i).to_string());
                    let r = w.command(
                        l,
                        Input::StepDown {
                            successor: back.clone(),
                            expected_term: None,
                        },
                    );
                    trace.log(
                        &w,
                        format!("operator step-down of {l}, successor {back:?} (cooling): {r:?}"),
                    );
                    w.run_until(w.now() + t.heartbeat.mul_f64(rng.unit() * 2.0));
                }
                w.stop(i);
            }
            if !kill {
                roll_until(&mut w, grace, step, &mut pending, |w| !w.is_up(i));
            }
            let named = w
                .last_resign(i)
                .filter(|(at, _)| *at >= stopped_at)
                .map(|(at, s)| format!(", resigned at {:.3}s naming {s:?}", at.as_secs_f64()));
            trace.log(
                &w,
                format!(
                    "pass {pass}: {} {i}{}{}",
                    if kill { "kill" } else { "SIGTERM" },
                    if was_leader { " (leader)" } else { "" },
                    named.unwrap_or_default()
                ),
            );
            let down = te.mul_f64(rng.unit() * 0.3);
            roll_until(&mut w, down, step, &mut pending, |_| false);
            // The change this roll makes, one node at a time: new flags or a new build.
            let forth = pass % 2 == 0;
            match &plan.change {
                Change::Nothing => {}
                Change::Timings(new) => {
                    w.retime(i, if forth { *new } else { scenario.timings });
                }
                Change::Upgrade { downgrade } => {
                    let back = !forth && *downgrade;
                    w.rebuild(
                        i,
                        if back {
                            Build::Previous
                        } else {
                            Build::Current
                        },
                    );
                }
            }
            w.restart(i);
            if plan.readiness {
                // The orchestrator waits for /readyz of the node it restarted, and of any other
                // node a fault took down meanwhile, before it goes on.
                let ready = roll_until(&mut w, te * 3, step, &mut pending, |w| w.ready(i));
                if ready.is_none() {
                    trace.log(&w, format!("node {i} not ready after 3T"));
                }
            } else {
                w.run_until(w.now() + t.heartbeat.mul_f64(rng.unit()));
            }
            if !pending.is_empty() {
                let gate = plan.readiness;
                let back = roll_until(&mut w, grace + te * 3, step, &mut pending, |w| {
                    (0..n).all(|j| w.is_up(j) && (!gate || w.ready(j)))
                });
                if back.is_none() {
                    trace.log(&w, "a node taken down by an overlapping fault is not back");
                }
            }
            if was_leader {
                let limit = te * 4 + t.stagger * n as u32;
                let found = leader_seen_by(&w, &all).is_some()
                    || roll_until(&mut w, limit, step, &mut pending, |w| {
                        leader_seen_by(w, &all).is_some()
                    })
                    .is_some();
                if !found {
                    let what = format!(
                        "no leader {limit:?} after the leader's restart: {}",
                        w.describe()
                    );
                    w.checker.violate(w.now().as_nanos() as u64, what);
                    continue;
                }
                // From the moment the old leader stopped answering as leader to the moment
                // another node did, as the checker saw the claims.
                let gap = w
                    .checker
                    .first_claim_gap_after(stopped_at.as_nanos() as u64)
                    .unwrap_or_default();
                report.leader_restart_gaps.push(gap);
                trace.log(
                    &w,
                    format!(
                        "leaderless for {gap:?} after {:.3}s (the leader's restart)",
                        stopped_at.as_secs_f64()
                    ),
                );
                // A handover needs a quorum without the leader (two nodes wait for it to return).
                let plain = !kill && !step_down && !overlap && plan.loss == 0.0 && n > quorum_of(n);
                if plain && gap > fast {
                    let what = format!(
                        "the graceful restart of the leader {i} left the cluster without a leader \
                         for {gap:?}, more than {fast:?} (rule 10: a handover waits for no timer)"
                    );
                    w.checker.violate(w.now().as_nanos() as u64, what);
                }
            }
        }
    }
    w.net = w.timely_net();
    let budget = te * 3 + t.stagger * n as u32;
    report.leader_after_heal =
        run_until_cond(&mut w, budget, step, |w| w.agreed_leader().is_some());
    if report.leader_after_heal.is_none() {
        let what = format!(
            "no agreed leader {budget:?} after the rolling restart: {}",
            w.describe()
        );
        w.checker.violate(w.now().as_nanos() as u64, what);
    }
    report.violations = w.checker.violations.clone();
    report.events = w.stats.events;
    report.firings = w.firings_run();
    report.observed = w.stats.observed;
    report.trace = trace.0;
    report
}

/// The longest a graceful handover may leave the cluster without a leader on a timely network
/// without loss: the resign, a pre-vote round and a vote round (five one-way delays) and the
/// fsyncs of the votes and the new term, with a delay's worth to spare. Rule 10 makes the
/// successor campaign at once, so no timer (`h`, the stagger, `T`) belongs in it.
fn handover_bound(w: &World) -> Duration {
    w.net.max_delay * 6 + w.runtime.fsync_max * 4
}

/// Takes a second node down while a handover is in flight (right after the leader's resign left,
/// before the old leader has exited): the successor it named or another voter, by `kill -9` or
/// SIGTERM; the orchestrator brings it back a little later.
fn overlap_fault(
    w: &mut World,
    rng: &mut Rng,
    leader: usize,
    pending: &mut Vec<(Duration, usize)>,
    trace: &mut Trace,
) {
    let n = w.size();
    let te = w.timings().election_timeout;
    w.run_until(w.now() + w.net.max_delay.mul_f64(rng.unit() * 3.0));
    let named = w
        .last_resign(leader)
        .and_then(|(_, s)| s.map(str::to_string))
        .and_then(|id| (0..n).find(|&j| w.id(j) == id));
    let others: Vec<usize> = (0..n).filter(|&j| j != leader && w.is_up(j)).collect();
    let victim = match named {
        Some(j) if j != leader && rng.chance(0.6) => j,
        _ if others.is_empty() => return,
        _ => others[rng.below(others.len() as u64) as usize],
    };
    let how = if rng.chance(0.5) {
        w.crash(victim);
        "kill"
    } else {
        w.stop(victim);
        "SIGTERM"
    };
    let back = w.now() + te.mul_f64(0.05 + rng.unit() * 0.25);
    pending.push((back, victim));
    trace.log(
        w,
        format!(
            "{how} {victim} during the handover of {leader} (named {named:?}), back from {:.3}s",
            back.as_secs_f64()
        ),
    );
}

/// Runs in steps until `cond` holds or `limit` passes, restarting the nodes of `pending` once
/// their time has come and they are down; how long it took.
fn roll_until(
    w: &mut World,
    limit: Duration,
    step: Duration,
    pending: &mut Vec<(Duration, usize)>,
    mut cond: impl FnMut(&World) -> bool,
) -> Option<Duration> {
    let start = w.now();
    while w.now() < start + limit {
        let next = (w.now() + step).min(start + limit);
        w.run_until(next);
        pending.retain(|&(at, j)| {
            if w.now() >= at && !w.is_up(j) {
                w.restart(j);
                false
            } else {
                true
            }
        });
        if cond(w) {
            return Some(w.now() - start);
        }
    }
    None
}
