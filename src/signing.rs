//! Message authentication between peers: HMAC-SHA256 with a cluster key, and replay windows.
//!
//! Anyone who can reach a Pilot broker can publish on the election topic, and anyone who can
//! reach a node's port can POST to `/peer/messages`. With a cluster key, every message carries
//! `kid` (which key) and `sig` (HMAC-SHA256 over its canonical bytes); unsigned, unknown-key,
//! tampered and replayed messages never reach the election core.
//!
//! Canonical bytes: the message as a JSON object without `sig`, keys sorted, no whitespace. Unknown
//! fields are covered too, so a newer sender's extra fields are protected and verifiable.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::election::{Message, WireError, MAX_MESSAGE_BYTES};

type HmacSha256 = Hmac<Sha256>;

/// Shortest secret accepted: 16 bytes keeps brute force out of reach.
pub const MIN_KEY_BYTES: usize = 16;

/// One named secret.
#[derive(Clone)]
pub struct Key {
    pub id: String,
    secret: Vec<u8>,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The cluster keys: sign with the first, accept any. Rotation is: add the new key second on
/// every node, then move it first everywhere, then drop the old one.
#[derive(Clone, Debug)]
pub struct KeyRing {
    /// Shared: every reading of a wire message holds the ring while it verifies.
    keys: Arc<[Key]>,
}

/// Why a key file or value was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read cluster key file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cluster key file {0} holds no key")]
    Empty(String),
    #[error("cluster key {id:?} is {len} bytes; at least {MIN_KEY_BYTES} are required")]
    TooShort { id: String, len: usize },
    #[error("cluster key id {0:?} is used twice")]
    Duplicate(String),
    #[error("cluster key id {0:?} must be 1 to 64 characters of [A-Za-z0-9._-]")]
    BadId(String),
}

/// Why a message from the wire was dropped before the core saw it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error(transparent)]
    Malformed(#[from] WireError),
    #[error("message is not signed")]
    Unsigned,
    #[error("message is signed with unknown key {0:?}")]
    UnknownKey(String),
    #[error("signature does not match the message")]
    BadSignature,
    #[error("message from {from} with seq {seq} was already seen or is too old")]
    Replayed { from: String, seq: u64 },
}

impl Rejection {
    /// The label used in metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::Malformed(_) => "malformed",
            Rejection::Unsigned => "unsigned",
            Rejection::UnknownKey(_) => "unknown_key",
            Rejection::BadSignature => "bad_signature",
            Rejection::Replayed { .. } => "replayed",
        }
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

