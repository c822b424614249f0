//! The chaos family: random faults of every kind, then healing, then liveness and the
//! steady-state rank check; in some seeds a calm spell for a quorum, which must have a leader.

use super::*;

/// Since when, as seen at the chaos steps, the network as a whole, each node and each link have
/// been free of faults, so that a quorum connected both ways on timely links can be held to the
/// liveness promise (docs/protocol.md, "What it promises") in the middle of the chaos and not
/// only after healing. A node counts when it is up, unpaused, out of maintenance, not stopping, not about to crash,
/// eligible, not stalled and left alone by the operator; a link when it is open both ways
/// without extra loss or delay; the network when it loses nothing and stays within the timely
/// delay.
struct Calm {
    net: Option<Duration>,
    /// Per node: since when, in which incarnation.
    nodes: Vec<Option<(Duration, u64)>>,
    links: Vec<Vec<Option<Duration>>>,
}

impl Calm {
    fn new(n: usize) -> Calm {
        Calm {
            net: None,
            nodes: vec![None; n],
            links: vec![vec![None; n]; n],
        }
    }

    /// Looks at the world now; `touched` was just given an operator command.
    fn update(&mut self, w: &World, touched: Option<usize>) {
        let now = w.now();
        let timely = w.timely_net();
        let net_ok = w.net.loss == 0.0
            && w.net.long_delay_chance == 0.0
            && w.net.max_delay <= timely.max_delay;
        self.net = net_ok.then(|| self.net.unwrap_or(now));
        for i in 0..w.size() {
            let ok = w.is_up(i)
                && !w.is_paused(i)
                && !w.in_maintenance(i)
                && !w.is_stopping(i)
                && !w.crash_armed(i)
                && w.config(i).eligible
                && w.view(i).is_some_and(|v| v.eligible)
                && w.stalled_until(i) <= now
                && touched != Some(i);
            let inc = w.incarnation(i);
            self.nodes[i] = match self.nodes[i] {
                _ if !ok => None,
                Some((since, seen)) if seen == inc && w.stalled_until(i) <= since => {
                    Some((since, seen))
                }
                _ => Some((now, inc)),
            };
        }
        for a in 0..w.size() {
            for b in 0..w.size() {
                let ok = a == b
                    || (w.link_up(a, b)
                        && !w.net.link_loss.contains_key(&(a, b))
                        && !w.net.link_delay.contains_key(&(a, b)));
                self.links[a][b] = ok.then(|| self.links[a][b].unwrap_or(now));
            }
        }
    }

    /// Since when some quorum of the nodes has been calm with every link among them, the
    /// longest-calm one; `None` if no quorum is.
    fn quorum_since(&self, quorum: usize) -> Option<Duration> {
        let n = self.nodes.len();
        let net = self.net?;
        (0u32..1 << n)
            .filter(|m| m.count_ones() as usize >= quorum)
            .filter_map(|m| {
                let members: Vec<usize> = (0..n).filter(|&i| m & (1 << i) != 0).collect();
                let mut since = net;
                for &a in &members {
                    since = since.max(self.nodes[a]?.0);
                    for &b in &members {
                        since = since.max(self.links[a][b]?);
                    }
                }
                Some(since)
            })
            .min()
    }
}

