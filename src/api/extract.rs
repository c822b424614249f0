//! Extractors whose every rejection is an [`ApiError`], and the operator check.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::{header, request::Parts};
use serde::de::DeserializeOwned;
use subtle::ConstantTimeEq;

use crate::log_limit::LogLimit;

use super::{ApiError, AppState};

/// The request body did not arrive within `--body-timeout`: the server's body deadline fails the
/// read with it, and [`read_body`] answers 408.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

impl BodyTimedOut {
    /// Whether `e`, or anything it was caused by, is a body deadline.
    pub fn caused(e: &(dyn std::error::Error + 'static)) -> Option<BodyTimedOut> {
        cause::<BodyTimedOut>(e).copied()
    }
}

/// The first error of type `T` in `e`'s chain of sources: the framework wraps body errors in its
/// own, once per layer, so the one that says what happened is somewhere down the chain.
fn cause<'e, T: std::error::Error + 'static>(
    e: &'e (dyn std::error::Error + 'static),
) -> Option<&'e T> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<T>() {
            return Some(t);
        }
        cur = err.source();
    }
    None
}

/// Largest request body the API reads.
pub const BODY_LIMIT: usize = 64 * 1024;

/// Reads at most `limit` bytes of the body; more is a 413, whatever `Content-Length` claims.
pub async fn read_body(req: Request, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|e| body_error(&e, limit))
}

/// What failed reading a body of at most `limit` bytes: its deadline (408), its size (413) or
/// the connection (400).
pub(super) fn body_error(e: &axum::Error, limit: usize) -> ApiError {
    if let Some(t) = BodyTimedOut::caused(e) {
        return ApiError::RequestTimeout {
            after_ms: t.0.as_millis() as u64,
        };
    }
    if cause::<http_body_util::LengthLimitError>(e).is_some() {
        ApiError::PayloadTooLarge { limit }
    } else {
        ApiError::BadRequest(e.to_string())
    }
}

/// A JSON body: `application/json`, at most 64 KiB, no unknown fields (the target types deny
/// them), every failure a JSON error.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes = read_body(req, BODY_LIMIT).await?;
        // Syntax first (400), then shape (422), so the status does not depend on which error
        // the parser happens to meet first.
        let raw: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
        let value = T::deserialize(raw).map_err(|e| ApiError::InvalidBody(e.to_string()))?;
        Ok(JsonBody(value))
    }
}

/// Operator credentials.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    pub token: Option<String>,
    pub allow_unauthenticated: bool,
}

impl Auth {
    pub fn check(&self, header_value: Option<&str>) -> Result<(), ApiError> {
        let Some(token) = &self.token else {
            return if self.allow_unauthenticated {
                Ok(())
            } else {
                Err(ApiError::AdminTokenNotConfigured)
            };
        };
        let presented = header_value
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(ApiError::Unauthorized)?;
        if bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
            Ok(())
        } else {
            Err(ApiError::Forbidden)
        }
    }
}

/// Proof that the request comes from an operator. Runs before the body is read, and logs every
/// decision with the source address (never the token).
pub struct Admin {
    pub source: String,
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let source = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(|| "unknown".to_string(), |c| c.0.to_string());
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match state.auth.check(header) {
            Ok(()) => Ok(Admin { source }),
            Err(e) => {
                if let Some(not_logged) = refusal_to_log() {
                    tracing::warn!(
                        source = %source,
                        method = %parts.method,
                        path = parts.uri.path(),
                        error = e.code(),
                        not_logged,
                        "refused mutation"
                    );
                }
                Err(e)
            }
        }
    }
}

/// Refused mutations logged per second at most: a flood of them must not become a flood of log
/// lines (disk and CPU); the next line logged counts those left out.
const REFUSALS_LOGGED_PER_SECOND: u32 = 20;

static REFUSAL_LOG: Mutex<LogLimit> = Mutex::new(LogLimit::per_second(REFUSALS_LOGGED_PER_SECOND));

fn refusal_to_log() -> Option<u64> {
    let mut log = REFUSAL_LOG.lock().unwrap_or_else(|e| e.into_inner());
    log.admit(crate::clock::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_logged_twenty_a_second_and_the_rest_counted() {
        let mut log = LogLimit::per_second(REFUSALS_LOGGED_PER_SECOND);
        let t0 = crate::clock::now();
        let first: Vec<_> = (0..25).map(|_| log.admit(t0)).collect();
        assert_eq!(first.iter().filter(|x| x.is_some()).count(), 20);
        assert!(first[..20].iter().all(|x| *x == Some(0)));
        assert_eq!(log.admit(t0 + Duration::from_millis(999)), None);
        assert_eq!(
            log.admit(t0 + Duration::from_secs(1)),
            Some(6),
            "the next second's first line counts those left out"
        );
        assert_eq!(log.admit(t0 + Duration::from_secs(1)), Some(0));
    }
}
