//! `GET /leader` and `GET /term`: who leads, and the term clients use as a fencing token.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use super::{age_ms, current_leader, wall_clock, ApiError, AppState};

#[derive(Serialize)]
pub struct LeaderBody {
    leader: String,
    /// Where clients reach the leader's API, as it announced (`null`: not announced).
    leader_url: Option<String>,
    leader_meta: BTreeMap<String, String>,
    /// This node's own URL.
    node_url: Option<String>,
    term: u64,
    is_self: bool,
    node: String,
    elected_at: Option<String>,
    last_heartbeat_ms: Option<u64>,
    lease_remaining_ms: Option<u64>,
}

pub async fn get_leader(State(s): State<AppState>) -> Result<Json<LeaderBody>, ApiError> {
    let snap = s.snapshot();
    let now = crate::clock::now();
    let v = &snap.view;
    let Some(leader) = current_leader(v, now) else {
        return Err(ApiError::NoLeader { term: v.term });
    };
    let is_self = leader == v.node_id;
    let info = snap.info_of(&leader);
    Ok(Json(LeaderBody {
        leader_url: info.map(|i| i.url.clone()),
        leader_meta: info.map(|i| i.meta.clone()).unwrap_or_default(),
        node_url: snap.info.as_ref().map(|i| i.url.clone()),
        is_self,
        term: v.term,
        node: v.node_id.clone(),
        elected_at: v.leader_since.map(|i| wall_clock(i, now)),
        last_heartbeat_ms: v.leader_heard_at.map(|i| age_ms(i, now)),
        lease_remaining_ms: v
            .lease_until
            .filter(|_| is_self)
            .map(|l| l.saturating_duration_since(now).as_millis() as u64),
        leader,
    }))
}

#[derive(Serialize)]
pub struct TermBody {
    term: u64,
    leader: Option<String>,
    voted_for: Option<String>,
}

pub async fn get_term(State(s): State<AppState>) -> Json<TermBody> {
    let snap = s.snapshot();
    let now = crate::clock::now();
    Json(TermBody {
        term: snap.view.term,
        leader: current_leader(&snap.view, now),
        voted_for: snap.view.voted_for.clone(),
    })
}
