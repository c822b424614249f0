//! The HTTP server: our own accept loop on hyper, so that connections are bounded by
//! configuration rather than by the open-file limit, and slow or idle clients cannot hold the
//! node (axum's `serve` has no timeouts and no cap).
//!
//! - Every connection has deadlines: the first head within the header timeout of the accept, a
//!   request body within the body timeout of its head, the next head within the idle timeout
//!   of the last response and, once it has started, within the header timeout.
//! - Connections are capped. At the cap the one that has waited longest without finishing a
//!   head is closed to make room, then the longest idle one; only when every connection is
//!   busy with a request is a newcomer refused, with `503 too_many_connections`.
//! - Peer ingress never depends on the API having room: on a shared port, `--peer-connections`
//!   slots beyond the cap carry only the transport's peer routes (the http transport's
//!   `POST /peer/messages`); with `--peer-listen` the peers have a listener (and cap) of their
//!   own.
//! - With `--tls-cert`, every connection (on both listeners) is a TLS connection. Its handshake
//!   runs in the connection's own task, after admission: it holds a slot of the cap, can be
//!   evicted like a connection that has not sent a head, and must be done, with the first
//!   head, within the header timeout of the accept. A failed handshake (plain HTTP, garbage,
//!   a client certificate the CA did not sign or that has expired) closes the connection and
//!   is logged, at most [`HANDSHAKE_LOGS_PER_SECOND`] lines a second.
//! - An answer given before the request's body was read (a refusal by the token check, an
//!   unknown group, a body too large) says `connection: close`: hyper closes such a connection
//!   after the answer, and a client must not send its next request on it.
//! - On shutdown, the listeners close, waiting connections are closed at once and requests in
//!   progress are finished (event streams end with the election loop).
//!
//! Connection deadlines are about this process's own sockets, not the protocol: they are
//! measured on tokio's clock (which the runtime's timers use), not the suspend-aware
//! `clock::now()` that leases need.
#![allow(clippy::disallowed_methods)]

mod body;
mod conn;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Method, Request, Response};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::log_limit::LogLimit;
use tokio_rustls::TlsAcceptor;

use crate::tls::cert::{Anonymous, ClientNames};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use body::{Deadline, Tracked};
use conn::{Alarm, Conn, Watched};

use crate::api::ApiError;
use crate::metrics::{self, Metrics, Refused};
use crate::tls::Tls;

/// Connection limits and timeouts (`--max-connections` and friends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_event_subscribers: usize,
    pub peer_connections: usize,
}

impl Default for Limits {
    /// A LAN control plane: a few peers, dashboards, probes and operators. Fits, with the
    /// node's own files, in the common open-file limit of 1024.
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            max_connections: 512,
            max_event_subscribers: 128,
            peer_connections: 64,
        }
    }
}

/// Connections being answered `503 too_many_connections` at the same time; beyond this a
/// refused connection is closed without an answer.
pub const REFUSALS: usize = 32;
/// Open files the node needs besides inbound connections: its data files, logs, the runtime,
/// and slack for pilotctl pipes; outgoing peer connections are counted on top.
pub const OWN_FILES: u64 = 64;
/// Largest request head (all header lines) a client may send.
const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
/// Failed handshakes logged in one second; the others are counted in the next line logged
/// (and all of them in `refusals_total{reason="tls_handshake"}`).
pub const HANDSHAKE_LOGS_PER_SECOND: u32 = 5;
/// Pause after an accept error such as EMFILE, so that a full table does not spin the loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// At most one warning about failed accepts in this long; the next counts those left out (and
/// `accept_errors_total` counts them all).
const ACCEPT_WARNING_EVERY: Duration = Duration::from_secs(10);

impl Limits {
    /// File descriptors the caps can take at once.
    pub fn files_needed(&self) -> u64 {
        (self.max_connections + self.peer_connections + REFUSALS) as u64
    }

