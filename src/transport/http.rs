//! The built-in transport: each message is POSTed to every peer's `/peer/messages`, the route
//! [`ingress`] serves.
//!
//! Every peer has its own bounded queue and a bounded number of requests in flight, so a slow or
//! dead peer costs at most that much memory and never delays the others or the election loop;
//! what does not fit is dropped (the protocol tolerates loss, not a stuck leader).

mod ingress;

pub use ingress::{ingress, Refusal, PEER_MESSAGES};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, Semaphore};

use super::{Health, HealthCell, Inbound, Transport};
use crate::metrics::Metrics;
use crate::peer_client::{self, PEER_IN_FLIGHT};
use crate::tls::Tls;

/// Messages waiting for one peer; older ones are worth little once newer ones exist.
const PEER_QUEUE: usize = 32;

/// Where each request gets its client: one for good, or the TLS configuration's current one
/// (replaced when the certificates are reloaded).
#[derive(Clone)]
enum Clients {
    Plain(reqwest::Client),
    Tls(reqwest::Client, Arc<Tls>),
}

impl Clients {
    fn get(&self) -> reqwest::Client {
        match self {
            Clients::Plain(c) => c.clone(),
            Clients::Tls(fallback, tls) => tls.peer_client().unwrap_or_else(|| fallback.clone()),
        }
    }
}

/// A peer: its node id and base URL (`http://host:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub id: String,
    pub url: String,
}

pub struct HttpTransport {
    peers: Vec<mpsc::Sender<Arc<[u8]>>>,
    inbound: Inbound,
    health: Arc<HealthCell>,
    metrics: Arc<Metrics>,
}

/// Which peers answered their latest request, to judge whether a quorum is reachable.
struct Reach {
    ok: Mutex<HashMap<String, bool>>,
    /// Peers that must answer for this node to reach a quorum (itself counted).
    needed: usize,
}

impl HttpTransport {
    /// Starts one sender task per peer. The transport counts as healthy when enough peers
    /// answer for this node to be part of a `quorum`. With `tls`, every request is sent with
    /// the peer client it gives at that moment (`--peer-ca` and the node's client certificate,
    /// replaced on reload).
    pub fn start(
        peers: Vec<Peer>,
        quorum: usize,
        inbound: Inbound,
        metrics: Arc<Metrics>,
        tls: Option<Arc<Tls>>,
    ) -> Result<Self, reqwest::Error> {
        let plain = peer_client::builder().build()?;
        let client = match tls.filter(|t| t.peer_client().is_some()) {
            Some(tls) => Clients::Tls(plain, tls),
            None => Clients::Plain(plain),
        };
        let needed = quorum.saturating_sub(1);
        let health = Arc::new(HealthCell::new("http", needed == 0));
        let reach = Arc::new(Reach {
            ok: Mutex::new(HashMap::new()),
            needed,
        });
        let mut senders = Vec::new();
        for peer in peers {
            let (tx, rx) = mpsc::channel(PEER_QUEUE);
            senders.push(tx);
            tokio::spawn(peer_task(
                peer,
                rx,
                client.clone(),
                health.clone(),
                reach.clone(),
                metrics.clone(),
            ));
        }
        Ok(HttpTransport {
            peers: senders,
            inbound,
            health,
            metrics,
        })
    }
}

async fn peer_task(
    peer: Peer,
    mut rx: mpsc::Receiver<Arc<[u8]>>,
    client: Clients,
    health: Arc<HealthCell>,
    reach: Arc<Reach>,
    metrics: Arc<Metrics>,
) {
    let url = format!("{}{PEER_MESSAGES}", peer.url.trim_end_matches('/'));
    let slots = Arc::new(Semaphore::new(PEER_IN_FLIGHT));
    while let Some(bytes) = rx.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (client, url, health, reach, metrics, id) = (
            client.get(),
            url.clone(),
            health.clone(),
            reach.clone(),
            metrics.clone(),
            peer.id.clone(),
        );
        tokio::spawn(async move {
            let started = crate::clock::now();
            let result = client
                .post(&url)
                .header("content-type", "application/json")
                .body(bytes.to_vec())
                .send()
                .await
                .and_then(|r| r.error_for_status());
            metrics.observe_publish(crate::clock::since(started));
            let error = match result {
                Ok(_) => None,
                Err(e) => {
                    metrics.publish_failed();
                    Some(format!("peer {id}: {}", without_url(&e)))
                }
            };
            let mut ok = reach.ok.lock().unwrap_or_else(|e| e.into_inner());
            ok.insert(id, error.is_none());
            let reachable = ok.values().filter(|v| **v).count();
            health.set(reachable >= reach.needed, error);
            drop(permit);
        });
    }
}

/// reqwest errors repeat the URL, which the peer id already names.
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        // A TLS failure (an unknown CA, a wrong name) is a connect error too: say which.
        let mut cause: &dyn std::error::Error = e;
        while let Some(next) = cause.source() {
            cause = next;
        }
        let cause = cause.to_string();
        if cause.contains("certificate") || cause.contains("TLS") || cause.contains("tls") {
            return format!("TLS handshake failed: {cause}");
        }
        "connection refused or unreachable"
    } else if let Some(s) = e.status() {
        return format!("answered {s}");
    } else {
        "request failed"
    };
    kind.to_string()
}

impl Transport for HttpTransport {
    fn publish(&self, bytes: Arc<[u8]>) {
        let _ = self.inbound.try_send(bytes.to_vec());
        for p in &self.peers {
            if p.try_send(bytes.clone()).is_err() {
                self.metrics.publish_failed();
            }
        }
    }

    fn health(&self) -> Health {
        self.health.get()
    }
}
