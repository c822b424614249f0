//! Property tests: nothing on the wire can panic the parser or the signature check, and what
//! parses is exactly what was sent.

use pilot_election::election::{Body, Candidacy, Message, MAX_MESSAGE_BYTES, PROTOCOL_VERSION};
use pilot_election::signing::{KeyRing, Rejection};
use proptest::prelude::*;
use serde_json::Value;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
        prop_oneof![
            Just("heartbeat"),
            Just("ack"),
            Just("presence"),
            Just("election"),
            Just("vote"),
            Just("leader"),
            Just("resign")
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("v".to_string()),
                    Just("type".to_string()),
                    Just("group".to_string()),
                    Just("from".to_string()),
                    Just("term".to_string()),
                    Just("seq".to_string()),
                    Just("leader".to_string()),
                    Just("candidate".to_string()),
                    Just("sig".to_string()),
                    Just("kid".to_string()),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..10
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn candidacy() -> impl Strategy<Value = Candidacy> {
    prop_oneof![
        Just(Candidacy::Eligible),
        Just(Candidacy::Booting),
        Just(Candidacy::Cooling),
        Just(Candidacy::Withdrawn),
        Just(Candidacy::Stopping),
    ]
}

fn ids() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[a-z0-9-]{1,12}", 0..6)
}

fn body() -> impl Strategy<Value = Body> {
    let id = "[a-z0-9-]{1,12}";
    prop_oneof![
        (
            id,
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            candidacy(),
            ids(),
            ids(),
            any::<bool>()
        )
            .prop_map(
                |(leader, timestamp, lease_ms, priority, candidacy, hears, member_ids, flapped)| {
                    Body::Heartbeat {
                        leader,
                        timestamp,
                        lease_ms,
                        priority,
                        candidacy,
                        hears,
                        member_ids,
                        flapped,
                    }
                }
            ),
        (
            id,
            any::<u64>(),
            any::<u32>(),
            candidacy(),
            ids(),
            ids(),
            any::<bool>()
        )
            .prop_map(
                |(leader, hb_seq, priority, candidacy, hears, member_ids, flapped)| Body::Ack {
                    leader,
                    hb_seq,
                    priority,
                    candidacy,
                    hears,
                    member_ids,
                    flapped,
                }
            ),
        (any::<u32>(), candidacy(), ids(), ids(), any::<bool>()).prop_map(
            |(priority, candidacy, hears, member_ids, flapped)| Body::Presence {
                priority,
                candidacy,
                hears,
                member_ids,
                flapped,
            }
        ),
        (id, any::<u32>(), any::<bool>()).prop_map(|(candidate, priority, pre_vote)| {
            Body::Election {
                candidate,
                priority,
                pre_vote,
            }
        }),
        (id, any::<bool>(), any::<bool>()).prop_map(|(candidate, granted, pre_vote)| Body::Vote {
            candidate,
            granted,
            pre_vote
        }),
        (id, any::<u64>()).prop_map(|(leader, elected_at)| Body::Leader { leader, elected_at }),
        (id, proptest::option::of(id), any::<bool>()).prop_map(
            |(leader, successor, lost_quorum)| Body::Resign {
                leader,
                successor,
                lost_quorum
            }
        ),
    ]
}

/// Makes the sender fields agree with the body, as `Message::check` requires.
fn message(from: String, term: u64, seq: u64, body: Body) -> Message {
    let body = match body {
        Body::Heartbeat {
            timestamp,
            lease_ms,
            priority,
            candidacy,
            hears,
            member_ids,
            flapped,
            ..
        } => Body::Heartbeat {
            leader: from.clone(),
            timestamp,
            lease_ms,
            priority,
            candidacy,
            hears,
            member_ids,
            flapped,
        },
        Body::Election {
            priority, pre_vote, ..
        } => Body::Election {
            candidate: from.clone(),
            priority,
            pre_vote,
        },
        Body::Leader { elected_at, .. } => Body::Leader {
            leader: from.clone(),
            elected_at,
        },
        Body::Resign {
            successor,
            lost_quorum,
            ..
        } => Body::Resign {
            leader: from.clone(),
            successor,
            lost_quorum,
        },
        other => other,
    };
    Message {
        v: PROTOCOL_VERSION,
        group: "g".into(),
        from,
        term,
        seq,
        ts: 0,
        members: "0a1b2c3d".into(),
        body,
        kid: None,
        sig: None,
    }
}

fn ring() -> KeyRing {
    KeyRing::parse("k1=0123456789abcdef0123", "test").unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let parsed = Message::parse(&bytes);
        if let Ok(m) = parsed {
            prop_assert!(m.check().is_ok());
        }
        prop_assert!(ring().verify(&bytes).is_err(), "random bytes are never a signed message");
    }

    #[test]
    fn random_json_never_panics(v in json_value()) {
        let text = v.to_string();
        if let Ok(m) = Message::parse(text.as_bytes()) {
            prop_assert!(m.check().is_ok());
        }
        match ring().verify(text.as_bytes()) {
            Ok(_) => prop_assert!(false, "a random object verified: {}", text),
            Err(e) => prop_assert!(!e.reason().is_empty()),
        }
    }

    #[test]
    fn valid_messages_round_trip_and_survive_signing(
        from in "[a-z0-9-]{1,12}", term in any::<u64>(), seq in any::<u64>(), b in body()
    ) {
        let m = message(from, term, seq, b);
        prop_assert_eq!(Message::parse(m.to_json().as_bytes()).unwrap(), m.clone());
        let mut signed = m.clone();
        ring().sign(&mut signed);
        let back = ring().verify(signed.to_json().as_bytes()).unwrap();
        prop_assert_eq!(back, signed.clone());
        // Flip one byte anywhere in the signed text: never accepted as the same message.
        let text = signed.to_json().into_bytes();
        for i in (0..text.len()).step_by(7) {
            let mut t = text.clone();
            t[i] ^= 0x01;
            if let Ok(m2) = ring().verify(&t) {
                prop_assert_eq!(m2, signed.clone(), "a changed message verified");
            }
        }
    }

    #[test]
    fn oversized_input_is_refused_before_parsing(extra in 1usize..64) {
        let big = vec![b'{'; MAX_MESSAGE_BYTES + extra];
        prop_assert!(Message::parse(&big).is_err());
        prop_assert!(matches!(ring().verify(&big), Err(Rejection::Malformed(_))));
    }
}
