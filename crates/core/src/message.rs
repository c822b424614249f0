//! Wire messages: what nodes publish on `election:<group>`.
//!
//! Every message is one JSON object with a common header (`v, type, group, from, term, seq, ts,
//! members`) and the fields of its type (docs/protocol.md, "The messages"). `election`, `leader` and
//! `heartbeat` keep the field names of the bash script this project replaces (docs/pilot.md) (`leader`, `term`,
//! `timestamp`), so a jq observer written for it still works. Unknown fields are ignored so that
//! newer nodes can add fields without breaking older ones; a change of meaning bumps
//! [`PROTOCOL_VERSION`].

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks. Version 2 added the member fingerprint, the
/// advertised candidacy and the `hears` list; nodes of different versions ignore each other.
pub const PROTOCOL_VERSION: u32 = 2;
/// Most ids a `hears` list may hold (a member set is bounded far below this by its byte size).
pub const MAX_HEARS: usize = 1024;
/// Messages larger than this are dropped before parsing.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;
/// Longest node id, group or key id accepted on the wire.
pub const MAX_ID_BYTES: usize = 256;

/// One wire message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// [`PROTOCOL_VERSION`] of the sender; a message of another version is dropped unread.
    pub v: u32,
    /// The election group; a message of another group is dropped before anything else is read.
    pub group: String,
    /// The sender; if it is not a member the message changes nothing, not even the term (rule 1).
    pub from: String,
    /// The sender's term: a higher one is adopted, a lower one makes the message stale (rule 2).
    pub term: u64,
    /// Per-sender sequence number; strictly increasing for a sender, across restarts.
    pub seq: u64,
    /// Wall-clock send time in unix milliseconds. Informational only: the protocol never reads it.
    #[serde(default)]
    pub ts: u64,
    /// Fingerprint of the sender's member set ([`super::MemberSet::fingerprint`]). Required;
    /// defaulted only so that a message of another version is refused for its version.
    #[serde(default)]
    pub members: String,
    /// The type-specific fields, flattened into the same JSON object and named by `type`.
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
        /// The sending leader (it must be `from`), under the bash script's field name.
        leader: String,
        /// Wall-clock unix seconds, as the bash script sent it (docs/pilot.md).
        #[serde(default)]
        timestamp: u64,
        /// The leader's `L` in milliseconds, for observers; followers guard for their own `T`.
        lease_ms: u64,
        /// The leader's priority, so the others rank it against better members (rule 11).
        priority: u32,
        /// Whether the leader would still lead by choice (rule 11).
        candidacy: Candidacy,
        /// Members the leader heard within `T`: its two-way evidence (rule 11).
        hears: Vec<String>,
        /// The leader's whole member set, so a change of two ids at once is seen (rule 1).
        member_ids: Vec<String>,
        /// The sender counts itself as flapped (rule 12): back from a restart or resigned for a
        /// lost quorum within its flap window. Absent means no.
        #[serde(default, skip_serializing_if = "is_false")]
        flapped: bool,
    },
    /// A follower's answer to one heartbeat; a quorum of them renews the lease.
    Ack {
        /// The leader whose heartbeat this answers; every other node ignores the ack.
        leader: String,
        /// `seq` of that heartbeat: a quorum renews the lease from its send time (rule 6).
        hb_seq: u64,
        /// The follower's priority, for the leader's preemption check (rule 12).
        priority: u32,
        /// Whether the follower would campaign and lead now (rule 11).
        candidacy: Candidacy,
        /// Members the follower heard within `T`: its two-way evidence (rule 11).
        hears: Vec<String>,
        /// The follower's whole member set, so a change of two ids at once is seen (rule 1).
        member_ids: Vec<String>,
        /// The sender counts itself as flapped (rule 12): back from a restart or resigned for a
        /// lost quorum within its flap window. Absent means no.
        #[serde(default, skip_serializing_if = "is_false")]
        flapped: bool,
    },
    /// From a node that knows no leader, whose candidacy changed, or whose acks are late.
    Presence {
        /// The sender's priority, so the others rank it (rule 11).
        priority: u32,
        /// Whether the sender would campaign and lead now (rule 11).
        candidacy: Candidacy,
        /// Members the sender heard within `T`: its two-way evidence (rule 11).
        hears: Vec<String>,
        /// The sender's whole member set, so a change of two ids at once is seen (rule 1).
        member_ids: Vec<String>,
        /// The sender counts itself as flapped (rule 12): back from a restart or resigned for a
        /// lost quorum within its flap window. Absent means no.
        #[serde(default, skip_serializing_if = "is_false")]
        flapped: bool,
    },
    /// A candidacy: a pre-vote round asks for `term` without anyone changing state.
    Election {
        /// The node asking (it must be `from`); votes name it back.
        candidate: String,
        /// The candidate's priority, which voters rank against better members (rule 11).
        priority: u32,
        /// A pre-vote for `term` that changes nothing anywhere (rule 4); false asks for real votes.
        pre_vote: bool,
    },
    /// An answer to an election.
    Vote {
        /// The candidate this answers; only it counts the vote.
        candidate: String,
        /// A real grant is on disk before it leaves (rule 3) and starts the voter's guard (rule 5).
        granted: bool,
        /// Answers a pre-vote: it only lets the candidate raise its term (rule 4).
        pre_vote: bool,
    },
    /// A victory declaration.
    Leader {
        /// The winner of `term` (it must be `from`); receivers follow it (rule 8).
        leader: String,
        /// Wall-clock unix milliseconds of the win; informational.
        #[serde(default)]
        elected_at: u64,
    },
    /// The leader has stopped leading; `successor` (if any) should campaign at once.
    Resign {
        /// The ex-leader (it must be `from`); followers drop their guard for it (rule 10).
        leader: String,
        /// Who should lead next: it campaigns at once and gets the only votes for `T` (rule 10).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        successor: Option<String>,
        /// It stopped because its lease ran out (no quorum acknowledged it), not by choice.
        #[serde(default)]
        lost_quorum: bool,
    },
}

