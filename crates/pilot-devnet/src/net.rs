//! The emulated network: which nodes exist, which links are up, who trusts whom, and every
//! node's event broker.
//!
//! All of it sits behind one mutex because faults must act atomically on the whole picture: a
//! cut has to close exactly the connections that cross it, and a publish has to see one
//! consistent set of subscribers (fan-out happens at publish time only, as the real broker does).
//!
//! The broker follows the real event-stream service (port 1002) of Pilot 1.18:
//! - the first event frame on a connection subscribes it to that frame's topic, and only if the
//!   broker's node trusts the connecting node; otherwise the connection is closed right there,
//!   without a word, and nothing sent on it is ever read. A `pilotctl publish` also opens with
//!   such a frame, so an untrusted node can neither hear nor be heard through that broker;
//! - an event is fanned out to the connections subscribed to its topic or to `*` at that
//!   moment, never back to the connection that sent it; nothing is stored or replayed;
//! - each connection may publish 100 events per second with a burst of 200; the excess is
//!   dropped silently;
//! - a delivery that fails is tried once more 20 ms later; a subscriber whose deliveries failed
//!   3 times in a row is taken off the subscriber list, while its connection stays open (it
//!   simply never hears anything again).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use pilot_election::election::Rng;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The only service port the emulator implements: the event-stream broker.
pub const EVENT_STREAM_PORT: u16 = 1002;
/// Limits from the broker's documented behaviour; larger input closes the connection.
pub const MAX_TOPIC_BYTES: usize = 1024;
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;
/// The broker's per-connection publish budget: 100 events/s with a burst of 200; the excess
/// is dropped silently. One `pilotctl publish` is one connection, so only long-lived
/// publishers ever meet it.
const RATE_PER_SEC: f64 = 100.0;
const RATE_BURST: f64 = 200.0;
/// A failed delivery is tried once more after this long.
pub const RETRY_AFTER: Duration = Duration::from_millis(20);
/// Failed deliveries in a row (each after its retry) that take a subscriber off the list.
const MAX_FAILURES_IN_A_ROW: u32 = 3;

/// Daemon → client: the remote end of a stream closed. Found by probing pilotctl 1.18.0: only
/// this opcode makes a running `subscribe` exit with `recv: EOF` (a `0x08` from the daemon is
/// ignored).
pub use pilot_election::transport::pilot::daemon::command::CMD_CLOSED as CMD_REMOTE_CLOSED;
pub use pilot_election::transport::pilot::daemon::command::CMD_RECV;

#[derive(Debug, Clone, Serialize)]
pub struct NodeInfo {
    pub name: String,
    /// What `resolve` answers to and `info` reports; the node name, kept as its own field so
    /// the startup line reads like `pilotctl info`.
    pub hostname: String,
    pub node_id: u32,
    pub address: String,
    pub socket: PathBuf,
}

/// Pilot addresses print as `N:HHHH.HHHH.HHHH`: the network, then the 32-bit node id split in
/// two hex groups.
pub fn format_address(network: u16, node_id: u32) -> String {
    format!(
        "{network}:{:04X}.{:04X}.{:04X}",
        0u16,
        node_id >> 16,
        node_id & 0xFFFF
    )
}

/// A frame queued for one IPC client, with the instant it may be written (the delay fault).
pub struct Outbound {
    pub at: Instant,
    pub frame: Vec<u8>,
}

pub type ClientTx = mpsc::Sender<Outbound>;

/// Frames queued for one IPC client at most. A client that stops reading (a `pilotctl
/// subscribe` whose stdout nobody drains) then loses deliveries, counted as `overflowed`,
/// instead of growing the emulator's memory without bound.
pub const CLIENT_QUEUE: usize = 4096;

/// One stream connection from a client of node `origin` to the broker on node `broker`.
struct StreamConn {
    client: u64,
    origin: usize,
    broker: usize,
    /// The first event frame on a connection names its subscription; until then, `None`.
    topic: Option<String>,
    /// On the broker's subscriber list: set by an accepted first frame, cleared after
    /// [`MAX_FAILURES_IN_A_ROW`] failed deliveries while the connection itself stays open.
    listed: bool,
    /// Deliveries to this connection that failed in a row, each after its retry.
    failures: u32,
    /// Bytes sent so far that do not yet form a whole event frame: sends are a byte stream.
    pending: Vec<u8>,
    /// Made deaf while its node was (`/deafen`): it hears nothing more, even after a heal, as
    /// a subscriber the broker dropped without closing it. New connections hear again.
    deafened: bool,
    out: ClientTx,
    tokens: f64,
    refilled: Instant,
}

