//! `POST /peer/messages`: where the HTTP transport's peers deliver wire messages.
//!
//! Bytes are checked here so that the sender learns at once that a message is malformed; the
//! election loop parses again (it owns counting and the rules). Over mutual TLS the sender is
//! known by its certificate, so a message is taken only from the member the certificate names:
//! another member's key or a stolen certificate cannot speak for anyone else.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::extract::read_body;
use super::{ApiError, AppState};
use crate::election::{Message, MAX_MESSAGE_BYTES};
use crate::tls::cert::ClientNames;

pub async fn post_messages(
    State(s): State<AppState>,
    req: Request,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let names = req.extensions().get::<ClientNames>().cloned();
    let bytes = read_body(req, MAX_MESSAGE_BYTES).await?;
    let m = match Message::parse(&bytes) {
        Ok(m) => m,
        Err(e) => {
            s.metrics.received("unknown", "malformed");
            return Err(ApiError::MalformedMessage(e.to_string()));
        }
    };
    if let Some(names) = names {
        if !names.names_member(&m.from) {
            s.metrics.received("unknown", "wrong_certificate");
            return Err(ApiError::WrongCertificate {
                from: m.from,
                names: names.0.to_vec(),
            });
        }
    }
    s.ingress
        .try_send(bytes.to_vec())
        .map_err(|_| ApiError::Overloaded)?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true}))))
}
