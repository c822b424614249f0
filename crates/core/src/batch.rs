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

use crate::message::{Message, WireError, MAX_MESSAGE_BYTES};

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

    /// Reads `bytes` and parses its messages one by one as they are taken, for a node without
    /// a cluster key (one with a key verifies each message's own bytes: [`Batch::read`]). A
    /// batch laid out as [`pack`] writes it is read in one pass, each message parsed and
    /// dropped before the next is read: with a thousand groups, skimming every batch before
    /// parsing its messages was a tenth of an idle node's CPU, and holding all its parsed
    /// messages at once cost as much again in the allocator. Any other layout is read as
    /// [`Batch::read`] does, then each message parsed.
    ///
    /// A well-formed batch gives exactly what [`Batch::read`] and [`Message::parse`] of each
    /// message give. One that breaks off partway (bytes cut or garbled, more than
    /// [`MAX_BATCH_MESSAGES`]) gives the messages before the break, each as it would be alone,
    /// then one error for the batch, and nothing after it: [`Batch::read`] would refuse it
    /// whole. No message is harmed by that (each is complete, as if it had come alone); only the
    /// count of what was dropped differs.
    pub fn parse(bytes: &'a [u8]) -> Result<Option<Messages<'a>>, WireError> {
        if bytes.len() > MAX_BATCH_BYTES {
            return Err(WireError::TooLarge(bytes.len()));
        }
        if !bytes.starts_with(BATCH_PREFIX) {
            return Ok(None);
        }
        if let Some(messages) = Messages::one_pass(bytes) {
            return messages.map(Some);
        }
        let batch = Batch::read(bytes)?.expect("starts with the batch prefix");
        Ok(Some(Messages {
            from: batch.from,
            read: Read::Skimmed(batch.messages.into_iter()),
        }))
    }
}

/// A batch's messages, parsed as they are taken: [`Batch::parse`].
pub struct Messages<'a> {
    /// Who says it sent it (informational, as in [`Batch`]).
    pub from: &'a str,
    read: Read<'a>,
}

