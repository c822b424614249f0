//! Many nodes electing over one broker at default timings, with the real pilotctl over
//! pilot-devnet. Its own test binary: cargo runs test binaries one after another, so nothing
//! else in the suite shares the two cores with its nodes, their subscribers and the
//! `pilotctl publish` processes they start (about two per node per second).
//!
//! Every message is its own `pilotctl publish`, i.e. its own broker connection carrying one
//! event, so the broker's per-connection limit (100 events/s, burst 200) never applies to the
//! election however large the cluster: the test checks that nothing was rate-limited while
//! about two events per node per second went through one broker.

use support::app;
use support::devnet;
use support::pilot_cluster;

use std::time::Duration;

use app::{get_json, metric, metrics_text, wait_up, Cluster, T};
use devnet::Devnet;
use pilot_cluster::pilot_cluster_of;

/// The size the suite runs; `PILOT_SCALE_NODES=25` runs the size BENCHMARKS.md reports (it also
/// says why the suite stays smaller on a shared 2-core machine).
const DEFAULT_NODES: usize = 15;

fn nodes() -> usize {
    match std::env::var("PILOT_SCALE_NODES") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("PILOT_SCALE_NODES={v:?} is not a number")),
        Err(_) => DEFAULT_NODES,
    }
}
/// How long the cluster is watched once it has settled: several leases and election timeouts.
const WATCH: Duration = Duration::from_secs(15);

async fn restarts(c: &Cluster) -> f64 {
    let mut sum = 0.0;
    for n in &c.nodes {
        sum += metric(
            &metrics_text(&n.url()).await,
            "pilot_election_subscription_restarts_total",
        );
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_nodes_on_one_broker_stay_stable_at_default_timings() {
    let nodes = nodes();
    let net = Devnet::start(nodes as u32 + 1);
    let c = pilot_cluster_of(&net, nodes, &[]);
    for n in &c.nodes {
        wait_up(n).await;
    }
    let all: Vec<usize> = (0..nodes).collect();
    let started = pilot_election::clock::now();
    let (leader, term) = c.agreed(&all, T * 10, |_, _| true).await;
    println!(
        "{nodes} nodes agree on {leader} in term {term} {:?} after all were up",
        pilot_election::clock::since(started)
    );
    // Past the first exchanges: from here on nothing may move.
    tokio::time::sleep(T).await;
    let restarts0 = restarts(&c).await;
    let stats0 = net.status().await["stats"].clone();
    let t0 = pilot_election::clock::now();
    let mut rounds = 0;
    while pilot_election::clock::since(t0) < WATCH {
        let tick = pilot_election::clock::now();
        for n in &c.nodes {
            let (code, body) = get_json(&format!("{}/leader", n.url())).await;
            let seen = (body["leader"].as_str(), body["term"].as_u64());
            assert!(
                code == 200 && seen == (Some(leader.as_str()), Some(term)),
                "{} after {:?} of steady state: {code} {body}\n{}",
                n.id,
                pilot_election::clock::since(t0),
                n.log()
            );
        }
        rounds += 1;
        pilot_election::clock::sleep_until(tick + Duration::from_millis(250)).await;
    }
    let secs = pilot_election::clock::since(t0).as_secs_f64();
    let stats = net.status().await["stats"].clone();
    let delta = |k: &str| stats[k].as_u64().unwrap() - stats0[k].as_u64().unwrap();
    let per_sec = delta("published") as f64 / secs;
    println!(
        "{rounds} rounds over {secs:.1}s, all {nodes} agreeing; broker: {per_sec:.1} events/s, \
         {:.0} deliveries/s, rate-limited {}, dropped subscribers {}",
        delta("delivered") as f64 / secs,
        delta("rate_limited"),
        delta("subscribers_dropped"),
    );
    // One heartbeat and an ack from each follower per 500 ms interval: 2 per node per second.
    let expected = 2.0 * nodes as f64;
    assert!(
        per_sec > 0.8 * expected,
        "only {per_sec:.1} events/s went through, {expected} expected"
    );
    assert_eq!(delta("rate_limited"), 0, "{stats}");
    assert_eq!(delta("subscribers_dropped"), 0, "{stats}");
    assert_eq!(delta("delivery_failures"), 0, "{stats}");
    assert_eq!(restarts(&c).await, restarts0, "a subscription restarted");
    for n in &c.nodes {
        let (code, ready) = get_json(&format!("{}/readyz", n.url())).await;
        assert_eq!(code, 200, "{}: {ready}", n.id);
    }
}
