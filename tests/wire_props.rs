//! Property tests: nothing on the wire can panic the parser or the signature check, and what
//! parses is exactly what was sent.

use pilot_election::election::{
    Advert, Announced, Body, Candidacy, Message, Versions, MAX_ANNOUNCED_MS, MAX_MESSAGE_BYTES,
    PREVIOUS_VERSION, PROTOCOL_VERSION,
};
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

fn advert() -> impl Strategy<Value = Advert> {
    (any::<u32>(), candidacy(), ids(), ids(), any::<bool>()).prop_map(
        |(priority, candidacy, hears, member_ids, flapped)| Advert {
            unhealthy: false,
            priority,
            candidacy,
            hears,
            member_ids,
            flapped,
        },
    )
}

/// A promise as a sender writes it (or, for version 2, may leave out).
fn guard() -> impl Strategy<Value = Option<u64>> {
    proptest::option::of(0u64..=MAX_ANNOUNCED_MS)
}

fn body() -> impl Strategy<Value = Body> {
    let id = "[a-z0-9-]{1,12}";
    prop_oneof![
        (id, any::<u64>(), any::<u64>(), advert()).prop_map(
            |(leader, timestamp, lease_ms, advert)| Body::Heartbeat {
                leader,
                timestamp,
                lease_ms,
                advert,
            }
        ),
        (id, any::<u64>(), guard(), advert()).prop_map(|(leader, hb_seq, guard_ms, advert)| {
            Body::Ack {
                leader,
                hb_seq,
                guard_ms,
                advert,
            }
        }),
        advert().prop_map(|advert| Body::Presence { advert }),
        (id, any::<u32>(), any::<bool>()).prop_map(|(candidate, priority, pre_vote)| {
            Body::Election {
                candidate,
                priority,
                pre_vote,
            }
        }),
        (id, any::<bool>(), any::<bool>(), guard()).prop_map(
            |(candidate, granted, pre_vote, guard_ms)| Body::Vote {
                candidate,
                granted,
                pre_vote,
                guard_ms,
            }
        ),
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

/// Timings a sender may announce: valid durations with `h < L`, a drift below 50 %.
fn announced() -> impl Strategy<Value = Announced> {
    (
        1u64..MAX_ANNOUNCED_MS,
        1u64..MAX_ANNOUNCED_MS,
        0u32..500_000,
    )
        .prop_map(|(h, t, r)| Announced {
            heartbeat_ms: h,
            lease_ms: h + 1,
            election_timeout_ms: t,
            max_drift_ppm: r,
        })
}

/// Makes the sender fields agree with the body, as `Message::check` requires, in version `v`:
/// a version-3 message says what it speaks and runs on, and every promise says how long.
fn message(from: String, term: u64, seq: u64, body: Body, v: u32, timings: Announced) -> Message {
    let promise = |g: Option<u64>| if v >= 3 { g.or(Some(0)) } else { g };
    let body = match body {
        Body::Heartbeat {
            timestamp,
            lease_ms,
            advert,
            ..
        } => Body::Heartbeat {
            leader: from.clone(),
            timestamp,
            lease_ms,
            advert,
        },
        Body::Ack {
            leader,
            hb_seq,
            guard_ms,
            advert,
        } => Body::Ack {
            leader,
            hb_seq,
            guard_ms: promise(guard_ms),
            advert,
        },
        Body::Vote {
            candidate,
            granted,
            pre_vote,
            guard_ms,
        } => Body::Vote {
            candidate,
            granted,
            pre_vote,
            guard_ms: if granted && !pre_vote {
                promise(guard_ms)
            } else {
                guard_ms
            },
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
        v,
        term,
        seq,
        members: "0a1b2c3d".into(),
        speaks: (v >= 3).then_some(Versions::OURS),
        timings: (v >= 3).then_some(timings),
        ..Message::new("g".into(), from, body)
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
        from in "[a-z0-9-]{1,12}", term in any::<u64>(), seq in any::<u64>(), b in body(),
        v in PREVIOUS_VERSION..=PROTOCOL_VERSION, timings in announced()
    ) {
        let m = message(from, term, seq, b, v, timings);
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
