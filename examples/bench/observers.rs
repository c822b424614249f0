//! `bench observers`: what observers (`run --observe`) cost the members. Three members at
//! default timings, then 0, 50 and 200 observers (`--observers 0,50,200`, the default), over
//! http or pilot; at each count, once every member counts them in `/status`, each member's RSS
//! (VmRSS) and CPU (utime + stime of the member and of its pilotctl children, those that exited
//! included) over a `--secs` window.
//!
//! Over http an observer follows one member's `/events` (a keep-alive every second); over pilot
//! it subscribes to the topic through the broker and announces itself every 10 s, so a member
//! verifies one announcement per observer per 10 s and sends nothing more.

use std::time::Duration;

use support::observers::{http_observer, observer_id, pilot_observer};

use super::{clk_tck, cpu_ticks, current_leader, http, reaped_ticks, rss_kib, settle, start, Opts};
use crate::app::{children_of, wait_for, App};
use crate::pilot_cluster::node_id;

/// Starting a hundred processes, then their announcements (every 10 s), on a loaded machine.
const COUNTED_WITHIN: Duration = Duration::from_secs(90);
/// Daemons the observers share over pilot.
const OBSERVER_DAEMONS: usize = 10;

pub async fn observers(o: &Opts) {
    let counts = &o.observers;
    let most = counts.iter().copied().max().unwrap_or(0);
    let size = o.nodes;
    let pilot = o.transport == "pilot";
    let mut bed = if pilot {
        // n1..nN members, nN+1 the broker, then the observers' daemons.
        let net = crate::devnet::Devnet::start((size + 1 + OBSERVER_DAEMONS) as u32);
        let extra = ["--preempt-after", "0s"];
        let c = crate::pilot_cluster::pilot_cluster_of(&net, size, &extra);
        for n in &c.nodes {
            crate::app::wait_up(n).await;
        }
        super::Bed { c, net: Some(net) }
    } else {
        start("http", size).await
    };
    let client = http();
    let all: Vec<usize> = (0..size).collect();
    current_leader(&client, &bed.c, &all).await;
    settle(pilot_election::clock::now()).await;
    let broker = format!("n{}", size + 1);
    let members: Vec<(String, u16)> = bed.c.nodes.iter().map(|n| (n.id.clone(), n.port)).collect();
    let member_ids: Vec<String> = match &bed.net {
        Some(net) => (1..=size).map(|i| node_id(net, &format!("n{i}"))).collect(),
        None => Vec::new(),
    };
    let mut running: Vec<App> = Vec::with_capacity(most);
    println!(
        "observers: {size} members over {} at default timings, {}s windows",
        o.transport, o.secs
    );
    println!(
        "{:>9} {:>6} {:>8} {:>9} {:>10} {:>12} {:>12}",
        "observers", "member", "role", "RSS MiB", "CPU %core", "children CPU", "observers here"
    );
    for &count in counts {
        while running.len() < count {
            let i = running.len();
            let id = observer_id(i);
            let mut a = match &bed.net {
                Some(net) => {
                    let daemon = format!("n{}", size + 2 + i % OBSERVER_DAEMONS);
                    pilot_observer(net, &id, &daemon, &broker, &member_ids)
                }
                None => http_observer(&id, &members),
            };
            a.start();
            running.push(a);
        }
        let field = if pilot { "topic" } else { "events" };
        let counted = wait_for(COUNTED_WITHIN, || async {
            let mut seen = Vec::new();
            for n in &bed.c.nodes {
                let (_, s) = crate::app::get_json(&format!("{}/status", n.url())).await;
                seen.push(s["observers"][field].as_u64()?);
            }
            let ok = if pilot {
                seen.iter().all(|n| *n == count as u64)
            } else {
                seen.iter().sum::<u64>() == count as u64
            };
            ok.then_some(seen)
        })
        .await
        .unwrap_or_else(|| panic!("the members did not count {count} observers"));
        // Past the start-up of the last observers (their first connections, subscriptions).
        tokio::time::sleep(Duration::from_secs(5)).await;
        let pids: Vec<u32> = bed
            .c
            .nodes
            .iter()
            .map(|n| n.child.as_ref().unwrap().id())
            .collect();
        let kids = |p: u32| -> u64 { children_of(p).iter().map(|k| cpu_ticks(*k)).sum() };
        let t0: Vec<(u64, u64, u64)> = pids
            .iter()
            .map(|p| (cpu_ticks(*p), kids(*p), reaped_ticks(*p)))
            .collect();
        let start = pilot_election::clock::now();
        tokio::time::sleep(Duration::from_secs(o.secs)).await;
        let secs = pilot_election::clock::since(start).as_secs_f64();
        let hz = clk_tck();
        for (i, n) in bed.c.nodes.iter().enumerate() {
            let p = pids[i];
            let own = (cpu_ticks(p) - t0[i].0) as f64 / hz / secs * 100.0;
            let children =
                (kids(p).saturating_sub(t0[i].1) + reaped_ticks(p) - t0[i].2) as f64 / hz / secs
                    * 100.0;
            let (s, _) = crate::app::get_json(&format!("{}/role/leader", n.url())).await;
            println!(
                "{:>9} {:>6} {:>8} {:>9.1} {:>9.2}% {:>11.2}% {:>14}",
                count,
                n.id,
                if s == 200 { "leader" } else { "follower" },
                rss_kib(p) as f64 / 1024.0,
                own,
                children,
                counted[i]
            );
        }
    }
    drop(running);
    bed.c.nodes.clear();
}
