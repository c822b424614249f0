//! Wire messages: what nodes publish on `election:<group>`.
//!
//! Every message is one JSON object with a common header (`v, type, group, from, term, seq, ts,
//! members`) and the fields of its type (docs/protocol.md, "The messages"). `election`, `leader` and
//! `heartbeat` keep the field names of the bash script this project replaces (docs/pilot.md) (`leader`, `term`,
//! `timestamp`), so a jq observer written for it still works. Unknown fields are ignored so that
//! newer nodes can add fields without breaking older ones; a change of meaning bumps
//! [`PROTOCOL_VERSION`], and a build reads and writes its version and the one before
//! ([`Versions::OURS`], docs/protocol.md rule 15).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::timings::Timings;
use crate::firing::Firing;

/// The protocol version this build prefers. Version 3 added the sender's timings and protocol
/// versions to every message and the promise to acks and votes (docs/protocol.md, rules 5, 6
/// and 15).
pub const PROTOCOL_VERSION: u32 = 3;
/// The oldest version this build still speaks and reads: the one before, so that a cluster can
/// be upgraded one node at a time (rule 15). Version 2 added the member fingerprint, the
/// advertised candidacy and the `hears` list.
pub const PREVIOUS_VERSION: u32 = 2;
/// Most ids a `hears` list may hold (a member set is bounded far below this by its byte size).
pub const MAX_HEARS: usize = 1024;
/// Messages larger than this are dropped before parsing.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;
/// Longest node id, group or key id accepted on the wire.
pub const MAX_ID_BYTES: usize = 256;

/// One wire message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "flat::Flat")]
pub struct Message {
    /// The protocol version it is written in: the newest one every member speaks (rule 15). A
    /// version this build does not speak is dropped unread.
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
    /// The versions the sender speaks (rule 15). Required from version 3 on; a message without
    /// it comes from a build that speaks only its `v`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speaks: Option<Versions>,
    /// The sender's `h`, `L`, `T` and `r`, which its voters' promises must cover (rules 5 and 6).
    /// Required from version 3 on; a version-2 sender runs on the receiver's own timings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Announced>,
    /// The type-specific fields, flattened into the same JSON object and named by `type`.
    #[serde(flatten)]
    pub body: Body,
    /// Where clients reach the sender's API, and its operator's labels (docs/clients.md). The
    /// shell fills it in and reads it; the election never looks at it, so it cannot be a safety
    /// input. Older builds ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<NodeInfo>,
    /// The operator's maintenance setting as the sender knows it (rule 16). The shell spreads
    /// it, keeps the newest and tells its core whether maintenance is on; the core never reads
    /// this field. Older builds ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// The newest scheduled firing the sender knows of, once it is on its disk (rule 19). The
    /// shell keeps it and counts who holds it; the core never reads this field. Older builds
    /// ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firing: Option<Firing>,
    /// The sender is an observer (`run --observe`): it follows the election without a vote, and
    /// the message (a presence) only tells the members it is there. The shell records it for
    /// `/status` and never hands it to the core, which would refuse a non-member anyway (rule 1).
    /// Absent means no; older builds ignore it and take the message for a stray's.
    #[serde(default, skip_serializing_if = "is_false")]
    pub observer: bool,
    /// The sender reads batches ([`crate::batch`]): messages of many groups in one (rule 18).
    /// The shell says so on every message and reads it; the election never looks at it.
    /// Absent means no, as from a build before batches, which is never sent one.
    #[serde(default, skip_serializing_if = "is_false")]
    pub batches: bool,
    /// Id of the cluster key that signed this message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    /// HMAC-SHA256 signature over the message without `sig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

/// What a node tells clients about itself: its API's URL (`--advertise-url`) and labels
/// (`--meta`). Bounded by the shell on both ends (`src/directory.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Where clients reach this node's HTTP API.
    pub url: String,
    /// The operator's `KEY=VALUE` labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, String>,
}

/// One write of the operator's maintenance setting (`POST /pause`, `DELETE /pause`). Every
/// member keeps the newest write it has seen, by `(version, by)`, and sends it on every
/// message, so a write made on any member reaches all of them and survives their restarts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Maintenance {
    /// Paused (true) or resumed.
    pub on: bool,
    /// Unix milliseconds at which a pause ends by itself; `None`: until resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// Unix milliseconds of the write, for display.
    pub at: u64,
    /// The member the operator wrote it on.
    pub by: String,
    /// One more than the newest version that member had seen: later writes win.
    pub version: u64,
    /// The operator's words, for display.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Maintenance {
    /// Whether this write supersedes `other`: a higher version, or the same one from a member
    /// whose id sorts after (two writes made at once on different members).
    pub fn supersedes(&self, other: &Maintenance) -> bool {
        (self.version, &self.by) > (other.version, &other.by)
    }

    /// Whether it holds maintenance on at `now_ms` (unix milliseconds).
    pub fn in_force(&self, now_ms: u64) -> bool {
        self.on && self.until.is_none_or(|u| now_ms < u)
    }
}

