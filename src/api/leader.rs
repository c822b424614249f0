//! `GET /leader` and `GET /term`: who leads, and the term clients use as a fencing token.

use std::collections::BTreeMap;

use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use super::consistent::{self, Asked, Consistency};
use super::{age_ms, current_leader, wall_clock, ApiError, Group};

/// Borrowed from the snapshot and written out while it is borrowed: the answer copies no
/// string of the snapshot.
#[derive(Serialize)]
pub struct LeaderBody<'a> {
    leader: &'a str,
    /// Where clients reach the leader's API, as it announced (`null`: not announced).
    leader_url: Option<&'a str>,
    leader_meta: &'a BTreeMap<String, String>,
    /// This node's own URL.
    node_url: Option<&'a str>,
    term: u64,
    is_self: bool,
    node: &'a str,
    elected_at: Option<String>,
    last_heartbeat_ms: Option<u64>,
    lease_remaining_ms: Option<u64>,
    /// Answered by the leader once a quorum confirmed it after the request arrived
    /// (`?consistent=true`), rather than from this node's view.
    consistent: bool,
}

static NO_META: BTreeMap<String, String> = BTreeMap::new();

pub async fn get_leader(s: Group, c: Consistency, uri: Uri) -> Result<Response, ApiError> {
    // The snapshot's `Arc`, taken out of the channel at once: the answer is written without
    // holding the channel's lock (the loop publishes while it is written) and copies only what
    // it answers.
    let snap = if c.consistent {
        consistent::confirmed(&s, asked(&uri)).await?
    } else {
        s.snapshot()
    };
    let now = crate::clock::now();
    let v = &snap.view;
    let Some(leader) = v.leader_at(now) else {
        return Err(ApiError::NoLeader { term: v.term });
    };
    let is_self = leader == v.node_id;
    let info = snap.info_of(leader);
    let body = LeaderBody {
        leader_url: info.map(|i| i.url.as_str()),
        leader_meta: info.map_or(&NO_META, |i| &i.meta),
        node_url: snap.info.as_ref().map(|i| i.url.as_str()),
        is_self,
        term: v.term,
        node: &v.node_id,
        elected_at: v.leader_since.map(|i| wall_clock(i, now)),
        last_heartbeat_ms: v.leader_heard_at.map(|i| age_ms(i, now)),
        lease_remaining_ms: v
            .lease_until
            .filter(|_| is_self)
            .map(|l| l.saturating_duration_since(now).as_millis() as u64),
        leader,
        consistent: c.consistent,
    };
    Ok(Json(body).into_response())
}

/// The read to ask the leader again: the same path and query.
fn asked(uri: &Uri) -> Asked<'_> {
    Asked {
        path_and_query: uri.path_and_query().map_or("/", |p| p.as_str()),
    }
}

#[derive(Serialize)]
pub struct TermBody {
    term: u64,
    leader: Option<String>,
    voted_for: Option<String>,
    /// As for `GET /leader`.
    consistent: bool,
}

pub async fn get_term(s: Group, c: Consistency, uri: Uri) -> Result<Json<TermBody>, ApiError> {
    let snap = if c.consistent {
        consistent::confirmed(&s, asked(&uri)).await?
    } else {
        s.snapshot()
    };
    let now = crate::clock::now();
    Ok(Json(TermBody {
        term: snap.view.term,
        leader: current_leader(&snap.view, now),
        voted_for: snap.view.voted_for.clone(),
        consistent: c.consistent,
    }))
}
