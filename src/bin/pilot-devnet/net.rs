//! The emulated network: which nodes exist, which links are up, and every node's event broker.
//!
//! All of it sits behind one mutex because faults must act atomically on the whole picture: a
//! cut has to close exactly the connections that cross it, and a publish has to see one
//! consistent set of subscribers (fan-out happens at publish time only, as the real broker does).

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

pub const CMD_RECV: u8 = 0x07;
/// Daemon → client: the remote end of a stream closed. Found by probing pilotctl 1.18.0: only
/// this opcode makes a running `subscribe` exit with `recv: EOF` (a `0x08` from the daemon is
/// ignored).
pub const CMD_REMOTE_CLOSED: u8 = 0x09;

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
    /// Bytes sent so far that do not yet form a whole event frame: sends are a byte stream.
    pending: Vec<u8>,
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
    pub overflowed: u64,
    pub rate_limited: u64,
    pub dials_refused: u64,
    pub connections_cut: u64,
}

struct State {
    cuts: HashSet<(usize, usize)>,
    isolated: HashSet<usize>,
    stalled: HashSet<usize>,
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
    seed: u64,
    state: Mutex<State>,
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
            if let Some(conn) = self.conns.remove(id) {
                let _ = conn.out.try_send(Outbound {
                    at: pilot_election::clock::now(),
                    frame: encode_frame(CMD_REMOTE_CLOSED, &id.to_be_bytes()),
                });
            }
        }
        self.stats.connections_cut += broken.len() as u64;
        broken.len()
    }
}

/// Encodes one IPC frame: u32 BE length of what follows, the command byte, the payload.
pub fn encode_frame(cmd: u8, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len() + 1).unwrap_or(u32::MAX);
    let mut frame = Vec::with_capacity(payload.len() + 5);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.push(cmd);
    frame.extend_from_slice(payload);
    frame
}

fn encode_event(topic: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(topic.len() + payload.len() + 6);
    out.extend_from_slice(&(topic.len() as u16).to_be_bytes());
    out.extend_from_slice(topic.as_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

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
        Net {
            nodes,
            seed,
            state: Mutex::new(State {
                cuts: HashSet::new(),
                isolated: HashSet::new(),
                stalled: HashSet::new(),
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
                pending: Vec::new(),
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
                let conn = st.conns.remove(&conn_id);
                if let Some(conn) = conn {
                    let _ = conn.out.try_send(Outbound {
                        at: pilot_election::clock::now(),
                        frame: encode_frame(CMD_REMOTE_CLOSED, &conn_id.to_be_bytes()),
                    });
                }
                return Ok(());
            }
        };
        for (topic, payload) in events {
            let conn = st.conns.get_mut(&conn_id).expect("checked above");
            if conn.topic.is_none() {
                conn.topic = Some(topic);
                continue;
            }
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
        let subscribers = st.conns.values().filter(|c| c.topic.is_some()).count();
        serde_json::json!({
            "cuts": cuts,
            "isolated": isolated,
            "stalled": stalled,
            "drop_fraction": st.drop_fraction,
            "delay_ms": st.delay.as_millis() as u64,
            "connections": st.conns.len(),
            "subscribed_connections": subscribers,
            "stats": st.stats,
        })
    }
}

impl State {
    /// Fans one event out to the connections on `broker` subscribed to its topic or `*` right
    /// now; the sending connection itself is skipped (its subscription frame only names what it
    /// publishes). Nothing is retained for later subscribers.
    fn publish(&mut self, from: u32, broker: usize, topic: &str, payload: &[u8]) {
        self.stats.published += 1;
        let at = pilot_election::clock::now() + self.delay;
        let event = encode_event(topic, payload);
        let mut targets: Vec<u32> = self
            .conns
            .iter()
            .filter(|(id, c)| {
                **id != from
                    && c.broker == broker
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
            let conn = &self.conns[&id];
            let mut payload = Vec::with_capacity(event.len() + 4);
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&event);
            let frame = encode_frame(CMD_RECV, &payload);
            match conn.out.try_send(Outbound { at, frame }) {
                Ok(()) => self.stats.delivered += 1,
                Err(mpsc::error::TrySendError::Full(_)) => self.stats.overflowed += 1,
                // The client is gone; its connections are being removed.
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
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
        let frame = encode_event("t", b"abc");
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
        net.send(1, sub, &encode_event("t", b""))
            .expect("subscribe");
        let mut burst = encode_event("t", b"");
        for _ in 0..250 {
            burst.extend_from_slice(&encode_event("t", b"x"));
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

    #[test]
    fn oversized_topic_is_refused() {
        let mut pending = ((MAX_TOPIC_BYTES + 1) as u16).to_be_bytes().to_vec();
        assert!(take_events(&mut pending).is_err());
    }
}
