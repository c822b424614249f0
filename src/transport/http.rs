//! The built-in transport: each message is POSTed to every peer's `/peer/messages`, the route
//! [`ingress`] serves.
//!
//! Every peer has its own bounded queue and a bounded number of requests in flight, so a slow or
//! dead peer costs at most that much memory and never delays the others or the election loop;
//! what does not fit is dropped (the protocol tolerates loss, not a stuck leader).

mod ingress;

pub use ingress::{ingress, Refusal, PEER_MESSAGES};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use tokio::sync::{mpsc, Notify, Semaphore};

use super::{Health, Inbound, Link, Links, Transport};
use crate::clock::wall::{rfc3339, unix_ms_now};
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
    reach: Arc<Reach>,
    metrics: Arc<Metrics>,
    pending: Arc<Pending>,
}

/// Requests handed to the peers' queues and not yet answered or failed, over every peer: a
/// request runs in a task of its own, which the process's exit would cut off, and a stopping
/// leader's last request is its resign (without it, a peer that restarted meanwhile stays
/// behind its start-up guard for `T`). [`Transport::flushed`] waits for none to be left.
#[derive(Default)]
struct Pending {
    count: AtomicUsize,
    none_left: Notify,
}

impl Pending {
    fn add(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    fn done(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.none_left.notify_waiters();
        }
    }

    async fn none_left(&self) {
        loop {
            // Registered before the count is read, so that a last `done` in between wakes it.
            let notified = self.none_left.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// What the latest request to each peer found: whether a quorum is reachable, and each peer for
/// `/status`.
struct Reach {
    /// In the order of `--peer`.
    peers: Mutex<Vec<PeerReach>>,
    /// Peers that must answer for this node to reach a quorum (itself counted).
    needed: usize,
    /// The latest failure of any peer.
    last_error: Mutex<Option<String>>,
}

/// One peer as `/status` shows it: a link named by `id`, in `state`, the other fields its
/// detail.
#[derive(Debug, Clone, Serialize)]
struct PeerReach {
    #[serde(skip)]
    id: String,
    #[serde(skip)]
    state: PeerState,
    /// When the current state began (wall clock, RFC 3339; for display).
    #[serde(serialize_with = "as_rfc3339")]
    since: u64,
    /// The latest failure to deliver to it, whenever it was.
    last_error: Option<String>,
}

fn as_rfc3339<S: serde::Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*ms))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerState {
    /// Nothing was sent to it yet.
    Unknown,
    /// It took the latest message.
    Reachable,
    /// The latest message to it failed.
    Unreachable,
}

impl PeerState {
    fn as_str(self) -> &'static str {
        match self {
            PeerState::Unknown => "unknown",
            PeerState::Reachable => "reachable",
            PeerState::Unreachable => "unreachable",
        }
    }
}

impl Reach {
    fn new(peers: &[Peer], quorum: usize) -> Reach {
        let since = unix_ms_now();
        Reach {
            peers: Mutex::new(
                peers
                    .iter()
                    .map(|p| PeerReach {
                        id: p.id.clone(),
                        state: PeerState::Unknown,
                        since,
                        last_error: None,
                    })
                    .collect(),
            ),
            needed: quorum.saturating_sub(1),
            last_error: Mutex::new(None),
        }
    }

    /// The latest request to peer `index` succeeded (`error` is `None`) or failed, and why.
    fn record(&self, index: usize, error: Option<String>) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let peer = &mut peers[index];
        let state = match error {
            None => PeerState::Reachable,
            Some(_) => PeerState::Unreachable,
        };
        if peer.state != state {
            peer.state = state;
            peer.since = unix_ms_now();
        }
        if let Some(e) = error {
            *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(format!("peer {}: {e}", peer.id));
            peer.last_error = Some(e);
        }
    }

    /// Healthy while enough peers answer for this node to be part of a quorum.
    fn health(&self) -> Health {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let reachable = peers
            .iter()
            .filter(|p| p.state == PeerState::Reachable)
            .count();
        Health {
            io: None,
            kind: "http",
            healthy: reachable >= self.needed,
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            reason: None,
            links: Some(Links {
                list: "peers",
                name: "peer",
                entries: peers
                    .iter()
                    .map(|p| Link::new(p.id.clone(), p.state.as_str(), p))
                    .collect(),
            }),
        }
    }
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
        let reach = Arc::new(Reach::new(&peers, quorum));
        let pending = Arc::new(Pending::default());
        let mut senders = Vec::new();
        for (index, peer) in peers.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel(PEER_QUEUE);
            senders.push(tx);
            tokio::spawn(peer_task(
                (index, peer),
                rx,
                client.clone(),
                reach.clone(),
                pending.clone(),
                metrics.clone(),
            ));
        }
        Ok(HttpTransport {
            peers: senders,
            inbound,
            reach,
            metrics,
            pending,
        })
    }
}

async fn peer_task(
    (index, peer): (usize, Peer),
    mut rx: mpsc::Receiver<Arc<[u8]>>,
    client: Clients,
    reach: Arc<Reach>,
    pending: Arc<Pending>,
    metrics: Arc<Metrics>,
) {
    let url = format!("{}{PEER_MESSAGES}", peer.url.trim_end_matches('/'));
    let slots = Arc::new(Semaphore::new(PEER_IN_FLIGHT));
    while let Some(bytes) = rx.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (client, url, reach, metrics, pending) = (
            client.get(),
            url.clone(),
            reach.clone(),
            metrics.clone(),
            pending.clone(),
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
                    Some(without_url(&e))
                }
            };
            reach.record(index, error);
            drop(permit);
            pending.done();
        });
    }
}

