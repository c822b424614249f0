//! `GET`, `POST` and `DELETE /pause`: the operator's cluster-wide maintenance (docs/protocol.md,
//! rule 16). The write is made on this node, kept on its disk, and reaches every member on the
//! next messages; while it holds, no member starts a campaign of its own and no leader preempts.

use axum::Json;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::extract::{Admin, JsonBody};
use std::sync::Arc;

use super::{ApiError, ElectionApi, Group};
use crate::clock::wall::{parse_rfc3339, rfc3339, unix_ms_now};
use crate::election::Maintenance;
use crate::runtime::{MaintenanceRequest, Snapshot};

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
    /// The members that hold that write (this node first): those whose latest message carried
    /// it, which a member sends only once it is on its disk.
    held_by: Vec<String>,
    /// How many members must hold a write before it is answered as made: a majority.
    quorum: usize,
    /// Whether a quorum holds it: from then on it outlives any minority, and a leader that dies
    /// is not replaced while the pause holds.
    confirmed: bool,
}

impl PauseBody {
    fn of(snap: &Snapshot) -> PauseBody {
        let quorum = snap.member_set.quorum();
        PauseBody {
            paused: snap.view.maintenance,
            setting: snap.maintenance.as_ref().map(SettingBody::of),
            held_by: snap.maintenance_held_by.clone(),
            quorum,
            confirmed: snap.maintenance.is_some() && snap.maintenance_held_by.len() >= quorum,
        }
    }
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

pub async fn get_pause(s: Group) -> Json<PauseBody> {
    Json(PauseBody::of(&s.snapshot()))
}

pub async fn post_pause(
    admin: Admin,
    s: Group,
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
    let snap = confirmed(&s, &write).await?;
    tracing::info!(held_by = ?snap.maintenance_held_by, "the pause is held by a quorum");
    Ok(Json(PauseBody::of(&snap)))
}

pub async fn delete_pause(admin: Admin, s: Group) -> Result<Json<PauseBody>, ApiError> {
    let write = change(&s, false, None, None).await?;
    tracing::info!(source = %admin.source, "resumed: automatic failover is back");
    let snap = confirmed(&s, &write).await?;
    Ok(Json(PauseBody::of(&snap)))
}

/// Waits, for at most the election timeout `T`, until a quorum of members holds `write`: the
/// snapshot in which it does. An answered write is then one that a restart of any minority
/// cannot lose and that a leader's death right after the answer cannot outrun (every member
/// that holds it passes it on with its next message, well within the `T` the others wait
/// before they campaign). `T` is several heartbeat intervals: a quorum that has not taken it by
/// then is one that cannot be reached now, and the answer says who holds it.
async fn confirmed(s: &ElectionApi, write: &Maintenance) -> Result<Arc<Snapshot>, ApiError> {
    let wait = s.snapshot().timings.election_timeout;
    let deadline = crate::clock::now() + wait;
    let verdict = s.settle(deadline, |snap| {
        let newest = snap.maintenance.as_ref()?;
        let ours = newest.version == write.version && newest.by == write.by;
        if ours && snap.maintenance_held_by.len() >= snap.member_set.quorum() {
            return Some(Ok(snap.clone()));
        }
        newest.supersedes(write).then(|| {
            Err(ApiError::MaintenanceSuperseded {
                by: newest.by.clone(),
                version: newest.version,
            })
        })
    });
    verdict.await.unwrap_or_else(|snap| {
        let ours = snap
            .maintenance
            .as_ref()
            .is_some_and(|m| m.version == write.version && m.by == write.by);
        Err(ApiError::NotConfirmed {
            held_by: if ours {
                snap.maintenance_held_by.clone()
            } else {
                Vec::new()
            },
            quorum: snap.member_set.quorum(),
            members: snap.member_set.len(),
            after_ms: wait.as_millis() as u64,
        })
    })
}

async fn change(
    s: &ElectionApi,
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