enum Read<'a> {
    /// Laid out as [`pack`] writes it: read at the cursor, `taken` so far.
    OnePass { at: Cursor<'a>, taken: usize },
    /// Any other layout, skimmed whole first.
    Skimmed(std::vec::IntoIter<&'a RawValue>),
    /// After the last message, or after the error that broke the batch off.
    Done,
}

impl<'a> Messages<'a> {
    /// The one-pass reading of a batch that begins as [`pack`] writes one (`type`, `from`,
    /// then `messages`): `None` for any other beginning, which [`Batch::read`] then judges.
    fn one_pass(bytes: &'a [u8]) -> Option<Result<Messages<'a>, WireError>> {
        let mut at = Cursor { bytes, pos: 0 };
        at.literal(BATCH_PREFIX)?;
        at.literal(br#""from":"#)?;
        let from: &str = at.value()?.ok()?.0;
        at.literal(br#","messages":["#)?;
        if from.is_empty() || from.len() > crate::message::MAX_ID_BYTES {
            return Some(Err(WireError::Invalid(
                "a batch's `from` must be 1 to 256 bytes",
            )));
        }
        Some(Ok(Messages {
            from,
            read: Read::OnePass { at, taken: 0 },
        }))
    }
}

impl Iterator for Messages<'_> {
    type Item = Result<Message, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.read {
            Read::Done => None,
            Read::Skimmed(each) => each.next().map(|m| Message::parse(m.get().as_bytes())),
            Read::OnePass { at, taken } => {
                let item = at.element(*taken);
                *taken += 1;
                match item {
                    Some(Ok(m)) => Some(Ok(m)),
                    Some(Err(Element::Message(e))) => Some(Err(e)),
                    // The batch broken off, or its end: nothing more is read.
                    Some(Err(Element::Broken(e))) => {
                        self.read = Read::Done;
                        Some(Err(e))
                    }
                    None => {
                        self.read = Read::Done;
                        None
                    }
                }
            }
        }
    }
}

/// Why an element of a batch read in one pass is not a message.
enum Element {
    /// The message's own error, as [`Message::parse`] gives it alone; the batch reads on.
    Message(WireError),
    /// The batch breaks off here.
    Broken(WireError),
}

/// A position in a batch's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn literal(&mut self, expected: &[u8]) -> Option<()> {
        let rest = self.bytes.get(self.pos..)?;
        rest.starts_with(expected)
            .then(|| self.pos += expected.len())
    }

    fn next(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// JSON's whitespace, as serde_json skips it.
    fn skip_space(&mut self) {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let spaces = rest
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\n' | b'\t' | b'\r'))
            .count();
        self.pos += spaces;
    }

    /// One JSON value of type `T` at the position, and its bytes; the position moves past it.
    /// `None` when there is none to read; `Some(Err)` when one is there but not a `T`.
    fn value<T: Deserialize<'a>>(&mut self) -> Option<Result<(T, &'a [u8]), ()>> {
        let rest = &self.bytes[self.pos..];
        let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<T>();
        match values.next()? {
            Ok(v) => {
                let end = values.byte_offset();
                let text = &rest[..end];
                self.pos += end;
                Some(Ok((v, text)))
            }
            Err(_) => Some(Err(())),
        }
    }

    /// The element after `taken` others (the cursor just after `[` or after the previous
    /// element), parsed as [`Message::parse`] would parse its bytes alone; `None` after the
    /// last, once the batch's closing bytes are there and nothing follows them.
    fn element(&mut self, taken: usize) -> Option<Result<Message, Element>> {
        let broken = |why: &str| {
            Some(Err(Element::Broken(WireError::Malformed(format!(
                "batch: broken off after {taken} messages: {why}"
            )))))
        };
        self.skip_space();
        if taken > 0 {
            match self.next() {
                Some(b',') => self.skip_space(),
                Some(b']') => return self.end(taken),
                _ => return broken("expected `,` or `]`"),
            }
        } else if self.literal(b"]").is_some() {
            return self.end(taken);
        }
        if taken == MAX_BATCH_MESSAGES {
            return Some(Err(Element::Broken(WireError::Invalid(
                "a batch holds at most 4096 messages",
            ))));
        }
        let start = self.pos;
        let parsed = match self.value::<Message>() {
            // Refused for its size as Message::parse refuses it alone, before its fields.
            Some(Ok((m, text))) => {
                if text.len() > MAX_MESSAGE_BYTES {
                    Err(WireError::TooLarge(text.len()))
                } else {
                    m.check().map(|()| m)
                }
            }
            // JSON that is not a message: read alone, for its own error.
            Some(Err(())) => {
                self.pos = start;
                match self.value::<&RawValue>() {
                    Some(Ok((_, text))) => Message::parse(text),
                    _ => return broken("not JSON"),
                }
            }
            None => return broken("not JSON"),
        };
        Some(parsed.map_err(Element::Message))
    }

    /// After the closing `]`: the batch's `}`, and nothing but spaces after it.
    fn end(&mut self, taken: usize) -> Option<Result<Message, Element>> {
        self.skip_space();
        let closed = self.literal(b"}").is_some() && {
            self.skip_space();
            self.pos == self.bytes.len()
        };
        if closed {
            return None;
        }
        Some(Err(Element::Broken(WireError::Malformed(format!(
            "batch: trailing bytes after its {taken} messages"
        )))))
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
        assert!(took_one_pass(&at));
        assert_eq!(one_pass_of(&at), two_passes(&at));
        assert_eq!(
            one_pass_of(&past),
            Err(WireError::TooLarge(MAX_BATCH_BYTES + 1))
        );
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
        // Read in one pass: the most messages are taken; one more breaks the batch off there.
        assert!(took_one_pass(&most));
        let taken: Vec<_> = Batch::parse(&most).unwrap().unwrap().collect();
        assert_eq!(taken.len(), MAX_BATCH_MESSAGES);
        assert_eq!(Ok(Some(("n1", taken))), two_passes(&most));
        let past: Vec<_> = Batch::parse(&batch("n1", MAX_BATCH_MESSAGES + 1))
            .unwrap()
            .unwrap()
            .collect();
        assert_eq!(past.len(), MAX_BATCH_MESSAGES + 1);
        assert_eq!(
            past.last(),
            Some(&Err(WireError::Invalid(
                "a batch holds at most 4096 messages"
            )))
        );
        assert!(matches!(Batch::parse(&batch(&longest, 2)), Ok(Some(_))));
        assert!(Batch::parse(&batch(&too_long, 2)).is_err());
        assert!(Batch::parse(&batch("", 2)).is_err());
    }

    /// What `Batch::parse` gives: who sent it and every item, or the batch's error.
    type Taken<'a> = Result<Option<(&'a str, Vec<Result<Message, WireError>>)>, WireError>;

    fn one_pass_of(bytes: &[u8]) -> Taken<'_> {
        Ok(Batch::parse(bytes)?.map(|m| (m.from, m.collect())))
    }

    /// What a well-formed batch must give: the batch skimmed, then each message parsed alone.
    fn two_passes(bytes: &[u8]) -> Taken<'_> {
        Ok(Batch::read(bytes)?.map(|b| (b.from, b.each().map(Message::parse).collect())))
    }

    fn took_one_pass(bytes: &[u8]) -> bool {
        matches!(
            Batch::parse(bytes),
            Ok(Some(Messages {
                read: Read::OnePass { .. },
                ..
            }))
        )
    }

    /// Wire messages of several kinds and groups, as nodes write them.
    fn real(i: usize) -> Arc<[u8]> {
        use crate::message::{Advert, Announced, Body, Candidacy};
        let advert = Advert {
            priority: i as u32,
            candidacy: Candidacy::Eligible,
            hears: vec!["n2".into(), "n3".into()],
            member_ids: vec!["n1".into(), "n2".into(), "n3".into()],
            flapped: false,
            unhealthy: false,
        };
        let body = match i % 3 {
            0 => Body::Heartbeat {
                leader: "n1".into(),
                timestamp: 0,
                lease_ms: 2000,
                advert,
            },
            1 => Body::Ack {
                leader: "n2".into(),
                hb_seq: i as u64,
                guard_ms: Some(3000),
                advert,
            },
            _ => Body::Presence { advert },
        };
        let m = Message {
            term: 3 + i as u64,
            seq: 100 + i as u64,
            members: "0badf00d".into(),
            timings: Some(Announced::of(&crate::Timings::default())),
            ..Message::new(format!("shard-{i:04}"), "n1".into(), body)
        };
        m.to_json().into_bytes().into()
    }

    #[test]
    fn a_packed_batch_is_parsed_in_one_pass_to_what_two_passes_give() {
        let sent: Vec<_> = (0..300).map(real).collect();
        let mut taken = 0;
        for wire in pack("n1", &sent, 32 * 1024) {
            assert!(
                took_one_pass(&wire),
                "the layout pack writes is read in one pass"
            );
            let (from, one) = one_pass_of(&wire).unwrap().expect("a batch");
            assert_eq!(from, "n1");
            assert!(one.iter().all(Result::is_ok));
            assert_eq!(Ok(Some((from, one.clone()))), two_passes(&wire));
            taken += one.len();
        }
        assert_eq!(taken, sent.len());
        assert!(Batch::parse(&real(0)).unwrap().is_none(), "a message alone");
    }

    /// Whatever the bytes (batches with odd elements, spaces, other layouts, bytes flipped,
    /// cut or inserted): a batch that two passes read whole gives exactly the same messages
    /// and errors in one; one that they refuse gives either their error, or the messages before
    /// its break (each as it would be alone) and one error last.
    #[test]
    fn any_batch_parses_in_one_pass_as_in_two() {
        let mut rng = crate::rng::Rng::new(42);
        let odd: [&[u8]; 8] = [
            br#"{"v":3}"#,
            br#"{"v":99,"type":"future"}"#,
            b"7",
            br#""text""#,
            b"[1,2]",
            b"null",
            br#"{"v":3,"type":"heartbeat","group":"g"}"#,
            br#"{"a":{"b":[1,{"c":"\u00e9\""}]}}"#,
        ];
        let (mut fast, mut broken) = (0, 0);
        for round in 0..3000 {
            let n = 1 + rng.below(6) as usize;
            let mut messages: Vec<Arc<[u8]>> = Vec::new();
            for _ in 0..n {
                if rng.chance(0.7) {
                    messages.push(real(rng.below(50) as usize));
                } else {
                    messages.push(odd[rng.below(odd.len() as u64) as usize].to_vec().into());
                }
            }
            if rng.chance(0.05) {
                let mut big = real(1).to_vec();
                big.truncate(big.len() - 1);
                big.extend_from_slice(
                    format!(r#","pad":"{}"}}"#, "x".repeat(MAX_MESSAGE_BYTES)).as_bytes(),
                );
                messages.push(big.into());
            }
            let from = if rng.chance(0.1) { "" } else { "n1" };
            let texts: Vec<String> = messages
                .iter()
                .map(|m| String::from_utf8_lossy(m).into_owned())
                .collect();
            let sep = if rng.chance(0.2) { " ,\n " } else { "," };
            let mut wire = format!(
                r#"{{"type":"batch","from":"{from}","messages":[{}]}}"#,
                texts.join(sep)
            )
            .into_bytes();
            match rng.below(8) {
                0 => {
                    let at = rng.below(wire.len() as u64) as usize;
                    wire[at] = b"{}[],:\" x9"[rng.below(10) as usize];
                }
                1 => wire.truncate(rng.below(wire.len() as u64) as usize),
                2 => {
                    let at = rng.below(wire.len() as u64) as usize;
                    wire.insert(at, b' ');
                }
                3 => wire.extend_from_slice(b" \n"),
                4 => wire.extend_from_slice(b"x"),
                _ => {}
            }
            let text = String::from_utf8_lossy(&wire);
            let (one, two) = (one_pass_of(&wire), two_passes(&wire));
            match (&one, &two) {
                (_, Ok(_)) => assert_eq!(one, two, "round {round}: {text}"),
                (Ok(Some((_, items))), Err(_)) => {
                    let (last, before) = items.split_last().expect("at least the error");
                    assert!(
                        last.is_err(),
                        "round {round}: the break is the last item: {text}"
                    );
                    // Each message before the break is what it is alone.
                    let alone: Vec<_> = before.iter().filter(|m| m.is_ok()).collect();
                    assert!(alone.len() <= n + 1, "round {round}: {text}");
                    broken += 1;
                }
                // Refused whole by both (each may name another of its faults).
                (Err(_), Err(_)) => {}
                (Ok(None), Err(_)) => panic!("round {round}: not a batch, says one pass: {text}"),
            }
            fast += usize::from(took_one_pass(&wire));
        }
        assert!(fast > 1500, "only {fast} of 3000 took the one pass");
        assert!(broken > 100, "only {broken} of 3000 broke off partway");
    }

    /// A message of a batch read in one pass is held to the size of a message alone: one of
    /// exactly the most bytes is taken, one byte more is refused for its size and the batch
    /// reads on.
    #[test]
    fn a_message_in_a_batch_is_held_to_the_limit_of_one_alone() {
        let sized = |len: usize| {
            let mut m = real(0).to_vec();
            let close = m.pop();
            assert_eq!(close, Some(b'}'));
            m.resize(len - 1, b' ');
            m.push(b'}');
            m
        };
        let largest = sized(MAX_MESSAGE_BYTES);
        assert!(Message::parse(&largest).is_ok());
        let wire = |m: &[u8]| {
            let mut b = br#"{"type":"batch","from":"n1","messages":["#.to_vec();
            b.extend_from_slice(m);
            b.push(b',');
            b.extend_from_slice(&real(1));
            b.extend_from_slice(b"]}");
            b
        };
        let at = wire(&largest);
        assert!(took_one_pass(&at));
        let (_, taken) = one_pass_of(&at).unwrap().unwrap();
        assert!(taken.iter().all(Result::is_ok), "{taken:?}");
        assert_eq!(Ok(Some(("n1", taken))), two_passes(&at));
        let past = wire(&sized(MAX_MESSAGE_BYTES + 1));
        let (_, taken) = one_pass_of(&past).unwrap().unwrap();
        assert_eq!(taken.len(), 2);
        assert_eq!(taken[0], Err(WireError::TooLarge(MAX_MESSAGE_BYTES + 1)));
        assert!(taken[1].is_ok());
        assert_eq!(Ok(Some(("n1", taken))), two_passes(&past));
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
