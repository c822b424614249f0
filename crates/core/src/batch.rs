//! Batches: the messages a node sends in one turn of its loop, of every group, as one wire
//! message (docs/protocol.md, rule 18). A batch is a JSON object
//!
//! ```json
//! {"type":"batch","from":"n1","messages":[{"v":3,"type":"heartbeat",...},{"v":3,"type":"ack",...}]}
//! ```
//!
//! A batch starts with exactly the bytes `{"type":"batch",` (its writer puts `type` first and no
//! space): a receiver tells a batch from a single message by that prefix, without reading a
//! megabyte twice. Each element is a whole wire message, byte for byte as it would travel alone (signed alone
//! with a cluster key): the receiver checks, de-replays and hands each to the election of its
//! group exactly as if it had come by itself, so no rule reads a batch. `from` is for people
//! reading the wire (a `jq` observer: `if .type == "batch" then .messages[] else . end`) and for
//! dropping the node's own batches early; nothing is trusted from it. A node sends batches only
//! to members that said they read them ([`super::Message::batches`]), so older builds never
//! see one.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::message::{WireError, MAX_MESSAGE_BYTES};

/// The largest batch a node accepts; a sender splits what it has into batches of at most its
/// transport's limit, never above this.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;

/// The most messages one batch may hold (a thousand groups' heartbeats and a few more).
pub const MAX_BATCH_MESSAGES: usize = 4096;

/// A batch as it is read: every message still as its exact bytes.
#[derive(Debug, Deserialize)]
pub struct Batch<'a> {
    /// Who says it sent it (informational; each message names its own sender).
    pub from: &'a str,
    /// The messages, each as it travelled.
    #[serde(borrow)]
    pub messages: Vec<&'a RawValue>,
}

/// How every batch begins (see the module's documentation).
pub const BATCH_PREFIX: &[u8] = br#"{"type":"batch","#;

#[derive(Serialize)]
struct Out<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    from: &'a str,
    messages: Vec<&'a RawValue>,
}

