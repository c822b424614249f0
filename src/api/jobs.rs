//! `POST /jobs/holds`, `PUT` and `DELETE /jobs/holds/{id}`: the holds of `pilot-election once`
//! (src/jobs.rs). A hold is an operator's command (the admin token), since a held command can
//! delay a handover by up to its time to live.

use axum::http::{StatusCode, Uri};
use axum::Json;

use super::extract::Admin;
use super::{ApiError, Group};
use crate::clock;
use crate::jobs::{HoldBody, HoldError};

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
    let snap = s.snapshot();
    let granted = s.holds.take(&snap.view, clock::now())?;
    tracing::info!(source = %admin.source, id = granted.id, term = granted.term, "hold granted to a leader-only job");
    Ok((
        StatusCode::CREATED,
        Json(HoldBody::new(&granted, &snap.view.node_id, &s.group)),
    ))
}

pub async fn put_hold(_admin: Admin, s: Group, uri: Uri) -> Result<Json<HoldBody>, ApiError> {
    let id = hold_id(&uri)?;
    let snap = s.snapshot();
    let granted = s.holds.renew(id, &snap.view, clock::now())?;
    Ok(Json(HoldBody::new(&granted, &snap.view.node_id, &s.group)))
}

pub async fn delete_hold(admin: Admin, s: Group, uri: Uri) -> Result<StatusCode, ApiError> {
    let id = hold_id(&uri)?;
    s.holds.release(id)?;
    tracing::info!(source = %admin.source, id, "hold given back");
    Ok(StatusCode::NO_CONTENT)
}
