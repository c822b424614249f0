//! `bench groups`: many elections in one process. For each count of `--groups` (default
//! 1,10,100,1000): three http nodes at default timings, each in that many groups (the default
//! group and `shard-NNNN`s). Once every group has a leader: each node's RSS, CPU and messages
//! published per second over a `--secs` window; then a kill -9 of the node that leads the most
//! groups, and how long each group it led took to have a new leader that both survivors name
//! (p50, p99 and max over those groups), polling `GET /groups` on both every 20 ms.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::Value;

use super::{clk_tck, cpu_ticks, http, publishes, rss_kib, settle, Opts};
use crate::app::{wait_for, wait_up, Cluster};

/// A thousand elections' first campaigns, with a persisted vote each, on a loaded machine.
const ELECTED_WITHIN: Duration = Duration::from_secs(120);
const FAILED_OVER_WITHIN: Duration = Duration::from_secs(60);

/// `group -> (leader, term)` as `url` can vouch for now.
async fn leaders(
    client: &reqwest::Client,
    url: &str,
) -> Option<BTreeMap<String, (Option<String>, u64)>> {
    let resp = client.get(format!("{url}/groups")).send().await.ok()?;
    let body: Value = resp.json().await.ok()?;
    let list = body["groups"].as_array()?;
    Some(
        list.iter()
            .map(|g| {
                let name = g["group"].as_str().unwrap_or_default().to_string();
                (
                    name,
                    (
                        g["leader"].as_str().map(str::to_string),
                        g["term"].as_u64().unwrap_or(0),
                    ),
                )
            })
            .collect(),
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub async fn groups(o: &Opts) {
    let client = http();
    println!(
        "groups: 3 nodes over http at default timings, {}s windows",
        o.secs
    );
    println!(
        "{:>6} {:>6} {:>8} {:>9} {:>10} {:>11} {:>9}",
        "groups", "node", "leads", "RSS MiB", "CPU %core", "publish/s", "elected"
    );
    for &count in &o.groups {
        let names: Vec<String> = (1..count).map(|i| format!("shard-{i:04}")).collect();
        let max = count.max(1).to_string();
        let mut args: Vec<&str> = vec!["--preempt-after", "0s", "--max-groups", &max];
        for n in &names {
            args.extend(["--group", n.as_str()]);
        }
        let started = pilot_election::clock::now();
        let mut c = Cluster::start(3, &args);
        for n in &c.nodes {
            wait_up(n).await;
        }
        let urls: Vec<String> = c.nodes.iter().map(|n| n.url()).collect();
        let elected = wait_for(ELECTED_WITHIN, || async {
            let views = join_all(urls.iter().map(|u| leaders(&client, u))).await;
            let views: Vec<_> = views.into_iter().collect::<Option<Vec<_>>>()?;
            let first = &views[0];
            let agreed = first.len() == count
                && first.iter().all(|(g, (l, t))| {
                    l.is_some()
                        && views[1..]
                            .iter()
                            .all(|v| v.get(g) == Some(&(l.clone(), *t)))
                });
            agreed.then(|| first.clone())
        })
        .await;
        let Some(led) = elected else {
            println!("{count:>6}: not every group elected within {ELECTED_WITHIN:?}");
            continue;
        };
        let elected_in = pilot_election::clock::since(started);
        settle(pilot_election::clock::now()).await;
        let pids: Vec<u32> = c
            .nodes
            .iter()
            .map(|n| n.child.as_ref().unwrap().id())
            .collect();
        let ticks0: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
        let pubs0 = join_all(urls.iter().map(|u| publishes(&client, u.clone()))).await;
        let t0 = pilot_election::clock::now();
        tokio::time::sleep(Duration::from_secs(o.secs)).await;
        let secs = pilot_election::clock::since(t0).as_secs_f64();
        let pubs1 = join_all(urls.iter().map(|u| publishes(&client, u.clone()))).await;
        let hz = clk_tck();
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for (l, _) in led.values() {
            *per_node.entry(l.clone().unwrap_or_default()).or_default() += 1;
        }
        for (i, n) in c.nodes.iter().enumerate() {
            let cpu = (cpu_ticks(pids[i]) - ticks0[i]) as f64 / hz / secs * 100.0;
            println!(
                "{count:>6} {:>6} {:>8} {:>9.1} {:>9.2}% {:>11.1} {:>8.1}s",
                n.id,
                per_node.get(&n.id).copied().unwrap_or(0),
                rss_kib(pids[i]) as f64 / 1024.0,
                cpu,
                (pubs1[i] - pubs0[i]) / secs,
                elected_in.as_secs_f64()
            );
        }

        // kill -9 of the node that leads the most groups.
        let (victim, _) = per_node
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(v, n)| (v.clone(), *n))
            .unwrap();
        let vi = c.nodes.iter().position(|n| n.id == victim).unwrap();
        let its: BTreeSet<String> = led
            .iter()
            .filter(|(_, (l, _))| l.as_deref() == Some(victim.as_str()))
            .map(|(g, _)| g.clone())
            .collect();
        let survivors: Vec<String> = (0..3)
            .filter(|i| *i != vi)
            .map(|i| urls[i].clone())
            .collect();
        c.nodes[vi].kill9();
        let killed = pilot_election::clock::now();
        let mut new_leader_at: BTreeMap<String, Duration> = BTreeMap::new();
        while new_leader_at.len() < its.len()
            && pilot_election::clock::since(killed) < FAILED_OVER_WITHIN
        {
            let views = join_all(survivors.iter().map(|u| leaders(&client, u))).await;
            if let [Some(a), Some(b)] = &views[..] {
                let now = pilot_election::clock::since(killed);
                for g in &its {
                    if new_leader_at.contains_key(g) {
                        continue;
                    }
                    let (Some((la, ta)), Some((lb, tb))) = (a.get(g), b.get(g)) else {
                        continue;
                    };
                    if la.is_some()
                        && la == lb
                        && ta == tb
                        && la.as_deref() != Some(victim.as_str())
                    {
                        new_leader_at.insert(g.clone(), now);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut times: Vec<Duration> = new_leader_at.values().copied().collect();
        times.sort();
        println!(
            "{count:>6} kill -9 of {victim} (leading {}): {} of them have a new leader; p50 {:.2}s, p99 {:.2}s, max {:.2}s",
            its.len(),
            times.len(),
            percentile(&times, 0.5).as_secs_f64(),
            percentile(&times, 0.99).as_secs_f64(),
            times.last().copied().unwrap_or_default().as_secs_f64()
        );
        drop(c);
    }
}