impl StreamConn {
    fn take_token(&mut self) -> bool {
        let now = pilot_election::clock::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * RATE_PER_SEC;
        self.tokens = (self.tokens + earned).min(RATE_BURST);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct Stats {
    pub published: u64,
    pub delivered: u64,
    pub dropped: u64,
    /// Deliveries that found the subscriber's queue full (each is then retried).
    pub overflowed: u64,
    pub rate_limited: u64,
    pub dials_refused: u64,
    pub connections_cut: u64,
    /// First frames from nodes the broker does not trust: connection closed, nothing read.
    pub rejected: u64,
    /// Deliveries tried a second time after a failure.
    pub retried: u64,
    /// Deliveries that failed their retry too.
    pub delivery_failures: u64,
    /// Subscribers taken off the list after failing in a row.
    pub subscribers_dropped: u64,
    /// Events from muted nodes, read and dropped.
    pub muted: u64,
    /// Deliveries not made to a deafened connection.
    pub deafened: u64,
}

/// A delivery to try again once `due` has come.
pub struct Retry {
    pub due: Instant,
    conn: u32,
    out: Outbound,
}

/// Why a trust request from the IPC could not be carried out.
#[derive(Debug)]
pub enum TrustError {
    NoSuchNode,
    NoPendingRequest,
}

/// A handshake request waiting for approval on the node it was sent to, as `pilotctl pending`
/// prints it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingRequest {
    pub node_id: u32,
    pub justification: String,
    /// Unix seconds (display only).
    pub received_at: u64,
}

/// One row of `pilotctl trust`.
#[derive(Debug, Clone, Serialize)]
pub struct TrustRecord {
    pub node_id: u32,
    /// Whether the peer trusts this node back.
    pub mutual: bool,
    /// Unix seconds of the last grant, or the devnet's start for the trust it starts with.
    pub approved_at: u64,
}

fn unix_secs() -> u64 {
    pilot_election::clock::wall::unix_ms_now() / 1000
}

struct State {
    cuts: HashSet<(usize, usize)>,
    isolated: HashSet<usize>,
    stalled: HashSet<usize>,
    /// `(node, peer)`: `node` does not trust `peer`. Trust is directed, as in Pilot (one side
    /// may have approved the other and not the reverse); on a fresh devnet everyone trusts
    /// everyone.
    untrusted: HashSet<(usize, usize)>,
    /// Handshake requests by the node asked to approve them: requester, justification, when.
    pending: HashMap<usize, Vec<(usize, String, u64)>>,
    /// When `(node, peer)` trust was last granted, for `pilotctl trust`.
    granted_at: HashMap<(usize, usize), u64>,
    started_at: u64,
    /// Nodes whose stream connections fail every delivery, as a broken tunnel would.
    failing_delivery: HashSet<usize>,
    /// Nodes whose published events every broker reads and drops: heard by nobody, while
    /// their subscriptions still hear everyone (a mute node, as a path that loses only what
    /// the node sends would make it).
    muted: HashSet<usize>,
    /// Nodes whose stream connections hear nothing (`/deafen`), while what they publish is
    /// still delivered: a deaf node, whatever way it reaches the broker.
    deaf: HashSet<usize>,
    retries: mpsc::UnboundedSender<Retry>,
    drop_fraction: f64,
    rng: Rng,
    delay: Duration,
    conns: HashMap<u32, StreamConn>,
    next_conn: u32,
    next_client: u64,
    stats: Stats,
}

pub struct Net {
    pub nodes: Vec<NodeInfo>,
    /// What each daemon's `info` names as its version (`--daemon-version`): another one lets a
    /// test see a node choose pilotctl over the daemon's socket.
    pub daemon_version: String,
    seed: u64,
    state: Mutex<State>,
    retry_queue: Mutex<Option<mpsc::UnboundedReceiver<Retry>>>,
}

#[derive(Debug)]
pub enum DialError {
    NoSuchNode,
    PortClosed,
    Unreachable,
}

#[derive(Debug)]
pub enum SendError {
    UnknownConnection,
}

fn link_key(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

impl State {
    fn link_up(&self, a: usize, b: usize) -> bool {
        a == b
            || (!self.isolated.contains(&a)
                && !self.isolated.contains(&b)
                && !self.cuts.contains(&link_key(a, b)))
    }

    /// Whether `node` trusts `peer`; a daemon always trusts itself, so a node's own clients
    /// reach its own broker.
    fn trusts(&self, node: usize, peer: usize) -> bool {
        node == peer || !self.untrusted.contains(&(node, peer))
    }

    /// Closes every connection whose link is now down, telling its client the way a daemon
    /// does when a peer goes away, so a running `pilotctl subscribe` exits `connection_failed`.
    fn close_broken(&mut self) -> usize {
        let broken: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| !self.link_up(c.origin, c.broker))
            .map(|(id, _)| *id)
            .collect();
        for id in &broken {
            self.close_remote(*id);
        }
        self.stats.connections_cut += broken.len() as u64;
        broken.len()
    }

    /// The broker's side ends a connection: its client hears the remote close.
    fn close_remote(&mut self, id: u32) {
        if let Some(conn) = self.conns.remove(&id) {
            let _ = conn.out.try_send(Outbound {
                at: pilot_election::clock::now(),
                frame: ipc_frame(CMD_REMOTE_CLOSED, &id.to_be_bytes()),
            });
        }
    }

    /// `node` stops trusting `peer`. Like the real daemon's `untrust`, it tears down the
    /// tunnel between the two: every stream connection between them closes.
    fn revoke(&mut self, node: usize, peer: usize) -> usize {
        if node == peer {
            return 0;
        }
        self.untrusted.insert((node, peer));
        let between: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| link_key(c.origin, c.broker) == link_key(node, peer))
            .map(|(id, _)| *id)
            .collect();
        for id in &between {
            self.close_remote(*id);
        }
        between.len()
    }

