//! Peer authentication over the http transport: with a cluster key, forged, tampered and
//! replayed messages change nothing and are counted by reason.

use std::time::Duration;

use serde_json::{json, Value};

use pilot_election::election::Message;
use pilot_election::signing::KeyRing;

use crate::app::{
    app, client, free_port, leader_of, metrics_text, serial, wait_for, wait_up, Cluster, TempDir,
};

pub(crate) const KEY: &str = "k1=0123456789abcdef0123456789abcdef";

pub(crate) fn message(term: u64, seq: u64, body: Value) -> Message {
    let mut v =
        json!({"v": 1, "group": "it", "from": "mallory", "term": term, "seq": seq, "ts": 0});
    v.as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    serde_json::from_value(v).expect("a well-formed message")
}

/// A key file holding [`KEY`]: the directory (removed on drop) and the file's path.
pub(crate) fn key_file() -> (TempDir, String) {
    let dir = TempDir::new("keys");
    let file = dir.0.join("cluster.key");
    std::fs::write(&file, format!("{KEY}\n")).unwrap();
    let path = file.display().to_string();
    (dir, path)
}

pub(crate) fn counted(metrics: &str, outcome: &str) -> f64 {
    let prefix = format!(
        "pilot_election_messages_received_total{{type=\"unknown\",outcome=\"{outcome}\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn forged_tampered_and_replayed_messages_change_nothing() {
    let _serial = serial().await;
    let (_keys_dir, kf) = key_file();
    let c = Cluster::start(3, &["--cluster-key-file", &kf]);
    let (leader, term) = c
        .agreed(&[0, 1, 2], Duration::from_secs(20), |_, _| true)
        .await;
    let fi = (c.index(&leader) + 1) % 3;
    let target = format!("{}/peer/messages", c.nodes[fi].url());

    let coup = json!({"type": "leader", "leader": "mallory", "elected_at": 0});
    let heartbeat = json!({"type": "heartbeat", "leader": "mallory", "timestamp": 0,
                           "lease_ms": 2000, "priority": 4_000_000_000u32, "eligible": true});
    let real = KeyRing::parse(KEY, "test").unwrap();
    let wrong = KeyRing::parse("k1=ffffffffffffffffffffffffffffffff", "test").unwrap();
    let unknown = KeyRing::parse("k9=0123456789abcdef0123456789abcdef", "test").unwrap();

    let mut sends: Vec<String> = Vec::new();
    // Unsigned, with a much higher term.
    sends.push(message(term + 100, 1, coup.clone()).to_json());
    sends.push(message(term + 100, 2, heartbeat.clone()).to_json());
    // Signed with the wrong secret, and with an unknown key id.
    for (ring, seq) in [(&wrong, 3), (&unknown, 4)] {
        let mut m = message(term + 100, seq, coup.clone());
        ring.sign(&mut m);
        sends.push(m.to_json());
    }
    // Validly signed, then a field changed.
    let mut m = message(
        term,
        5,
        json!({"type": "presence", "priority": 1, "eligible": false}),
    );
    real.sign(&mut m);
    let mut tampered: Value = serde_json::from_str(&m.to_json()).unwrap();
    tampered["term"] = json!(term + 100);
    sends.push(tampered.to_string());
    // Validly signed and harmless, sent twice: the second copy is a replay.
    sends.push(m.to_json());
    sends.push(m.to_json());

    for body in &sends {
        let resp = client()
            .post(&target)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 202, "{body}");
    }

    // Same leader, same term, on every node.
    c.agreed(&[0, 1, 2], Duration::from_secs(5), |l, t| {
        l == leader && t == term
    })
    .await;
    let metrics = metrics_text(&c.nodes[fi].url()).await;
    assert!(counted(&metrics, "unsigned") >= 2.0, "{metrics}");
    assert!(counted(&metrics, "bad_signature") >= 2.0, "{metrics}");
    assert!(counted(&metrics, "unknown_key") >= 1.0, "{metrics}");
    assert!(counted(&metrics, "replayed") >= 1.0, "{metrics}");
}

