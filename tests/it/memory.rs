//! The runtime and the in-process memory bus: a whole cluster inside the test process, built
//! with the same [`NodeBuilder`] as the binary.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use pilot_election::api::Auth;
use pilot_election::transport::memory::Bus;
use pilot_election::NodeBuilder;

use crate::app::{node_config, wait_for, TempDir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_runtimes_on_a_memory_bus_agree_on_one_leader() {
    let bus = Bus::new();
    let stop = CancellationToken::new();
    let mut views = Vec::new();
    let mut dirs = Vec::new();
    let ids = ["m1", "m2", "m3"];
    for (i, id) in ids.iter().enumerate() {
        let dir = TempDir::new(id);
        let mut config = node_config(id, &ids, &dir.0, &Auth::default());
        config.priority = 10 + i as u32;
        let bus = bus.clone();
        let built = NodeBuilder::new(config)
            .seed(i as u64)
            .transport(move |inbound, _, _| Arc::new(bus.attach(inbound)))
            .build()
            .expect("node");
        views.push(built.state.snapshot.clone());
        tokio::spawn(built.runtime.run(stop.clone()));
        dirs.push(dir);
    }
    let leader = wait_for(Duration::from_secs(10), || {
        let views = views.clone();
        async move {
            let now = pilot_election::clock::now();
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
