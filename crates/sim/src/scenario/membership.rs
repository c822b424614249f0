//! The membership family: growing, shrinking and replacing members one at a time, and stray
//! nodes, under partitions and crashes.

use super::*;

/// Membership changes one member at a time (and stray nodes) under partitions, loss and crashes.
pub fn run_membership(scenario: Scenario, plan: MemberPlan, factory: Factory) -> SeedReport {
    let t = scenario.envelope();
    let te = t.election_timeout;
    let mut rng = Rng::new(scenario.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xC0FFEE);
    // Every node that will ever exist: the initial members first, then the ones added later.
    let extra = match plan {
        MemberPlan::Grow | MemberPlan::TwoAtOnce => 2,
        MemberPlan::Replace | MemberPlan::Stray => 1,
        MemberPlan::Shrink => 0,
    };
    let ids = node_ids(scenario.size + extra, &mut rng);
    let initial: Vec<String> = ids[..scenario.size]
        .iter()
        .map(|(i, _)| i.clone())
        .collect();
    let specs: Vec<NodeSpec> = ids
        .iter()
        .enumerate()
        .map(|(k, (id, p))| NodeSpec {
            members: Some(initial.clone()),
            starts: k < scenario.size,
            timings: scenario.node_timings.get(k).copied(),
            ..NodeSpec::new(id.clone(), *p)
        })
        .collect();
    let mut w = world_of(&scenario, specs, factory, &mut rng);
    w.runtime = RuntimeModel {
        fsync_max: Duration::from_millis(3),
        ..RuntimeModel::default()
    };
    let mut trace = Trace(String::new());
    trace.log(&w, scenario.summary());
    let mut report = SeedReport::new(scenario.clone());
    let step = sample_step(&t);
    w.run_until(te * 4 + t.stagger * scenario.size as u32);
    let index = |w: &World, id: &str| (0..w.size()).find(|&i| w.id(i) == id).expect("known id");

    // The sequence of member sets, each one member away from the previous.
    let mut sets: Vec<Vec<String>> = vec![initial.clone()];
    match plan {
        MemberPlan::Grow => {
            for (id, _) in &ids[scenario.size..] {
                let mut next = sets.last().unwrap().clone();
                next.push(id.clone());
                sets.push(next);
            }
        }
        MemberPlan::Shrink => {
            for _ in 0..2 {
                let mut next = sets.last().unwrap().clone();
                let k = rng.below(next.len() as u64) as usize;
                next.remove(k);
                sets.push(next);
            }
        }
        MemberPlan::Replace => {
            let mut next = initial.clone();
            next.push(ids[scenario.size].0.clone());
            sets.push(next.clone());
            let k = rng.below(initial.len() as u64) as usize;
            next.retain(|id| *id != initial[k]);
            sets.push(next);
        }
        MemberPlan::Stray | MemberPlan::TwoAtOnce => {}
    }
    // Some disorder between the operator's steps.
    let noise = |w: &mut World, rng: &mut Rng, trace: &mut Trace| {
        let n = w.size();
        match rng.below(6) {
            0 => {
                let side: Vec<usize> = (0..n).filter(|_| rng.chance(0.5)).collect();
                w.partition(&side);
                trace.log(w, format!("partition {side:?}"));
            }
            1 => {
                w.heal();
                trace.log(w, "heal links");
            }
            2 => {
                w.net.loss = rng.unit() * 0.1;
                trace.log(w, format!("loss {:.0}%", w.net.loss * 100.0));
            }
            3 => {
                let i = rng.below(n as u64) as usize;
                if w.is_up(i) {
                    w.crash(i);
                    let back = w.now() + te.mul_f64(0.2 + rng.unit());
                    w.run_until(back);
                    w.restart(i);
                    trace.log(w, format!("crash and restart {i}"));
                }
            }
            _ => {}
        }
    };
    if plan == MemberPlan::TwoAtOnce {
        // Some members restarted with two new members added, and the new ones started: the
        // sets differ by two ids, so quorums of the two need not intersect. Every node hears
        // every other (rule 1 relies on it), crashes happen; no leader is acceptable.
        let mut bigger = initial.clone();
        bigger.extend(ids[scenario.size..].iter().map(|(id, _)| id.clone()));
        let switched = 1 + rng.below((scenario.size / 2) as u64) as usize;
        for id in initial.iter().take(switched) {
            let i = index(&w, id);
            w.reconfigure(i, &bigger);
            w.crash(i);
            w.restart(i);
        }
        for (id, _) in &ids[scenario.size..] {
            let i = index(&w, id);
            w.reconfigure(i, &bigger);
            w.restart(i);
        }
        trace.log(
            &w,
            format!("{switched} members and 2 new nodes run with {bigger:?}"),
        );
        let until = w.now() + te * 15;
        while w.now() < until {
            let next = w.now() + te.mul_f64(0.3 + rng.unit());
            w.run_until(next);
            let i = rng.below(w.size() as u64) as usize;
            if rng.chance(0.3) && w.is_up(i) {
                w.crash(i);
                w.run_until(w.now() + te.mul_f64(rng.unit()));
                w.restart(i);
                trace.log(&w, format!("crash and restart {i}"));
            }
        }
        report.violations = w.checker.violations.clone();
        report.events = w.stats.events;
        report.firings = w.firings_run();
        report.observed = w.stats.observed;
        report.trace = trace.0;
        return report;
    }
    if plan == MemberPlan::Stray {
        // A replacement started before the old node was removed (its set swaps one member),
        // or a scale-up whose new node lists one more member than the others.
        let stray = index(&w, &ids[scenario.size].0);
        let mut set = initial.clone();
        if rng.chance(0.5) {
            let k = rng.below(set.len() as u64) as usize;
            set.remove(k);
        }
        set.push(ids[scenario.size].0.clone());
        w.reconfigure(stray, &set);
        w.restart(stray);
        trace.log(&w, format!("stray {stray} with members {set:?}"));
        let until = w.now() + te * 12;
        while w.now() < until {
            let next = w.now() + te.mul_f64(0.3 + rng.unit());
            w.run_until(next);
            noise(&mut w, &mut rng, &mut trace);
        }
        w.heal();
        w.net = w.timely_net();
    } else {
        for (k, pair) in sets.windows(2).enumerate() {
            let (old, new) = (&pair[0], &pair[1]);
            if k > 0 {
                // The operator procedure rule 1 relies on: the next change only once every
                // member runs the current set and is ready on it, which needs the partition
                // healed. Going on across it let a member that never heard a term's leader
                // (on the set two ids back) help elect a second leader in that term (seed
                // 7959 with the wider timings).
                w.heal();
                let current: Vec<usize> = old.iter().map(|id| index(&w, id)).collect();
                let budget = te * 6 + t.stagger * current.len() as u32;
                let settled = run_until_cond(&mut w, budget, step, |w| {
                    current.iter().all(|&i| w.ready(i))
                });
                trace.log(&w, format!("every member of {old:?} ready: {settled:?}"));
                if settled.is_none() {
                    let what = format!(
                        "the members of {old:?} were not all ready {budget:?} after healing: {}",
                        w.describe()
                    );
                    w.checker.violate(w.now().as_nanos() as u64, what);
                }
            }
            trace.log(&w, format!("change members {old:?} -> {new:?}"));
            // New member first, with the new set.
            for id in new.iter().filter(|id| !old.contains(id)) {
                let i = index(&w, id);
                w.reconfigure(i, new);
                w.restart(i);
                trace.log(&w, format!("start {i} with the new set"));
            }
            // Every staying member restarted with the new set, one at a time.
            let mut staying: Vec<&String> = new.iter().filter(|id| old.contains(id)).collect();
            shuffle(&mut staying, &mut rng);
            for id in staying {
                let i = index(&w, id);
                w.reconfigure(i, new);
                if rng.chance(0.8) {
                    w.stop(i);
                    let grace = w.runtime.handover_grace + te;
                    run_until_cond(&mut w, grace, step, |w| !w.is_up(i));
                } else {
                    w.crash(i);
                }
                w.run_until(w.now() + te.mul_f64(rng.unit() * 0.3));
                w.restart(i);
                trace.log(&w, format!("restart {i} with the new set"));
                if rng.chance(0.3) {
                    noise(&mut w, &mut rng, &mut trace);
                }
                run_until_cond(&mut w, te * 3, step, |w| {
                    w.view(i).is_some_and(|v| v.can_vote)
                });
            }
            // A removed member stops for good.
            for id in old.iter().filter(|id| !new.contains(id)) {
                let i = index(&w, id);
                w.stop(i);
                let grace = w.runtime.handover_grace + te;
                run_until_cond(&mut w, grace, step, |w| !w.is_up(i));
                w.crash(i);
                trace.log(&w, format!("remove {i}"));
            }
            if rng.chance(0.5) {
                noise(&mut w, &mut rng, &mut trace);
            }
            w.run_until(w.now() + te.mul_f64(rng.unit() * 2.0));
        }
        w.heal();
        w.net = w.timely_net();
    }
    // Liveness among the final members, all of them up.
    let last = sets.last().unwrap().clone();
    let members: Vec<usize> = last.iter().map(|id| index(&w, id)).collect();
    for &i in &members {
        w.restart(i);
    }
    trace.log(&w, "healed");
    let budget = te * 4 + t.stagger * members.len() as u32 + t.lease;
    report.leader_after_heal = run_until_cond(&mut w, budget, step, |w| {
        w.agreed_leader_among(&members).is_some()
    });
    if report.leader_after_heal.is_none() && quorum_of(members.len()) <= members.len() {
        let what = format!(
            "no leader among the final members {budget:?} after the change: {}",
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
