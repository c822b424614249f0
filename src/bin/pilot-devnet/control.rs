//! The fault-control API. HTTP/JSON on loopback so that tests in any language, or `curl` during
//! a demo, can break the network while real pilotctl processes are using it.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::net::Net;

type Reply = (StatusCode, Json<Value>);

#[derive(Deserialize)]
struct Link {
    a: String,
    b: String,
}

#[derive(Deserialize)]
struct NodeRef {
    node: String,
}

#[derive(Deserialize)]
struct Drop {
    fraction: f64,
    seed: Option<u64>,
}

#[derive(Deserialize)]
struct Delay {
    ms: u64,
}

fn bad(msg: String) -> Reply {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"ok": false, "error": msg})),
    )
}

fn ok(extra: Value) -> Reply {
    let mut body = json!({"ok": true});
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
    (StatusCode::OK, Json(body))
}

fn node(net: &Net, key: &str) -> Result<usize, Reply> {
    net.find(key)
        .ok_or_else(|| bad(format!("unknown node {key:?}")))
}

fn link(net: &Net, l: &Link) -> Result<(usize, usize), Reply> {
    let (a, b) = (node(net, &l.a)?, node(net, &l.b)?);
    if a == b {
        return Err(bad("a link needs two different nodes".into()));
    }
    Ok((a, b))
}

async fn cut(State(net): State<Arc<Net>>, Json(l): Json<Link>) -> Reply {
    match link(&net, &l) {
        Ok((a, b)) => ok(json!({"closed": net.cut(a, b)})),
        Err(e) => e,
    }
}

async fn restore(State(net): State<Arc<Net>>, Json(l): Json<Link>) -> Reply {
    match link(&net, &l) {
        Ok((a, b)) => {
            net.restore(a, b);
            ok(json!({}))
        }
        Err(e) => e,
    }
}

async fn isolate(State(net): State<Arc<Net>>, Json(n): Json<NodeRef>) -> Reply {
    match node(&net, &n.node) {
        Ok(i) => ok(json!({"closed": net.isolate(i)})),
        Err(e) => e,
    }
}

async fn unisolate(State(net): State<Arc<Net>>, Json(n): Json<NodeRef>) -> Reply {
    match node(&net, &n.node) {
        Ok(i) => {
            net.unisolate(i);
            ok(json!({}))
        }
        Err(e) => e,
    }
}

async fn stall(State(net): State<Arc<Net>>, Json(n): Json<NodeRef>) -> Reply {
    match node(&net, &n.node) {
        Ok(i) => {
            net.set_stalled(i, true);
            ok(json!({}))
        }
        Err(e) => e,
    }
}

async fn drop_fraction(State(net): State<Arc<Net>>, Json(d): Json<Drop>) -> Reply {
    if !(0.0..=1.0).contains(&d.fraction) {
        return bad(format!("fraction {} is not within [0, 1]", d.fraction));
    }
    net.set_drop(d.fraction, d.seed);
    ok(json!({}))
}

async fn delay(State(net): State<Arc<Net>>, Json(d): Json<Delay>) -> Reply {
    if d.ms > 60_000 {
        return bad("delay above 60000 ms".into());
    }
    net.set_delay(Duration::from_millis(d.ms));
    ok(json!({}))
}

async fn heal(State(net): State<Arc<Net>>) -> Reply {
    net.heal();
    ok(json!({}))
}

async fn nodes(State(net): State<Arc<Net>>) -> Json<Value> {
    Json(net.nodes_json())
}

async fn status(State(net): State<Arc<Net>>) -> Json<Value> {
    Json(net.status_json())
}

pub async fn serve(net: Arc<Net>, listener: tokio::net::TcpListener) {
    let app = Router::new()
        .route("/nodes", get(nodes))
        .route("/status", get(status))
        .route("/cut", post(cut))
        .route("/restore", post(restore))
        .route("/isolate", post(isolate))
        .route("/unisolate", post(unisolate))
        .route("/stall", post(stall))
        .route("/drop", post(drop_fraction))
        .route("/delay", post(delay))
        .route("/heal", post(heal))
        .with_state(net);
    if let Err(e) = axum::serve(listener, app).await {
        eprintln!("pilot-devnet: control API stopped: {e}");
    }
}