/// reqwest errors repeat the URL, which the peer id already names.
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        // A TLS failure (an unknown CA, a wrong name) is a connect error too: say which.
        if let Some(tls) = crate::tls::rustls_error(e) {
            return format!("TLS handshake failed: {tls}");
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
            self.pending.add();
            if p.try_send(bytes.clone()).is_err() {
                self.pending.done();
                self.metrics.publish_failed();
            }
        }
    }

    fn flushed(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let pending = self.pending.clone();
        Box::pin(async move { pending.none_left().await })
    }

    fn health(&self) -> Health {
        self.reach.health()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a peer's last error says is read from the error's type, not its text: a server
    /// whose certificate this client cannot check is a failed TLS handshake, a closed port is
    /// not, and neither repeats the URL.
    #[tokio::test]
    async fn a_failed_handshake_is_told_apart_from_a_refused_connection() {
        use tokio::net::TcpListener;
        // A TLS server on a self-signed certificate that no client here trusts.
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tls_port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = acceptor.accept(tcp).await;
            }
        });
        // A port nobody listens on (bound, then closed).
        let closed_port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap();
        let get = |url: String| {
            let client = client.clone();
            async move { client.get(url).send().await.expect_err("no answer") }
        };
        let tls = without_url(&get(format!("https://127.0.0.1:{tls_port}/")).await);
        assert!(tls.starts_with("TLS handshake failed: "), "{tls}");
        assert!(!tls.contains("127.0.0.1"), "{tls}");
        let refused = without_url(&get(format!("https://127.0.0.1:{closed_port}/")).await);
        assert_eq!(refused, "connection refused or unreachable");
    }

    /// The exit waits for `flushed`: every request handed over so far answered, so that a
    /// stopping leader's resign is not cut off with the process. The peer here takes 300 ms to
    /// answer; `flushed` resolves only after it has taken both messages, and at once when
    /// nothing is pending. (With the trait's default, ready at once, the peer has taken none
    /// when it resolves.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn flushed_waits_until_every_request_is_answered() {
        use std::time::Duration;
        let taken = Arc::new(AtomicUsize::new(0));
        let route = {
            let taken = taken.clone();
            axum::routing::post(move |_body: axum::body::Bytes| {
                let taken = taken.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    taken.fetch_add(1, Ordering::SeqCst);
                    ""
                }
            })
        };
        let app = axum::Router::new().route(PEER_MESSAGES, route);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let (inbound, _own) = mpsc::channel(8);
        let peers = vec![Peer {
            id: "b".into(),
            url,
        }];
        let t = HttpTransport::start(peers, 2, inbound, Arc::new(Metrics::new()), None).unwrap();
        t.flushed().await;
        assert_eq!(taken.load(Ordering::SeqCst), 0, "nothing was pending");
        t.publish(Arc::from(&b"{}"[..]));
        t.publish(Arc::from(&b"{}"[..]));
        tokio::time::timeout(Duration::from_secs(10), t.flushed())
            .await
            .expect("flushed within 10 s");
        assert_eq!(
            taken.load(Ordering::SeqCst),
            2,
            "both answered before flushed"
        );
    }

    #[test]
    fn each_peer_shows_its_latest_request_and_a_quorum_of_answers_is_healthy() {
        let peer = |id: &str| Peer {
            id: id.into(),
            url: format!("http://{id}"),
        };
        // Five members: this node and two peers make a quorum.
        let reach = Reach::new(&[peer("b"), peer("c"), peer("d"), peer("e")], 3);
        let states = |h: &Health| -> Vec<&'static str> {
            h.links
                .as_ref()
                .unwrap()
                .entries
                .iter()
                .map(|l| l.state)
                .collect()
        };
        let h = reach.health();
        assert!(!h.healthy);
        assert_eq!(states(&h), ["unknown"; 4]);
        reach.record(0, None);
        reach.record(2, Some("timed out".into()));
        assert!(!reach.health().healthy, "one peer of the two needed");
        reach.record(3, None);
        let h = reach.health();
        assert!(h.healthy);
        assert_eq!(
            states(&h),
            ["reachable", "unknown", "unreachable", "reachable"]
        );
        assert_eq!(h.last_error.as_deref(), Some("peer d: timed out"));
        let json = serde_json::to_value(&h).unwrap();
        let d = &json["peers"][2];
        assert_eq!(
            (&d["peer"], &d["state"]),
            (&"d".into(), &"unreachable".into())
        );
        assert_eq!(d["last_error"], "timed out");
        assert!(d["since"].as_str().is_some_and(|s| s.ends_with('Z')), "{d}");
        // Back: reachable again, its last failure kept.
        reach.record(2, None);
        let json = serde_json::to_value(reach.health()).unwrap();
        assert_eq!(json["peers"][2]["state"], "reachable");
        assert_eq!(json["peers"][2]["last_error"], "timed out");
    }
}