/// Chaos, then healing, then the liveness and steady-state checks.
pub fn run_chaos(scenario: Scenario, factory: Factory) -> SeedReport {
    let t = scenario.envelope();
    let te = t.election_timeout;
    let (mut w, mut rng) = world_for(&scenario, factory);
    w.runtime = busy_runtime(&t, &mut rng);
    let n = w.size();
    let mut trace = Trace(String::new());
    trace.log(&w, scenario.summary());

    // Warm-up: a clean start elects someone.
    let warmup = te * 3 + t.stagger * n as u32;
    w.run_until(warmup);
    trace.log(&w, "warm-up done");

    // A quorum calm this long has a leader: T of start-up guard, the guard and lease of a
    // leader outside it, a round with every rank's stagger, and a bounded veto (T).
    let calm_bound = te * 4 + t.stagger * n as u32 + t.lease * 2;
    // In some seeds a quorum gets a calm spell in the middle of the chaos: its links and the
    // network are made whole and the faults go on around it, on the other nodes only.
    let spell = rng.chance(0.4).then(|| {
        let mut order: Vec<usize> = (0..n).collect();
        shuffle(&mut order, &mut rng);
        order.truncate(quorum_of(n));
        let start = warmup + scenario.faults_until.mul_f64(rng.unit() * 0.5);
        (start, start + calm_bound.mul_f64(1.5), order)
    });
    let heal_at =
        warmup + scenario.faults_until + spell.as_ref().map_or(Duration::ZERO, |s| s.1 - s.0);
    let commands_until = heal_at.saturating_sub(te);
    let mut restarts: Vec<(Duration, usize)> = Vec::new();
    let mut now = warmup;
    let mut restored = false;
    // Not begun, on, over.
    let mut spell_state = 0;
    let stall_chance = w.runtime.stall_chance;
    let mut calm = Calm::new(n);
    let mut touched = None;
    let mut calm_reported = false;
    while now < heal_at {
        now += te.mul_f64(0.07 + rng.unit() * 0.8);
        let now_c = now.min(heal_at);
        w.run_until(now_c);
        restarts.retain(|&(at, i)| {
            if at <= now_c {
                w.restart(i);
                false
            } else {
                true
            }
        });
        // The spell's quorum, while it lasts.
        let calm_q: Option<&[usize]> = spell
            .as_ref()
            .filter(|(from, until, _)| now_c >= *from && now_c < *until)
            .map(|(_, _, q)| q.as_slice());
        match (calm_q, spell_state) {
            (Some(q), 0) => {
                spell_state = 1;
                calm_spell(&mut w, q);
                trace.log(&w, format!("calm spell for {q:?}"));
            }
            (None, 1) => {
                spell_state = 2;
                w.runtime.stall_chance = stall_chance;
                trace.log(&w, "calm spell over");
            }
            _ => {}
        }
        calm.update(&w, touched.take());
        let claimless = w.checker.claimless_since.map(Duration::from_nanos);
        if let (Some(g), Some(c)) = (calm.quorum_since(quorum_of(n)), claimless) {
            if w.now() >= g.max(c) + calm_bound && !calm_reported {
                let what = format!(
                    "a quorum connected both ways on timely links for {:?} had no leader for \
                     {:?} (bound {calm_bound:?}): {}",
                    w.now() - g,
                    w.now() - c,
                    w.describe()
                );
                w.checker.violate(w.now().as_nanos() as u64, what);
                calm_reported = true;
            }
        }
        if now >= heal_at {
            break;
        }
        let outside: Vec<usize> = (0..n)
            .filter(|j| calm_q.is_none_or(|q| !q.contains(j)))
            .collect();
        if outside.is_empty() {
            continue;
        }
        let i = outside[rng.below(outside.len() as u64) as usize];
        let event = rng.below(22);
        // During a spell the network stays timely, and only nodes outside the quorum are hit.
        if calm_q.is_some() && matches!(event, 0 | 1 | 13) {
            continue;
        }
        let what = match event {
            0 => {
                w.net.loss = rng.unit() * 0.2;
                format!("loss {:.0}%", w.net.loss * 100.0)
            }
            1 => {
                w.net.duplicate = rng.unit() * 0.05;
                w.net.max_delay = Duration::from_millis(5) + t.heartbeat.mul_f64(rng.unit() * 3.0);
                format!(
                    "dup {:.1}%, max delay {:?}",
                    w.net.duplicate * 100.0,
                    w.net.max_delay
                )
            }
            2 => {
                let side: Vec<usize> = outside
                    .iter()
                    .copied()
                    .filter(|_| rng.chance(0.5))
                    .collect();
                w.partition(&side);
                format!("partition {side:?}")
            }
            3 => {
                let j = rng.below(n as u64) as usize;
                if i != j {
                    w.block(i, j);
                }
                format!("block {i}->{j}")
            }
            4 => {
                w.heal();
                "heal links".into()
            }
            5 | 6 => {
                if w.is_up(i) {
                    if rng.chance(0.3) {
                        let k = rng.below(4) as u32;
                        w.crash_after_actions(i, k);
                        let back = now + te.mul_f64(0.1 + rng.unit() * 2.5);
                        restarts.push((back, i));
                        format!(
                            "crash {i} after {k} more actions, back at {:.3}s",
                            back.as_secs_f64()
                        )
                    } else {
                        w.crash(i);
                        let back = now + te.mul_f64(0.1 + rng.unit() * 2.5);
                        restarts.push((back, i));
                        format!("crash {i} until {:.3}s", back.as_secs_f64())
                    }
                } else {
                    continue;
                }
            }
            7 => {
                if now + t.lease * 3 < heal_at {
                    let d = t.lease.mul_f64(0.5 + rng.unit() * 2.5);
                    w.pause(i, d);
                    format!("pause {i} for {d:?}")
                } else {
                    continue;
                }
            }
            8 | 9 if now < commands_until => {
                let successor = if rng.chance(0.6) {
                    Some(w.id(rng.below(n as u64) as usize).to_string())
                } else {
                    None
                };
                let expected_term = match rng.below(3) {
                    0 => None,
                    1 => w.view(i).map(|v| v.term),
                    _ => w.view(i).map(|v| v.term.saturating_sub(1)),
                };
                let r = w.command(
                    i,
                    Input::StepDown {
                        successor: successor.clone(),
                        expected_term,
                    },
                );
                touched = Some(i);
                format!("step-down {i} successor={successor:?} expected={expected_term:?}: {r:?}")
            }
            10 if now < commands_until => {
                let eligible = rng.chance(0.7);
                let priority = rng.chance(0.5).then(|| rng.below(1 << 32) as u32);
                let r = w.command(i, Input::SetCandidacy { eligible, priority });
                touched = Some(i);
                format!("candidacy {i} eligible={eligible} priority={priority:?}: {r:?}")
            }
            11 => {
                // Within the node's own bound: a clock beyond the `r` its node was given is
                // outside what any rule promises (the envelope's `r` is another node's).
                let own = w.timings_of(i).max_drift;
                let r = if rng.chance(0.5) {
                    1.0 + own * if rng.chance(0.5) { 1.0 } else { -1.0 }
                } else {
                    draw_rate(own, &mut rng)
                };
                w.set_rate(i, r);
                format!("clock of {i} at rate {r:.4}")
            }
            12 => {
                let (a, b) = (i, rng.below(n as u64) as usize);
                if a != b {
                    let p = rng.unit() * 0.6;
                    w.net.link_loss.insert((a, b), p);
                    format!("link {a}->{b} loses {:.0}%", p * 100.0)
                } else {
                    continue;
                }
            }
            13 => {
                w.net.long_delay_chance = rng.unit() * 0.03;
                w.net.long_delay = t.lease.mul_f64(1.0 + rng.unit() * 1.5);
                format!(
                    "{:.1}% of messages delayed up to {:?}",
                    w.net.long_delay_chance * 100.0,
                    w.net.long_delay
                )
            }
            14 => {
                if w.is_up(i) && !w.is_stopping(i) {
                    w.stop(i);
                    let back = now + te.mul_f64(0.2 + rng.unit() * 2.0);
                    restarts.push((back, i));
                    format!("SIGTERM {i}, back at {:.3}s", back.as_secs_f64())
                } else {
                    continue;
                }
            }
            15 => {
                if rng.chance(0.5) {
                    w.deafen(i);
                    format!("deafen {i}")
                } else {
                    w.mute(i);
                    format!("mute {i}")
                }
            }
            16 => {
                let j = rng.below(n as u64) as usize;
                if i != j {
                    let d = te.mul_f64(0.2 + rng.unit() * 1.3);
                    w.net.link_delay.insert((i, j), d);
                    format!("link {i}->{j} slow by {d:?}")
                } else {
                    w.net.link_delay.clear();
                    "slow links back to normal".into()
                }
            }
            17 | 18 => {
                // The leader is the node whose faults matter most: cut it off, one way or both.
                let Some(l) = w.current_leader().filter(|l| outside.contains(l)) else {
                    continue;
                };
                match rng.below(3) {
                    0 => {
                        w.mute(l);
                        format!("mute the leader {l}")
                    }
                    1 => {
                        w.deafen(l);
                        format!("deafen the leader {l}")
                    }
                    _ => {
                        w.partition(&[l]);
                        format!("isolate the leader {l}")
                    }
                }
            }
            19 if now < commands_until => {
                // Maintenance (rule 16), on one node or, as the shells spread it, on all; the
                // spreading itself is the shell's, so a partial spread is a node at a time.
                let on = rng.chance(0.6);
                let all = rng.chance(0.5);
                // (During a spell, not on its quorum.)
                let nodes: Vec<usize> = if all { outside.clone() } else { vec![i] };
                let answers: Vec<_> = nodes
                    .iter()
                    .map(|&j| w.command(j, Input::SetMaintenance { on }))
                    .collect();
                touched = Some(i);
                format!("maintenance {on} on {nodes:?}: {answers:?}")
            }
            20 => {
                // The application's health (rule 17), on one node or on all of them outside a
                // calm spell: with nobody healthy somebody must still lead.
                let healthy = rng.chance(0.5);
                let nodes: Vec<usize> = if rng.chance(0.3) {
                    outside.clone()
                } else {
                    vec![i]
                };
                for &j in &nodes {
                    w.set_health(j, healthy);
                }
                format!("health {healthy} on {nodes:?}")
            }
            21 => {
                // Observers gone wrong (issue 27): senders outside the member set sending
                // whatever they like, votes and heartbeats of any term included. Every
                // delivery is checked to change nothing (rule 1, `World::step`).
                let burst = 1 + rng.below(6);
                let kinds: Vec<&str> = (0..burst)
                    .map(|_| {
                        let m = observer_noise(&w, &mut rng);
                        let kind = m.body.kind();
                        w.send_as_observer(m);
                        kind
                    })
                    .collect();
                format!("observers sent {kinds:?}")
            }
            _ => continue,
        };
        trace.log(&w, what);
        if now >= commands_until && !restored {
            restore_candidacy(&mut w);
            restored = true;
        }
    }
    // Heal: everything back, nobody paused for long, every node a candidate again.
    w.run_until(heal_at);
    restore_candidacy(&mut w);
    w.heal();
    w.net = w.timely_net();
    w.runtime.stall_chance = 0.0;
    w.bring_all_up();
    trace.log(&w, "healed");

    let mut report = SeedReport::new(scenario.clone());
    // Liveness: T of start-up guard for restarted nodes, then 2T + n·W, and a lease's worth for a
    // node whose stalled step was still running.
    let budget = te * 3 + t.stagger * n as u32 + t.lease * 2;
    report.leader_after_heal = run_until_cond(&mut w, budget, sample_step(&t), |w| {
        w.agreed_leader().is_some()
    });
    if report.leader_after_heal.is_none() {
        w.checker.violate(
            w.now().as_nanos() as u64,
            format!(
                "no agreed leader {budget:?} after healing: {}",
                w.describe()
            ),
        );
    }
    // Steady state: after preemption has had its time (flap damping may have raised it), the
    // top-ranked node leads.
    // (Only when every node preempts: a leader with `P = 0` keeps leading by design.)
    if scenario.every_node_preempts() {
        let wait = t.preempt_after.max(te);
        let settle = wait * (16 + 2) + te * 2;
        let top = run_until_cond(&mut w, settle, te / 4, |w| {
            w.agreed_leader().is_some_and(|(i, _)| w.is_top_ranked(i))
        });
        trace.log(&w, "settled");
        if top.is_none() {
            let what = format!(
                "steady-state leader is not the top-ranked node {settle:?} after healing: {}",
                w.describe()
            );
            w.checker.violate(w.now().as_nanos() as u64, what);
        }
    }
    report.violations = w.checker.violations.clone();
    report.events = w.stats.events;
    report.firings = w.firings_run();
    report.observed = w.stats.observed;
    report.trace = trace.0;
    report
}

