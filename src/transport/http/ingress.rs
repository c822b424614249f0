//! `POST /peer/messages`: where the http transport's peers deliver wire messages. The node's
//! HTTP server serves it beside the API (the API's router merges it, and the server keeps
//! connections for it or a listener of its own, `--peer-listen`).
//!
//! A single message is checked here so that the sender learns at once that it is malformed;
//! the election loop parses again (it owns counting and the rules). A batch is only recognised
//! here (by its first bytes) and read by the loop, which drops and counts a malformed one:
//! reading a thousand groups' batch twice cost an idle node a twentieth of its CPU. Over mutual
//! TLS the sender is known by its certificate, so a message, alone or in a batch, is taken only
//! from the member the certificate names: another member's key or a stolen certificate cannot
//! speak for anyone else.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::election::batch::{Batch, BATCH_PREFIX, MAX_BATCH_BYTES};
use crate::election::{Message, WireError, MAX_MESSAGE_BYTES};
use crate::metrics::{MessageType, Metrics, Received};
use crate::tls::cert::ClientNames;
use crate::transport::{Inbound, Ingress};

/// The route's path; the peers' senders POST to it.
pub const PEER_MESSAGES: &str = "/peer/messages";

/// A batch is taken only while fewer than this many wire messages wait for the loop.
const BATCHES_QUEUED: usize = 64;

/// Why a peer's message was refused. The API renders it as it renders every error of the node
/// (`api::ApiError`, one shape for all of them), so the transport needs no error format of its
/// own.
#[derive(Debug)]
pub enum Refusal {
    /// The body could not be read whole within `limit` bytes (too large, too slow, broken).
    Body { error: axum::Error, limit: usize },
    /// A single message larger than [`MAX_MESSAGE_BYTES`] (a batch may be up to
    /// [`MAX_BATCH_BYTES`]): the limit.
    TooLarge { limit: usize },
    /// Not a wire message.
    Malformed(String),
    /// Over mutual TLS, the certificate does not name the member the message is from.
    WrongCertificate { from: String, names: Vec<String> },
    /// The election loop's inbound queue is full.
    Overloaded,
}

#[derive(Clone)]
struct Delivery {
    inbound: Inbound,
    metrics: Arc<Metrics>,
}

/// The route, delivering into `inbound` (the queue the election loop reads).
pub fn ingress(inbound: Inbound, metrics: Arc<Metrics>) -> Ingress {
    Ingress {
        router: Router::new()
            .route(PEER_MESSAGES, post(post_messages))
            .with_state(Delivery { inbound, metrics }),
        routes: &[("post", PEER_MESSAGES)],
    }
}

async fn post_messages(
    State(s): State<Delivery>,
    req: Request,
) -> Result<(StatusCode, Json<Value>), Refusal> {
    let names = req.extensions().get::<ClientNames>().cloned();
    let bytes = axum::body::to_bytes(req.into_body(), MAX_BATCH_BYTES)
        .await
        .map_err(|error| Refusal::Body {
            error,
            limit: MAX_BATCH_BYTES,
        })?;
    if bytes.starts_with(BATCH_PREFIX) {
        return take_batch(&s, names, &bytes);
    }
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(Refusal::TooLarge {
            limit: MAX_MESSAGE_BYTES,
        });
    }
    let m = match Message::parse(&bytes) {
        Ok(m) => m,
        Err(e) => {
            s.metrics
                .received(MessageType::Unknown, Received::Malformed);
            return Err(Refusal::Malformed(e.to_string()));
        }
    };
    if let Some(names) = names {
        if !names.names_member(&m.from) {
            s.metrics
                .received(MessageType::Unknown, Received::WrongCertificate);
            return Err(Refusal::WrongCertificate {
                from: m.from,
                names: names.0.to_vec(),
            });
        }
    }
    s.inbound
        .try_send(bytes.to_vec())
        .map_err(|_| Refusal::Overloaded)?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true}))))
}

/// A batch (docs/protocol.md, rule 18): its messages are parsed and checked by the election
/// loop, as each would be alone; here, over mutual TLS, each must be from the member the
/// certificate names (which reads the batch). Taken only while the loop's queue is nearly
/// empty, so that a queue of batches, each up to a megabyte, stays small.
fn take_batch(
    s: &Delivery,
    names: Option<ClientNames>,
    bytes: &[u8],
) -> Result<(StatusCode, Json<Value>), Refusal> {
    if let Some(names) = names {
        let read = Batch::read(bytes)
            .and_then(|b| b.ok_or_else(|| WireError::Malformed("not a batch".into())));
        let batch = match read {
            Ok(batch) => batch,
            Err(e) => {
                s.metrics
                    .received(MessageType::Unknown, Received::Malformed);
                return Err(Refusal::Malformed(e.to_string()));
            }
        };
        #[derive(serde::Deserialize)]
        struct From<'a> {
            #[serde(borrow)]
            from: std::borrow::Cow<'a, str>,
        }
        for message in batch.each() {
            let from = match serde_json::from_slice::<From<'_>>(message) {
                Ok(f) => f.from,
                Err(e) => {
                    s.metrics
                        .received(MessageType::Unknown, Received::Malformed);
                    return Err(Refusal::Malformed(format!("a message of the batch: {e}")));
                }
            };
            if !names.names_member(&from) {
                s.metrics
                    .received(MessageType::Unknown, Received::WrongCertificate);
                return Err(Refusal::WrongCertificate {
                    from: from.into_owned(),
                    names: names.0.to_vec(),
                });
            }
        }
    }
    if s.inbound.capacity() + BATCHES_QUEUED < s.inbound.max_capacity() {
        return Err(Refusal::Overloaded);
    }
    s.inbound
        .try_send(bytes.to_vec())
        .map_err(|_| Refusal::Overloaded)?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true}))))
}
