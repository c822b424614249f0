//! The runtime and the in-process memory bus: a whole cluster inside the test process.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use pilot_election::election::{Config, Node};
use pilot_election::metrics::Metrics;
use pilot_election::runtime::{Runtime, Wiring};
use pilot_election::store::Store;
use pilot_election::transport::memory::Bus;
use pilot_election::transport::INBOUND_CAPACITY;

use crate::app::{fast_timings, wait_for, TempDir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_runtimes_on_a_memory_bus_agree_on_one_leader() {
    let timings = fast_timings();
    let bus = Bus::new();
    let stop = CancellationToken::new();
    let mut views = Vec::new();
    let mut dirs = Vec::new();
    for (i, id) in ["m1", "m2", "m3"].iter().enumerate() {
        let dir = TempDir::new(id);
        let loaded = Store::open(&dir.0, false).expect("fresh data dir");
        let node = Node::new(
            Config {
                node_id: id.to_string(),
                group: "mem".into(),
                cluster_size: 3,
                priority: 10 + i as u32,
                eligible: true,
                timings,
            },
            loaded.persistent,
            Instant::now(),
            i as u64,
            loaded.boot << 32,
        );
        let (tx, rx) = mpsc::channel(INBOUND_CAPACITY);
        let (_cmd_tx, cmd_rx) = mpsc::channel(8);
        let (rt, snapshot, _clock) = Runtime::new(
            node,
            loaded.store,
            loaded.history,
            Wiring {
                transport: Arc::new(bus.attach(tx)),
                keys: None,
                inbound: rx,
                commands: cmd_rx,
                metrics: Arc::new(Metrics::new()),
            },
        );
        tokio::spawn(rt.run(stop.clone()));
        views.push(snapshot);
        dirs.push(dir);
    }
    let leader = wait_for(Duration::from_secs(10), || {
        let views = views.clone();
        async move {
            let now = Instant::now();
            let leading: Vec<_> = views
                .iter()
                .filter(|v| v.borrow().view.is_leader_at(now))
                .map(|v| v.borrow().view.node_id.clone())
                .collect();
            let named: Vec<_> = views
                .iter()
                .map(|v| v.borrow().view.leader.clone())
                .collect();
            (leading.len() == 1 && named.iter().all(|n| n.as_ref() == Some(&leading[0])))
                .then(|| leading[0].clone())
        }
    })
    .await
    .expect("one leader agreed by all three");
    // Highest priority wins.
    assert_eq!(leader, "m3");
    stop.cancel();
}