/// Makes quorum `q` whole for a calm spell: every node of it up and a candidate, the links among
/// them open both ways without extra loss or delay, the network timely and the loop unstalled.
fn calm_spell(w: &mut World, q: &[usize]) {
    let timely = w.timely_net();
    w.net.loss = 0.0;
    w.net.long_delay_chance = 0.0;
    w.net.max_delay = w.net.max_delay.min(timely.max_delay);
    w.runtime.stall_chance = 0.0;
    for &a in q {
        for &b in q {
            w.unblock(a, b);
            w.net.link_loss.remove(&(a, b));
            w.net.link_delay.remove(&(a, b));
        }
        w.restart(a);
        if w.in_maintenance(a) {
            let _ = w.command(a, Input::SetMaintenance { on: false });
        }
        if !w.config(a).eligible || w.view(a).is_some_and(|v| !v.eligible) {
            let _ = w.command(
                a,
                Input::SetCandidacy {
                    eligible: true,
                    priority: None,
                },
            );
        }
    }
}

fn restore_candidacy(w: &mut World) {
    for i in 0..w.size() {
        if !w.is_healthy(i) {
            w.set_health(i, true);
        }
        if w.in_maintenance(i) {
            let _ = w.command(i, Input::SetMaintenance { on: false });
        }
        let running_ineligible = w.view(i).is_some_and(|v| !v.eligible);
        if !w.config(i).eligible || running_ineligible {
            let _ = w.command(
                i,
                Input::SetCandidacy {
                    eligible: true,
                    priority: None,
                },
            );
        }
    }
}

