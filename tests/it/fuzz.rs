//! Random bodies into every endpoint that reads one: never a 5xx, always a JSON answer, and
//! every refusal in the error shape. Seeded, so a failure replays.

use serde_json::{json, Map, Value};

use pilot_election::api::Auth;

use crate::app::{client, in_process, InProcess};

/// xorshift64*: enough randomness for inputs, and no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const KEYS: &[&str] = &[
    "eligible",
    "priority",
    "successor",
    "expected_term",
    "v",
    "type",
    "group",
    "from",
    "term",
    "seq",
    "leader",
    "candidate",
    "granted",
    "pre_vote",
    "lease_ms",
    "hb_seq",
    "x",
];

fn value(r: &mut Rng, depth: u32) -> Value {
    match r.below(if depth > 2 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => json!(r.below(2) == 1),
        2 => json!(r.below(10)),
        3 => json!(r.next()),
        4 => json!(-(r.below(1000) as i64)),
        5 => json!(["n1", "it", "", "heartbeat", "vote", "é\u{0}"][r.below(6) as usize]),
        6 => Value::Array((0..r.below(4)).map(|_| value(r, depth + 1)).collect()),
        _ => {
            let mut m = Map::new();
            for _ in 0..r.below(6) {
                let k = KEYS[r.below(KEYS.len() as u64) as usize];
                m.insert(k.into(), value(r, depth + 1));
            }
            Value::Object(m)
        }
    }
}

fn body(r: &mut Rng) -> Vec<u8> {
    match r.below(4) {
        0 => (0..r.below(200)).map(|_| r.next() as u8).collect(),
        1 => {
            let mut s = value(r, 0).to_string().into_bytes();
            let cut = r.below(s.len() as u64 + 1) as usize;
            s.truncate(cut);
            s
        }
        _ => value(r, 0).to_string().into_bytes(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bodies_never_cause_a_5xx_and_always_get_json() {
    let InProcess {
        url,
        task,
        dir: _dir,
    } = in_process(
        "fuzzed",
        Auth {
            token: None,
            allow_unauthenticated: true,
        },
    )
    .await;
    let mut r = Rng(0x5eed_1234_abcd_0001);
    let c = client();
    for i in 0..600 {
        let path = ["/step-down", "/candidacy", "/peer/messages"][i % 3];
        let b = body(&mut r);
        let resp = c
            .post(format!("{url}{path}"))
            .header("content-type", "application/json")
            .body(b.clone())
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let answer: Value = resp.json().await.unwrap_or(Value::Null);
        let shown = String::from_utf8_lossy(&b).into_owned();
        assert!(
            status < 500,
            "case {i}: {path} {shown:?} -> {status} {answer}"
        );
        assert!(
            answer.is_object(),
            "case {i}: {path} {shown:?} -> {status} not JSON"
        );
        if status >= 400 {
            assert!(
                answer["error"].is_string() && answer["message"].is_string(),
                "case {i}: {path} {shown:?} -> {status} {answer}"
            );
        }
    }
    assert!(!task.is_finished(), "the election loop survived all of it");
}
