//! How wire messages leave and reach a node.
//!
//! The runtime never waits on a transport: `publish` hands bytes over and returns at once, because
//! a slow peer (or a `pilotctl` process that hangs) must never delay a heartbeat or a lease check.
//! Inbound messages arrive as raw bytes on a channel so that parsing, size limits and counting
//! happen in one place, the runtime, whatever the transport.

pub mod events;
pub mod http;
pub mod memory;
mod pace;
pub mod pilot;

pub use pace::{Bucket, Pace};

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::tls::Tls;

/// How many received messages may wait for the election loop before new ones are dropped. The
/// protocol tolerates loss; an unbounded queue under a flood would not be tolerated by memory.
pub const INBOUND_CAPACITY: usize = 1024;

/// The sending half a transport (or its ingress route) pushes received bytes into.
pub type Inbound = mpsc::Sender<Vec<u8>>;

/// Which transport a node elects over, and its settings: the one place that names every kind.
#[derive(Debug, Clone)]
pub enum TransportConfig {
    /// The built-in transport: every message POSTed to each peer's `/peer/messages`.
    Http {
        /// Where the other members listen.
        peers: Vec<http::Peer>,
    },
    /// Over the Pilot overlay's brokers, through pilotctl.
    Pilot(pilot::PilotConfig),
    /// An observer's only (`run --observe` over http): one member's `/events` at a time,
    /// whose reports reach the loop through [`Started::reports`]; it sends nothing.
    Events(events::EventsConfig),
}

/// What a node gives the transport it starts.
pub struct Start {
    /// Where received messages go: the election loop's inbound queue.
    pub inbound: Inbound,
    pub metrics: Arc<Metrics>,
    /// Stops the transport's background tasks (cancelled after the loop, so that a leader
    /// handing over still hears its successor win).
    pub stop: CancellationToken,
    /// The member set's quorum, this node included.
    pub quorum: usize,
    /// `--peer-ca` and the node's client certificate, for transports that speak HTTPS.
    pub tls: Option<Arc<Tls>>,
}

/// A started transport: what the election loop publishes through, and what the node's HTTP
/// server serves for it, if anything.
pub struct Started {
    pub transport: Arc<dyn Transport>,
    pub ingress: Option<Ingress>,
    /// What the members followed report (the events transport's); `None` for every other.
    pub reports: Option<mpsc::Receiver<events::Report>>,
}

/// Routes a transport serves on the node's HTTP server for its peers (the http transport's
/// `POST /peer/messages`). The API's router merges them; the server keeps connections for them
/// beyond `--max-connections` and may serve them on a listener of their own (`--peer-listen`).
#[derive(Clone)]
pub struct Ingress {
    /// The routes, their state given.
    pub router: axum::Router,
    /// `(method, path)` of each, the method in lower case as in openapi/openapi.yaml.
    pub routes: &'static [(&'static str, &'static str)],
}

/// Why a transport could not start (the node then exits non-zero, with this message).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot start the HTTP transport: {0}")]
    HttpClient(#[from] reqwest::Error),
    #[error("cannot follow the members' /events: {0}")]
    Events(String),
    #[error("the events transport is an observer's (run --observe over http): a member elects over http or pilot")]
    ObserverOnly,
}

impl TransportConfig {
    /// Starts the transport.
    pub fn start(&self, node: Start) -> Result<Started, StartError> {
        Ok(match self {
            TransportConfig::Http { peers } => Started {
                ingress: Some(http::ingress(node.inbound.clone(), node.metrics.clone())),
                transport: Arc::new(http::HttpTransport::start(
                    peers.clone(),
                    node.quorum,
                    node.inbound,
                    node.metrics,
                    node.tls,
                )?),
                reports: None,
            },
            TransportConfig::Pilot(config) => Started {
                transport: Arc::new(pilot::PilotTransport::start(
                    config.clone(),
                    node.inbound,
                    node.metrics,
                    node.stop,
                )),
                ingress: None,
                reports: None,
            },
            TransportConfig::Events(config) => {
                let (transport, reports) =
                    events::EventsTransport::start(config.clone(), node.stop)?;
                Started {
                    transport: Arc::new(transport),
                    ingress: None,
                    reports: Some(reports),
                }
            }
        })
    }

