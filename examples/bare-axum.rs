//! The baseline for `GET /leader` throughput: axum with one handler returning a constant JSON
//! body of the same shape, and nothing else (no state, no middleware). The bench compares the
//! real node against it in the same run, so the ratio is what the service's own work costs.
//!
//! `cargo run --release --example bare-axum -- 127.0.0.1:PORT`

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

async fn leader() -> Json<Value> {
    Json(json!({
        "leader": "n3",
        "term": 7,
        "is_self": false,
        "node": "n1",
        "elected_at": "2026-01-01T00:00:00Z",
        "last_heartbeat_ms": 120,
        "lease_remaining_ms": 1880
    }))
}

#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7090".into());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    let app = Router::new().route("/leader", get(leader));
    axum::serve(listener, app).await.expect("serve");
}