/// The range of protocol versions a build speaks, both ends included (rule 15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versions {
    /// The oldest version it still reads and writes.
    pub oldest: u32,
    /// The newest, which it writes once every member speaks it.
    pub newest: u32,
}

impl Versions {
    /// What this build speaks.
    pub const OURS: Versions = Versions {
        oldest: PREVIOUS_VERSION,
        newest: PROTOCOL_VERSION,
    };

    /// What a sender that does not say speaks: only the version it wrote in.
    pub fn only(v: u32) -> Versions {
        Versions {
            oldest: v,
            newest: v,
        }
    }

    /// Whether `v` is in the range.
    pub fn speaks(&self, v: u32) -> bool {
        (self.oldest..=self.newest).contains(&v)
    }
}

/// A node's timings as it announces them: whole milliseconds rounded up and the drift in parts
/// per million rounded up, so that a promise computed from them covers the real values (rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announced {
    /// `h`.
    pub heartbeat_ms: u64,
    /// `L`.
    pub lease_ms: u64,
    /// `T`.
    pub election_timeout_ms: u64,
    /// `r`, in parts per million.
    pub max_drift_ppm: u32,
}

/// Longest duration a node may announce (and [`Timings::validate`] accepts): a day. Anything
/// longer is a mistake, and bounding it keeps every instant the core computes from it finite.
pub const MAX_ANNOUNCED_MS: u64 = 24 * 3600 * 1000;

/// The smallest drift, in parts per million, that a receiver refuses (50 %: rule 7
/// divides by `1 - r`).
pub(crate) const MAX_DRIFT_PPM: u32 = 500_000;

/// `d` in whole milliseconds, rounded up: how messages carry a duration.
pub(crate) fn ceil_ms(d: Duration) -> u64 {
    d.as_nanos().div_ceil(1_000_000) as u64
}

impl Announced {
    /// What a node with timings `t` announces.
    pub fn of(t: &Timings) -> Announced {
        Announced {
            heartbeat_ms: ceil_ms(t.heartbeat),
            lease_ms: ceil_ms(t.lease),
            election_timeout_ms: ceil_ms(t.election_timeout),
            max_drift_ppm: (t.max_drift * 1e6).ceil() as u32,
        }
    }

    /// `h`.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms)
    }

    /// `L`.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// `T`.
    pub fn election_timeout(&self) -> Duration {
        Duration::from_millis(self.election_timeout_ms)
    }

    /// `r` as a fraction.
    pub fn max_drift(&self) -> f64 {
        f64::from(self.max_drift_ppm) / 1e6
    }

    /// What a receiver can rely on: every duration non-zero and at most a day, `h < L`, and
    /// `r` below 50 %. (Whether `T` is safe for `L` is the sender's own start-up check, rule 7;
    /// a promise covers the announced `T` whatever it is.)
    fn check(&self) -> Result<(), WireError> {
        let ms = [self.heartbeat_ms, self.lease_ms, self.election_timeout_ms];
        if ms.iter().any(|&m| m == 0 || m > MAX_ANNOUNCED_MS)
            || self.heartbeat_ms >= self.lease_ms
            || self.max_drift_ppm >= MAX_DRIFT_PPM
        {
            return Err(WireError::Invalid(
                "`timings` must be durations of 1 ms to a day with h < L, and a drift below 50 %",
            ));
        }
        Ok(())
    }
}

