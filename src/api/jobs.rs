//! `POST /jobs/holds`, `PUT` and `DELETE /jobs/holds/{id}`: the holds of `pilot-election once`
//! (src/jobs.rs). A hold is an operator's command (the admin token), since a held command can
//! delay a handover by up to its time to live.

use axum::http::{StatusCode, Uri};
use axum::Json;
use serde::Serialize;

use super::extract::Admin;
use super::{ApiError, Group};
use crate::clock;
use crate::jobs::{Granted, HoldError};

#[derive(Debug, Serialize)]
pub struct HoldBody {
    /// What the client renews and gives back.
    id: u64,
    /// The term the command runs in: its fencing token.
    term: u64,
    /// This node, the leader.
    leader: String,
    group: String,
    /// How long the lease runs from this answer: the command must be gone by then.
    lease_remaining_ms: u64,
    /// How long the hold lives without a renewal.
    ttl_ms: u64,
    /// How often the client renews it.
    renew_every_ms: u64,
}

fn body(s: &Group, g: Granted) -> HoldBody {
    HoldBody {
        id: g.id,
        term: g.term,
        leader: s.snapshot().view.node_id.clone(),
        group: s.group.clone(),
        lease_remaining_ms: g.lease_remaining.as_millis() as u64,
        ttl_ms: g.ttl.as_millis() as u64,
        renew_every_ms: (g.ttl / 4).as_millis() as u64,
    }
}

impl From<HoldError> for ApiError {
    fn from(e: HoldError) -> ApiError {
        match e {
            HoldError::NotLeader { term, leader } => ApiError::NotLeader { term, leader },
            HoldError::HandingOver { term } => ApiError::HandingOver { term },
            HoldError::Unknown(id) => ApiError::UnknownHold(id.to_string()),
        }
    }
}

/// The hold's id: the last segment of the path (a `/groups/{group}/...` path has two captures).
fn hold_id(uri: &Uri) -> Result<u64, ApiError> {
    let last = uri.path().rsplit('/').next().unwrap_or_default();
    last.parse()
        .map_err(|_| ApiError::UnknownHold(last.chars().take(64).collect()))
}

pub async fn post_hold(admin: Admin, s: Group) -> Result<(StatusCode, Json<HoldBody>), ApiError> {
    let view = s.snapshot().view.clone();
    let granted = s.holds.take(&view, clock::now())?;
    tracing::info!(source = %admin.source, id = granted.id, term = granted.term, "hold granted to a leader-only job");
    Ok((StatusCode::CREATED, Json(body(&s, granted))))
}

pub async fn put_hold(_admin: Admin, s: Group, uri: Uri) -> Result<Json<HoldBody>, ApiError> {
    let id = hold_id(&uri)?;
    let view = s.snapshot().view.clone();
    let granted = s.holds.renew(id, &view, clock::now())?;
    Ok(Json(body(&s, granted)))
}

pub async fn delete_hold(admin: Admin, s: Group, uri: Uri) -> Result<StatusCode, ApiError> {
    let id = hold_id(&uri)?;
    s.holds.release(id)?;
    tracing::info!(source = %admin.source, id, "hold given back");
    Ok(StatusCode::NO_CONTENT)
}