/// Whether a node would campaign and lead now, as it tells the others (rule 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Candidacy {
    /// Would campaign and lead now.
    Eligible,
    /// Inside its start-up guard (rule 8): will be eligible soon, cannot vote or lead yet.
    Booting,
    /// Resigned less than `T` ago (rule 10): not campaigning, but an operator may name it.
    Cooling,
    /// Candidacy withdrawn by its operator (`--no-candidate`, `POST /candidacy`).
    Withdrawn,
    /// Shutting down.
    Stopping,
}

impl Candidacy {
    /// The snake_case wire name, also shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Candidacy::Eligible => "eligible",
            Candidacy::Booting => "booting",
            Candidacy::Cooling => "cooling",
            Candidacy::Withdrawn => "withdrawn",
            Candidacy::Stopping => "stopping",
        }
    }
}

/// What a node says about itself in heartbeats, acks and presences: rank, candidacy, the
/// members it heard within `T` (the two-way evidence of rule 11) and its whole member set (so
/// that a change of more than one member at a time is seen, rule 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advert<'a> {
    /// The first part of the sender's rank (rule 11).
    pub priority: u32,
    /// Whether the sender would campaign and lead now; only `Eligible` can veto (rule 11).
    pub candidacy: Candidacy,
    /// Members the sender heard within `T`: makes it two-way and viable or not (rule 11).
    pub hears: &'a [String],
    /// The sender's member set, compared with ours for the one-id-at-a-time rule (rule 1).
    pub member_ids: &'a [String],
    /// The sender ranks itself as flapped, below every steady member (rule 12).
    pub flapped: bool,
}

impl Body {
    /// The sender's advertisement, for the types that carry one.
    pub fn advert(&self) -> Option<Advert<'_>> {
        match self {
            Body::Heartbeat {
                priority,
                candidacy,
                hears,
                member_ids,
                flapped,
                ..
            }
            | Body::Ack {
                priority,
                candidacy,
                hears,
                member_ids,
                flapped,
                ..
            }
            | Body::Presence {
                priority,
                candidacy,
                hears,
                member_ids,
                flapped,
            } => Some(Advert {
                priority: *priority,
                candidacy: *candidacy,
                hears,
                member_ids,
                flapped: *flapped,
            }),
            _ => None,
        }
    }

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
    /// Longer than [`MAX_MESSAGE_BYTES`] (its length in bytes): dropped before parsing.
    #[error("message of {0} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")]
    TooLarge(usize),
    /// Not JSON of a known message type (the parser's explanation).
    #[error("malformed message: {0}")]
    Malformed(String),
    /// Another protocol version (the one it speaks): nodes of different versions ignore each other.
    #[error("unsupported protocol version {0} (this node speaks {PROTOCOL_VERSION})")]
    Version(u32),
    /// Well-formed but breaks a bound or names someone other than its sender (which check).
    #[error("invalid message: {0}")]
    Invalid(&'static str),
}

