//! The pilotctl wrapper against the REAL pilotctl 1.18.0 talking to pilot-devnet's emulated
//! daemons, and the transport's other path, the daemon's socket spoken directly, checked
//! against the same real CLI (what one publishes the other hears). Nothing here is mocked
//! except where a test needs a misbehaving binary on purpose.

use support::devnet;

use std::path::{Path, PathBuf};
use std::time::Duration;

use devnet::{event_frame, pilotctl_path, temp_dir, write_script, Devnet, StreamClient, DEADLINE};
use pilot_election::pilotctl::{ErrorCode, Pilotctl, PilotctlError, Subscription};
use pilot_election::transport::pilot::daemon::{self, EventStream, Probe};
use serde_json::json;

async fn next_event(sub: &mut Subscription) -> String {
    match tokio::time::timeout(DEADLINE, sub.next()).await {
        Ok(Some(Ok(data))) => data,
        other => panic!("expected an event, got {other:?}"),
    }
}

async fn subscribe(net: &Devnet, node: &str, broker: &str, topic: &str) -> Subscription {
    net.ctl(node).subscribe(broker, topic).expect("subscribe")
}

/// Publishes through the real CLI and insists it succeeds.
async fn publish(net: &Devnet, from: &str, broker: &str, topic: &str, data: &str) {
    if let Err(e) = net.ctl(from).publish(broker, topic, data).await {
        panic!("publish from {from} via {broker}: {e}");
    }
}

/// Publishes through the real CLI and insists it fails, returning the parsed error.
async fn publish_err(net: &Devnet, from: &str, broker: &str) -> PilotctlError {
    match net.ctl(from).publish(broker, "election:g1", "x").await {
        Ok(r) => panic!("publish from {from} via {broker} succeeded: {r:?}"),
        Err(e) => e,
    }
}

