//! Peer authentication over the http transport: with a cluster key, forged, tampered and
//! replayed messages change nothing and are counted by reason.

use std::time::Duration;

use serde_json::{json, Value};

use pilot_election::election::{Announced, Message, Timings, Versions, PROTOCOL_VERSION};
use pilot_election::signing::KeyRing;

use crate::app::{
    app, free_port, leader_of, metrics_text, post_raw, serial, wait_for, wait_up, App, Cluster,
    TempDir,
};

pub(crate) const KEY: &str = "k1=0123456789abcdef0123456789abcdef";

pub(crate) fn message(term: u64, seq: u64, body: Value) -> Message {
    let mut v = json!({"v": PROTOCOL_VERSION, "group": "it", "from": "mallory", "term": term,
                       "seq": seq, "ts": 0, "members": "00000000", "speaks": Versions::OURS,
                       "timings": Announced::of(&Timings::default())});
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

/// POSTs one wire message to a node's peer ingress, which takes it for the loop (202).
async fn post_message(target: &str, body: &str) {
    let (status, answer) = post_raw(target, body).await;
    assert_eq!(status, 202, "{body}: {answer}");
}

/// A harmless `presence` from `mallory`, validly signed with [`KEY`]: what a member holding the
/// key sends, or what an eavesdropper records.
fn signed_presence(term: u64, seq: u64) -> String {
    let mut m = message(
        term,
        seq,
        json!({"type": "presence", "priority": 1, "candidacy": "withdrawn", "hears": [],
               "member_ids": []}),
    );
    KeyRing::parse(KEY, "test").unwrap().sign(&mut m);
    m.to_json()
}

/// `mallory` declaring itself leader in `term`: unsigned (seq 1), signed with the wrong secret
/// (seq 3) and with an unknown key id (seq 4). Each refusal is counted by its own reason.
pub(crate) fn forgeries(term: u64) -> Vec<String> {
    let coup = json!({"type": "leader", "leader": "mallory", "elected_at": 0});
    let wrong = KeyRing::parse("k1=ffffffffffffffffffffffffffffffff", "test").unwrap();
    let unknown = KeyRing::parse("k9=0123456789abcdef0123456789abcdef", "test").unwrap();
    let mut sends = vec![message(term, 1, coup.clone()).to_json()];
    for (ring, seq) in [(&wrong, 3), (&unknown, 4)] {
        let mut m = message(term, seq, coup.clone());
        ring.sign(&mut m);
        sends.push(m.to_json());
    }
    sends
}

/// The highest number the node has saved for `mallory` in its replay marks, if any.
fn saved_mark(node: &App) -> Option<u64> {
    let bytes = std::fs::read(node.data_dir().join("replay.json")).ok()?;
    serde_json::from_slice::<Value>(&bytes).ok()?["mallory"].as_u64()
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

    let heartbeat = json!({"type": "heartbeat", "leader": "mallory", "timestamp": 0,
                           "lease_ms": 2000, "priority": 4_000_000_000u32, "candidacy": "eligible",
                           "hears": [], "member_ids": []});
    let mut sends = forgeries(term + 100);
    sends.push(message(term + 100, 2, heartbeat).to_json());
    // Validly signed, then a field changed.
    let m = signed_presence(term, 5);
    let mut tampered: Value = serde_json::from_str(&m).unwrap();
    tampered["term"] = json!(term + 100);
    sends.push(tampered.to_string());
    // Validly signed and harmless, sent twice: the second copy is a replay.
    sends.push(m.clone());
    sends.push(m);

    for body in &sends {
        post_message(&target, body).await;
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

    // What an eavesdropper recorded: validly signed presence messages of a member.
    let recorded: Vec<String> = (1..=3)
        .map(|seq| signed_presence(0, (7 << 32) + seq))
        .collect();
    for m in &recorded {
        post_message(&target, m).await;
    }
    // Saved within a heartbeat interval; then the node dies without any chance to flush.
    let saved = wait_for(Duration::from_secs(10), || {
        let saved = saved_mark(&node);
        async move { saved.filter(|m| *m == (7 << 32) + 3) }
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
        post_message(&target, m).await;
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
    post_message(&target, &signed_presence(0, (7 << 32) + 4)).await;
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
    post_message(&target, &signed_presence(0, (9 << 32) + 1)).await;
    let first = wait_for(Duration::from_secs(10), || {
        let saved = saved_mark(&node);
        async move { saved.filter(|m| *m == (9 << 32) + 1) }
    })
    .await;
    assert!(first.is_some(), "first mark never saved\n{}", node.log());
    // The writer now waits a heartbeat interval before its next save: this one arrives
    // inside that wait, and only the exit's final save can keep it.
    post_message(&target, &signed_presence(0, (9 << 32) + 2)).await;
    node.sigterm();
    let status = node.wait_exit(Duration::from_secs(4)).await;
    assert!(status.success(), "exit status {status:?}\n{}", node.log());
    assert!(node.log().contains("can_hand_over=false"), "{}", node.log());
    assert_eq!(
        saved_mark(&node),
        Some((9 << 32) + 2),
        "the last accepted number must be saved on exit\n{}",
        node.log()
    );
    let history = std::fs::read_to_string(node.data_dir().join("history.json")).unwrap();
    assert!(history.contains("\"shutdown\""), "{history}");
}
