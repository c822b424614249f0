//! `GET`, `POST` and `DELETE /pause`: the operator's cluster-wide maintenance (docs/protocol.md,
//! rule 16). The write is made on this node, kept on its disk, and reaches every member on the
//! next messages; while it holds, no member starts a campaign of its own and no leader preempts.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::extract::{Admin, JsonBody};
use super::{ApiError, AppState};
use crate::clock::wall::{parse_rfc3339, rfc3339, unix_ms_now};
use crate::election::Maintenance;
use crate::runtime::MaintenanceRequest;

/// The longest `reason` kept: it travels on every message.
pub const MAX_REASON_BYTES: usize = 256;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    /// RFC 3339; the pause ends by itself then. Absent: until `DELETE /pause`.
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PauseBody {
    /// Maintenance holds on this node now (a pause whose end has passed does not).
    paused: bool,
    /// The newest write this node has seen; `null` if none was ever made.
    setting: Option<SettingBody>,
}

#[derive(Debug, Serialize)]
pub struct SettingBody {
    on: bool,
    until: Option<String>,
    at: String,
    by: String,
    version: u64,
    reason: Option<String>,
}

impl SettingBody {
    pub fn of(m: &Maintenance) -> SettingBody {
        SettingBody {
            on: m.on,
            until: m.until.map(rfc3339),
            at: rfc3339(m.at),
            by: m.by.clone(),
            version: m.version,
            reason: m.reason.clone(),
        }
    }
}

pub async fn get_pause(State(s): State<AppState>) -> Json<PauseBody> {
    let snap = s.snapshot();
    Json(PauseBody {
        paused: snap.view.maintenance,
        setting: snap.maintenance.as_ref().map(SettingBody::of),
    })
}

pub async fn post_pause(
    State(s): State<AppState>,
    admin: Admin,
    JsonBody(req): JsonBody<PauseRequest>,
) -> Result<Json<PauseBody>, ApiError> {
    let until = match &req.until {
        None => None,
        Some(t) => {
            let at = parse_rfc3339(t).map_err(ApiError::InvalidBody)?;
            if at <= unix_ms_now() {
                return Err(ApiError::InvalidBody(format!(
                    "until {t} has passed already; give a time ahead, or leave it out to pause until DELETE /pause"
                )));
            }
            Some(at)
        }
    };
    if let Some(r) = &req.reason {
        if r.len() > MAX_REASON_BYTES {
            return Err(ApiError::InvalidBody(format!(
                "reason is {} bytes; at most {MAX_REASON_BYTES}",
                r.len()
            )));
        }
    }
    let write = change(&s, true, until, req.reason).await?;
    tracing::info!(source = %admin.source, until = until.map(rfc3339).unwrap_or_default(), "paused: no automatic failover");
    Ok(Json(PauseBody {
        paused: write.in_force(unix_ms_now()),
        setting: Some(SettingBody::of(&write)),
    }))
}

pub async fn delete_pause(
    State(s): State<AppState>,
    admin: Admin,
) -> Result<Json<PauseBody>, ApiError> {
    let write = change(&s, false, None, None).await?;
    tracing::info!(source = %admin.source, "resumed: automatic failover is back");
    Ok(Json(PauseBody {
        paused: false,
        setting: Some(SettingBody::of(&write)),
    }))
}

async fn change(
    s: &AppState,
    on: bool,
    until: Option<u64>,
    reason: Option<String>,
) -> Result<Maintenance, ApiError> {
    let (reply, answer) = oneshot::channel();
    s.maintenance
        .send(MaintenanceRequest {
            on,
            until,
            reason,
            reply,
        })
        .await
        .map_err(|_| ApiError::LoopStopped)?;
    tokio::time::timeout(std::time::Duration::from_secs(5), answer)
        .await
        .map_err(|_| ApiError::LoopStopped)?
        .map_err(|_| ApiError::LoopStopped)?
        .map_err(|e| ApiError::StorageFailed(e.to_string()))
}