impl KeyRing {
    /// Parses keys, one per line (or comma-separated): `ID=SECRET` or a bare `SECRET`, whose id
    /// is then the first 8 hex digits of its SHA-256 so every node derives the same one.
    /// Blank lines and lines starting with `#` are skipped.
    pub fn parse(text: &str, origin: &str) -> Result<KeyRing, KeyError> {
        let mut keys: Vec<Key> = Vec::new();
        for entry in text
            .lines()
            .flat_map(|l| l.split(','))
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (id, secret) = match entry.split_once('=') {
                Some((id, secret)) if valid_id(id.trim()) => {
                    (id.trim().to_string(), secret.trim().as_bytes().to_vec())
                }
                Some((id, _)) if !id.trim().is_empty() && !id.contains(char::is_whitespace) => {
                    return Err(KeyError::BadId(id.trim().to_string()));
                }
                _ => {
                    let secret = entry.as_bytes().to_vec();
                    (hex(&Sha256::digest(&secret)[..4]), secret)
                }
            };
            if secret.len() < MIN_KEY_BYTES {
                return Err(KeyError::TooShort {
                    id,
                    len: secret.len(),
                });
            }
            if keys.iter().any(|k| k.id == id) {
                return Err(KeyError::Duplicate(id));
            }
            keys.push(Key { id, secret });
        }
        if keys.is_empty() {
            return Err(KeyError::Empty(origin.to_string()));
        }
        Ok(KeyRing { keys: keys.into() })
    }

    pub fn from_file(path: &Path) -> Result<KeyRing, KeyError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: shown.clone(),
            source,
        })?;
        KeyRing::parse(&text, &shown)
    }

    pub fn signing_key_id(&self) -> &str {
        &self.keys[0].id
    }

    fn mac(secret: &[u8], canonical: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
        mac.update(canonical);
        mac
    }

    /// Sets `kid` and `sig` on a message about to leave this node.
    pub fn sign(&self, msg: &mut Message) {
        let key = &self.keys[0];
        msg.kid = Some(key.id.clone());
        msg.sig = None;
        let value = serde_json::to_value(&*msg).expect("a message always serializes");
        let canonical = canonical_bytes(&value);
        let tag = Self::mac(&key.secret, &canonical).finalize().into_bytes();
        msg.sig = Some(hex(&tag));
    }

    /// Checks the signature of raw wire bytes, then parses them. Constant-time comparison.
    pub fn verify(&self, bytes: &[u8]) -> Result<Message, Rejection> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(WireError::TooLarge(bytes.len()).into());
        }
        let mut value: Value = serde_json::from_slice(bytes)
            .map_err(|e| Rejection::Malformed(WireError::Malformed(e.to_string())))?;
        let obj = value.as_object_mut().ok_or_else(|| {
            Rejection::Malformed(WireError::Malformed("not a JSON object".into()))
        })?;
        let sig = match obj.remove("sig") {
            Some(Value::String(s)) => s,
            Some(_) => return Err(Rejection::BadSignature),
            None => return Err(Rejection::Unsigned),
        };
        let kid = match obj.get("kid") {
            Some(Value::String(k)) => k.clone(),
            _ => return Err(Rejection::Unsigned),
        };
        let key = self
            .keys
            .iter()
            .find(|k| k.id == kid)
            .ok_or_else(|| Rejection::UnknownKey(kid.chars().take(64).collect()))?;
        let tag = unhex(&sig).ok_or(Rejection::BadSignature)?;
        Self::mac(&key.secret, &canonical_bytes(&value))
            .verify_slice(&tag)
            .map_err(|_| Rejection::BadSignature)?;
        let mut msg: Message = serde_json::from_value(value)
            .map_err(|e| Rejection::Malformed(WireError::Malformed(e.to_string())))?;
        msg.check()?;
        msg.sig = Some(sig);
        Ok(msg)
    }
}

/// serde_json's map is ordered by key (no `preserve_order` feature), so this is canonical.
fn canonical_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("a JSON value always serializes")
}

/// Per-sender sliding windows over sequence numbers: each number is accepted once, and nothing
/// older than the window behind the highest seen. Senders number from `boot << 32`, so a restart
/// of the sender moves every earlier message out of the window.
#[derive(Debug, Default)]
pub struct ReplayGuard {
    senders: HashMap<String, Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    highest: u64,
    /// Bit `i` set: `highest - i` was seen.
    seen: u128,
}

/// How far behind the newest message an older one may still arrive (reordering on the wire).
pub const REPLAY_WINDOW: u64 = 128;
/// Senders tracked at most; beyond that the least recently active one is forgotten.
pub const MAX_SENDERS: usize = 4096;

impl ReplayGuard {
    pub fn new() -> ReplayGuard {
        ReplayGuard::default()
    }

    /// A guard that refuses everything at or below the marks a previous run of this node left
    /// (see [`ReplayGuard::marks`]): without them, a restarted receiver would take a recording
    /// of its peers' recent messages as new.
    pub fn from_marks(marks: &BTreeMap<String, u64>) -> ReplayGuard {
        let mut by_recency: Vec<_> = marks.iter().collect();
        by_recency.sort_by_key(|(_, seq)| std::cmp::Reverse(**seq));
        let senders = by_recency
            .into_iter()
            .take(MAX_SENDERS)
            .map(|(from, seq)| {
                (
                    from.clone(),
                    Window {
                        highest: *seq,
                        seen: u128::MAX,
                    },
                )
            })
            .collect();
        ReplayGuard { senders }
    }

    /// The highest number accepted from each sender.
    pub fn marks(&self) -> BTreeMap<String, u64> {
        self.senders
            .iter()
            .map(|(from, w)| (from.clone(), w.highest))
            .collect()
    }