    /// Files the transport may hold open besides the node's own, which the connection caps must
    /// leave room for: the http transport's connections to its peers (pilotctl's pipes are in
    /// the node's own share).
    pub fn open_files(&self) -> u64 {
        match self {
            TransportConfig::Http { peers } => {
                (peers.len() * crate::peer_client::PEER_IN_FLIGHT) as u64
            }
            TransportConfig::Pilot(_) => 0,
            // One stream at a time, and its reconnection.
            TransportConfig::Events(_) => 2,
        }
    }
}

/// What `/readyz` and `/status` report about the transport. The fields after `last_error` came
/// later and are left out of the JSON when a transport has nothing to say in them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    pub kind: &'static str,
    pub healthy: bool,
    pub last_error: Option<String>,
    /// Why the transport is not healthy, in words an operator can act on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Pilot only: how the node reaches its brokers, `socket` or `pilotctl` (chosen at start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<&'static str>,
    /// What each of its links is doing (pilot: its brokers; http: its peers).
    #[serde(flatten)]
    pub links: Option<Links>,
}

/// A transport's links, under its own names for them in the JSON: `"brokers": [{"broker":
/// "hub", "state": "subscribed", ...}]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Links {
    /// The key of the list (`brokers`, `peers`).
    pub list: &'static str,
    /// The key of each entry's name (`broker`, `peer`).
    pub name: &'static str,
    pub entries: Vec<Link>,
}

/// One link of a transport (a pilot broker, an http peer): which, what it is doing, and what
/// else the transport says of it, in its own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub name: String,
    /// The transport's word for its state (pilot: `subscribed`, `rejected`, ...; http:
    /// `reachable`, `unreachable`, `unknown`).
    pub state: &'static str,
    /// The entry's other fields (pilot: `since`, `restarts`, `cause`, `fix`, ...).
    pub detail: serde_json::Map<String, serde_json::Value>,
}

impl Link {
    /// `detail` is a value of the transport's own that serializes to a JSON object; its fields
    /// follow the name and the state.
    pub fn new(name: String, state: &'static str, detail: &impl Serialize) -> Link {
        let detail = match serde_json::to_value(detail) {
            Ok(serde_json::Value::Object(fields)) => fields,
            _ => serde_json::Map::new(),
        };
        Link {
            name,
            state,
            detail,
        }
    }
}

impl Serialize for Links {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Entry<'a>(&'static str, &'a Link);
        impl Serialize for Entry<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let Entry(key, link) = self;
                let mut m = s.serialize_map(Some(2 + link.detail.len()))?;
                m.serialize_entry(key, &link.name)?;
                m.serialize_entry("state", link.state)?;
                for (k, v) in &link.detail {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
        struct Entries<'a>(&'a Links);
        impl Serialize for Entries<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.entries.len()))?;
                for link in &self.0.entries {
                    seq.serialize_element(&Entry(self.0.name, link))?;
                }
                seq.end()
            }
        }
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(self.list, &Entries(self))?;
        m.end()
    }
}

/// A way to publish to the group.
pub trait Transport: Send + Sync + 'static {
    /// Fire and forget: must return without waiting on the network or a child process.
    fn publish(&self, bytes: Arc<[u8]>);
    fn health(&self) -> Health;
    /// The largest wire message the node may hand `publish` (a batch of many groups' messages
    /// is split to fit, docs/protocol.md rule 18).
    fn max_batch_bytes(&self) -> usize {
        crate::election::batch::MAX_BATCH_BYTES
    }
    /// How fast it may be handed wire messages, if its medium limits that (pilot: the broker's
    /// rate per connection); `None`: as fast as the loop makes them.
    fn pace(&self) -> Option<Pace> {
        None
    }
    /// Resolves once every message handed to `publish` so far has left or failed. The exit
    /// waits for it (bounded), so that a stopping node's last message, typically its resign,
    /// is not killed with the process. Transports that send before `publish` returns need not
    /// override it; one that sends from tasks or processes of its own (http, pilot) must.
    fn flushed(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(std::future::ready(()))
    }
}