    /// `node` trusts `peer`; a handshake request from `peer` waiting on `node` is settled.
    fn grant(&mut self, node: usize, peer: usize) {
        if self.untrusted.remove(&(node, peer)) {
            self.granted_at.insert((node, peer), unix_secs());
        }
        if let Some(list) = self.pending.get_mut(&node) {
            list.retain(|(r, ..)| *r != peer);
        }
    }
}

pub use pilot_election::transport::pilot::daemon::{event_frame, ipc_frame};

/// Splits whole event frames off the front of `pending`. `Err` means the peer broke the
/// broker's limits and the connection must close.
fn take_events(pending: &mut Vec<u8>) -> Result<Vec<(String, Vec<u8>)>, ()> {
    let mut events = Vec::new();
    let mut at = 0;
    loop {
        let rest = &pending[at..];
        if rest.len() < 2 {
            break;
        }
        let topic_len = u16::from_be_bytes([rest[0], rest[1]]) as usize;
        if topic_len > MAX_TOPIC_BYTES {
            return Err(());
        }
        if rest.len() < 2 + topic_len + 4 {
            break;
        }
        let l = &rest[2 + topic_len..2 + topic_len + 4];
        let payload_len = u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize;
        if payload_len > MAX_EVENT_BYTES {
            return Err(());
        }
        let total = 2 + topic_len + 4 + payload_len;
        if rest.len() < total {
            break;
        }
        let topic = String::from_utf8_lossy(&rest[2..2 + topic_len]).into_owned();
        let payload = rest[2 + topic_len + 4..total].to_vec();
        events.push((topic, payload));
        at += total;
    }
    pending.drain(..at);
    Ok(events)
}