    /// Lowers the caps until they fit in `open_files` with `reserved` files left for the node;
    /// returns what was changed, for the log. A node out of descriptors could not write its
    /// state file or reach its peers, which is worse than refusing clients.
    pub fn fit(&mut self, open_files: u64, reserved: u64) -> Option<String> {
        let room = open_files.saturating_sub(reserved + REFUSALS as u64) as usize;
        if self.max_connections + self.peer_connections <= room {
            return None;
        }
        let before = self.clone();
        self.peer_connections = self.peer_connections.min((room / 8).max(4));
        self.max_connections = room.saturating_sub(self.peer_connections).max(8);
        if self.max_event_subscribers >= self.max_connections {
            self.max_event_subscribers = (self.max_connections / 2).max(1);
        }
        Some(format!(
            "--max-connections {} and --peer-connections {} do not fit in the open-file limit \
             {open_files} (the node keeps {reserved} for itself): using {} and {} (event \
             subscribers {} -> {})",
            before.max_connections,
            before.peer_connections,
            self.max_connections,
            self.peer_connections,
            before.max_event_subscribers,
            self.max_event_subscribers
        ))
    }
}

/// Where the node listens: the API, and optionally a separate peer ingress.
pub struct Listeners {
    pub api: TcpListener,
    pub peer: Option<TcpListener>,
}

impl From<TcpListener> for Listeners {
    fn from(api: TcpListener) -> Listeners {
        Listeners { api, peer: None }
    }
}

/// What a connection may ask for, decided when it is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// The API port, which also takes peer messages.
    All,
    /// The API port when peers have their own listener.
    Api,
    /// A slot reserved for peers on the shared port: only peer messages.
    Reserved,
    /// The peer listener.
    Peer,
}

impl Scope {
    /// The answer for a request this connection may not make, if it is one; `peers` are the
    /// requests the peers make.
    fn refusal(self, method: &Method, path: &str, peers: &PeerRoutes) -> Option<ApiError> {
        let peer = peers.carries(method, path);
        match self {
            Scope::All => None,
            Scope::Api if peer => Some(ApiError::NotFound(format!(
                "{method} {path} (this node takes peer messages on its --peer-listen address)"
            ))),
            Scope::Reserved if !peer => Some(ApiError::TooManyConnections),
            Scope::Peer if !peer => Some(ApiError::NotFound(format!(
                "{method} {path} (this is the peer listener: only {})",
                peers.paths()
            ))),
            _ => None,
        }
    }
}

