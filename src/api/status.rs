//! `GET /status`: this node's whole view, for operators.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use tokio::time::Instant;

use super::{age_ms, current_leader, AppState};
use crate::election::Role;
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
    can_campaign: bool,
    shutting_down: bool,
    cluster_size: usize,
    quorum: usize,
    members: Vec<MemberBody>,
    timings: TimingsBody,
    transport: Health,
}

#[derive(Serialize)]
pub struct MemberBody {
    id: String,
    priority: u32,
    eligible: bool,
    last_seen_ms: u64,
    live: bool,
    /// 1 = the best-ranked of the members listed and this node.
    rank: usize,
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
    let now = Instant::now();
    let v = &snap.view;
    let mut ranks: Vec<(u32, &str)> = snap
        .members
        .iter()
        .map(|m| (m.priority, m.id.as_str()))
        .chain(std::iter::once((v.priority, v.node_id.as_str())))
        .collect();
    ranks.sort_by(|a, b| b.cmp(a));
    let rank_of = |p: u32, id: &str| ranks.iter().position(|r| *r == (p, id)).unwrap_or(0) + 1;
    let members = snap
        .members
        .iter()
        .map(|m| MemberBody {
            id: m.id.clone(),
            priority: m.priority,
            eligible: m.eligible,
            last_seen_ms: age_ms(m.last_seen, now),
            live: m.live,
            rank: rank_of(m.priority, &m.id),
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
        can_campaign: v.can_campaign,
        shutting_down: v.shutting_down,
        cluster_size: snap.cluster_size,
        quorum: snap.quorum,
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
