//! Wire messages: what nodes publish on `election:<group>`.
//!
//! Every message is one JSON object with a common header (`v, type, group, from, term, seq, ts`)
//! and the fields of its type. `election`, `leader` and `heartbeat` keep the reference workflow's
//! field names so that its jq observers still work. Unknown fields are ignored so that newer
//! nodes can add fields without breaking older ones.

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Messages larger than this are dropped before parsing.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;
/// Longest node id, group or key id accepted on the wire.
pub const MAX_ID_BYTES: usize = 256;

/// One wire message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub v: u32,
    pub group: String,
    pub from: String,
    pub term: u64,
    /// Per-sender sequence number; strictly increasing for a sender, across restarts.
    pub seq: u64,
    /// Wall-clock send time in unix milliseconds. Informational only: the protocol never reads it.
    #[serde(default)]
    pub ts: u64,
    #[serde(flatten)]
    pub body: Body,
    /// Id of the cluster key that signed this message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    /// HMAC-SHA256 signature over the message without `sig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

/// The type-specific part of a message; `type` on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Body {
    /// From the leader every heartbeat interval.
    Heartbeat {
        leader: String,
        /// Wall-clock unix seconds, as the reference workflow sent it.
        #[serde(default)]
        timestamp: u64,
        lease_ms: u64,
        priority: u32,
        eligible: bool,
    },
    /// A follower's answer to one heartbeat; a quorum of them renews the lease.
    Ack {
        leader: String,
        hb_seq: u64,
        priority: u32,
        eligible: bool,
    },
    /// From a node that knows no leader (or has not spoken for a heartbeat interval).
    Presence { priority: u32, eligible: bool },
    /// A candidacy: a pre-vote round asks for `term` without anyone changing state.
    Election {
        candidate: String,
        priority: u32,
        pre_vote: bool,
    },
    /// An answer to an election.
    Vote {
        candidate: String,
        granted: bool,
        pre_vote: bool,
    },
    /// A victory declaration.
    Leader {
        leader: String,
        /// Wall-clock unix milliseconds of the win; informational.
        #[serde(default)]
        elected_at: u64,
    },
    /// The leader has stopped leading; `successor` (if any) should campaign at once.
    Resign {
        leader: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        successor: Option<String>,
    },
}

impl Body {
    /// The wire name of the type, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Body::Heartbeat { .. } => "heartbeat",
            Body::Ack { .. } => "ack",
            Body::Presence { .. } => "presence",
            Body::Election { .. } => "election",
            Body::Vote { .. } => "vote",
            Body::Leader { .. } => "leader",
            Body::Resign { .. } => "resign",
        }
    }
}

/// Why bytes from the wire are not a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message of {0} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")]
    TooLarge(usize),
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("unsupported protocol version {0} (this node speaks {PROTOCOL_VERSION})")]
    Version(u32),
    #[error("invalid message: {0}")]
    Invalid(&'static str),
}