    /// The highest number accepted from `from`, if it is tracked.
    pub fn highest(&self, from: &str) -> Option<u64> {
        self.senders.get(from).map(|w| w.highest)
    }

    /// Senders tracked (at most [`MAX_SENDERS`]).
    pub fn len(&self) -> usize {
        self.senders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.senders.is_empty()
    }

    /// Accepts `(from, seq)` once; a repeat or a number below the window is refused.
    pub fn check(&mut self, from: &str, seq: u64) -> Result<(), Rejection> {
        let refuse = || Rejection::Replayed {
            from: from.chars().take(64).collect(),
            seq,
        };
        if !self.senders.contains_key(from) && self.senders.len() >= MAX_SENDERS {
            let oldest = self
                .senders
                .iter()
                .min_by_key(|(_, w)| w.highest)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.senders.remove(&k);
            }
        }
        let w = self.senders.entry(from.to_string()).or_insert(Window {
            highest: seq,
            seen: 0,
        });
        if seq > w.highest {
            let shift = seq - w.highest;
            w.seen = if shift >= REPLAY_WINDOW {
                0
            } else {
                w.seen << shift
            };
            w.highest = seq;
            w.seen |= 1;
            return Ok(());
        }
        let back = w.highest - seq;
        if back >= REPLAY_WINDOW {
            return Err(refuse());
        }
        let bit = 1u128 << back;
        if w.seen & bit != 0 {
            return Err(refuse());
        }
        w.seen |= bit;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::Body;

    fn ring() -> KeyRing {
        KeyRing::parse(
            "# rotation\nnew=0123456789abcdef-new\nold=0123456789abcdef-old\n",
            "t",
        )
        .unwrap()
    }

    fn msg() -> Message {
        Message {
            term: 4,
            seq: 7,
            ts: 1,
            members: "0a1b2c3d".into(),
            timings: Some(crate::election::Announced::of(
                &crate::election::Timings::default(),
            )),
            ..Message::new(
                "g".into(),
                "a".into(),
                Body::Heartbeat {
                    leader: "a".into(),
                    timestamp: 1,
                    lease_ms: 2000,
                    advert: crate::election::Advert {
                        priority: 1,
                        candidacy: crate::election::Candidacy::Eligible,
                        hears: vec!["b".into()],
                        member_ids: vec!["a".into(), "b".into()],
                        flapped: false,
                        unhealthy: false,
                    },
                },
            )
        }
    }

