//! `GET|HEAD /role/leader` and `/role/follower`: status codes for load balancers.
//!
//! The answer is judged against the current time: a leader whose loop is stuck stops answering
//! 200 on `/role/leader` when its lease runs out, which is what keeps two backends from being
//! "leader" at once.

use axum::http::{header, StatusCode};
use axum::Json;
use serde::Serialize;

use super::consistent::{self, Asked, Consistency};
use super::{current_leader, ElectionApi, Group};

#[derive(Serialize)]
pub struct RoleBody {
    node: String,
    role: &'static str,
    term: u64,
    leader: Option<String>,
}

/// 200 when this node's role (judged now) is the one asked for, 503 otherwise.
fn answer(s: &ElectionApi, want_leader: bool) -> (StatusCode, Json<RoleBody>) {
    let snap = s.snapshot();
    let now = crate::clock::now();
    let leading = snap.view.is_leader_at(now);
    let code = if leading == want_leader {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = RoleBody {
        node: snap.view.node_id.clone(),
        role: if leading { "leader" } else { "follower" },
        term: snap.view.term,
        leader: current_leader(&snap.view, now),
    };
    (code, Json(body))
}

/// With `?consistent=true`, 200 only once a quorum confirmed this node's leadership after the
/// check arrived (never a redirect: a load balancer asks each backend about itself).
pub async fn get_role_leader(s: Group, c: Consistency) -> (StatusCode, Json<RoleBody>) {
    if c.consistent {
        let here = Asked {
            path_and_query: "/role/leader",
        };
        if consistent::confirmed(&s, here).await.is_err() {
            let (_, body) = answer(&s, true);
            return (StatusCode::SERVICE_UNAVAILABLE, body);
        }
    }
    answer(&s, true)
}

pub async fn get_role_follower(s: Group) -> (StatusCode, Json<RoleBody>) {
    answer(&s, false)
}

/// `OPTIONS` answers as `HEAD` does (the status, no body): HAProxy's bare `option httpchk` and
/// Patroni-style checks send it.
fn options(
    s: &ElectionApi,
    want_leader: bool,
) -> (StatusCode, [(header::HeaderName, &'static str); 1]) {
    let (code, _) = answer(s, want_leader);
    (code, [(header::ALLOW, "GET, HEAD, OPTIONS")])
}

pub async fn options_role_leader(
    s: Group,
) -> (StatusCode, [(header::HeaderName, &'static str); 1]) {
    options(&s, true)
}

pub async fn options_role_follower(
    s: Group,
) -> (StatusCode, [(header::HeaderName, &'static str); 1]) {
    options(&s, false)
}
