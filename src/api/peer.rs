//! `POST /peer/messages`: where the HTTP transport's peers deliver wire messages.
//!
//! Bytes are checked here so that the sender learns at once that a message is malformed; the
//! election loop parses again (it owns counting and the rules).

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::extract::read_body;
use super::{ApiError, AppState};
use crate::election::{Message, MAX_MESSAGE_BYTES};

pub async fn post_messages(
    State(s): State<AppState>,
    req: Request,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let bytes = read_body(req, MAX_MESSAGE_BYTES).await?;
    if let Err(e) = Message::parse(&bytes) {
        s.metrics.received("unknown", "malformed");
        return Err(ApiError::MalformedMessage(e.to_string()));
    }
    s.ingress
        .try_send(bytes.to_vec())
        .map_err(|_| ApiError::Overloaded)?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true}))))
}
