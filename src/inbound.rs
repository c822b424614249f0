//! One wire message from a peer, read into the messages it carries: each verified with the
//! cluster key, or parsed without one, a batch's one by one as they are taken (docs/protocol.md,
//! rule 18). The election loop and the observer read the wire through it, so that both take a
//! batch, a signature and a malformed message the same way; what each does with a message
//! (the loop's replay guard and core, the observer's `Observed`) is its own.

use serde_json::value::RawValue;

use crate::election::batch::{Batch, Messages};
use crate::election::Message;
use crate::signing::{KeyRing, Rejection};

/// The messages of one wire message, each verified or parsed as it is taken: [`read`].
pub struct Reader<'a> {
    /// A batch's `from` (nothing is trusted from it: it only lets a node drop its own batches
    /// early); `None` for a message alone.
    pub from: Option<&'a str>,
    each: Each<'a>,
    keys: Option<&'a KeyRing>,
}

enum Each<'a> {
    /// A message alone, until taken.
    Alone(Option<&'a [u8]>),
    /// A batch read without a key: parsed as taken, in one pass.
    Parsed(Messages<'a>),
    /// A batch read with a key: each message's own bytes verified as taken.
    Verified(std::vec::IntoIter<&'a RawValue>),
}

/// Reads `bytes`, with `keys` if the cluster has any. A batch refused whole (too large, not a
/// batch's JSON, too long a `from`) is the error; each message's own fault is its item's.
pub fn read<'a>(bytes: &'a [u8], keys: Option<&'a KeyRing>) -> Result<Reader<'a>, Rejection> {
    let (from, each) = match keys {
        None => match Batch::parse(bytes)? {
            None => (None, Each::Alone(Some(bytes))),
            Some(messages) => (Some(messages.from), Each::Parsed(messages)),
        },
        Some(_) => match Batch::read(bytes)? {
            None => (None, Each::Alone(Some(bytes))),
            Some(batch) => (Some(batch.from), Each::Verified(batch.messages.into_iter())),
        },
    };
    Ok(Reader { from, each, keys })
}

impl Iterator for Reader<'_> {
    type Item = Result<Message, Rejection>;

    fn next(&mut self) -> Option<Self::Item> {
        let bytes = match &mut self.each {
            Each::Parsed(messages) => return messages.next().map(|m| m.map_err(Rejection::from)),
            Each::Alone(bytes) => bytes.take()?,
            Each::Verified(each) => each.next()?.get().as_bytes(),
        };
        Some(match self.keys {
            Some(keys) => keys.verify(bytes),
            None => Message::parse(bytes).map_err(Rejection::from),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::election::batch::pack;
    use crate::election::{Advert, Announced, Body, Candidacy, Timings, WireError};

    fn presence(group: &str, seq: u64) -> Message {
        Message {
            term: 2,
            seq,
            members: "0a1b2c3d".into(),
            timings: Some(Announced::of(&Timings::default())),
            ..Message::new(
                group.into(),
                "n2".into(),
                Body::Presence {
                    advert: Advert {
                        priority: 1,
                        candidacy: Candidacy::Eligible,
                        hears: vec!["n1".into()],
                        member_ids: vec!["n1".into(), "n2".into()],
                        flapped: false,
                        unhealthy: false,
                    },
                },
            )
        }
    }

    fn ring() -> KeyRing {
        KeyRing::parse("k1=0123456789abcdef-k1", "t").unwrap()
    }

    fn wire(messages: &[Message], keys: Option<&KeyRing>) -> Vec<Arc<[u8]>> {
        messages
            .iter()
            .map(|m| {
                let mut m = m.clone();
                if let Some(keys) = keys {
                    keys.sign(&mut m);
                }
                m.to_json().into_bytes().into()
            })
            .collect()
    }

    fn taken(bytes: &[u8], keys: Option<&KeyRing>) -> Vec<Result<Message, Rejection>> {
        read(bytes, keys).expect("read").collect()
    }

    #[test]
    fn a_message_alone_and_a_batch_give_their_messages_in_order() {
        let sent: Vec<Message> = (0..5).map(|i| presence(&format!("g{i}"), i)).collect();
        let alone = wire(&sent[..1], None);
        let r = read(&alone[0], None).unwrap();
        assert_eq!(r.from, None);
        assert_eq!(r.collect::<Vec<_>>(), vec![Ok(sent[0].clone())]);
        let batch = pack("n2", &wire(&sent, None), 1 << 20);
        assert_eq!(batch.len(), 1);
        let r = read(&batch[0], None).unwrap();
        assert_eq!(r.from, Some("n2"));
        let got: Vec<_> = r.collect();
        assert_eq!(got, sent.iter().cloned().map(Ok).collect::<Vec<_>>());
    }

    /// With a key, each message of a batch is verified on its own: a forged one is refused and
    /// the others are taken; an unsigned one is refused as unsigned.
    #[test]
    fn with_a_key_each_message_of_a_batch_is_verified_alone() {
        let keys = ring();
        let sent: Vec<Message> = (0..3).map(|i| presence("g", i)).collect();
        let mut signed = wire(&sent, Some(&keys));
        let forged = String::from_utf8(signed[1].to_vec())
            .unwrap()
            .replace("\"term\":2", "\"term\":9");
        signed[1] = forged.into_bytes().into();
        signed.push(wire(&[presence("g", 9)], None).remove(0));
        let batch = pack("n2", &signed, 1 << 20);
        let got = taken(&batch[0], Some(&keys));
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], Ok(keys_signed(&keys, &sent[0])));
        assert_eq!(got[1], Err(Rejection::BadSignature));
        assert_eq!(got[2], Ok(keys_signed(&keys, &sent[2])));
        assert_eq!(got[3], Err(Rejection::Unsigned));
        // Without the key the same batch is only parsed: all four are messages.
        assert!(taken(&batch[0], None).iter().all(Result::is_ok));
    }

    /// `m` as it arrives signed: with its key id and signature.
    fn keys_signed(keys: &KeyRing, m: &Message) -> Message {
        let mut m = m.clone();
        keys.sign(&mut m);
        m
    }

    #[test]
    fn a_batch_refused_whole_is_the_error_and_a_bad_message_its_own() {
        for keys in [None, Some(ring())] {
            let too_long = format!(
                r#"{{"type":"batch","from":"{}","messages":[]}}"#,
                "n".repeat(300)
            );
            assert!(matches!(
                read(too_long.as_bytes(), keys.as_ref()),
                Err(Rejection::Malformed(WireError::Invalid(_)))
            ));
            assert!(read(
                br#"{"type":"batch","from":"n2","messages":7}"#,
                keys.as_ref()
            )
            .is_err());
            let got = taken(b"not json", keys.as_ref());
            assert_eq!(got.len(), 1);
            assert!(matches!(got[0], Err(Rejection::Malformed(_))), "{got:?}");
        }
    }
}
