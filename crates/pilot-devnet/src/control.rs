//! The fault-control API. HTTP/JSON on loopback so that tests in any language, or `curl` during
//! a demo, can break the network while real pilotctl processes are using it.
//!
//! Nodes are named by name/hostname, decimal node id or address. Every POST answers
//! `{"ok":true,...}` or 400 `{"ok":false,"error":...}`.
//! - `GET /nodes`, `GET /status` (faults in force, open connections, delivery counters)
//! - `POST /cut {"a","b"}`, `POST /restore {"a","b"}`: a link between two nodes. Cutting closes
//!   the connections across it (`"closed": n`) and later dials across it fail.
//! - `POST /isolate {"node"}`, `POST /unisolate {"node"}`: every link of one node; the node can
//!   still reach its own daemon's broker.
//! - `POST /drop {"fraction", "seed"?}`: drop that share of deliveries, seeded for replay.
//! - `POST /delay {"ms"}`: hold every delivery back this long (order per connection is kept).
//! - `POST /stall {"node"}`: the node's daemon reads requests and never answers, for timeouts.
//! - `POST /fail-delivery {"node"}`: every event the brokers deliver to this node's connections
//!   fails, as a write into a broken tunnel would: retried once after 20 ms, and after 3 such
//!   failures in a row the broker takes the subscriber off its list while the connection stays
//!   open (a `pilotctl subscribe` that silently hears nothing more, even after `/heal`).
//! - `POST /mute {"node"}`: every event this node publishes is read by the broker and dropped
//!   (counted as `muted`); its subscriptions still hear everyone. A mute node: heard by nobody.
//! - `POST /deafen {"node"}`: this node's stream connections hear nothing (counted as
//!   `deafened`) while what it publishes is still delivered: a deaf node. A heal lets the node's
//!   new connections hear again; the ones deafened stay deaf, as subscribers a broker dropped
//!   without closing them, so the node has to notice and replace them itself.
//! - `POST /heal`: clear every fault (trust is not a fault: it stays as it is).
//!
//! Trust is directed, as in Pilot: every node trusts every other at start, and always itself.
//! - `POST /revoke-trust {"node","peer"}`: `node` stops trusting `peer` (the peer may still
//!   trust it: one-way). The tunnel between them is torn down (`"closed": n` connections), and
//!   from then on `node`'s broker closes a connection from `peer` right after its first frame:
//!   subscription refused, publishes never read. This is the broker-side gate a public broker
//!   applies; while `peer` still trusts `node`, pilotctl on `peer` dials without asking more.
//! - `POST /grant-trust {"node","peer"}`: `node` trusts `peer` again.
//!
//! The same through the real CLI: `pilotctl handshake <b>` on a (a now trusts b; the request
//! waits on b), `pilotctl approve <a's node id>` on b (mutual), `pilotctl untrust <id>`,
//! `pilotctl pending`, `pilotctl trust`. A node that does not trust a peer makes pilotctl ask
//! the registry whether the peer is public before it dials; the devnet has no registry, so
//! pilotctl then fails with `trust_required` after trying `PILOT_REGISTRY`.

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

#[derive(Deserialize)]
struct Trust {
    node: String,
    peer: String,
}

fn trust_pair(net: &Net, t: &Trust) -> Result<(usize, usize), Reply> {
    let (n, p) = (node(net, &t.node)?, node(net, &t.peer)?);
    if n == p {
        return Err(bad("a node always trusts itself".into()));
    }
    Ok((n, p))
}

async fn revoke_trust(State(net): State<Arc<Net>>, Json(t): Json<Trust>) -> Reply {
    match trust_pair(&net, &t) {
        Ok((node, peer)) => ok(json!({"closed": net.revoke_trust(node, peer)})),
        Err(e) => e,
    }
}

async fn grant_trust(State(net): State<Arc<Net>>, Json(t): Json<Trust>) -> Reply {
    match trust_pair(&net, &t) {
        Ok((node, peer)) => {
            net.grant_trust(node, peer);
            ok(json!({}))
        }
        Err(e) => e,
    }
}

async fn fail_delivery(State(net): State<Arc<Net>>, Json(n): Json<NodeRef>) -> Reply {
    match node(&net, &n.node) {
        Ok(i) => {
            net.set_failing_delivery(i);
            ok(json!({}))
        }
        Err(e) => e,
    }
}

async fn mute(State(net): State<Arc<Net>>, Json(n): Json<NodeRef>) -> Reply {
    match node(&net, &n.node) {
        Ok(i) => {
            net.set_muted(i);
            ok(json!({}))
        }
        Err(e) => e,
    }
}

async fn deafen(State(net): State<Arc<Net>>, Json(n): Json<NodeRef>) -> Reply {
    match node(&net, &n.node) {
        Ok(i) => {
            net.set_deaf(i);
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
        .route("/fail-delivery", post(fail_delivery))
        .route("/mute", post(mute))
        .route("/deafen", post(deafen))
        .route("/revoke-trust", post(revoke_trust))
        .route("/grant-trust", post(grant_trust))
        .route("/drop", post(drop_fraction))
        .route("/delay", post(delay))
        .route("/heal", post(heal))
        .with_state(net);
    if let Err(e) = axum::serve(listener, app).await {
        eprintln!("pilot-devnet: control API stopped: {e}");
    }
}
