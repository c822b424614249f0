//! The baseline for `GET /leader` throughput: axum with one handler returning a constant JSON
//! body of the same shape, and nothing else (no state, no middleware). The bench compares the
//! real node against it in the same run, so the ratio is what the service's own work costs.
//!
//! With `--tls-cert`/`--tls-key` (and optionally `--tls-client-ca`, `--tls-anonymous-reads`) it
//! serves TLS with the rustls configuration the node itself builds from those files
//! (`pilot_election::tls`), so that a TLS comparison measures the node's work, not two
//! different TLS set-ups: a plain accept loop, the handshake, and HTTP/1.1 on top.
//!
//! `cargo run --release --example bare-axum -- 127.0.0.1:PORT [--tls-cert F --tls-key F ...]`

use std::convert::Infallible;
use std::path::PathBuf;

use axum::routing::get;
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use pilot_election::tls::{Tls, TlsFiles};
use serde_json::{json, Value};
use tower::ServiceExt;

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

fn usage(what: &str) -> ! {
    eprintln!(
        "bare-axum: {what}\nusage: bare-axum ADDR [--tls-cert FILE --tls-key FILE \
         [--tls-client-ca FILE [--tls-anonymous-reads]]]"
    );
    std::process::exit(64)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:7090".into());
    let mut files = TlsFiles::default();
    while let Some(flag) = args.next() {
        if flag == "--tls-anonymous-reads" {
            files.anonymous_reads = true;
            continue;
        }
        let value = args
            .next()
            .map(PathBuf::from)
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--tls-cert" => files.cert = Some(value),
            "--tls-key" => files.key = Some(value),
            "--tls-client-ca" => files.client_ca = Some(value),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    let app = Router::new().route("/leader", get(leader));
    if files.cert.is_none() {
        axum::serve(listener, app).await.expect("serve");
        return;
    }
    let tls = Tls::load(files).unwrap_or_else(|e| usage(&e));
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config().expect("a server config"));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let service = hyper::service::service_fn(move |req| {
                let app = app.clone();
                async move { Ok::<_, Infallible>(app.oneshot(req).await.unwrap_or_else(|e| match e {})) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}
