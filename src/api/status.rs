//! `GET /status`: this node's whole view, for operators.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use tokio::time::Instant;

use super::{age_ms, current_leader, AppState};
use crate::clock;
use crate::election::{rank, Candidacy, Rank, Role};
use crate::transport::Health;

#[derive(Serialize)]
pub struct StatusBody {
    node: String,
    role: Role,
    term: u64,
    leader: Option<String>,
    voted_for: Option<String>,
    priority: u32,
    eligible: bool,
    candidacy: Candidacy,
    can_campaign: bool,
    can_vote: bool,
    shutting_down: bool,
    cluster_size: usize,
    quorum: usize,
    /// Fingerprint of this node's member set; every member should show the same.
    fingerprint: String,
    members: Vec<MemberBody>,
    timings: TimingsBody,
    transport: Health,
}

#[derive(Serialize)]
pub struct MemberBody {
    id: String,
    priority: Option<u32>,
    candidacy: Option<Candidacy>,
    /// Advertises that it would lead now.
    eligible: bool,
    /// `null` when it has never been heard.
    last_seen_ms: Option<u64>,
    live: bool,
    /// Its latest message says it hears this node.
    two_way: bool,
    /// Could win an election now (two-way, hears a quorum, same member set).
    viable: bool,
    fingerprint: Option<String>,
    /// Same member set as this node; `null` when it has never been heard.
    matches: Option<bool>,
    /// 1 = would lead first among the members heard and this node; `null` if never heard.
    rank: Option<usize>,
}

#[derive(Serialize)]
pub struct TimingsBody {
    heartbeat_ms: u64,
    lease_ms: u64,
    election_timeout_ms: u64,
    stagger_ms: u64,
    preempt_after_ms: u64,
    max_drift: f64,
}

pub async fn get_status(State(s): State<AppState>) -> Json<StatusBody> {
    let snap = s.snapshot();
    let now: Instant = clock::now();
    let v = &snap.view;
    let own = snap.member_set.fingerprint().to_string();
    let heard = snap
        .members
        .iter()
        .filter(|m| m.last_seen.is_some())
        .map(|m| Rank::new(m.priority, &m.id));
    let positions =
        rank::positions(heard.chain(std::iter::once(Rank::new(v.priority, &v.node_id))));
    let rank_of = |id: &str| positions.iter().find(|(r, _)| r.id == id).map(|(_, i)| *i);
    let members = snap
        .members
        .iter()
        .map(|m| MemberBody {
            id: m.id.clone(),
            priority: m.last_seen.map(|_| m.priority),
            candidacy: m.candidacy,
            eligible: m.candidacy == Some(Candidacy::Eligible),
            last_seen_ms: m.last_seen.map(|at| age_ms(at, now)),
            live: m.live,
            two_way: m.two_way,
            viable: m.viable,
            fingerprint: m.fingerprint.clone(),
            matches: m.matches(&own),
            rank: rank_of(&m.id),
        })
        .collect();
    let t = &snap.timings;
    let role = if v.role == Role::Leader && !v.is_leader_at(now) {
        Role::Follower
    } else {
        v.role
    };
    Json(StatusBody {
        node: v.node_id.clone(),
        role,
        term: v.term,
        leader: current_leader(v, &snap, now),
        voted_for: v.voted_for.clone(),
        priority: v.priority,
        eligible: v.eligible,
        candidacy: v.candidacy,
        can_campaign: v.can_campaign,
        can_vote: v.can_vote,
        shutting_down: v.shutting_down,
        cluster_size: snap.member_set.len(),
        quorum: snap.member_set.quorum(),
        fingerprint: own,
        members,
        timings: TimingsBody {
            heartbeat_ms: t.heartbeat.as_millis() as u64,
            lease_ms: t.lease.as_millis() as u64,
            election_timeout_ms: t.election_timeout.as_millis() as u64,
            stagger_ms: t.stagger.as_millis() as u64,
            preempt_after_ms: t.preempt_after.as_millis() as u64,
            max_drift: t.max_drift,
        },
        transport: snap.transport.clone(),
    })
}