/// The routes the node's transport serves for its peers (`transport::Ingress::routes`): `(method,
/// path)`, the method in lower case. None for a transport without an ingress.
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerRoutes(pub &'static [(&'static str, &'static str)]);

impl PeerRoutes {
    fn carries(&self, method: &Method, path: &str) -> bool {
        self.0
            .iter()
            .any(|(m, p)| *p == path && method.as_str().eq_ignore_ascii_case(m))
    }

    fn paths(&self) -> String {
        let paths: Vec<&str> = self.0.iter().map(|(_, p)| *p).collect();
        paths.join(", ")
    }
}

/// A capped set of connections, named for the metrics.
struct Pool {
    name: metrics::Pool,
    cap: usize,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Pool {
    fn new(name: metrics::Pool, cap: usize) -> Pool {
        Pool {
            name,
            cap,
            conns: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `conn` if there is room, making room by evicting a waiting connection if need be.
    fn admit(&self, conn: &Arc<Conn>, metrics: &Metrics) -> bool {
        let mut conns = self.lock();
        while conns.len() >= self.cap {
            let Some(victim) = conns
                .values()
                .filter_map(|c| c.eviction_rank().map(|r| (r, c.id)))
                .min()
                .map(|(_, id)| id)
            else {
                return false;
            };
            // A victim that started a request meanwhile stays (and is not picked again).
            if conns.get(&victim).is_some_and(|v| v.evict()) {
                conns.remove(&victim);
                metrics.evicted(self.name);
            }
        }
        conns.insert(conn.id, conn.clone());
        metrics.connections_open(self.name, conns.len());
        true
    }

    fn remove(&self, id: u64, metrics: &Metrics) {
        let mut conns = self.lock();
        conns.remove(&id);
        metrics.connections_open(self.name, conns.len());
    }
}

/// A connection's place in its pool, given back however its task ends (even by a panic).
struct PoolSlot {
    shared: Arc<Shared>,
    pool: usize,
    id: u64,
}

impl Drop for PoolSlot {
    fn drop(&mut self) {
        self.shared.pools[self.pool].remove(self.id, &self.shared.metrics);
    }
}

struct Shared {
    router: Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    /// `[api, peer]`: the API's cap, and the peers' reserve or listener.
    pools: [Pool; 2],
    /// Whether peers have their own listener.
    peer_listener: bool,
    /// What the peers may ask for.
    peer_routes: PeerRoutes,
    refusals: Arc<Semaphore>,
    tasks: TaskTracker,
    stop: CancellationToken,
    next_id: AtomicU64,
    http: http1::Builder,
    tls: Option<Arc<Tls>>,
    /// At most [`HANDSHAKE_LOGS_PER_SECOND`] lines a second, with a count of those left out.
    handshake_log: Mutex<LogLimit>,
}

impl Shared {
    /// The acceptor for a new connection (the configuration in use now), if TLS is on.
    fn acceptor(&self) -> Option<TlsAcceptor> {
        self.tls
            .as_ref()
            .and_then(|t| t.server_config())
            .map(TlsAcceptor::from)
    }

    fn handshake_failed(&self, remote: SocketAddr, error: &std::io::Error) {
        self.metrics.refused(Refused::TlsHandshake);
        let admitted = self
            .handshake_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(Instant::now());
        if let Some(left_out) = admitted {
            // A first record of no TLS content type: what it usually is.
            let plain = matches!(
                crate::tls::rustls_error(error),
                Some(rustls::Error::InvalidMessage(
                    rustls::InvalidMessage::InvalidContentType
                ))
            );
            let hint = if plain {
                "not TLS (plain HTTP to the TLS port?)"
            } else {
                ""
            };
            tracing::warn!(%remote, error = %error, hint, left_out, "TLS handshake refused");
        }
    }
}

const API: usize = 0;
const PEER: usize = 1;

/// Serves `router` on `listeners` until `stop` is cancelled, then until the requests in
/// progress are done (the caller bounds that wait). `peer_routes` are those of the router's
/// routes the peers use, which connections kept for peers carry.
pub async fn serve(
    listeners: Listeners,
    router: Router,
    peer_routes: PeerRoutes,
    limits: Limits,
    tls: Option<Arc<Tls>>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut http = http1::Builder::new();
    http.keep_alive(true)
        .header_read_timeout(None)
        .max_header_size(MAX_HEAD)
        .max_headers(MAX_HEADERS);
    metrics.connections_open(metrics::Pool::Api, 0);
    metrics.connections_open(metrics::Pool::Peer, 0);
    let shared = Arc::new(Shared {
        router,
        pools: [
            Pool::new(metrics::Pool::Api, limits.max_connections),
            Pool::new(metrics::Pool::Peer, limits.peer_connections),
        ],
        limits,
        metrics,
        peer_listener: listeners.peer.is_some(),
        peer_routes,
        refusals: Arc::new(Semaphore::new(REFUSALS)),
        tasks: TaskTracker::new(),
        stop,
        next_id: AtomicU64::new(0),
        http,
        tls,
        handshake_log: Mutex::new(LogLimit::per_second(HANDSHAKE_LOGS_PER_SECOND)),
    });
    let tasks = shared.tasks.clone();
    tasks.spawn(accept_loop(listeners.api, false, shared.clone()));
    if let Some(peer) = listeners.peer {
        tasks.spawn(accept_loop(peer, true, shared.clone()));
    }
    shared.stop.cancelled().await;
    drop(shared);
    tasks.close();
    tasks.wait().await;
}

async fn accept_loop(listener: TcpListener, peer: bool, shared: Arc<Shared>) {
    let mut warnings = LogLimit::new(1, ACCEPT_WARNING_EVERY);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shared.stop.cancelled() => return,
        };
        match accepted {
            Ok((stream, remote)) => admit(&shared, stream, remote, peer),
            Err(e) => {
                use std::io::ErrorKind::*;
                if matches!(
                    e.kind(),
                    ConnectionAborted | ConnectionReset | ConnectionRefused
                ) {
                    continue;
                }
                // EMFILE and the like: the connection waits in the backlog; try again soon.
                shared.metrics.accept_errors.inc();
                if let Some(left_out) = warnings.admit(Instant::now()) {
                    tracing::warn!(error = %e, left_out, "accept failed (is the open-file limit too low for the connection caps?)");
                }
                tokio::select! {
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    _ = shared.stop.cancelled() => return,
                }
            }
        }
    }
}

/// Finds the connection a place (API, then the peers' reserve on a shared port), or refuses it.
fn admit(shared: &Arc<Shared>, stream: TcpStream, remote: SocketAddr, peer: bool) {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let conn = Arc::new(Conn::new(
        id,
        shared.limits.header_timeout,
        shared.limits.idle_timeout,
    ));
    let places: &[(usize, Scope)] = match (peer, shared.peer_listener) {
        (true, _) => &[(PEER, Scope::Peer)],
        (false, true) => &[(API, Scope::Api)],
        (false, false) => &[(API, Scope::All), (PEER, Scope::Reserved)],
    };
    for &(pool, scope) in places {
        if shared.pools[pool].admit(&conn, &shared.metrics) {
            let slot = PoolSlot {
                shared: shared.clone(),
                pool,
                id,
            };
            shared
                .tasks
                .spawn(serve_connection(stream, remote, conn, scope, slot));
            return;
        }
    }
    refuse(shared, stream);
}

/// Serves one admitted connection until it closes, times out, is evicted or the server stops:
/// over TLS once its handshake is done, if TLS is on.
async fn serve_connection(
    stream: TcpStream,
    remote: SocketAddr,
    conn: Arc<Conn>,
    scope: Scope,
    slot: PoolSlot,
) {
    let shared = slot.shared.clone();
    let io = Watched::new(stream, conn.clone());
    match shared.acceptor() {
        None => serve_http(io, remote, conn, scope, &shared, Client::Unasked).await,
        Some(acceptor) => {
            if let Some(tls) = handshake(&shared, &conn, acceptor, io, remote).await {
                // A verified client certificate's names go with every request of the
                // connection (POST /peer/messages checks the sender against them).
                let names = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| ClientNames::of(c));
                let anonymous = names.is_none()
                    && shared
                        .tls
                        .as_ref()
                        .is_some_and(|t| t.requires_client_certs());
                let who = match names {
                    Some(n) => Client::Named(n),
                    None if anonymous => Client::Anonymous,
                    None => Client::Unasked,
                };
                serve_http(tls, remote, conn, scope, &shared, who).await;
            }
        }
    }
    drop(slot);
}

/// Who is at the other end of a connection, as its handshake told.
enum Client {
    /// Plain HTTP, or TLS that asks for no client certificate.
    Unasked,
    /// A verified client certificate, and the names it presents.
    Named(ClientNames),
    /// Client certificates are asked for and none came (`--tls-anonymous-reads`).
    Anonymous,
}

/// The TLS handshake of an admitted connection, within its header deadline; `None` when it
/// failed, timed out, was evicted or the server stops.
async fn handshake<I>(
    shared: &Shared,
    conn: &Conn,
    acceptor: TlsAcceptor,
    io: I,
    remote: SocketAddr,
) -> Option<tokio_rustls::server::TlsStream<I>>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let accept = acceptor.accept(io);
    tokio::pin!(accept);
    loop {
        let deadline = conn.deadline();
        tokio::select! {
            done = accept.as_mut() => {
                return match done {
                    Ok(tls) => Some(tls),
                    Err(e) => {
                        shared.handshake_failed(remote, &e);
                        None
                    }
                };
            }
            _ = conn.changed.notified() => {
                if conn.evicted() {
                    return None;
                }
            }
            _ = sleep_until(deadline) => {
                if let Some(wait) = conn.expired(Instant::now()) {
                    shared.metrics.timed_out(wait.phase());
                    return None;
                }
            }
            _ = shared.stop.cancelled() => return None,
        }
    }
}