/// What a node says about itself in heartbeats, acks and presences: rank, candidacy, the
/// members it heard lately (the two-way evidence of rule 11), its whole member set (so that a
/// change of more than one member at a time is seen, rule 1) and its own flap judgement
/// (rule 12). One type, flattened into each of the three bodies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Advert {
    /// The first part of the sender's rank (rule 11).
    pub priority: u32,
    /// Whether the sender would campaign and lead now; only `Eligible` can veto (rule 11).
    pub candidacy: Candidacy,
    /// Members the sender heard lately: makes it two-way and viable or not (rule 11).
    pub hears: Vec<String>,
    /// The sender's member set, compared with ours for the one-id-at-a-time rule (rule 1).
    pub member_ids: Vec<String>,
    /// The sender counts itself as flapped (rule 12): back from a restart or resigned for a
    /// lost quorum within its flap window. Absent means no.
    #[serde(default, skip_serializing_if = "is_false")]
    pub flapped: bool,
    /// The sender's application health check fails (rule 17): it ranks below every healthy
    /// member. Absent means healthy, as from a build without health checks.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unhealthy: bool,
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
        /// The leader's `L` in milliseconds (also in `timings`; kept for observers and for
        /// version-2 receivers, which read only this).
        lease_ms: u64,
        /// The leader's rank, candidacy and evidence (rules 1, 11, 12).
        #[serde(flatten)]
        advert: Advert,
    },
    /// A follower's answer to one heartbeat; a quorum of them renews the lease.
    Ack {
        /// The leader whose heartbeat this answers; every other node ignores the ack.
        leader: String,
        /// `seq` of that heartbeat: a quorum renews the lease from its send time (rule 6).
        hb_seq: u64,
        /// How long, on the follower's clock, it refuses other votes after sending this ack
        /// (rule 5; rounded down). Required from version 3 on; a version-2 follower promises
        /// the leader's own `T`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        guard_ms: Option<u64>,
        /// The follower's rank, candidacy and evidence (rules 1, 11, 12).
        #[serde(flatten)]
        advert: Advert,
    },
    /// From a node that knows no leader, whose candidacy changed, or whose acks are late.
    Presence {
        /// The sender's rank, candidacy and evidence (rules 1, 11, 12).
        #[serde(flatten)]
        advert: Advert,
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
        /// For a real grant: how long, on the voter's clock, it refuses other votes (rule 5;
        /// rounded down). Required on a granted real vote from version 3 on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        guard_ms: Option<u64>,
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

impl Body {
    /// The sender's advertisement, for the types that carry one.
    pub fn advert(&self) -> Option<&Advert> {
        match self {
            Body::Heartbeat { advert, .. }
            | Body::Ack { advert, .. }
            | Body::Presence { advert } => Some(advert),
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
    /// A protocol version this build does not speak (the one it is written in).
    #[error("unsupported protocol version {0} (this node speaks {PREVIOUS_VERSION} to {PROTOCOL_VERSION})")]
    Version(u32),
    /// Well-formed but breaks a bound or names someone other than its sender (which check).
    #[error("invalid message: {0}")]
    Invalid(&'static str),
}

impl Message {
    /// A message of this build's version from `from` in `group`, term and sequence number 0,
    /// saying what this build speaks and nothing else: every message is built from this one
    /// (`Message { term, seq, .., ..Message::new(group, from, body) }`), so that a field added
    /// to the wire is one edit here, not one in every place that builds a message.
    pub fn new(group: String, from: String, body: Body) -> Message {
        Message {
            v: PROTOCOL_VERSION,
            group,
            from,
            term: 0,
            seq: 0,
            ts: 0,
            members: String::new(),
            speaks: Some(Versions::OURS),
            timings: None,
            body,
            info: None,
            maintenance: None,
            firing: None,
            observer: false,
            batches: false,
            kid: None,
            sig: None,
        }
    }

    /// Parses and checks one message. Never panics, whatever the bytes.
    pub fn parse(bytes: &[u8]) -> Result<Message, WireError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(WireError::TooLarge(bytes.len()));
        }
        let msg: Message = match serde_json::from_slice(bytes) {
            Ok(m) => m,
            Err(e) => {
                // A node of another version is named as such rather than as malformed (its
                // fields may differ). Read only when the message did not parse: one pass over
                // the bytes for every message that does.
                #[derive(Deserialize)]
                struct Version {
                    v: u32,
                }
                if let Ok(Version { v }) = serde_json::from_slice::<Version>(bytes) {
                    if !Versions::OURS.speaks(v) {
                        return Err(WireError::Version(v));
                    }
                }
                return Err(WireError::Malformed(e.to_string()));
            }
        };
        // `check` refuses a version this build does not speak first.
        msg.check()?;
        Ok(msg)
    }

    /// The structural rules serde cannot express.
    pub fn check(&self) -> Result<(), WireError> {
        if !Versions::OURS.speaks(self.v) {
            return Err(WireError::Version(self.v));
        }
        // Version 3 on: every message says what its sender speaks and runs on.
        if self.v >= 3 && (self.speaks.is_none() || self.timings.is_none()) {
            return Err(WireError::Invalid(
                "`speaks` and `timings` are required from version 3 on",
            ));
        }
        if let Some(s) = &self.speaks {
            if !s.speaks(self.v) {
                return Err(WireError::Invalid(
                    "`speaks` must include the version the message is written in",
                ));
            }
        }
        if let Some(t) = &self.timings {
            t.check()?;
        }
        let promise = match &self.body {
            Body::Ack { guard_ms, .. } => Some(*guard_ms),
            Body::Vote {
                granted: true,
                pre_vote: false,
                guard_ms,
                ..
            } => Some(*guard_ms),
            _ => None,
        };
        match promise {
            Some(None) if self.v >= 3 => {
                return Err(WireError::Invalid(
                    "acks and granted votes carry `guard_ms` from version 3 on",
                ))
            }
            Some(Some(ms)) if ms > MAX_ANNOUNCED_MS * 4 => {
                return Err(WireError::Invalid("`guard_ms` must be at most four days"))
            }
            _ => {}
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
            for list in [&a.hears, &a.member_ids] {
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

/// How a message is read: every field of every type in one flat object, then the body its
/// `type` names. The derived reader of [`Message`] (a body flattened into the header, tagged by
/// `type`) first copies the whole object into a buffer and reads the body again from it; at a
/// thousand groups that was a fifth of a node's time. This reads each byte once, takes the same
/// messages and refuses the same ones (a body field that its type needs and is missing), and
/// ignores fields it does not know, as before.
mod flat {
    use super::*;

    /// Which body the message has.
    #[derive(Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Heartbeat,
        Ack,
        Presence,
        Election,
        Vote,
        Leader,
        Resign,
    }

    #[derive(Deserialize)]
    pub(super) struct Flat {
        v: u32,
        group: String,
        from: String,
        term: u64,
        seq: u64,
        #[serde(default)]
        ts: u64,
        #[serde(default)]
        members: String,
        #[serde(default)]
        speaks: Option<Versions>,
        #[serde(default)]
        timings: Option<Announced>,
        #[serde(rename = "type")]
        kind: Kind,
        #[serde(default)]
        leader: Option<String>,
        #[serde(default)]
        timestamp: Option<u64>,
        #[serde(default)]
        lease_ms: Option<u64>,
        #[serde(default)]
        priority: Option<u32>,
        #[serde(default)]
        candidacy: Option<Candidacy>,
        #[serde(default)]
        hears: Option<Vec<String>>,
        #[serde(default)]
        member_ids: Option<Vec<String>>,
        #[serde(default)]
        flapped: Option<bool>,
        #[serde(default)]
        unhealthy: Option<bool>,
        #[serde(default)]
        hb_seq: Option<u64>,
        #[serde(default)]
        guard_ms: Option<u64>,
        #[serde(default)]
        candidate: Option<String>,
        #[serde(default)]
        pre_vote: Option<bool>,
        #[serde(default)]
        granted: Option<bool>,
        #[serde(default)]
        elected_at: Option<u64>,
        #[serde(default)]
        successor: Option<String>,
        #[serde(default)]
        lost_quorum: Option<bool>,
        #[serde(default)]
        info: Option<NodeInfo>,
        #[serde(default)]
        maintenance: Option<Maintenance>,
        #[serde(default)]
        firing: Option<Firing>,
        #[serde(default)]
        observer: bool,
        #[serde(default)]
        batches: bool,
        #[serde(default)]
        kid: Option<String>,
        #[serde(default)]
        sig: Option<String>,
    }

    /// A body field its type needs.
    fn needed<T>(field: Option<T>, name: &'static str) -> Result<T, String> {
        field.ok_or_else(|| format!("missing field `{name}`"))
    }

    impl Flat {
        fn advert(&mut self) -> Result<Advert, String> {
            Ok(Advert {
                priority: needed(self.priority, "priority")?,
                candidacy: needed(self.candidacy, "candidacy")?,
                hears: needed(self.hears.take(), "hears")?,
                member_ids: needed(self.member_ids.take(), "member_ids")?,
                flapped: self.flapped.unwrap_or(false),
                unhealthy: self.unhealthy.unwrap_or(false),
            })
        }
    }

    impl TryFrom<Flat> for Message {
        type Error = String;

        fn try_from(mut f: Flat) -> Result<Message, String> {
            let body = match f.kind {
                Kind::Heartbeat => Body::Heartbeat {
                    leader: needed(f.leader.take(), "leader")?,
                    timestamp: f.timestamp.unwrap_or(0),
                    lease_ms: needed(f.lease_ms, "lease_ms")?,
                    advert: f.advert()?,
                },
                Kind::Ack => Body::Ack {
                    leader: needed(f.leader.take(), "leader")?,
                    hb_seq: needed(f.hb_seq, "hb_seq")?,
                    guard_ms: f.guard_ms,
                    advert: f.advert()?,
                },
                Kind::Presence => Body::Presence {
                    advert: f.advert()?,
                },
                Kind::Election => Body::Election {
                    candidate: needed(f.candidate.take(), "candidate")?,
                    priority: needed(f.priority, "priority")?,
                    pre_vote: needed(f.pre_vote, "pre_vote")?,
                },
                Kind::Vote => Body::Vote {
                    candidate: needed(f.candidate.take(), "candidate")?,
                    granted: needed(f.granted, "granted")?,
                    pre_vote: needed(f.pre_vote, "pre_vote")?,
                    guard_ms: f.guard_ms,
                },
                Kind::Leader => Body::Leader {
                    leader: needed(f.leader.take(), "leader")?,
                    elected_at: f.elected_at.unwrap_or(0),
                },
                Kind::Resign => Body::Resign {
                    leader: needed(f.leader.take(), "leader")?,
                    successor: f.successor.take(),
                    lost_quorum: f.lost_quorum.unwrap_or(false),
                },
            };
            Ok(Message {
                v: f.v,
                group: f.group,
                from: f.from,
                term: f.term,
                seq: f.seq,
                ts: f.ts,
                members: f.members,
                speaks: f.speaks,
                timings: f.timings,
                body,
                info: f.info,
                maintenance: f.maintenance,
                firing: f.firing,
                observer: f.observer,
                batches: f.batches,
                kid: f.kid,
                sig: f.sig,
            })
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

    fn write(on: bool, until: Option<u64>, by: &str, version: u64) -> Maintenance {
        Maintenance {
            on,
            until,
            at: 0,
            by: by.into(),
            version,
            reason: None,
        }
    }

    #[test]
    fn a_later_maintenance_write_supersedes_by_version_then_member() {
        let w = write(true, None, "b", 3);
        assert!(
            write(false, None, "a", 4).supersedes(&w),
            "a higher version"
        );
        assert!(
            !write(false, None, "z", 2).supersedes(&w),
            "a lower version"
        );
        assert!(
            write(false, None, "c", 3).supersedes(&w),
            "same version, later id"
        );
        assert!(
            !write(false, None, "a", 3).supersedes(&w),
            "same version, earlier id"
        );
        assert!(!w.supersedes(&w.clone()), "itself");
    }

    #[test]
    fn a_pause_is_in_force_when_on_and_before_its_end() {
        assert!(write(true, None, "a", 1).in_force(u64::MAX));
        assert!(!write(false, None, "a", 1).in_force(0));
        let until = write(true, Some(1_000), "a", 1);
        assert!(until.in_force(999));
        assert!(!until.in_force(1_000), "the end is outside it");
        assert!(!until.in_force(1_001));
        assert!(
            !write(false, Some(1_000), "a", 1).in_force(5),
            "off, whatever its end"
        );
    }

    fn advert() -> Advert {
        Advert {
            priority: 7,
            candidacy: Candidacy::Eligible,
            hears: vec!["b".into(), "c".into()],
            member_ids: vec!["a".into(), "b".into(), "c".into()],
            flapped: false,
            unhealthy: false,
        }
    }

    fn heartbeat() -> Message {
        Message {
            term: 3,
            seq: 9,
            members: "0badf00d".into(),
            timings: Some(Announced::of(&Timings::default())),
            ..Message::new(
                "g1".into(),
                "a".into(),
                Body::Heartbeat {
                    leader: "a".into(),
                    timestamp: 0,
                    lease_ms: 2000,
                    advert: advert(),
                },
            )
        }
    }

    /// The same message as a version-2 build writes it: no `speaks`, `timings` or promises.
    fn v2(mut m: Message) -> Message {
        m.v = 2;
        m.speaks = None;
        m.timings = None;
        match &mut m.body {
            Body::Ack { guard_ms, .. } | Body::Vote { guard_ms, .. } => *guard_ms = None,
            _ => {}
        }
        m
    }

    fn bodies() -> Vec<Body> {
        vec![
            heartbeat().body,
            Body::Ack {
                leader: "a".into(),
                hb_seq: 4,
                guard_ms: Some(3000),
                advert: Advert {
                    candidacy: Candidacy::Cooling,
                    hears: vec![],
                    member_ids: vec!["a".into()],
                    ..advert()
                },
            },
            Body::Presence {
                advert: Advert {
                    candidacy: Candidacy::Booting,
                    flapped: true,
                    ..advert()
                },
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
                guard_ms: Some(16_000),
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
        ]
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
        assert_eq!(v["priority"], 7, "the advert is flattened into the body");
        assert_eq!(v["timings"]["election_timeout_ms"], 3000);
        assert_eq!(v["speaks"]["newest"], PROTOCOL_VERSION);
        assert!(v.get("sig").is_none());
    }

    #[test]
    fn round_trip_every_type_in_both_versions() {
        for body in bodies() {
            let m = Message {
                body,
                ..heartbeat()
            };
            for m in [m.clone(), v2(m)] {
                let back = Message::parse(m.to_json().as_bytes()).unwrap();
                assert_eq!(back, m);
            }
        }
    }

    /// Bytes a version-2 build (main at d9ce58b) wrote: they parse, and a message of version 2
    /// serializes to exactly these bytes again, so both builds read each other (rule 15).
    #[test]
    fn version_2_bytes_are_read_and_written_unchanged() {
        let written = [
            r#"{"v":2,"group":"g1","from":"a","term":3,"seq":9,"ts":0,"members":"0badf00d","type":"heartbeat","leader":"a","timestamp":0,"lease_ms":2000,"priority":7,"candidacy":"eligible","hears":["b","c"],"member_ids":["a","b","c"]}"#,
            r#"{"v":2,"group":"g1","from":"a","term":3,"seq":9,"ts":0,"members":"0badf00d","type":"ack","leader":"a","hb_seq":4,"priority":7,"candidacy":"cooling","hears":[],"member_ids":["a"]}"#,
            r#"{"v":2,"group":"g1","from":"a","term":3,"seq":9,"ts":0,"members":"0badf00d","type":"presence","priority":7,"candidacy":"booting","hears":["b","c"],"member_ids":["a","b","c"],"flapped":true}"#,
            r#"{"v":2,"group":"g1","from":"a","term":3,"seq":9,"ts":0,"members":"0badf00d","type":"election","candidate":"a","priority":3,"pre_vote":true}"#,
            r#"{"v":2,"group":"g1","from":"a","term":3,"seq":9,"ts":0,"members":"0badf00d","type":"vote","candidate":"b","granted":true,"pre_vote":false}"#,
            r#"{"v":2,"group":"g1","from":"a","term":3,"seq":9,"ts":0,"members":"0badf00d","type":"leader","leader":"a","elected_at":5}"#,
            r#"{"v":2,"group":"g1","from":"a","term":3,"seq":9,"ts":0,"members":"0badf00d","type":"resign","leader":"a","successor":"b","lost_quorum":false}"#,
            r#"{"v":2,"group":"g1","from":"a","term":3,"seq":9,"ts":0,"members":"0badf00d","type":"resign","leader":"a","lost_quorum":true}"#,
        ];
        for (text, body) in written.iter().zip(bodies()) {
            let m = Message::parse(text.as_bytes()).unwrap();
            assert_eq!(
                m,
                v2(Message {
                    body,
                    ..heartbeat()
                })
            );
            assert_eq!(m.to_json(), *text);
        }
    }

    #[test]
    fn version_3_requires_what_the_rules_read() {
        let missing = [
            Message {
                speaks: None,
                ..heartbeat()
            },
            Message {
                timings: None,
                ..heartbeat()
            },
            Message {
                body: Body::Ack {
                    leader: "a".into(),
                    hb_seq: 1,
                    guard_ms: None,
                    advert: advert(),
                },
                ..heartbeat()
            },
            Message {
                body: Body::Vote {
                    candidate: "b".into(),
                    granted: true,
                    pre_vote: false,
                    guard_ms: None,
                },
                ..heartbeat()
            },
            Message {
                speaks: Some(Versions::only(2)),
                ..heartbeat()
            },
        ];
        for m in missing {
            assert!(
                matches!(
                    Message::parse(m.to_json().as_bytes()),
                    Err(WireError::Invalid(_))
                ),
                "{}",
                m.to_json()
            );
        }
        // A refused pre-vote or a pre-vote grant promises nothing.
        let pre = Message {
            body: Body::Vote {
                candidate: "b".into(),
                granted: true,
                pre_vote: true,
                guard_ms: None,
            },
            ..heartbeat()
        };
        Message::parse(pre.to_json().as_bytes()).unwrap();
    }

    #[test]
    fn announced_timings_are_bounded_and_round_up() {
        let t = Timings {
            election_timeout: Duration::from_nanos(2_710_526_317),
            max_drift: 0.05,
            ..Timings::default()
        };
        let a = Announced::of(&t);
        assert_eq!(a.election_timeout_ms, 2711, "rounded up");
        assert_eq!(a.max_drift_ppm, 50_000);
        assert!(a.election_timeout() >= t.election_timeout);
        for bad in [
            Announced {
                heartbeat_ms: 0,
                ..a
            },
            Announced {
                heartbeat_ms: 2000,
                ..a
            },
            Announced {
                election_timeout_ms: MAX_ANNOUNCED_MS + 1,
                ..a
            },
            Announced {
                max_drift_ppm: 500_000,
                ..a
            },
        ] {
            let m = Message {
                timings: Some(bad),
                ..heartbeat()
            };
            assert!(Message::parse(m.to_json().as_bytes()).is_err(), "{bad:?}");
        }
    }

    /// Rule 17's word in an advert: written only when true, so a healthy node's bytes are what
    /// a build without health checks writes, and read back whatever the version.
    #[test]
    fn an_unhealthy_advert_says_so_and_a_healthy_one_says_nothing() {
        let unhealthy = Message {
            body: Body::Presence {
                advert: Advert {
                    unhealthy: true,
                    ..advert()
                },
            },
            ..heartbeat()
        };
        for m in [unhealthy.clone(), v2(unhealthy)] {
            let text = m.to_json();
            assert!(text.contains(r#""unhealthy":true"#), "{text}");
            assert_eq!(Message::parse(text.as_bytes()).unwrap(), m);
        }
        let healthy = Message {
            body: Body::Presence { advert: advert() },
            ..heartbeat()
        };
        assert!(!healthy.to_json().contains("unhealthy"));
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let text = r#"{"v":2,"type":"presence","group":"g","from":"x","term":1,"seq":2,"ts":3,
            "members":"01234567","priority":5,"candidacy":"eligible","hears":["y"],"member_ids":["x","y"],"future":{"a":[1,2]}}"#;
        let m = Message::parse(text.as_bytes()).unwrap();
        assert_eq!(
            m.body,
            Body::Presence {
                advert: Advert {
                    priority: 5,
                    candidacy: Candidacy::Eligible,
                    hears: vec!["y".into()],
                    member_ids: vec!["x".into(), "y".into()],
                    flapped: false,
                    unhealthy: false,
                }
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
        for v in [1, 4] {
            let text = format!(
                r#"{{"v":{v},"type":"presence","group":"g","from":"x","term":1,"seq":1,"priority":1,"eligible":true}}"#
            );
            assert_eq!(Message::parse(text.as_bytes()), Err(WireError::Version(v)));
        }
        let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert_eq!(
            Message::parse(&big),
            Err(WireError::TooLarge(MAX_MESSAGE_BYTES + 1))
        );
    }

    fn parses(m: &Message) -> bool {
        Message::parse(m.to_json().as_bytes()).is_ok()
    }

    fn id(len: usize) -> String {
        "i".repeat(len)
    }

    /// A message of up to 16 KiB is read (docs/pilot.md; docs/guide/api.md, "Routes": "at most
    /// 16 KiB"), one byte more is dropped unread with its length.
    #[test]
    fn a_message_may_be_sixteen_kib() {
        let text = heartbeat().to_json();
        let padded = |len: usize| {
            let mut b = text.clone().into_bytes();
            b.resize(len, b' ');
            b
        };
        assert_eq!(Message::parse(&padded(16 * 1024)), Ok(heartbeat()));
        assert_eq!(
            Message::parse(&padded(16 * 1024 + 1)),
            Err(WireError::TooLarge(16 * 1024 + 1))
        );
    }

    #[test]
    fn announced_timings_read_back_as_durations() {
        let a = Announced {
            heartbeat_ms: 500,
            lease_ms: 2000,
            election_timeout_ms: 3000,
            max_drift_ppm: 50_000,
        };
        assert_eq!(a.heartbeat(), Duration::from_millis(500));
        assert_eq!(a.lease(), Duration::from_millis(2000));
        assert_eq!(a.election_timeout(), Duration::from_millis(3000));
        assert_eq!(a.max_drift(), 0.05);
    }

    /// Durations of up to a day (86 400 000 ms) are announced, not a millisecond more.
    #[test]
    fn announced_durations_may_be_a_day() {
        const DAY_MS: u64 = 24 * 60 * 60 * 1000;
        let at_most = Announced {
            heartbeat_ms: DAY_MS - 1,
            lease_ms: DAY_MS,
            election_timeout_ms: DAY_MS,
            max_drift_ppm: 499_999,
        };
        let with = |t: Announced| Message {
            timings: Some(t),
            ..heartbeat()
        };
        assert!(parses(&with(at_most)), "{at_most:?}");
        for over in [
            Announced {
                lease_ms: DAY_MS + 1,
                ..at_most
            },
            Announced {
                election_timeout_ms: DAY_MS + 1,
                ..at_most
            },
        ] {
            assert!(!parses(&with(over)), "{over:?}");
        }
    }

    /// A promise (`guard_ms` of an ack or a granted vote) may be up to four days
    /// (345 600 000 ms), not a millisecond more.
    #[test]
    fn a_promise_may_be_four_days() {
        const FOUR_DAYS_MS: u64 = 4 * 24 * 60 * 60 * 1000;
        let ack = |ms: u64| Message {
            body: Body::Ack {
                leader: "b".into(),
                hb_seq: 4,
                guard_ms: Some(ms),
                advert: advert(),
            },
            ..heartbeat()
        };
        let vote = |ms: u64| Message {
            body: Body::Vote {
                candidate: "b".into(),
                granted: true,
                pre_vote: false,
                guard_ms: Some(ms),
            },
            ..heartbeat()
        };
        let bodies: [fn(u64) -> Message; 2] = [ack, vote];
        for m in bodies {
            for ok in [1, 3000, FOUR_DAYS_MS - 1, FOUR_DAYS_MS] {
                assert!(parses(&m(ok)), "{ok}");
            }
            for bad in [FOUR_DAYS_MS + 1, u64::MAX] {
                assert!(
                    matches!(
                        Message::parse(m(bad).to_json().as_bytes()),
                        Err(WireError::Invalid(_))
                    ),
                    "{bad}"
                );
            }
        }
    }

    /// `kid`, when present, is an id of 1 to 256 bytes.
    #[test]
    fn a_key_id_is_one_to_256_bytes() {
        let with = |kid: String| Message {
            kid: Some(kid),
            sig: Some("c2ln".into()),
            ..heartbeat()
        };
        assert!(parses(&with("k1".into())));
        assert!(parses(&with(id(256))));
        assert!(!parses(&with(String::new())));
        assert!(!parses(&with(id(257))));
    }

    /// `members`, the fingerprint, is 1 to 64 bytes.
    #[test]
    fn the_member_fingerprint_is_one_to_64_bytes() {
        let with = |members: String| Message {
            members,
            ..heartbeat()
        };
        assert!(parses(&with("0".into())));
        assert!(parses(&with(id(63))));
        assert!(parses(&with(id(64))));
        assert!(!parses(&with(String::new())));
        assert!(!parses(&with(id(65))));
    }

    /// `hears` and `member_ids` hold at most 1024 ids (`MAX_HEARS`).
    #[test]
    fn an_advert_lists_at_most_1024_ids() {
        fn ids(n: usize) -> Vec<String> {
            (0..n).map(|i| i.to_string()).collect()
        }
        let hears = |n: usize| Message {
            body: Body::Presence {
                advert: Advert {
                    hears: ids(n),
                    ..advert()
                },
            },
            ..heartbeat()
        };
        let members = |n: usize| Message {
            body: Body::Presence {
                advert: Advert {
                    member_ids: ids(n),
                    ..advert()
                },
            },
            ..heartbeat()
        };
        let lists: [fn(usize) -> Message; 2] = [hears, members];
        for m in lists {
            assert!(parses(&m(1023)));
            assert!(parses(&m(1024)));
            assert!(!parses(&m(1025)));
        }
    }

    /// A candidacy names its sender; an ack's leader, a vote's candidate and a resign's
    /// successor name someone else, but each is an id of 1 to 256 bytes.
    #[test]
    fn the_ids_a_body_names_are_checked() {
        fn with(body: Body) -> Message {
            Message {
                body,
                ..heartbeat()
            }
        }
        let election = |candidate: &str| {
            with(Body::Election {
                candidate: candidate.into(),
                priority: 3,
                pre_vote: true,
            })
        };
        assert!(parses(&election("a")));
        assert!(!parses(&election("b")));
        let ack = |leader: String| {
            with(Body::Ack {
                leader,
                hb_seq: 4,
                guard_ms: Some(3000),
                advert: advert(),
            })
        };
        let vote = |candidate: String| {
            with(Body::Vote {
                candidate,
                granted: false,
                pre_vote: false,
                guard_ms: None,
            })
        };
        let resign = |successor: String| {
            with(Body::Resign {
                leader: "a".into(),
                successor: Some(successor),
                lost_quorum: false,
            })
        };
        let naming: [fn(String) -> Message; 3] = [ack, vote, resign];
        for m in naming {
            assert!(parses(&m("b".into())));
            assert!(parses(&m(id(256))));
            assert!(!parses(&m(String::new())));
            assert!(!parses(&m(id(257))));
        }
    }

    /// `stamp` writes the time of the win into a victory that has none, and leaves a victory
    /// that already carries its time (sent again later) as it was.
    #[test]
    fn a_victory_keeps_the_time_of_the_win() {
        let leader = |elected_at: u64| Message {
            body: Body::Leader {
                leader: "a".into(),
                elected_at,
            },
            ..heartbeat()
        };
        let mut fresh = leader(0);
        fresh.stamp(1_700_000_000_123);
        assert_eq!(fresh.ts, 1_700_000_000_123);
        assert_eq!(fresh.body, leader(1_700_000_000_123).body);
        let mut again = fresh.clone();
        again.stamp(1_700_000_009_000);
        assert_eq!(again.ts, 1_700_000_009_000);
        assert_eq!(again.body, leader(1_700_000_000_123).body);
    }

    /// The names the API shows and the logs and metrics count by are the wire names.
    #[test]
    fn candidacies_and_types_go_by_their_wire_names() {
        for (c, name) in [
            (Candidacy::Eligible, "eligible"),
            (Candidacy::Booting, "booting"),
            (Candidacy::Cooling, "cooling"),
            (Candidacy::Withdrawn, "withdrawn"),
            (Candidacy::Stopping, "stopping"),
        ] {
            assert_eq!(c.as_str(), name);
            assert_eq!(serde_json::to_value(c).unwrap(), name);
        }
        let names = [
            "heartbeat",
            "ack",
            "presence",
            "election",
            "vote",
            "leader",
            "resign",
            "resign",
        ];
        for (body, name) in bodies().into_iter().zip(names) {
            assert_eq!(body.kind(), name);
            let m = Message {
                body,
                ..heartbeat()
            };
            let v: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
            assert_eq!(v["type"], name);
        }
    }
}