impl Message {
    /// Parses and checks one message. Never panics, whatever the bytes.
    pub fn parse(bytes: &[u8]) -> Result<Message, WireError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(WireError::TooLarge(bytes.len()));
        }
        let msg: Message =
            serde_json::from_slice(bytes).map_err(|e| WireError::Malformed(e.to_string()))?;
        msg.check()?;
        Ok(msg)
    }

    /// The structural rules serde cannot express.
    pub fn check(&self) -> Result<(), WireError> {
        if self.v != PROTOCOL_VERSION {
            return Err(WireError::Version(self.v));
        }
        let id_ok = |s: &str| !s.is_empty() && s.len() <= MAX_ID_BYTES;
        if !id_ok(&self.from) {
            return Err(WireError::Invalid("`from` must be 1 to 256 bytes"));
        }
        if !id_ok(&self.group) {
            return Err(WireError::Invalid("`group` must be 1 to 256 bytes"));
        }
        if self.kid.as_deref().is_some_and(|k| !id_ok(k)) {
            return Err(WireError::Invalid("`kid` must be 1 to 256 bytes"));
        }
        match &self.body {
            Body::Heartbeat { leader, .. }
            | Body::Leader { leader, .. }
            | Body::Resign { leader, .. }
                if *leader != self.from =>
            {
                Err(WireError::Invalid("`leader` must be the sender"))
            }
            Body::Election { candidate, .. } if *candidate != self.from => {
                Err(WireError::Invalid("`candidate` must be the sender"))
            }
            Body::Ack { leader, .. } if !id_ok(leader) => {
                Err(WireError::Invalid("`leader` must be 1 to 256 bytes"))
            }
            Body::Vote { candidate, .. } if !id_ok(candidate) => {
                Err(WireError::Invalid("`candidate` must be 1 to 256 bytes"))
            }
            Body::Resign {
                successor: Some(s), ..
            } if !id_ok(s) => Err(WireError::Invalid("`successor` must be 1 to 256 bytes")),
            _ => Ok(()),
        }
    }

    /// The JSON text that goes on the wire.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a message always serializes")
    }

    /// Fills in the wall-clock fields just before the message leaves the node. The core never
    /// reads a wall clock, so the shell does this.
    pub fn stamp(&mut self, unix_ms: u64) {
        self.ts = unix_ms;
        match &mut self.body {
            Body::Heartbeat { timestamp, .. } => *timestamp = unix_ms / 1000,
            Body::Leader { elected_at, .. } if *elected_at == 0 => *elected_at = unix_ms,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat() -> Message {
        Message {
            v: 1,
            group: "g1".into(),
            from: "a".into(),
            term: 3,
            seq: 9,
            ts: 0,
            body: Body::Heartbeat {
                leader: "a".into(),
                timestamp: 0,
                lease_ms: 2000,
                priority: 7,
                eligible: true,
            },
            kid: None,
            sig: None,
        }
    }

    #[test]
    fn reference_field_names_on_the_wire() {
        let mut m = heartbeat();
        m.stamp(1_700_000_000_123);
        let v: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(v["type"], "heartbeat");
        assert_eq!(v["leader"], "a");
        assert_eq!(v["term"], 3);
        assert_eq!(v["timestamp"], 1_700_000_000u64);
        assert_eq!(v["ts"], 1_700_000_000_123u64);
        assert!(v.get("sig").is_none());
    }

    #[test]
    fn round_trip_every_type() {
        let bodies = [
            heartbeat().body,
            Body::Ack {
                leader: "a".into(),
                hb_seq: 4,
                priority: 1,
                eligible: false,
            },
            Body::Presence {
                priority: 2,
                eligible: true,
            },
            Body::Election {
                candidate: "a".into(),
                priority: 3,
                pre_vote: true,
            },
            Body::Vote {
                candidate: "b".into(),
                granted: true,
                pre_vote: false,
            },
            Body::Leader {
                leader: "a".into(),
                elected_at: 5,
            },
            Body::Resign {
                leader: "a".into(),
                successor: Some("b".into()),
            },
            Body::Resign {
                leader: "a".into(),
                successor: None,
            },
        ];
        for body in bodies {
            let m = Message {
                body,
                ..heartbeat()
            };
            let back = Message::parse(m.to_json().as_bytes()).unwrap();
            assert_eq!(back, m);
        }
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let text = r#"{"v":1,"type":"presence","group":"g","from":"x","term":1,"seq":2,"ts":3,
            "priority":5,"eligible":true,"future":{"a":[1,2]}}"#;
        let m = Message::parse(text.as_bytes()).unwrap();
        assert_eq!(
            m.body,
            Body::Presence {
                priority: 5,
                eligible: true
            }
        );
    }

    #[test]
    fn malformed_input_is_an_error_value() {
        let cases: [&[u8]; 8] = [
            b"",
            b"null",
            b"{",
            b"[1,2]",
            br#"{"v":1,"type":"nope","group":"g","from":"x","term":1,"seq":1}"#,
            br#"{"v":1,"type":"presence","group":"g","from":"x","term":-1,"seq":1,"priority":1,"eligible":true}"#,
            br#"{"v":1,"type":"heartbeat","group":"g","from":"x","term":1,"seq":1,"leader":"y","lease_ms":1,"priority":1,"eligible":true}"#,
            &[0xff, 0xfe, 0x00],
        ];
        for c in cases {
            assert!(
                Message::parse(c).is_err(),
                "{:?}",
                String::from_utf8_lossy(c)
            );
        }
        let v2 = br#"{"v":2,"type":"presence","group":"g","from":"x","term":1,"seq":1,"priority":1,"eligible":true}"#;
        assert_eq!(Message::parse(v2), Err(WireError::Version(2)));
        let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert_eq!(
            Message::parse(&big),
            Err(WireError::TooLarge(MAX_MESSAGE_BYTES + 1))
        );
    }
}