/// HTTP/1.1 on an admitted connection (plain or TLS) until it closes, times out, is evicted or
/// the server stops.
async fn serve_http<I>(
    io: I,
    remote: SocketAddr,
    conn: Arc<Conn>,
    scope: Scope,
    shared: &Arc<Shared>,
    who: Client,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = {
        let (conn, shared) = (conn.clone(), shared.clone());
        hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let exchange = conn.begin();
            let shared = shared.clone();
            match &who {
                Client::Named(n) => {
                    req.extensions_mut().insert(n.clone());
                }
                Client::Anonymous => {
                    req.extensions_mut().insert(Anonymous);
                }
                Client::Unasked => {}
            }
            async move {
                let resp = answer(&shared, req, remote, scope).await;
                Ok::<_, Infallible>(resp.map(|b| Body::new(Tracked::new(b, exchange))))
            }
        })
    };
    let http = shared.http.serve_connection(TokioIo::new(io), service);
    tokio::pin!(http);
    let stop = shared.stop.cancelled();
    tokio::pin!(stop);
    let changed = conn.changed.notified();
    tokio::pin!(changed);
    let mut alarm = Alarm::default();
    let mut stopping = false;
    loop {
        // One poll function rather than `select!`: the deadline is read after hyper has run
        // (reads and finished responses move it), and the timer is not rebuilt per wake.
        let turn = std::future::poll_fn(|cx| {
            if http.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Turn::Closed);
            }
            if changed.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Turn::Changed);
            }
            alarm.follow(conn.deadline());
            if alarm.poll_fired(cx).is_ready() {
                return Poll::Ready(Turn::Alarm);
            }
            if !stopping && stop.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Turn::Stop);
            }
            Poll::Pending
        })
        .await;
        match turn {
            Turn::Closed => break,
            Turn::Changed => {
                if conn.evicted() {
                    break;
                }
                changed.set(conn.changed.notified());
            }
            Turn::Alarm => {
                if let Some(wait) = conn.expired(Instant::now()) {
                    shared.metrics.timed_out(wait.phase());
                    break;
                }
            }
            Turn::Stop => {
                stopping = true;
                if !conn.busy() {
                    break;
                }
                // Finish the request in progress, then close.
                http.as_mut().graceful_shutdown();
            }
        }
    }
}