/// A message an observer has no business sending: any type, any term near the cluster's or far
/// above it, naming itself or a member, as an observer's announcement or not.
pub fn observer_noise(w: &World, rng: &mut Rng) -> Message {
    let n = w.size();
    let observer = format!("observer-{}", rng.below(3));
    let member = |rng: &mut Rng| w.id(rng.below(n as u64) as usize).to_string();
    let known = (0..n)
        .filter_map(|i| w.view(i))
        .map(|v| v.term)
        .max()
        .unwrap_or(0);
    let term = match rng.below(4) {
        0 => known,
        1 | 2 => known + 1 + rng.below(3),
        _ => known + 1 + rng.below(1 << 20),
    };
    let named = |rng: &mut Rng| {
        if rng.chance(0.5) {
            observer.clone()
        } else {
            member(rng)
        }
    };
    let advert = |rng: &mut Rng| Advert {
        priority: rng.below(1 << 32) as u32,
        candidacy: Candidacy::Eligible,
        hears: (0..n).map(|i| w.id(i).to_string()).collect(),
        member_ids: (0..n).map(|i| w.id(i).to_string()).collect(),
        flapped: false,
        unhealthy: false,
    };
    let body = match rng.below(7) {
        0 => Body::Heartbeat {
            leader: named(rng),
            timestamp: 0,
            lease_ms: 1 + rng.below(10_000),
            advert: advert(rng),
        },
        1 => Body::Leader {
            leader: named(rng),
            elected_at: 0,
        },
        2 => Body::Ack {
            leader: member(rng),
            hb_seq: rng.below(1 << 40),
            guard_ms: Some(rng.below(100_000)),
            advert: advert(rng),
        },
        3 => Body::Presence {
            advert: advert(rng),
        },
        4 => Body::Election {
            candidate: named(rng),
            priority: rng.below(1 << 32) as u32,
            pre_vote: rng.chance(0.5),
        },
        5 => Body::Vote {
            candidate: member(rng),
            granted: true,
            pre_vote: rng.chance(0.5),
            guard_ms: Some(rng.below(100_000)),
        },
        _ => Body::Resign {
            leader: member(rng),
            successor: rng.chance(0.5).then(|| member(rng)),
            lost_quorum: rng.chance(0.2),
        },
    };
    Message {
        term,
        seq: rng.next_u64() >> 1,
        members: w.fingerprint(),
        timings: Some(Announced::of(w.timings())),
        observer: rng.chance(0.5),
        ..Message::new(w.group().to_string(), observer.clone(), body)
    }
}
