//! Peer authentication over the http transport: with a cluster key, forged, tampered and
//! replayed messages change nothing and are counted by reason.

use std::time::Duration;

use serde_json::{json, Value};

use pilot_election::election::Message;
use pilot_election::signing::KeyRing;

use crate::app::{client, metrics_text, serial, Cluster, TempDir};

pub(crate) const KEY: &str = "k1=0123456789abcdef0123456789abcdef";

pub(crate) fn message(term: u64, seq: u64, body: Value) -> Message {
    let mut v =
        json!({"v": 1, "group": "it", "from": "mallory", "term": term, "seq": seq, "ts": 0});
    v.as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    serde_json::from_value(v).expect("a well-formed message")
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
    let keys_dir = TempDir::new("keys");
    let key_file = keys_dir.0.join("cluster.key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let kf = key_file.display().to_string();
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