/// What woke a connection's task.
enum Turn {
    /// hyper is done with the connection.
    Closed,
    /// Its [`Conn`] was signalled (an eviction, perhaps).
    Changed,
    /// The timer fired: the deadline may have passed, or moved on.
    Alarm,
    /// The server stops.
    Stop,
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// One request through the router, with the connection's scope, its source address and the
/// body deadline.
async fn answer(
    shared: &Shared,
    req: Request<Incoming>,
    remote: SocketAddr,
    scope: Scope,
) -> Response<Body> {
    if let Some(e) = scope.refusal(req.method(), req.uri().path(), &shared.peer_routes) {
        if e == ApiError::TooManyConnections {
            shared.metrics.refused(Refused::MaxConnections);
            return closing(e);
        }
        return e.into_response();
    }
    // Without a client certificate a request may only read (`--tls-anonymous-reads`).
    let reads = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if req.extensions().get::<Anonymous>().is_some() && !reads {
        shared.metrics.refused(Refused::ClientCertificateRequired);
        return ApiError::ClientCertificateRequired.into_response();
    }
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(ConnectInfo(remote));
    // A request without a body (every GET) has nothing to put a deadline on.
    let (body, read) = if http_body::Body::is_end_stream(&body) {
        (Body::new(body), None)
    } else {
        let (body, read) = Deadline::new(
            Body::new(body),
            shared.limits.body_timeout,
            shared.metrics.clone(),
        );
        (Body::new(body), Some(read))
    };
    let req = Request::from_parts(parts, body);
    let mut resp = match shared.router.clone().oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    };
    // Refused before its body was read (401, an unknown group, a body too large): hyper closes
    // the connection after this answer, so the answer says so.
    if read.is_some_and(|r| !r.get()) {
        close_after(&mut resp);
    }
    resp
}

