//! `POST /candidacy` and `POST /step-down`: the operator commands that move leadership.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::extract::{Admin, JsonBody};
use super::{ApiError, AppState};
use crate::election::{CommandError, Input, Outcome};

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
    State(s): State<AppState>,
    admin: Admin,
    JsonBody(req): JsonBody<CandidacyRequest>,
) -> Result<Json<CandidacyBody>, ApiError> {
    s.command(Input::SetCandidacy {
        eligible: req.eligible,
        priority: req.priority,
    })
    .await?
    .map_err(from_command)?;
    let v = s.snapshot().view;
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
}

#[derive(Serialize)]
pub struct StepDownBody {
    term: u64,
    successor: Option<String>,
}

pub async fn post_step_down(
    State(s): State<AppState>,
    admin: Admin,
    JsonBody(req): JsonBody<StepDownRequest>,
) -> Result<(StatusCode, Json<StepDownBody>), ApiError> {
    let result = s
        .command(Input::StepDown {
            successor: req.successor.clone(),
            expected_term: req.expected_term,
        })
        .await?;
    match result {
        Ok(Outcome::SteppedDown { term, successor }) => {
            tracing::info!(source = %admin.source, term, successor = successor.as_deref().unwrap_or(""), "stepped down");
            Ok((StatusCode::ACCEPTED, Json(StepDownBody { term, successor })))
        }
        Ok(_) => {
            let v = s.snapshot().view;
            Ok((
                StatusCode::ACCEPTED,
                Json(StepDownBody {
                    term: v.term,
                    successor: req.successor,
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
        CommandError::SuccessorIneligible { successor, reason } => {
            ApiError::SuccessorIneligible { successor, reason }
        }
    }
}