    #[test]
    fn signed_messages_verify_and_tampering_is_caught() {
        let r = ring();
        let mut m = msg();
        r.sign(&mut m);
        assert_eq!(m.kid.as_deref(), Some("new"));
        let text = m.to_json();
        assert_eq!(r.verify(text.as_bytes()).unwrap(), m);
        let tampered = text.replace("\"term\":4", "\"term\":40");
        assert_eq!(r.verify(tampered.as_bytes()), Err(Rejection::BadSignature));
        let unsigned = msg().to_json();
        assert_eq!(r.verify(unsigned.as_bytes()), Err(Rejection::Unsigned));
        let other = KeyRing::parse("stranger=fedcba9876543210-x", "t").unwrap();
        let mut forged = msg();
        other.sign(&mut forged);
        assert_eq!(
            r.verify(forged.to_json().as_bytes()),
            Err(Rejection::UnknownKey("stranger".into()))
        );
        // Same id, wrong secret.
        let impostor = KeyRing::parse("new=fedcba9876543210-x", "t").unwrap();
        let mut forged = msg();
        impostor.sign(&mut forged);
        assert_eq!(
            r.verify(forged.to_json().as_bytes()),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn the_second_key_is_accepted_for_rotation() {
        let old_first = KeyRing::parse("old=0123456789abcdef-old", "t").unwrap();
        let mut m = msg();
        old_first.sign(&mut m);
        assert!(ring().verify(m.to_json().as_bytes()).is_ok());
    }

    #[test]
    fn unknown_fields_are_covered_by_the_signature() {
        let r = ring();
        let mut m = msg();
        r.sign(&mut m);
        let mut v: Value = serde_json::from_str(&m.to_json()).unwrap();
        v["extra"] = Value::from(1);
        assert_eq!(
            r.verify(v.to_string().as_bytes()),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn key_parsing_refuses_bad_input() {
        assert!(matches!(KeyRing::parse("", "f"), Err(KeyError::Empty(_))));
        assert!(matches!(
            KeyRing::parse("k=short", "f"),
            Err(KeyError::TooShort { .. })
        ));
        assert!(matches!(
            KeyRing::parse("k=0123456789abcdef\nk=0123456789abcdeg", "f"),
            Err(KeyError::Duplicate(_))
        ));
        assert!(matches!(
            KeyRing::parse("bad/id=0123456789abcdef", "f"),
            Err(KeyError::BadId(_))
        ));
        let bare = KeyRing::parse("0123456789abcdef0123", "f").unwrap();
        assert_eq!(bare.signing_key_id().len(), 8);
        let again = KeyRing::parse("0123456789abcdef0123", "f").unwrap();
        assert_eq!(bare.signing_key_id(), again.signing_key_id());
        let key = format!("{:?}", bare);
        assert!(!key.contains("0123456789abcdef0123"), "secrets never print");
    }

    #[test]
    fn replay_window_accepts_each_number_once() {
        let mut g = ReplayGuard::new();
        assert!(g.check("a", 100).is_ok());
        assert!(g.check("a", 100).is_err());
        assert!(g.check("a", 98).is_ok(), "reordered but new");
        assert!(g.check("a", 98).is_err());
        assert!(g.check("a", 101).is_ok());
        assert!(g.check("a", 100 + REPLAY_WINDOW + 5).is_ok());
        assert!(g.check("a", 99).is_err(), "fell out of the window");
        assert!(g.check("b", 1).is_ok(), "senders are independent");
        // A restarted sender numbers from a higher boot epoch.
        assert!(g.check("a", 2 << 32).is_ok());
        assert!(g.check("a", (1 << 32) + 5).is_err());
    }

    #[test]
    fn marks_carry_the_window_across_a_restart_of_the_receiver() {
        let mut g = ReplayGuard::new();
        for seq in [10, 11, 12] {
            g.check("a", seq).unwrap();
        }
        g.check("b", 7).unwrap();
        let marks = g.marks();
        assert_eq!(marks.get("a"), Some(&12));
        assert_eq!(g.highest("b"), Some(7));

        let mut restarted = ReplayGuard::from_marks(&marks);
        for seq in [10, 11, 12] {
            assert!(restarted.check("a", seq).is_err(), "{seq} replayed");
        }
        assert!(restarted.check("b", 7).is_err());
        assert!(restarted.check("a", 13).is_ok(), "newer numbers pass");
        assert!(restarted.check("a", 13).is_err());
        assert!(
            restarted.check("c", 1).is_ok(),
            "unknown senders start fresh"
        );
        // Without the marks the recording would pass: the test can fail.
        assert!(ReplayGuard::new().check("a", 12).is_ok());
    }

    #[test]
    fn senders_and_marks_stay_bounded() {
        let mut g = ReplayGuard::new();
        for i in 0..MAX_SENDERS as u64 + 10 {
            g.check(&format!("s{i}"), i + 1).unwrap();
        }
        assert_eq!(g.len(), MAX_SENDERS);
        assert_eq!(g.marks().len(), MAX_SENDERS);
        // The least recently numbered ones went first; the newest are kept.
        assert_eq!(g.highest("s0"), None);
        assert_eq!(
            g.highest(&format!("s{}", MAX_SENDERS + 9)),
            Some(MAX_SENDERS as u64 + 10)
        );
        let many: BTreeMap<String, u64> = (0..MAX_SENDERS as u64 * 2)
            .map(|i| (format!("m{i}"), i))
            .collect();
        let loaded = ReplayGuard::from_marks(&many);
        assert_eq!(loaded.len(), MAX_SENDERS);
        assert_eq!(
            loaded.highest("m0"),
            None,
            "the oldest marks are the ones dropped"
        );
    }
}
