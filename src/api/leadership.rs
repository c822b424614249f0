//! `POST /candidacy` and `/step-down` (now, or scheduled for later: `GET` and `DELETE` show and
//! cancel the scheduled one): the operator commands that move leadership.

use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::extract::{Admin, JsonBody};
use super::{ApiError, ElectionApi, Group};
use crate::clock;
use crate::clock::wall::{parse_rfc3339, rfc3339, unix_ms_now};
use crate::election::{CommandError, Input, Outcome};
use crate::scheduled::{Finished, Operation, Refusal, MAX_AHEAD};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidacyRequest {
    eligible: bool,
    #[serde(default)]
    priority: Option<u32>,
}

#[derive(Serialize)]
pub struct CandidacyBody {
    eligible: bool,
    priority: u32,
}

pub async fn post_candidacy(
    admin: Admin,
    s: Group,
    JsonBody(req): JsonBody<CandidacyRequest>,
) -> Result<Json<CandidacyBody>, ApiError> {
    s.command(Input::SetCandidacy {
        eligible: req.eligible,
        priority: req.priority,
    })
    .await?
    .map_err(from_command)?;
    let v = s.snapshot().view.clone();
    tracing::info!(source = %admin.source, eligible = req.eligible, priority = req.priority, "candidacy changed");
    Ok(Json(CandidacyBody {
        eligible: req.eligible,
        priority: req.priority.unwrap_or(v.priority),
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepDownRequest {
    #[serde(default)]
    successor: Option<String>,
    #[serde(default)]
    expected_term: Option<u64>,
    /// RFC 3339: schedule it for then instead of now.
    #[serde(default)]
    at: Option<String>,
}

#[derive(Serialize)]
pub struct StepDownBody {
    term: u64,
    successor: Option<String>,
    /// A scheduled step-down: the operation to watch or cancel.
    #[serde(skip_serializing_if = "Option::is_none")]
    operation: Option<ScheduledBody>,
}

#[derive(Serialize)]
pub struct ScheduledBody {
    #[serde(flatten)]
    operation: Operation,
    /// What drops it before its hour: it is kept in this node's memory only.
    dropped_if: &'static str,
}

/// Said with every scheduled operation, so nobody counts on it surviving what it cannot.
const DROPPED_IF: &str =
    "leadership changes first: another term, a lost lease, or a restart of this node (which hands leadership over)";

#[derive(Serialize)]
pub struct ScheduleBody {
    /// The step-down waiting for its hour; `null` if none.
    pending: Option<ScheduledBody>,
    /// The latest that ended (done, refused, cancelled, dropped), oldest first.
    finished: Vec<Finished>,
}

pub fn scheduled_body(op: Operation) -> ScheduledBody {
    ScheduledBody {
        operation: op,
        dropped_if: DROPPED_IF,
    }
}

pub async fn get_step_down(s: Group) -> Json<ScheduleBody> {
    Json(ScheduleBody {
        pending: s.scheduler.pending().map(scheduled_body),
        finished: s.scheduler.finished(),
    })
}

pub async fn delete_step_down(admin: Admin, s: Group) -> Result<Json<Finished>, ApiError> {
    let f = s
        .scheduler
        .cancel()
        .map_err(|_| ApiError::NothingScheduled)?;
    tracing::info!(source = %admin.source, operation = %f.operation.id, "scheduled step-down cancelled");
    Ok(Json(f))
}

/// `POST /step-down {"at": ...}`: checked now as far as it can be (this node leads, the term is
/// the expected one, the successor is a member, the hour lies ahead), carried out at its hour.
async fn schedule_step_down(
    s: &ElectionApi,
    admin: &Admin,
    at: &str,
    req: StepDownRequest,
) -> Result<(StatusCode, Json<StepDownBody>), ApiError> {
    let at_ms = parse_rfc3339(at).map_err(ApiError::InvalidBody)?;
    let now_ms = unix_ms_now();
    if at_ms <= now_ms {
        return Err(ApiError::InvalidBody(format!(
            "at {at} has passed already; give a time ahead, or leave it out to step down now"
        )));
    }
    if at_ms - now_ms > MAX_AHEAD.as_millis() as u64 {
        return Err(ApiError::InvalidBody(format!(
            "at {at} is more than {} days ahead",
            MAX_AHEAD.as_secs() / 86_400
        )));
    }
    let snap = s.snapshot();
    let v = &snap.view;
    if !v.is_leader_at(clock::now()) {
        return Err(ApiError::NotLeader {
            term: v.term,
            leader: super::current_leader(v, clock::now()),
        });
    }
    if let Some(expected) = req.expected_term {
        if expected != v.term {
            return Err(ApiError::TermMismatch {
                expected,
                current: v.term,
            });
        }
    }
    if let Some(succ) = &req.successor {
        if succ == &v.node_id || !snap.member_set.contains(succ) {
            return Err(ApiError::SuccessorIneligible {
                successor: succ.clone(),
                reason: format!(
                    "name another member than this node ({}); whether it can lead is checked at {at}",
                    snap.member_set
                ),
            });
        }
    }
    let op = s
        .scheduler
        .schedule(at_ms, req.successor.clone(), v.term)
        .map_err(|r| match r {
            Refusal::Pending(p) => ApiError::AlreadyScheduled {
                operation: p.id,
                at: p.at,
            },
            Refusal::Nothing => ApiError::NothingScheduled,
        })?;
    tracing::info!(source = %admin.source, operation = %op.id, at = %rfc3339(at_ms), "step-down scheduled by the operator");
    Ok((
        StatusCode::ACCEPTED,
        Json(StepDownBody {
            term: v.term,
            successor: req.successor,
            operation: Some(scheduled_body(op)),
        }),
    ))
}

pub async fn post_step_down(
    admin: Admin,
    s: Group,
    JsonBody(req): JsonBody<StepDownRequest>,
) -> Result<(StatusCode, Json<StepDownBody>), ApiError> {
    if let Some(at) = req.at.clone() {
        return schedule_step_down(&s, &admin, &at, req).await;
    }
    let result = s
        .command(Input::StepDown {
            successor: req.successor.clone(),
            expected_term: req.expected_term,
        })
        .await?;
    match result {
        Ok(Outcome::SteppedDown { term, successor }) => {
            tracing::info!(source = %admin.source, term, successor = successor.as_deref().unwrap_or(""), "stepped down");
            Ok((
                StatusCode::ACCEPTED,
                Json(StepDownBody {
                    term,
                    successor,
                    operation: None,
                }),
            ))
        }
        Ok(_) => {
            let v = s.snapshot().view.clone();
            Ok((
                StatusCode::ACCEPTED,
                Json(StepDownBody {
                    term: v.term,
                    successor: req.successor,
                    operation: None,
                }),
            ))
        }
        Err(e) => {
            tracing::warn!(source = %admin.source, error = %e, "step-down refused");
            Err(from_command(e))
        }
    }
}

fn from_command(e: CommandError) -> ApiError {
    match e {
        CommandError::NotLeader { term, leader } => ApiError::NotLeader { term, leader },
        CommandError::TermMismatch { expected, current } => {
            ApiError::TermMismatch { expected, current }
        }
        // The typed reason in its words, which say what would make the same request succeed.
        CommandError::SuccessorIneligible { successor, reason } => ApiError::SuccessorIneligible {
            successor,
            reason: reason.to_string(),
        },
        e @ CommandError::NoSuccessorInMaintenance => {
            ApiError::NoSuccessorInMaintenance(e.to_string())
        }
    }
}
