//! `GET /healthz` (the election loop runs) and `GET /readyz` (the transport works).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use tokio::time::Instant;

use super::AppState;
use crate::transport::Health;

#[derive(Serialize)]
pub struct HealthBody {
    status: &'static str,
    loop_age_ms: u64,
    lease_ms: u64,
}

/// Fails once the loop has not run for longer than the lease: by then a leader on this node
/// would have lost its lease without noticing.
pub async fn get_healthz(State(s): State<AppState>) -> (StatusCode, Json<HealthBody>) {
    let last = *s.clock.lock().unwrap_or_else(|e| e.into_inner());
    let lease = s.snapshot.borrow().timings.lease;
    let age = Instant::now().saturating_duration_since(last);
    let ok = age <= lease && s.snapshot.has_changed().is_ok();
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        Json(HealthBody {
            status: if ok { "ok" } else { "stalled" },
            loop_age_ms: age.as_millis() as u64,
            lease_ms: lease.as_millis() as u64,
        }),
    )
}

#[derive(Serialize)]
pub struct ReadyBody {
    ready: bool,
    /// Why not, when the transport says (the pilot transport names each broker, what it is
    /// doing and what to run); the same text as `transport.reason`, up front for probes.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    transport: Health,
}

pub async fn get_readyz(State(s): State<AppState>) -> (StatusCode, Json<ReadyBody>) {
    let transport = s.snapshot.borrow().transport.clone();
    let code = if transport.healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        Json(ReadyBody {
            ready: transport.healthy,
            reason: transport.reason.clone(),
            transport,
        }),
    )
}