async fn wait_gone(pid: u32) {
    let start = pilot_election::clock::now();
    while pilot_election::process_group::runs(pid) {
        assert!(
            pilot_election::clock::since(start) < DEADLINE,
            "process {pid} still alive"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_reports_the_numeric_node_id() {
    let net = Devnet::start(3);
    let info = net.ctl("n2").info().await.expect("info");
    assert_eq!(info.node_id, 2);
    assert_eq!(info.address, "0:0000.0000.0002");
    assert_eq!(info.hostname.as_deref(), Some("n2"));
    assert_eq!(info.version.as_deref(), Some("1.18.0"));
    // The startup line announces the same identity pilotctl reports.
    let announced = &net.nodes[1];
    assert_eq!(announced["node_id"], 2);
    assert_eq!(announced["hostname"], "n2");
    assert_eq!(announced["address"], info.address.as_str());
    assert_eq!(announced["socket"], net.socket("n2").to_str().unwrap());
    // Addresses are accepted where hostnames are.
    publish(&net, "n1", "0:0000.0000.0002", "t", "by address").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_reaches_every_current_subscriber_and_never_replays() {
    let net = Devnet::start(3);
    let mut on_n1 = subscribe(&net, "n1", "n2", "election:g1").await;
    let mut on_n2 = subscribe(&net, "n2", "n2", "election:g1").await;
    let mut other_topic = subscribe(&net, "n1", "n2", "election:other").await;
    let mut everything = subscribe(&net, "n3", "n2", "*").await;
    net.wait_subscribers(4).await;

    let receipt = net
        .ctl("n3")
        .publish("n2", "election:g1", r#"{"type":"heartbeat","term":1}"#)
        .await
        .expect("publish");
    assert_eq!(receipt.target, "0:0000.0000.0002");
    assert_eq!(receipt.topic, "election:g1");
    assert_eq!(
        next_event(&mut on_n1).await,
        r#"{"type":"heartbeat","term":1}"#
    );
    assert_eq!(
        next_event(&mut on_n2).await,
        r#"{"type":"heartbeat","term":1}"#
    );

    // The broker's own node hears its own publish; a payload starting with `--` stays data.
    publish(&net, "n2", "n2", "election:g1", "--own").await;
    assert_eq!(next_event(&mut on_n2).await, "--own");
    assert_eq!(next_event(&mut on_n1).await, "--own");

    // A late subscriber sees only what is published after it joined.
    let mut late = subscribe(&net, "n3", "n2", "election:g1").await;
    net.wait_subscribers(5).await;
    publish(&net, "n1", "n2", "election:g1", "after").await;
    assert_eq!(next_event(&mut late).await, "after");
    assert_eq!(next_event(&mut on_n1).await, "after");

    // Exact topics only: the other subscription never saw any of it.
    publish(&net, "n1", "n2", "election:other", "mine").await;
    assert_eq!(next_event(&mut other_topic).await, "mine");
    // `*` hears every topic, in publish order.
    for expected in [r#"{"type":"heartbeat","term":1}"#, "--own", "after", "mine"] {
        assert_eq!(next_event(&mut everything).await, expected);
    }
    net.wait_status("4 publishes", |s| s["stats"]["published"] == 4)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_daemon_is_not_running_and_retryable() {
    let dir = temp_dir("nodaemon");
    let ctl = Pilotctl::new(pilotctl_path())
        .unwrap()
        .with_socket(dir.join("absent.sock"));
    let err = ctl.info().await.expect_err("no daemon");
    assert_eq!(err.code(), Some(&ErrorCode::NotRunning), "{err}");
    assert!(err.is_retryable());
    let err = ctl.publish("n2", "t", "x").await.expect_err("no daemon");
    assert_eq!(err.code(), Some(&ErrorCode::NotRunning), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_link_fails_publish_with_connection_failed() {
    let net = Devnet::start(3);
    net.post("/cut", json!({"a": "n1", "b": "n2"})).await;
    let err = publish_err(&net, "n1", "n2").await;
    assert_eq!(err.code(), Some(&ErrorCode::ConnectionFailed), "{err}");
    assert!(err.is_retryable());
    // Other links still work, and restoring the link brings it back.
    publish(&net, "n3", "n2", "election:g1", "x").await;
    net.post("/restore", json!({"a": "n1", "b": "n2"})).await;
    publish(&net, "n1", "n2", "election:g1", "x").await;

    // An unknown hostname is not retryable.
    let err = publish_err(&net, "n1", "nobody").await;
    assert_eq!(err.code(), Some(&ErrorCode::NotFound), "{err}");
    assert!(!err.is_retryable());
    // Empty data is the caller's bug: invalid_argument, never retried.
    let err = net.ctl("n1").publish("n2", "t", "").await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::InvalidArgument), "{err}");
    assert!(!err.is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_exits_connection_failed_when_its_link_is_cut() {
    let net = Devnet::start(3);
    let mut sub = subscribe(&net, "n1", "n2", "election:g1").await;
    let mut survivor = subscribe(&net, "n3", "n2", "election:g1").await;
    net.wait_subscribers(2).await;
    let closed = net.post("/isolate", json!({"node": "n1"})).await;
    assert_eq!(closed["closed"], 1);
    match tokio::time::timeout(DEADLINE, sub.next()).await {
        Ok(Some(Err(err))) => {
            assert_eq!(err.code(), Some(&ErrorCode::ConnectionFailed), "{err}")
        }
        other => panic!("expected the subscriber to fail, got {other:?}"),
    }
    assert!(sub.next().await.is_none());
    publish(&net, "n2", "n2", "election:g1", "still here").await;
    assert_eq!(next_event(&mut survivor).await, "still here");

    // Rejoining: a new subscriber hears what comes after, not what it missed.
    net.post("/unisolate", json!({"node": "n1"})).await;
    let mut back = subscribe(&net, "n1", "n2", "election:g1").await;
    net.wait_subscribers(2).await;
    publish(&net, "n3", "n2", "election:g1", "welcome back").await;
    assert_eq!(next_event(&mut back).await, "welcome back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_and_delay_faults_shape_delivery() {
    let net = Devnet::start(2);
    let mut sub = subscribe(&net, "n1", "n2", "t").await;
    net.wait_subscribers(1).await;
    net.post("/drop", json!({"fraction": 1.0, "seed": 7})).await;
    publish(&net, "n2", "n2", "t", "lost").await;
    net.wait_status("the drop", |s| s["stats"]["dropped"] == 1)
        .await;
    assert_eq!(net.status().await["stats"]["delivered"], 0);
    net.post("/heal", json!({})).await;
    net.post("/delay", json!({"ms": 300})).await;
    let start = pilot_election::clock::now();
    publish(&net, "n2", "n2", "t", "late").await;
    assert_eq!(next_event(&mut sub).await, "late");
    assert!(pilot_election::clock::since(start) >= Duration::from_millis(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_closes_an_untrusted_node_at_once_until_handshake_and_approve() {
    let net = Devnet::start(3);
    let mut trusted = subscribe(&net, "n3", "n2", "election:g1").await;
    net.wait_subscribers(1).await;
    // One-way: n2 (the broker) stops trusting n1, while n1 still trusts n2 and so dials.
    net.post("/revoke-trust", json!({"node": "n2", "peer": "n1"}))
        .await;
    let started = pilot_election::clock::now();
    let mut refused = subscribe(&net, "n1", "n2", "election:g1").await;
    match tokio::time::timeout(DEADLINE, refused.next()).await {
        Ok(Some(Err(err))) => {
            assert_eq!(err.code(), Some(&ErrorCode::ConnectionFailed), "{err}");
            assert!(err.to_string().contains("recv: EOF"), "{err}");
        }
        other => panic!("expected the broker to close the subscription, got {other:?}"),
    }
    let closed_after = pilot_election::clock::since(started);
    println!("untrusted subscription closed after {closed_after:?}");
    net.wait_status("the rejection", |s| s["stats"]["rejected"] == 1)
        .await;

    // Its publish is written ("ok": pilotctl cannot tell) but never read by the broker.
    publish(&net, "n1", "n2", "election:g1", "from the untrusted node").await;
    net.wait_status("the second rejection", |s| s["stats"]["rejected"] == 2)
        .await;
    publish(&net, "n3", "n2", "election:g1", "marker").await;
    assert_eq!(next_event(&mut trusted).await, "marker");

    // The fix an operator is told to run: handshake from the node, approve on the broker.
    let asked = net.pilotctl("n1", &["handshake", "n2", "pilot-election"]);
    assert_eq!(asked["trusted"], false, "{asked}");
    let pending = net.pilotctl("n2", &["pending"]);
    assert_eq!(pending["pending"][0]["node_id"], 1, "{pending}");
    assert_eq!(pending["pending"][0]["justification"], "pilot-election");
    net.pilotctl("n2", &["approve", "1"]);
    let listed = net.pilotctl("n2", &["trust"]);
    assert!(
        listed["trusted"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["node_id"] == 1 && t["mutual"] == true),
        "{listed}"
    );
    let mut admitted = subscribe(&net, "n1", "n2", "election:g1").await;
    net.wait_subscribers(2).await;
    publish(&net, "n3", "n2", "election:g1", "welcome").await;
    assert_eq!(next_event(&mut admitted).await, "welcome");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_failing_three_deliveries_in_a_row_goes_silent_but_stays_connected() {
    let net = Devnet::start(2);
    let mut sub = subscribe(&net, "n1", "n2", "t").await;
    net.wait_subscribers(1).await;
    net.post("/fail-delivery", json!({"node": "n1"})).await;
    for i in 1..=3u64 {
        publish(&net, "n2", "n2", "t", "lost").await;
        net.wait_status("a failed retry", |s| s["stats"]["delivery_failures"] == i)
            .await;
    }
    net.wait_status("the drop", |s| s["stats"]["subscribers_dropped"] == 1)
        .await;
    assert_eq!(
        net.status().await["stats"]["retried"],
        3,
        "each retried once"
    );
    net.post("/heal", json!({})).await;
    publish(&net, "n2", "n2", "t", "unheard").await;
    net.wait_status("the last publish", |s| s["stats"]["published"] == 4)
        .await;
    let status = net.status().await;
    assert_eq!(status["stats"]["delivered"], 0, "{status}");
    assert_eq!(status["subscribed_connections"], 0, "{status}");
    assert_eq!(
        status["connections"], 1,
        "the subscriber is still connected: {status}"
    );
    // pilotctl itself cannot tell: it still runs and prints nothing.
    let quiet = tokio::time::timeout(Duration::from_millis(300), sub.next()).await;
    assert!(
        quiet.is_err(),
        "the dropped subscriber heard something: {quiet:?}"
    );
    // A new subscription is listed again.
    let mut fresh = subscribe(&net, "n1", "n2", "t").await;
    net.wait_subscribers(1).await;
    publish(&net, "n2", "n2", "t", "heard").await;
    assert_eq!(next_event(&mut fresh).await, "heard");
}

/// Reads `n` events from `sub`, in order.
async fn events(sub: &mut Subscription, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(next_event(sub).await);
    }
    out
}

fn burst(tag: &str, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| event_frame("rl", format!("{tag}{i}").as_bytes()))
        .collect()
}

/// The broker's token bucket (100 events/s, burst 200) on one long-lived connection: of each
/// burst exactly the first events the bucket has tokens for get through, in order, and the
/// rest are dropped without a word; separate connections have separate buckets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_faster_than_the_rate_limit_loses_what_the_token_bucket_refuses() {
    let net = Devnet::start(3);
    let mut sub = subscribe(&net, "n1", "n2", "rl").await;
    net.wait_subscribers(1).await;
    // Like `pilotctl publish`, the connection's first frame subscribes it to the topic it
    // publishes on; the broker never sends an event back on the connection it came from.
    let mut fast = StreamClient::open(&net.socket("n3"), 2, "rl");
    net.wait_subscribers(2).await;
    fast.send(&burst("a", 300));
    let sent_a = pilot_election::clock::now();
    net.wait_status("burst a", |s| {
        s["stats"]["published"].as_u64().unwrap() + s["stats"]["rate_limited"].as_u64().unwrap()
            == 300
    })
    .await;
    let got_a = net.status().await["stats"]["published"].as_u64().unwrap() as usize;
    // 300 events in one write are taken within a millisecond or two: the full bucket, no refill.
    assert!((200..=201).contains(&got_a), "burst a: {got_a} passed");
    let delivered = net.status().await["stats"]["delivered"].as_u64().unwrap() as usize;
    assert_eq!(
        delivered, got_a,
        "delivered to the subscriber only, never echoed"
    );
    let expected: Vec<String> = (0..got_a).map(|i| format!("a{i}")).collect();
    assert_eq!(
        events(&mut sub, got_a).await,
        expected,
        "the head of the burst passes"
    );

    // After a pause the bucket has refilled by 100 per second of it, no more.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let gap = pilot_election::clock::since(sent_a);
    fast.send(&burst("b", 300));
    net.wait_status("burst b", |s| {
        s["stats"]["published"].as_u64().unwrap() + s["stats"]["rate_limited"].as_u64().unwrap()
            == 600
    })
    .await;
    let status = net.status().await;
    let got_b = status["stats"]["published"].as_u64().unwrap() as usize - got_a;
    let model = (gap.as_secs_f64() * 100.0).min(200.0);
    println!("burst b after {gap:?}: {got_b} passed, the token bucket allows {model:.1}");
    assert!(
        (got_b as f64 - model).abs() <= 3.0,
        "burst b after {gap:?}: {got_b} passed, the bucket allows {model:.1}"
    );
    assert_eq!(
        status["stats"]["rate_limited"],
        600 - got_a - got_b,
        "{status}"
    );
    let expected: Vec<String> = (0..got_b).map(|i| format!("b{i}")).collect();
    assert_eq!(events(&mut sub, got_b).await, expected);

    // Three more connections, 150 events each at once: each has its own bucket, nothing lost
    // (their first frames name another topic, so they do not hear each other).
    let limited_before = status["stats"]["rate_limited"].as_u64().unwrap();
    for c in 0..3 {
        let mut other = StreamClient::open(&net.socket("n3"), 2, "rl-publisher");
        other.send(&burst(&format!("c{c}-"), 150));
    }
    let got_c = events(&mut sub, 450).await;
    for c in 0..3 {
        let mine: Vec<&String> = got_c
            .iter()
            .filter(|e| e.starts_with(&format!("c{c}-")))
            .collect();
        assert_eq!(mine.len(), 150, "connection {c} lost events");
    }
    assert_eq!(
        net.status().await["stats"]["rate_limited"]
            .as_u64()
            .unwrap(),
        limited_before
    );
}

/// A wrapper that runs the real pilotctl as a grandchild, like the pip console script does:
/// killing only our direct child would leave pilotctl running.
fn wrapper_script(dir: &Path) -> (PathBuf, PathBuf) {
    let script = dir.join("pilotctl-wrapper.sh");
    let pidfile = dir.join("grandchild.pid");
    write_script(
        &script,
        &format!(
            "#!/bin/sh\n\"{}\" \"$@\" &\necho $! > \"{}\"\nwait\n",
            pilotctl_path().display(),
            pidfile.display()
        ),
    );
    (script, pidfile)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_timeout_kills_the_whole_process_group() {
    let net = Devnet::start(2);
    // A stalled daemon reads requests and never answers; pilotctl has no deadline of its own.
    net.post("/stall", json!({"node": "n1"})).await;
    let (script, pidfile) = wrapper_script(&net.dir);
    let ctl = Pilotctl::new(&script)
        .unwrap()
        .with_socket(net.socket("n1"))
        .with_timeout(Duration::from_millis(1500));
    let err = ctl
        .publish("n2", "t", "x")
        .await
        .expect_err("must time out");
    assert!(err.is_retryable(), "{err}");
    let pgid = match err {
        PilotctlError::TimedOut { pgid, .. } => pgid,
        other => panic!("expected a timeout, got {other}"),
    };
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .expect("the wrapper started pilotctl")
        .trim()
        .parse()
        .unwrap();
    wait_gone(pgid).await;
    wait_gone(grandchild).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_non_executable_binary_is_unavailable() {
    let dir = temp_dir("nobin");
    let missing = dir.join("pilotctl");
    let err = Pilotctl::new(&missing).unwrap_err();
    assert!(matches!(err, PilotctlError::Unavailable { .. }));
    assert!(err.to_string().contains(&missing.display().to_string()));
    std::fs::write(&missing, "not a program").unwrap();
    let err = Pilotctl::new(&missing).unwrap_err();
    assert!(matches!(err, PilotctlError::Unavailable { .. }), "{err}");
    assert!(!err.is_retryable());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_lines_are_counted_and_skipped() {
    let dir = temp_dir("garbage");
    let script = dir.join("noisy-pilotctl");
    write_script(
        &script,
        "#!/bin/sh\n\
         echo 'not json'\n\
         head -c 300000 /dev/zero | tr '\\0' 'x'; echo\n\
         echo '{\"bytes\":2,\"data\":\"ok\",\"topic\":\"t\"}'\n\
         echo '{\"code\":\"connection_failed\",\"error\":\"recv: EOF\",\"message\":\"recv: EOF\",\"status\":\"error\"}' >&2\n\
         exit 1\n",
    );
    let mut sub = Pilotctl::new(&script).unwrap().subscribe("b", "t").unwrap();
    assert_eq!(next_event(&mut sub).await, "ok");
    let end = sub.next().await;
    assert!(
        matches!(&end, Some(Err(e)) if e.code() == Some(&ErrorCode::ConnectionFailed)),
        "{end:?}"
    );
    assert_eq!(sub.garbage_lines(), 1);
    assert_eq!(sub.oversized_lines(), 1);

    // A one-shot command that floods stdout is bounded and reported, never buffered whole.
    let chatty = dir.join("chatty-pilotctl");
    write_script(
        &chatty,
        "#!/bin/sh\nhead -c 3000000 /dev/zero | tr '\\0' 'x'\n",
    );
    let err = Pilotctl::new(&chatty).unwrap().info().await.unwrap_err();
    assert!(matches!(err, PilotctlError::Unexpected { .. }), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Publish latency through the real CLI: each publish is a new pilotctl process, so this is
/// mostly process start-up. Run with `--nocapture` to see the figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_latency_through_pilotctl() {
    const N: usize = 200;
    let net = Devnet::start(3);
    let mut sub = subscribe(&net, "n1", "n2", "lat").await;
    net.wait_subscribers(1).await;
    let ctl = net.ctl("n3");
    let mut publish = Vec::with_capacity(N);
    let mut delivered = Vec::with_capacity(N);
    for i in 0..N {
        let start = pilot_election::clock::now();
        ctl.publish("n2", "lat", &i.to_string()).await.unwrap();
        publish.push(pilot_election::clock::since(start));
        assert_eq!(next_event(&mut sub).await, i.to_string());
        delivered.push(pilot_election::clock::since(start));
    }
    publish.sort();
    delivered.sort();
    println!(
        "pilotctl publish latency over {N}: p50 {:?} p99 {:?} max {:?}; publish→subscriber p50 {:?} p99 {:?}",
        percentile(&publish, 0.5),
        percentile(&publish, 0.99),
        publish[N - 1],
        percentile(&delivered, 0.5),
        percentile(&delivered, 0.99),
    );
}

/// A stream through node `node`'s daemon socket to `broker`, subscribed to `topic`.
async fn socket_stream(net: &Devnet, node: &str, broker: &str, topic: &str) -> EventStream {
    match EventStream::open(&net.socket(node), broker, topic, "subscribe").await {
        Ok(s) => s,
        Err(e) => panic!("open {node} -> {broker} {topic}: {e}"),
    }
}

async fn socket_event(stream: &mut EventStream) -> String {
    match tokio::time::timeout(DEADLINE, stream.next()).await {
        Ok(Ok(data)) => data,
        other => panic!("expected an event, got {other:?}"),
    }
}

/// One long-lived connection publishes any number of events, each routed by its own topic, and
/// the real `pilotctl subscribe` hears them in order; the real `pilotctl publish` reaches a
/// socket subscriber. The publishing connection, subscribed to a topic nobody publishes on,
/// hears nothing, not even its own events, while another connection of the same node does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_path_and_the_real_pilotctl_hear_each_other() {
    let net = Devnet::start(3);
    let mut cli_a = subscribe(&net, "n3", "n2", "election:a").await;
    let mut cli_b = subscribe(&net, "n3", "n2", "election:b").await;
    let mut own = socket_stream(&net, "n1", "n2", "election:a").await;
    // Addressed three ways, as pilotctl accepts them: hostname, address, bare node id.
    let mut publisher = socket_stream(&net, "n1", "0:0000.0000.0002", "election:a/publisher").await;
    let mut by_id = socket_stream(&net, "n3", "2", "election:b").await;
    net.wait_subscribers(5).await;
    for i in 0..5 {
        publisher
            .send("election:a", format!("a{i}").as_bytes())
            .await
            .expect("send");
    }
    publisher.send("election:b", b"b0").await.expect("send");
    for i in 0..5 {
        assert_eq!(next_event(&mut cli_a).await, format!("a{i}"));
        assert_eq!(socket_event(&mut own).await, format!("a{i}"));
    }
    assert_eq!(
        next_event(&mut cli_b).await,
        "b0",
        "routed by the event's own topic"
    );
    assert_eq!(socket_event(&mut by_id).await, "b0");
    let quiet = tokio::time::timeout(Duration::from_millis(300), publisher.next()).await;
    assert!(quiet.is_err(), "the publishing connection heard {quiet:?}");
    // The other way: pilotctl publishes, the socket subscriber hears it, byte for byte.
    let text = r#"{"type":"heartbeat","term":7,"data":"--not a flag"}"#;
    publish(&net, "n3", "n2", "election:a", text).await;
    assert_eq!(socket_event(&mut own).await, text);
    assert_eq!(next_event(&mut cli_a).await, text);
    net.wait_status("7 publishes", |s| s["stats"]["published"] == 7)
        .await;
}

/// Every failure of the socket path carries the code pilotctl gives for it, so the broker
/// diagnosis reads both paths alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_failures_carry_the_codes_pilotctl_gives() {
    let net = Devnet::start(3);
    let open = |node: &'static str, broker: &'static str| {
        let socket = net.socket(node);
        async move { EventStream::open(&socket, broker, "election:g1", "subscribe").await }
    };
    let code = |r: Result<EventStream, PilotctlError>| match r {
        Ok(_) => panic!("opened"),
        Err(e) => (e.code().cloned(), e.is_retryable(), e.to_string()),
    };
    let dir = temp_dir("nosocket");
    let absent = EventStream::open(&dir.join("absent.sock"), "n2", "t", "subscribe").await;
    let (c, retry, text) = code(absent);
    assert_eq!(c, Some(ErrorCode::NotRunning), "{text}");
    assert!(retry);
    let _ = std::fs::remove_dir_all(dir);
    let (c, retry, text) = code(open("n1", "nobody").await);
    assert_eq!(c, Some(ErrorCode::NotFound), "{text}");
    assert!(!retry);
    // And the same for the real pilotctl, side by side.
    assert_eq!(
        publish_err(&net, "n1", "nobody").await.code(),
        Some(&ErrorCode::NotFound)
    );

    net.post("/cut", json!({"a": "n1", "b": "n2"})).await;
    let (c, retry, text) = code(open("n1", "n2").await);
    assert_eq!(c, Some(ErrorCode::ConnectionFailed), "{text}");
    assert!(retry);
    assert!(
        !text.contains("recv"),
        "a dial failure is not a closed stream: {text}"
    );
    net.post("/restore", json!({"a": "n1", "b": "n2"})).await;

    // This node does not trust the broker: refused before dialling, for pilotctl to decide.
    net.post("/revoke-trust", json!({"node": "n1", "peer": "n2"}))
        .await;
    let (c, _, text) = code(open("n1", "n2").await);
    assert_eq!(c, Some(ErrorCode::Other("trust_required".into())), "{text}");
    assert!(text.contains(daemon::NOT_TRUSTED), "{text}");
    net.post("/grant-trust", json!({"node": "n1", "peer": "n2"}))
        .await;

    // The broker does not trust this node: it closes the stream right after the first frame,
    // which reads as pilotctl's `recv: EOF`.
    net.post("/revoke-trust", json!({"node": "n2", "peer": "n1"}))
        .await;
    let mut refused = socket_stream(&net, "n1", "n2", "election:g1").await;
    let end = tokio::time::timeout(DEADLINE, refused.next()).await;
    match end {
        Ok(Err(e)) => {
            assert_eq!(e.code(), Some(&ErrorCode::ConnectionFailed), "{e}");
            assert!(e.to_string().contains("recv: EOF"), "{e}");
        }
        other => panic!("expected the broker to close the stream, got {other:?}"),
    }
    net.post("/grant-trust", json!({"node": "n2", "peer": "n1"}))
        .await;

    // A running stream whose link is cut ends the same way.
    let mut sub = socket_stream(&net, "n1", "n2", "election:g1").await;
    net.wait_subscribers(1).await;
    net.post("/isolate", json!({"node": "n1"})).await;
    match tokio::time::timeout(DEADLINE, sub.next()).await {
        Ok(Err(e)) => assert_eq!(e.code(), Some(&ErrorCode::ConnectionFailed), "{e}"),
        other => panic!("expected the stream to end, got {other:?}"),
    }
}

/// The start-up probe: a 1.18 daemon speaks, another version differs, no daemon is unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_tells_a_1_18_daemon_from_another_and_from_none() {
    let net = Devnet::start(1);
    match daemon::probe(&net.socket("n1")).await {
        Probe::Speaks(info) => assert_eq!(
            (info.node_id, info.address.as_str()),
            (1, "0:0000.0000.0001")
        ),
        other => panic!("{other:?}"),
    }
    let older = Devnet::start_with(1, &["--daemon-version", "1.17.3"]);
    match daemon::probe(&older.socket("n1")).await {
        Probe::Differs(why) => assert!(why.contains("1.17.3"), "{why}"),
        other => panic!("{other:?}"),
    }
    let dir = temp_dir("noprobe");
    assert!(matches!(
        daemon::probe(&dir.join("absent.sock")).await,
        Probe::Unreachable(_)
    ));
    let _ = std::fs::remove_dir_all(dir);
}
