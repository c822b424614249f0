//! Health that tells the truth: no quorum means no leader and not ready; a stuck election loop
//! fails `/healthz` and stops claiming leadership when its lease runs out.

use std::time::Duration;

use pilot_election::api::Auth;

use crate::app::{
    app, client, fast_timings, free_port, get_json, in_process, serial, wait_for, wait_up,
    InProcess,
};
use crate::contract::Spec;

#[tokio::test]
async fn without_a_quorum_there_is_no_leader_and_the_node_is_not_ready() {
    let _serial = serial().await;
    let spec = Spec::load();
    // A 2-node cluster whose other node never answers: quorum 2 is out of reach.
    let ghost = format!("ghost=http://127.0.0.1:{}", free_port());
    let mut a = app("alone", free_port(), &[], &["--peer", &ghost]);
    a.start();
    wait_up(&a).await;
    let url = a.url();

    let resp = client().get(format!("{url}/leader")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "no_leader");
    spec.check("get", "/leader", 503, &body);

    // Readiness follows the transport: the peer is unreachable.
    let ready = wait_for(Duration::from_secs(10), || {
        let url = url.clone();
        async move {
            let (s, b) = get_json(&format!("{url}/readyz")).await;
            (s == 503 && b["transport"]["last_error"].as_str().is_some()).then_some(b)
        }
    })
    .await
    .expect("readyz reports the unreachable peer");
    spec.check("get", "/readyz", 503, &ready);
    assert!(ready["transport"]["last_error"]
        .as_str()
        .unwrap()
        .contains("ghost"));
    assert_eq!(get_json(&format!("{url}/role/leader")).await.0, 503);
    assert_eq!(get_json(&format!("{url}/role/follower")).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_loop_fails_healthz_and_stops_claiming_leadership() {
    let timings = fast_timings();
    // Bound whole: dropping `dir` would delete the data dir under the running node.
    let InProcess {
        url,
        task,
        dir: _dir,
    } = in_process("solo", Auth::default()).await;

    let leading = wait_for(Duration::from_secs(10), || {
        let url = url.clone();
        async move { (get_json(&format!("{url}/role/leader")).await.0 == 200).then_some(()) }
    })
    .await;
    assert!(leading.is_some(), "a single node leads");
    assert_eq!(get_json(&format!("{url}/healthz")).await.0, 200);

    // The loop stops dead (as if stuck): no resign, no step-down, nothing more from it.
    task.abort();
    let stopped = pilot_election::clock::now();
    // Judged by when each request left, not by when the poll noticed: a loaded machine may
    // delay the answers, but a request sent after the lease ran out must never get a 200.
    let mut last_claim_sent = None;
    let deadline = stopped + Duration::from_secs(5);
    loop {
        let sent = pilot_election::clock::now();
        assert!(
            sent < deadline,
            "still claims leadership 5 s after its loop stopped"
        );
        match get_json(&format!("{url}/role/leader")).await.0 {
            200 => last_claim_sent = Some(sent),
            503 => break,
            other => panic!("/role/leader answered {other}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The last renewal happened before `stopped`; the margin covers an election-loop poll that
    // was already running when the task was aborted.
    if let Some(sent) = last_claim_sent {
        assert!(
            sent <= stopped + timings.lease + Duration::from_millis(100),
            "claimed leadership to a request sent {:?} after the loop stopped (lease {:?})",
            sent - stopped,
            timings.lease
        );
    }
    let (s, b) = get_json(&format!("{url}/healthz")).await;
    assert_eq!(s, 503, "{b}");
    let (s, _) = get_json(&format!("{url}/leader")).await;
    assert_eq!(s, 503);
}