/// A recording of a peer's messages, played to a node after that node restarted (even after a
/// `kill -9`), is refused: the highest number accepted per sender is kept in the data dir.
#[tokio::test]
async fn a_restarted_node_still_refuses_messages_it_accepted_before() {
    let _serial = serial().await;
    let (_keys_dir, kf) = key_file();
    let mut node = app("solo", free_port(), &[], &["--cluster-key-file", &kf]);
    node.start();
    wait_up(&node).await;
    let target = format!("{}/peer/messages", node.url());
    let post = |body: String| {
        let target = target.clone();
        async move {
            let resp = client()
                .post(&target)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("POST /peer/messages");
            assert_eq!(resp.status().as_u16(), 202);
        }
    };

    // What an eavesdropper recorded: validly signed presence messages of a member.
    let real = KeyRing::parse(KEY, "test").unwrap();
    let recorded: Vec<String> = (1..=3)
        .map(|seq| {
            let mut m = message(
                0,
                (7 << 32) + seq,
                json!({"type": "presence", "priority": 1, "eligible": false}),
            );
            real.sign(&mut m);
            m.to_json()
        })
        .collect();
    for m in &recorded {
        post(m.clone()).await;
    }
    // Saved within a heartbeat interval; then the node dies without any chance to flush.
    let marks = node.data_dir().join("replay.json");
    let saved = wait_for(Duration::from_secs(10), || {
        let marks = marks.clone();
        async move {
            let v: Value = serde_json::from_slice(&std::fs::read(&marks).ok()?).ok()?;
            (v["mallory"] == json!((7u64 << 32) + 3)).then_some(())
        }
    })
    .await;
    assert!(saved.is_some(), "replay marks never saved\n{}", node.log());
    assert_eq!(
        counted(&metrics_text(&node.url()).await, "replayed"),
        0.0,
        "first copies are new"
    );
    node.kill9();

    node.start();
    wait_up(&node).await;
    for m in &recorded {
        post(m.clone()).await;
    }
    let replayed = wait_for(Duration::from_secs(10), || {
        let url = node.url();
        async move {
            let n = counted(&metrics_text(&url).await, "replayed");
            (n >= 3.0).then_some(n)
        }
    })
    .await;
    assert_eq!(
        replayed,
        Some(3.0),
        "the recording must be refused after the restart\n{}",
        node.log()
    );
    // The member's next message is new and goes through.
    let mut next = message(
        0,
        (7 << 32) + 4,
        json!({"type": "presence", "priority": 1, "eligible": false}),
    );
    real.sign(&mut next);
    post(next.to_json()).await;
    let through = wait_for(Duration::from_secs(10), || {
        let url = node.url();
        async move {
            let metrics = metrics_text(&url).await;
            let presence: f64 = metrics
                .lines()
                .filter(|l| {
                    l.starts_with("pilot_election_messages_received_total{type=\"presence\"")
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            (presence >= 1.0).then_some(metrics)
        }
    })
    .await
    .expect("the member's next message reached the core");
    assert_eq!(counted(&through, "replayed"), 3.0, "{through}");
}

/// SIGTERM on a single node: nobody can take over, so it leaves at once instead of waiting out
/// the handover grace, and the marks it accepted since its last periodic save are on disk.
#[tokio::test]
async fn a_solo_leader_stops_at_once_and_saves_its_last_marks() {
    let _serial = serial().await;
    let (_keys_dir, kf) = key_file();
    let mut node = app("solo", free_port(), &[], &["--cluster-key-file", &kf]);
    node.start();
    wait_up(&node).await;
    let leading = wait_for(Duration::from_secs(20), || {
        let url = node.url();
        async move { (leader_of(&url).await?.0 == "solo").then_some(()) }
    })
    .await;
    assert!(leading.is_some(), "a single node leads\n{}", node.log());

    let target = format!("{}/peer/messages", node.url());
    let real = KeyRing::parse(KEY, "test").unwrap();
    let send = |seq: u64| {
        let target = target.clone();
        let mut m = message(
            0,
            (9 << 32) + seq,
            json!({"type": "presence", "priority": 1, "eligible": false}),
        );
        real.sign(&mut m);
        async move {
            let resp = client()
                .post(&target)
                .header("content-type", "application/json")
                .body(m.to_json())
                .send()
                .await
                .expect("POST /peer/messages");
            assert_eq!(resp.status().as_u16(), 202);
        }
    };
    let marks = node.data_dir().join("replay.json");
    let mark = |marks: std::path::PathBuf| async move {
        let v: Value = serde_json::from_slice(&std::fs::read(&marks).ok()?).ok()?;
        v["mallory"].as_u64()
    };
    send(1).await;
    let first = wait_for(Duration::from_secs(10), || {
        let marks = marks.clone();
        async move { mark(marks).await.filter(|m| *m == (9 << 32) + 1) }
    })
    .await;
    assert!(first.is_some(), "first mark never saved\n{}", node.log());
    // The writer now waits a heartbeat interval before its next save: this one arrives
    // inside that wait, and only the exit's final save can keep it.
    send(2).await;
    node.sigterm();
    let status = node.wait_exit(Duration::from_secs(4)).await;
    assert!(status.success(), "exit status {status:?}\n{}", node.log());
    assert!(node.log().contains("can_hand_over=false"), "{}", node.log());
    assert_eq!(
        mark(marks).await,
        Some((9 << 32) + 2),
        "the last accepted number must be saved on exit\n{}",
        node.log()
    );
    let history = std::fs::read_to_string(node.data_dir().join("history.json")).unwrap();
    assert!(history.contains("\"shutdown\""), "{history}");
}