impl Net {
    pub fn new(nodes: Vec<NodeInfo>, seed: u64) -> Net {
        let (retries, retry_queue) = mpsc::unbounded_channel();
        Net {
            nodes,
            daemon_version: "1.18.0".into(),
            seed,
            retry_queue: Mutex::new(Some(retry_queue)),
            state: Mutex::new(State {
                cuts: HashSet::new(),
                isolated: HashSet::new(),
                stalled: HashSet::new(),
                untrusted: HashSet::new(),
                pending: HashMap::new(),
                granted_at: HashMap::new(),
                started_at: unix_secs(),
                failing_delivery: HashSet::new(),
                muted: HashSet::new(),
                deaf: HashSet::new(),
                retries,
                drop_fraction: 0.0,
                rng: Rng::new(seed),
                delay: Duration::ZERO,
                conns: HashMap::new(),
                next_conn: 1,
                next_client: 1,
                stats: Stats::default(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn nodes_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.nodes).unwrap_or_default()
    }

    /// Finds a node by name, decimal node id or address, as the control API accepts all three.
    pub fn find(&self, key: &str) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.name == key || n.address == key || n.node_id.to_string() == key)
    }

    pub fn find_by_id(&self, node_id: u32) -> Option<usize> {
        self.nodes.iter().position(|n| n.node_id == node_id)
    }

    pub fn new_client(&self) -> u64 {
        let mut st = self.lock();
        st.next_client += 1;
        st.next_client
    }

    pub fn is_stalled(&self, node: usize) -> bool {
        self.lock().stalled.contains(&node)
    }

    pub fn dial(
        &self,
        client: u64,
        origin: usize,
        target_id: u32,
        port: u16,
        out: &ClientTx,
    ) -> Result<u32, DialError> {
        let broker = self.find_by_id(target_id).ok_or(DialError::NoSuchNode)?;
        let mut st = self.lock();
        if !st.link_up(origin, broker) {
            st.stats.dials_refused += 1;
            return Err(DialError::Unreachable);
        }
        if port != EVENT_STREAM_PORT {
            return Err(DialError::PortClosed);
        }
        let id = loop {
            let id = st.next_conn;
            st.next_conn = st.next_conn.wrapping_add(1).max(1);
            if !st.conns.contains_key(&id) {
                break id;
            }
        };
        st.conns.insert(
            id,
            StreamConn {
                client,
                origin,
                broker,
                topic: None,
                listed: false,
                failures: 0,
                pending: Vec::new(),
                deafened: false,
                out: out.clone(),
                tokens: RATE_BURST,
                refilled: pilot_election::clock::now(),
            },
        );
        Ok(id)
    }

    /// Feeds bytes a client sent on a stream connection to the broker at its far end.
    pub fn send(&self, client: u64, conn_id: u32, bytes: &[u8]) -> Result<(), SendError> {
        let mut st = self.lock();
        let conn = match st.conns.get_mut(&conn_id) {
            Some(c) if c.client == client => c,
            _ => return Err(SendError::UnknownConnection),
        };
        conn.pending.extend_from_slice(bytes);
        let broker = conn.broker;
        let events = match take_events(&mut conn.pending) {
            Ok(events) => events,
            Err(()) => {
                st.close_remote(conn_id);
                return Ok(());
            }
        };
        for (topic, payload) in events {
            let conn = st.conns.get(&conn_id).expect("checked above");
            if conn.topic.is_none() {
                // The trust gate: an untrusted node's first frame is read and its connection
                // closed; whatever followed it in the same send is never looked at.
                if !st.trusts(broker, conn.origin) {
                    st.stats.rejected += 1;
                    st.close_remote(conn_id);
                    return Ok(());
                }
                let conn = st.conns.get_mut(&conn_id).expect("checked above");
                conn.topic = Some(topic);
                conn.listed = true;
                continue;
            }
            if st.muted.contains(&conn.origin) {
                st.stats.muted += 1;
                continue;
            }
            let conn = st.conns.get_mut(&conn_id).expect("checked above");
            if !conn.take_token() {
                st.stats.rate_limited += 1;
                continue;
            }
            st.publish(conn_id, broker, &topic, &payload);
        }
        Ok(())
    }

    pub fn close(&self, client: u64, conn_id: u32) {
        let mut st = self.lock();
        if st.conns.get(&conn_id).is_some_and(|c| c.client == client) {
            st.conns.remove(&conn_id);
        }
    }

    pub fn client_gone(&self, client: u64) {
        self.lock().conns.retain(|_, c| c.client != client);
    }

    pub fn revoke_trust(&self, node: usize, peer: usize) -> usize {
        self.lock().revoke(node, peer)
    }

    pub fn grant_trust(&self, node: usize, peer: usize) {
        self.lock().grant(node, peer);
    }

    /// Whether `node` trusts the node with id `peer_id` (pilotctl asks before it dials).
    pub fn trusts_id(&self, node: usize, peer_id: u32) -> Result<bool, TrustError> {
        let peer = self.find_by_id(peer_id).ok_or(TrustError::NoSuchNode)?;
        Ok(self.lock().trusts(node, peer))
    }

    /// `pilotctl handshake <target>` on node `from`: the requester trusts the target from now
    /// on; unless the target trusts it back already, the request waits for `pilotctl approve`
    /// there. Returns whether the trust is mutual now.
    pub fn handshake(
        &self,
        from: usize,
        target_id: u32,
        justification: String,
    ) -> Result<bool, TrustError> {
        let target = self.find_by_id(target_id).ok_or(TrustError::NoSuchNode)?;
        let mut st = self.lock();
        st.grant(from, target);
        if st.trusts(target, from) {
            return Ok(true);
        }
        let list = st.pending.entry(target).or_default();
        list.retain(|(r, ..)| *r != from);
        list.push((from, justification, unix_secs()));
        Ok(false)
    }

    /// `pilotctl approve <requester>` on node `approver`: needs a pending request (or trust
    /// that already exists), and leaves the two trusting each other.
    pub fn approve(&self, approver: usize, requester_id: u32) -> Result<(), TrustError> {
        let requester = self
            .find_by_id(requester_id)
            .ok_or(TrustError::NoSuchNode)?;
        let mut st = self.lock();
        let asked = st
            .pending
            .get(&approver)
            .is_some_and(|l| l.iter().any(|(r, ..)| *r == requester));
        if !asked && !st.trusts(approver, requester) {
            return Err(TrustError::NoPendingRequest);
        }
        st.grant(approver, requester);
        st.grant(requester, approver);
        Ok(())
    }

    /// `pilotctl reject <requester>`: the request is forgotten, trust unchanged.
    pub fn reject(&self, approver: usize, requester_id: u32) -> Result<(), TrustError> {
        let requester = self
            .find_by_id(requester_id)
            .ok_or(TrustError::NoSuchNode)?;
        let mut st = self.lock();
        if let Some(list) = st.pending.get_mut(&approver) {
            list.retain(|(r, ..)| *r != requester);
        }
        Ok(())
    }

    /// `pilotctl untrust <peer>`: this node stops trusting the peer and the tunnel is torn
    /// down; the peer is not told (it may still trust this node: one-way).
    pub fn untrust(&self, node: usize, peer_id: u32) -> Result<usize, TrustError> {
        let peer = self.find_by_id(peer_id).ok_or(TrustError::NoSuchNode)?;
        Ok(self.lock().revoke(node, peer))
    }

    pub fn pending_for(&self, node: usize) -> Vec<PendingRequest> {
        let st = self.lock();
        st.pending
            .get(&node)
            .map(|l| {
                l.iter()
                    .map(|(r, j, at)| PendingRequest {
                        node_id: self.nodes[*r].node_id,
                        justification: j.clone(),
                        received_at: *at,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The other nodes `node` trusts.
    pub fn trusted_by(&self, node: usize) -> Vec<TrustRecord> {
        let st = self.lock();
        (0..self.nodes.len())
            .filter(|&o| o != node && st.trusts(node, o))
            .map(|o| TrustRecord {
                node_id: self.nodes[o].node_id,
                mutual: st.trusts(o, node),
                approved_at: st
                    .granted_at
                    .get(&(node, o))
                    .copied()
                    .unwrap_or(st.started_at),
            })
            .collect()
    }

    pub fn set_failing_delivery(&self, node: usize) {
        self.lock().failing_delivery.insert(node);
    }

    pub fn set_muted(&self, node: usize) {
        self.lock().muted.insert(node);
    }

    pub fn set_deaf(&self, node: usize) {
        self.lock().deaf.insert(node);
    }

    /// Runs the broker's delayed second attempts, in the order they fell due.
    pub async fn run_retries(self: std::sync::Arc<Self>) {
        let queue = self
            .retry_queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(mut queue) = queue else {
            return;
        };
        while let Some(retry) = queue.recv().await {
            pilot_election::clock::sleep_until(retry.due).await;
            self.lock().retry(retry);
        }
    }

    pub fn cut(&self, a: usize, b: usize) -> usize {
        let mut st = self.lock();
        st.cuts.insert(link_key(a, b));
        st.close_broken()
    }

    pub fn restore(&self, a: usize, b: usize) {
        self.lock().cuts.remove(&link_key(a, b));
    }

    pub fn isolate(&self, node: usize) -> usize {
        let mut st = self.lock();
        st.isolated.insert(node);
        st.close_broken()
    }

    pub fn unisolate(&self, node: usize) {
        self.lock().isolated.remove(&node);
    }

    pub fn set_stalled(&self, node: usize, stalled: bool) {
        let mut st = self.lock();
        if stalled {
            st.stalled.insert(node);
        } else {
            st.stalled.remove(&node);
        }
    }

    pub fn set_drop(&self, fraction: f64, seed: Option<u64>) {
        let mut st = self.lock();
        st.drop_fraction = fraction;
        if let Some(seed) = seed {
            st.rng = Rng::new(seed);
        }
    }

    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    pub fn heal(&self) {
        let mut st = self.lock();
        st.cuts.clear();
        st.isolated.clear();
        st.stalled.clear();
        st.failing_delivery.clear();
        st.muted.clear();
        st.deaf.clear();
        st.drop_fraction = 0.0;
        st.delay = Duration::ZERO;
        st.rng = Rng::new(self.seed);
    }

    pub fn status_json(&self) -> serde_json::Value {
        let st = self.lock();
        let name = |i: usize| self.nodes[i].name.clone();
        let mut cuts: Vec<[String; 2]> = st.cuts.iter().map(|&(a, b)| [name(a), name(b)]).collect();
        cuts.sort();
        let mut isolated: Vec<String> = st.isolated.iter().map(|&i| name(i)).collect();
        isolated.sort();
        let mut stalled: Vec<String> = st.stalled.iter().map(|&i| name(i)).collect();
        stalled.sort();
        // Each entry is `[node, peer]`: node does not trust peer.
        let mut untrusted: Vec<[String; 2]> = st
            .untrusted
            .iter()
            .map(|&(a, b)| [name(a), name(b)])
            .collect();
        untrusted.sort();
        let mut failing: Vec<String> = st.failing_delivery.iter().map(|&i| name(i)).collect();
        failing.sort();
        let mut muted: Vec<String> = st.muted.iter().map(|&i| name(i)).collect();
        muted.sort();
        let mut deaf: Vec<String> = st.deaf.iter().map(|&i| name(i)).collect();
        deaf.sort();
        let subscribers = st.conns.values().filter(|c| c.listed).count();
        serde_json::json!({
            "cuts": cuts,
            "isolated": isolated,
            "stalled": stalled,
            "untrusted": untrusted,
            "failing_delivery": failing,
            "muted": muted,
            "deaf": deaf,
            "deafened_connections": st.conns.values().filter(|c| c.deafened).count(),
            "drop_fraction": st.drop_fraction,
            "delay_ms": st.delay.as_millis() as u64,
            "connections": st.conns.len(),
            "subscribed_connections": subscribers,
            "stats": st.stats,
        })
    }
}

/// How one attempt to hand an event to a subscriber's client went.
enum Attempt {
    Delivered,
    Failed(Outbound),
    /// The client is gone; its connections are being removed.
    Gone,
}

impl State {
    /// Fans one event out to the connections on `broker` subscribed to its topic or `*` right
    /// now; the sending connection itself is skipped (its subscription frame only names what it
    /// publishes). Nothing is retained for later subscribers.
    fn publish(&mut self, from: u32, broker: usize, topic: &str, payload: &[u8]) {
        self.stats.published += 1;
        let at = pilot_election::clock::now() + self.delay;
        let event = event_frame(topic, payload);
        let deaf = &self.deaf;
        for c in self.conns.values_mut() {
            if deaf.contains(&c.origin) {
                c.deafened = true;
            }
        }
        let deafened = self
            .conns
            .iter()
            .filter(|(id, c)| **id != from && c.broker == broker && c.listed && c.deafened)
            .filter(|(_, c)| c.topic.as_deref().is_some_and(|t| t == topic || t == "*"))
            .count();
        self.stats.deafened += deafened as u64;
        let mut targets: Vec<u32> = self
            .conns
            .iter()
            .filter(|(id, c)| {
                **id != from
                    && c.broker == broker
                    && c.listed
                    && !c.deafened
                    && c.topic.as_deref().is_some_and(|t| t == topic || t == "*")
            })
            .map(|(id, _)| *id)
            .collect();
        // Deterministic order so a seeded drop pattern replays.
        targets.sort_unstable();
        for id in targets {
            if self.drop_fraction > 0.0 && self.rng.chance(self.drop_fraction) {
                self.stats.dropped += 1;
                continue;
            }
            let mut payload = Vec::with_capacity(event.len() + 4);
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&event);
            let out = Outbound {
                at,
                frame: ipc_frame(CMD_RECV, &payload),
            };
            match self.attempt(id, out) {
                Attempt::Delivered => self.delivered(id),
                Attempt::Failed(out) => {
                    self.stats.retried += 1;
                    let _ = self.retries.send(Retry {
                        due: pilot_election::clock::now() + RETRY_AFTER,
                        conn: id,
                        out,
                    });
                }
                Attempt::Gone => {}
            }
        }
    }

    fn attempt(&mut self, id: u32, out: Outbound) -> Attempt {
        let Some(conn) = self.conns.get(&id) else {
            return Attempt::Gone;
        };
        if self.failing_delivery.contains(&conn.origin) {
            return Attempt::Failed(out);
        }
        match conn.out.try_send(out) {
            Ok(()) => Attempt::Delivered,
            Err(mpsc::error::TrySendError::Full(out)) => {
                self.stats.overflowed += 1;
                Attempt::Failed(out)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Attempt::Gone,
        }
    }

    fn delivered(&mut self, id: u32) {
        self.stats.delivered += 1;
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.failures = 0;
        }
    }

    /// The second and last attempt of a delivery; a subscriber that fails it too often in a
    /// row leaves the list but keeps its connection, exactly as the real broker leaves it.
    fn retry(&mut self, retry: Retry) {
        let out = Outbound {
            at: retry.out.at.max(pilot_election::clock::now()),
            frame: retry.out.frame,
        };
        match self.attempt(retry.conn, out) {
            Attempt::Delivered => self.delivered(retry.conn),
            Attempt::Failed(_) => {
                self.stats.delivery_failures += 1;
                if let Some(conn) = self.conns.get_mut(&retry.conn) {
                    conn.failures += 1;
                    if conn.failures >= MAX_FAILURES_IN_A_ROW && conn.listed {
                        conn.listed = false;
                        self.stats.subscribers_dropped += 1;
                    }
                }
            }
            Attempt::Gone => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_match_pilot_format() {
        assert_eq!(format_address(0, 5), "0:0000.0000.0005");
        assert_eq!(format_address(0, 0x1_002A), "0:0000.0001.002A");
    }

    #[test]
    fn events_split_across_sends_are_reassembled() {
        let frame = event_frame("t", b"abc");
        let mut pending = frame[..4].to_vec();
        assert!(take_events(&mut pending).unwrap().is_empty());
        pending.extend_from_slice(&frame[4..]);
        pending.extend_from_slice(&frame);
        let events = take_events(&mut pending).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0], ("t".to_string(), b"abc".to_vec()));
        assert!(pending.is_empty());
    }

    fn test_net() -> Net {
        let nodes = (1..=2)
            .map(|id| NodeInfo {
                name: format!("n{id}"),
                hostname: format!("n{id}"),
                node_id: id,
                address: format_address(0, id),
                socket: PathBuf::from(format!("/nonexistent/n{id}.sock")),
            })
            .collect();
        Net::new(nodes, 1)
    }

    #[test]
    fn a_long_lived_publisher_is_held_to_the_burst() {
        let net = test_net();
        let (sub_tx, mut sub_rx) = mpsc::channel(1024);
        let (pub_tx, _pub_rx) = mpsc::channel(1024);
        let sub = net.dial(1, 0, 2, EVENT_STREAM_PORT, &sub_tx).expect("dial");
        let publisher = net.dial(2, 1, 2, EVENT_STREAM_PORT, &pub_tx).expect("dial");
        net.send(1, sub, &event_frame("t", b"")).expect("subscribe");
        let mut burst = event_frame("t", b"");
        for _ in 0..250 {
            burst.extend_from_slice(&event_frame("t", b"x"));
        }
        net.send(2, publisher, &burst).expect("publish");
        let mut received = 0;
        while sub_rx.try_recv().is_ok() {
            received += 1;
        }
        // Refill during the test may add a token or two.
        assert!((200..=205).contains(&received), "{received}");
        assert_eq!(net.lock().stats.rate_limited, 250 - received);
    }

    /// Every frame queued for a client, decoded as `(command, payload)`.
    fn frames(rx: &mut mpsc::Receiver<Outbound>) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        while let Ok(o) = rx.try_recv() {
            out.push((o.frame[4], o.frame[5..].to_vec()));
        }
        out
    }

    #[test]
    fn an_untrusted_subscriber_is_closed_after_its_first_frame() {
        let net = test_net();
        net.revoke_trust(1, 0);
        let (tx, mut rx) = mpsc::channel(16);
        let conn = net.dial(1, 0, 2, EVENT_STREAM_PORT, &tx).expect("dial");
        let mut bytes = event_frame("t", b"");
        bytes.extend_from_slice(&event_frame("t", b"never read"));
        net.send(1, conn, &bytes).expect("send");
        assert_eq!(
            frames(&mut rx),
            vec![(CMD_REMOTE_CLOSED, conn.to_be_bytes().to_vec())]
        );
        let st = net.lock();
        assert_eq!((st.stats.rejected, st.stats.published), (1, 0));
        assert!(st.conns.is_empty());
        drop(st);
        // The broker's own node is always trusted, and trust is directed: n2 still hears n1.
        let (tx2, _rx2) = mpsc::channel(16);
        let own = net.dial(2, 1, 2, EVENT_STREAM_PORT, &tx2).expect("dial");
        net.send(2, own, &event_frame("t", b"")).expect("send");
        let back = net.dial(3, 1, 1, EVENT_STREAM_PORT, &tx2).expect("dial");
        net.send(3, back, &event_frame("t", b"")).expect("send");
        assert_eq!(net.lock().stats.rejected, 1);
        // Granting trust lets the next subscription in.
        net.grant_trust(1, 0);
        let again = net.dial(1, 0, 2, EVENT_STREAM_PORT, &tx).expect("dial");
        net.send(1, again, &event_frame("t", b"")).expect("send");
        assert!(frames(&mut rx).is_empty());
        assert!(net.lock().conns[&again].listed);
    }

    #[test]
    fn a_subscriber_failing_three_times_in_a_row_is_dropped_but_stays_connected() {
        let net = test_net();
        let mut retries = net.retry_queue.lock().unwrap().take().unwrap();
        let (sub_tx, mut sub_rx) = mpsc::channel(16);
        let sub = net.dial(1, 0, 2, EVENT_STREAM_PORT, &sub_tx).expect("dial");
        net.send(1, sub, &event_frame("t", b"")).expect("subscribe");
        let (pub_tx, _pub_rx) = mpsc::channel(16);
        let publisher = net.dial(2, 1, 2, EVENT_STREAM_PORT, &pub_tx).expect("dial");
        net.send(2, publisher, &event_frame("t", b""))
            .expect("open");
        let publish = |n: usize| {
            for _ in 0..n {
                net.send(2, publisher, &event_frame("t", b"x"))
                    .expect("publish");
            }
        };
        net.set_failing_delivery(0);
        // Two failures, then a retry that succeeds: the count starts again.
        publish(2);
        while let Ok(r) = retries.try_recv() {
            net.lock().retry(r);
        }
        net.heal();
        publish(1);
        assert_eq!(frames(&mut sub_rx).len(), 1);
        assert_eq!(net.lock().conns[&sub].failures, 0);
        net.set_failing_delivery(0);
        publish(3);
        let due: Vec<Retry> = std::iter::from_fn(|| retries.try_recv().ok()).collect();
        assert_eq!(due.len(), 3, "each failed delivery is retried once");
        assert!(due.iter().all(|r| r.due > pilot_election::clock::now()));
        // The third retry fails, but a failing retry is never retried again.
        for r in due {
            net.lock().retry(r);
        }
        assert!(retries.try_recv().is_err());
        net.heal();
        publish(1);
        let st = net.lock();
        assert!(!st.conns[&sub].listed, "dropped from the list");
        assert!(st.conns.contains_key(&sub), "but still connected");
        assert_eq!(st.stats.subscribers_dropped, 1);
        assert_eq!(st.stats.delivery_failures, 5);
        drop(st);
        assert!(
            frames(&mut sub_rx).is_empty(),
            "a dropped subscriber hears nothing"
        );
    }

    /// Whether any frame queued for a client carries `text`.
    fn heard(rx: &mut mpsc::Receiver<Outbound>, text: &[u8]) -> bool {
        frames(rx)
            .iter()
            .any(|(_, p)| p.windows(text.len()).any(|w| w == text))
    }

    type Client = (ClientTx, mpsc::Receiver<Outbound>);

    /// n1 and n2 each subscribed to `t` on n3's broker and each publishing on a connection of
    /// its own: the clients and the two publishing connections.
    fn two_subscribers_and_publishers() -> (Net, Client, Client, u32, u32) {
        let net = test_net();
        let (tx1, rx1) = mpsc::channel(16);
        let (tx2, rx2) = mpsc::channel(16);
        let sub1 = net.dial(1, 0, 2, EVENT_STREAM_PORT, &tx1).expect("dial");
        let sub2 = net.dial(2, 1, 2, EVENT_STREAM_PORT, &tx2).expect("dial");
        let pub1 = net.dial(1, 0, 2, EVENT_STREAM_PORT, &tx1).expect("dial");
        let pub2 = net.dial(2, 1, 2, EVENT_STREAM_PORT, &tx2).expect("dial");
        for (client, conn) in [(1, sub1), (2, sub2), (1, pub1), (2, pub2)] {
            net.send(client, conn, &event_frame("t", b""))
                .expect("open");
        }
        (net, (tx1, rx1), (tx2, rx2), pub1, pub2)
    }

    #[test]
    fn a_muted_node_hears_everyone_and_nobody_hears_it_until_healed() {
        let (net, (_, mut rx1), (_, mut rx2), pub1, pub2) = two_subscribers_and_publishers();
        net.set_muted(0);
        net.send(1, pub1, &event_frame("t", b"from n1"))
            .expect("publish");
        net.send(2, pub2, &event_frame("t", b"from n2"))
            .expect("publish");
        assert!(!heard(&mut rx2, b"from n1"), "n1 is heard by nobody");
        assert!(heard(&mut rx1, b"from n2"), "n1 still hears n2");
        assert_eq!(net.lock().stats.muted, 1);
        assert_eq!(net.status_json()["muted"], serde_json::json!(["n1"]));
        net.heal();
        net.send(1, pub1, &event_frame("t", b"again"))
            .expect("publish");
        assert!(heard(&mut rx2, b"again"), "heard again after /heal");
    }

    #[test]
    fn a_deafened_node_is_heard_and_hears_nothing_its_old_connections_stay_deaf_after_a_heal() {
        let (net, (tx1, mut rx1), (_, mut rx2), pub1, pub2) = two_subscribers_and_publishers();
        net.set_deaf(0);
        net.send(1, pub1, &event_frame("t", b"from n1"))
            .expect("publish");
        net.send(2, pub2, &event_frame("t", b"from n2"))
            .expect("publish");
        assert!(heard(&mut rx2, b"from n1"), "n1 is still heard");
        assert!(!heard(&mut rx1, b"from n2"), "n1 hears nobody");
        // n1's subscription missed both events, its publishing connection the one of n2.
        assert_eq!(net.lock().stats.deafened, 3);
        assert_eq!(net.status_json()["deaf"], serde_json::json!(["n1"]));
        net.heal();
        net.send(2, pub2, &event_frame("t", b"after"))
            .expect("publish");
        assert!(
            !heard(&mut rx1, b"after"),
            "the old subscription stays deaf"
        );
        let fresh = net.dial(1, 0, 2, EVENT_STREAM_PORT, &tx1).expect("dial");
        net.send(1, fresh, &event_frame("t", b"")).expect("open");
        net.send(2, pub2, &event_frame("t", b"again"))
            .expect("publish");
        assert!(heard(&mut rx1, b"again"), "a new subscription hears");
    }

    #[test]
    fn a_retry_delivers_when_the_queue_has_drained() {
        let net = test_net();
        let mut retries = net.retry_queue.lock().unwrap().take().unwrap();
        let (sub_tx, mut sub_rx) = mpsc::channel(1);
        let sub = net.dial(1, 0, 2, EVENT_STREAM_PORT, &sub_tx).expect("dial");
        net.send(1, sub, &event_frame("t", b"")).expect("subscribe");
        let (pub_tx, _pub_rx) = mpsc::channel(16);
        let publisher = net.dial(2, 1, 2, EVENT_STREAM_PORT, &pub_tx).expect("dial");
        let mut bytes = event_frame("t", b"");
        bytes.extend_from_slice(&event_frame("t", b"1"));
        bytes.extend_from_slice(&event_frame("t", b"2"));
        net.send(2, publisher, &bytes).expect("publish");
        assert_eq!(
            net.lock().stats.overflowed,
            1,
            "the second found the queue full"
        );
        assert_eq!(frames(&mut sub_rx).len(), 1);
        net.lock().retry(retries.try_recv().expect("a retry"));
        assert_eq!(frames(&mut sub_rx).len(), 1, "the retry got through");
        assert_eq!(net.lock().stats.delivered, 2);
    }

    #[test]
    fn oversized_topic_is_refused() {
        let mut pending = ((MAX_TOPIC_BYTES + 1) as u16).to_be_bytes().to_vec();
        assert!(take_events(&mut pending).is_err());
    }
}