/// An error answer after which the connection closes.
fn closing(e: ApiError) -> Response<Body> {
    let mut resp = e.into_response();
    close_after(&mut resp);
    resp
}

/// Tells the client that the connection closes after this answer.
fn close_after(resp: &mut Response<Body>) {
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// Answers `503 too_many_connections` to the connection's first request and closes it; past
/// [`REFUSALS`] such answers at once, closes it at once.
fn refuse(shared: &Arc<Shared>, stream: TcpStream) {
    shared.metrics.refused(Refused::MaxConnections);
    let Ok(permit) = shared.refusals.clone().try_acquire_owned() else {
        return;
    };
    let (stop, wait) = (shared.stop.clone(), shared.limits.header_timeout);
    let acceptor = shared.acceptor();
    shared.tasks.spawn(async move {
        // The handshake and the answer share one header timeout.
        let answer = async move {
            match acceptor {
                None => answer_refusal(stream).await,
                Some(acceptor) => {
                    if let Ok(tls) = acceptor.accept(stream).await {
                        answer_refusal(tls).await;
                    }
                }
            }
        };
        tokio::select! {
            _ = tokio::time::timeout(wait, answer) => {}
            _ = stop.cancelled() => {}
        }
        drop(permit);
    });
}

async fn answer_refusal<I>(io: I)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut http = http1::Builder::new();
    http.keep_alive(false)
        .header_read_timeout(None)
        .max_header_size(MAX_HEAD);
    let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(closing(ApiError::TooManyConnections))
    });
    let _ = http.serve_connection(TokioIo::new(io), service).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_fit_in_1024_open_files_and_larger_caps_are_lowered_to_fit() {
        let mut l = Limits::default();
        assert_eq!(
            l.fit(1024, OWN_FILES + 8),
            None,
            "the defaults fit the common limit"
        );
        assert_eq!(l, Limits::default());

        let mut l = Limits {
            max_connections: 5000,
            max_event_subscribers: 4000,
            ..Limits::default()
        };
        let said = l.fit(1024, OWN_FILES + 8).expect("lowered");
        assert!(said.contains("--max-connections 5000"), "{said}");
        assert!(l.files_needed() + OWN_FILES + 8 <= 1024, "{l:?}");
        assert!(l.max_event_subscribers < l.max_connections, "{l:?}");
        assert!(l.peer_connections >= 4, "{l:?}");

        // A tiny limit still leaves a working node rather than none.
        let mut l = Limits::default();
        l.fit(64, OWN_FILES + 8).expect("lowered");
        assert!(l.max_connections >= 8 && l.max_event_subscribers < l.max_connections);
    }

    #[test]
    fn each_scope_refuses_what_it_does_not_carry() {
        let post = Method::POST;
        let get = Method::GET;
        const PEER_MESSAGES: &str = "/peer/messages";
        let peers = PeerRoutes(&[("post", PEER_MESSAGES)]);
        let code = |s: Scope, m: &Method, p: &str| s.refusal(m, p, &peers).map(|e| e.code());
        assert_eq!(code(Scope::All, &post, PEER_MESSAGES), None);
        assert_eq!(code(Scope::All, &get, "/leader"), None);
        assert_eq!(code(Scope::Api, &get, "/leader"), None);
        assert_eq!(code(Scope::Api, &post, PEER_MESSAGES), Some("not_found"));
        assert_eq!(code(Scope::Reserved, &post, PEER_MESSAGES), None);
        assert_eq!(
            code(Scope::Reserved, &get, "/leader"),
            Some("too_many_connections")
        );
        assert_eq!(code(Scope::Peer, &post, PEER_MESSAGES), None);
        assert_eq!(code(Scope::Peer, &get, "/leader"), Some("not_found"));
        assert_eq!(code(Scope::Peer, &get, PEER_MESSAGES), Some("not_found"));
        // A transport without an ingress (pilot): the peers' slots carry nothing.
        let none = PeerRoutes::default();
        assert_eq!(
            Scope::Reserved.refusal(&post, PEER_MESSAGES, &none),
            Some(ApiError::TooManyConnections)
        );
    }
}