impl Message {
    /// Parses and checks one message. Never panics, whatever the bytes.
    pub fn parse(bytes: &[u8]) -> Result<Message, WireError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(WireError::TooLarge(bytes.len()));
        }
        // The version first, so that a node of another version is named as such rather than
        // as malformed (its fields may differ).
        #[derive(Deserialize)]
        struct Version {
            v: u32,
        }
        if let Ok(Version { v }) = serde_json::from_slice::<Version>(bytes) {
            if v != PROTOCOL_VERSION {
                return Err(WireError::Version(v));
            }
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
        if self.members.is_empty() || self.members.len() > 64 {
            return Err(WireError::Invalid("`members` must be 1 to 64 bytes"));
        }
        if let Some(a) = self.body.advert() {
            for list in [a.hears, a.member_ids] {
                if list.len() > MAX_HEARS || !list.iter().all(|h| id_ok(h)) {
                    return Err(WireError::Invalid(
                        "`hears` and `member_ids` must be at most 1024 ids of 1 to 256 bytes",
                    ));
                }
            }
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

/// For `skip_serializing_if`: a flag that is false is left out, as older nodes wrote it.
fn is_false(b: &bool) -> bool {
    !*b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat() -> Message {
        Message {
            v: PROTOCOL_VERSION,
            group: "g1".into(),
            from: "a".into(),
            term: 3,
            seq: 9,
            ts: 0,
            members: "0badf00d".into(),
            body: Body::Heartbeat {
                leader: "a".into(),
                timestamp: 0,
                lease_ms: 2000,
                priority: 7,
                candidacy: Candidacy::Eligible,
                hears: vec!["b".into(), "c".into()],
                member_ids: vec!["a".into(), "b".into(), "c".into()],
                flapped: false,
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
                candidacy: Candidacy::Cooling,
                hears: vec![],
                member_ids: vec!["a".into()],
                flapped: false,
            },
            Body::Presence {
                priority: 2,
                candidacy: Candidacy::Booting,
                hears: vec!["a".into()],
                member_ids: vec!["a".into(), "x".into()],
                flapped: false,
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
                lost_quorum: false,
            },
            Body::Resign {
                leader: "a".into(),
                successor: None,
                lost_quorum: true,
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
        let text = r#"{"v":2,"type":"presence","group":"g","from":"x","term":1,"seq":2,"ts":3,
            "members":"01234567","priority":5,"candidacy":"eligible","hears":["y"],"member_ids":["x","y"],"future":{"a":[1,2]}}"#;
        let m = Message::parse(text.as_bytes()).unwrap();
        assert_eq!(
            m.body,
            Body::Presence {
                priority: 5,
                candidacy: Candidacy::Eligible,
                hears: vec!["y".into()],
                member_ids: vec!["x".into(), "y".into()],
                flapped: false,
            }
        );
    }

    #[test]
    fn malformed_input_is_an_error_value() {
        let cases: [&[u8]; 10] = [
            b"",
            b"null",
            b"{",
            b"[1,2]",
            br#"{"v":1,"type":"nope","group":"g","from":"x","term":1,"seq":1}"#,
            br#"{"v":2,"type":"presence","group":"g","from":"x","term":-1,"seq":1,"members":"m","priority":1,"candidacy":"eligible","hears":[],"member_ids":["x"]}"#,
            br#"{"v":2,"type":"heartbeat","group":"g","from":"x","term":1,"seq":1,"members":"m","leader":"y","lease_ms":1,"priority":1,"candidacy":"eligible","hears":[],"member_ids":["x"]}"#,
            br#"{"v":2,"type":"presence","group":"g","from":"x","term":1,"seq":1,"priority":1,"candidacy":"eligible","hears":[],"member_ids":["x"]}"#,
            br#"{"v":2,"type":"presence","group":"g","from":"x","term":1,"seq":1,"members":"m","priority":1,"candidacy":"eligible","hears":[""],"member_ids":["x"]}"#,
            &[0xff, 0xfe, 0x00],
        ];
        for c in cases {
            assert!(
                Message::parse(c).is_err(),
                "{:?}",
                String::from_utf8_lossy(c)
            );
        }
        let v1 = br#"{"v":1,"type":"presence","group":"g","from":"x","term":1,"seq":1,"priority":1,"eligible":true}"#;
        assert_eq!(Message::parse(v1), Err(WireError::Version(1)));
        let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert_eq!(
            Message::parse(&big),
            Err(WireError::TooLarge(MAX_MESSAGE_BYTES + 1))
        );
    }
}