impl<'a> Batch<'a> {
    /// `Ok(None)` when `bytes` is not a batch (a single message, read as one); a batch that
    /// is too large, malformed or holds too many messages is an error. The messages inside are
    /// not parsed here.
    pub fn read(bytes: &'a [u8]) -> Result<Option<Batch<'a>>, WireError> {
        if bytes.len() > MAX_BATCH_BYTES {
            return Err(WireError::TooLarge(bytes.len()));
        }
        if !bytes.starts_with(BATCH_PREFIX) {
            return Ok(None);
        }
        let batch: Batch<'a> = serde_json::from_slice(bytes)
            .map_err(|e| WireError::Malformed(format!("batch: {e}")))?;
        if batch.messages.len() > MAX_BATCH_MESSAGES {
            return Err(WireError::Invalid("a batch holds at most 4096 messages"));
        }
        if batch.from.is_empty() || batch.from.len() > crate::message::MAX_ID_BYTES {
            return Err(WireError::Invalid(
                "a batch's `from` must be 1 to 256 bytes",
            ));
        }
        Ok(Some(batch))
    }

    /// The bytes of each message, as it travelled.
    pub fn each(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.messages.iter().map(|m| m.get().as_bytes())
    }
}

/// `messages` (each the JSON text of one wire message) as wire messages of at most `max` bytes
/// each: a message alone as itself, several as batches. A message that is not JSON text, or
/// larger than [`MAX_MESSAGE_BYTES`], goes alone (the receiver refuses it as it would alone).
pub fn pack(from: &str, messages: &[std::sync::Arc<[u8]>], max: usize) -> Vec<Vec<u8>> {
    let max = max.min(MAX_BATCH_BYTES);
    // `{"type":"batch","from":"<from>","messages":[` + `]}`, with room for escapes in `from`.
    let head = 40 + 2 * from.len();
    let mut out = Vec::new();
    let mut open: Vec<&RawValue> = Vec::new();
    let mut size = head;
    let close = |open: &mut Vec<&RawValue>, out: &mut Vec<Vec<u8>>| match open.len() {
        0 => {}
        1 => out.push(open[0].get().as_bytes().to_vec()),
        _ => {
            let batch = Out {
                kind: "batch",
                from,
                messages: std::mem::take(open),
            };
            out.push(serde_json::to_vec(&batch).expect("a batch serializes"));
        }
    };
    for bytes in messages {
        let raw = std::str::from_utf8(bytes)
            .ok()
            .filter(|_| bytes.len() <= MAX_MESSAGE_BYTES)
            .and_then(|text| serde_json::from_str::<&RawValue>(text).ok());
        let Some(raw) = raw else {
            out.push(bytes.to_vec());
            continue;
        };
        let len = raw.get().len() + 1;
        if !open.is_empty() && (size + len > max || open.len() == MAX_BATCH_MESSAGES) {
            close(&mut open, &mut out);
            open.clear();
            size = head;
        }
        open.push(raw);
        size += len;
    }
    close(&mut open, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn msg(i: usize, pad: usize) -> Arc<[u8]> {
        let text = format!(
            r#"{{"v":3,"type":"presence","group":"g{i}","pad":"{}"}}"#,
            "x".repeat(pad)
        );
        text.into_bytes().into()
    }

    #[test]
    fn one_message_goes_alone_and_several_in_one_batch_in_their_order() {
        let one = pack("n1", &[msg(0, 3)], MAX_BATCH_BYTES);
        assert_eq!(one, vec![msg(0, 3).to_vec()], "alone, byte for byte");
        assert!(
            Batch::read(&one[0]).unwrap().is_none(),
            "and read as a single message"
        );
        let three: Vec<_> = (0..3).map(|i| msg(i, 3)).collect();
        let packed = pack("n1", &three, MAX_BATCH_BYTES);
        assert_eq!(packed.len(), 1);
        let batch = Batch::read(&packed[0]).unwrap().expect("a batch");
        assert_eq!(batch.from, "n1");
        let back: Vec<Vec<u8>> = batch.each().map(<[u8]>::to_vec).collect();
        let sent: Vec<Vec<u8>> = three.iter().map(|m| m.to_vec()).collect();
        assert_eq!(back, sent, "every message byte for byte, in order");
        assert!(nothing_empty(&[]));
    }

    fn nothing_empty(messages: &[Arc<[u8]>]) -> bool {
        pack("n1", messages, MAX_BATCH_BYTES).is_empty()
    }

    #[test]
    fn batches_stay_under_the_limit_and_lose_nothing() {
        let many: Vec<_> = (0..1000).map(|i| msg(i, 400)).collect();
        let limit = 96 * 1024;
        let packed = pack("n1", &many, limit);
        assert!(packed.len() > 1, "{} batches", packed.len());
        let mut back = Vec::new();
        for wire in &packed {
            assert!(wire.len() <= limit, "{} bytes > {limit}", wire.len());
            match Batch::read(wire).unwrap() {
                Some(b) => back.extend(b.each().map(<[u8]>::to_vec)),
                None => back.push(wire.clone()),
            }
        }
        let sent: Vec<Vec<u8>> = many.iter().map(|m| m.to_vec()).collect();
        assert_eq!(back, sent);
    }

    #[test]
    fn what_is_not_a_message_goes_alone() {
        let bad: Arc<[u8]> = b"not json".to_vec().into();
        let packed = pack("n1", &[msg(0, 1), bad.clone(), msg(1, 1)], MAX_BATCH_BYTES);
        assert!(packed.contains(&bad.to_vec()));
        assert_eq!(packed.len(), 2, "the two messages still travel together");
    }

    #[test]
    fn a_bad_batch_is_refused_with_a_reason() {
        assert!(matches!(
            Batch::read(br#"{"type":"batch","from":"n1","messages":7}"#),
            Err(WireError::Malformed(_))
        ));
        assert!(matches!(
            Batch::read(br#"{"type":"batch","from":"","messages":[]}"#),
            Err(WireError::Invalid(_))
        ));
        let huge = vec![b' '; MAX_BATCH_BYTES + 1];
        assert!(matches!(Batch::read(&huge), Err(WireError::TooLarge(_))));
        let too_many = format!(
            r#"{{"type":"batch","from":"n1","messages":[{}]}}"#,
            vec!["{}"; MAX_BATCH_MESSAGES + 1].join(",")
        );
        assert!(matches!(
            Batch::read(too_many.as_bytes()),
            Err(WireError::Invalid(_))
        ));
        // Not a batch: left to the single message's parser (a batch written with its keys in
        // another order too: it is not one).
        assert!(Batch::read(br#"{"type":"heartbeat"}"#).unwrap().is_none());
        assert!(
            Batch::read(br#"{"from":"n1","type":"batch","messages":[]}"#)
                .unwrap()
                .is_none()
        );
        assert!(pack("n1", &[msg(0, 1), msg(1, 1)], MAX_BATCH_BYTES)[0].starts_with(BATCH_PREFIX));
        assert!(Batch::read(b"[1,2]").unwrap().is_none());
        assert!(Batch::read(b"garbage").unwrap().is_none());
    }

    /// The limits are inclusive: a batch of exactly the most bytes, messages and `from` bytes
    /// is read; one more of any is refused.
    #[test]
    fn a_batch_at_each_limit_is_read_and_one_past_it_is_not() {
        let batch = |from: &str, n: usize| {
            let msgs = vec![r#"{"v":3}"#; n].join(",");
            format!(r#"{{"type":"batch","from":"{from}","messages":[{msgs}]}}"#).into_bytes()
        };
        let padded = |mut b: Vec<u8>, to: usize| {
            b.resize(to, b' ');
            b
        };
        let at = padded(batch("n1", 2), MAX_BATCH_BYTES);
        assert!(matches!(Batch::read(&at), Ok(Some(_))));
        let past = padded(batch("n1", 2), MAX_BATCH_BYTES + 1);
        assert!(matches!(Batch::read(&past), Err(WireError::TooLarge(_))));
        let most = batch("n1", MAX_BATCH_MESSAGES);
        assert_eq!(
            Batch::read(&most).unwrap().unwrap().each().count(),
            MAX_BATCH_MESSAGES
        );
        assert!(Batch::read(&batch("n1", MAX_BATCH_MESSAGES + 1)).is_err());
        let longest = "n".repeat(crate::message::MAX_ID_BYTES);
        assert!(matches!(Batch::read(&batch(&longest, 2)), Ok(Some(_))));
        let too_long = "n".repeat(crate::message::MAX_ID_BYTES + 1);
        assert!(Batch::read(&batch(&too_long, 2)).is_err());
    }

    /// `pack` counts a batch's size as its head (40 bytes and twice `from`, for escapes) and
    /// each message with its comma: a limit of exactly that keeps them in one batch, one byte
    /// less splits them, and what it sends is never larger than its count.
    #[test]
    fn pack_fills_a_batch_to_exactly_its_limit() {
        let messages = [msg(0, 10), msg(1, 20), msg(2, 30)];
        let from = "node-1";
        let exact = 40 + 2 * from.len() + messages.iter().map(|m| m.len() + 1).sum::<usize>();
        let one = pack(from, &messages, exact);
        assert_eq!(one.len(), 1, "fits exactly");
        assert!(one[0].len() <= exact, "{} > {exact}", one[0].len());
        assert_eq!(Batch::read(&one[0]).unwrap().unwrap().each().count(), 3);
        let split = pack(from, &messages, exact - 1);
        assert_eq!(split.len(), 2, "one byte short");
        assert!(split.iter().all(|b| b.len() < exact));
    }
}
