//! How wire messages leave and reach a node.
//!
//! The runtime never waits on a transport: `publish` hands bytes over and returns at once, because
//! a slow peer (or a `pilotctl` process that hangs) must never delay a heartbeat or a lease check.
//! Inbound messages arrive as raw bytes on a channel so that parsing, size limits and counting
//! happen in one place, the runtime, whatever the transport.

pub mod http;
pub mod memory;
pub mod pilot;

use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::mpsc;

/// How many received messages may wait for the election loop before new ones are dropped. The
/// protocol tolerates loss; an unbounded queue under a flood would not be tolerated by memory.
pub const INBOUND_CAPACITY: usize = 1024;

/// The sending half a transport (or the HTTP ingress route) pushes received bytes into.
pub type Inbound = mpsc::Sender<Vec<u8>>;

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
    /// The pilot transport's brokers, one entry each.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brokers: Option<Vec<pilot::BrokerHealth>>,
}

/// A way to publish to the group.
pub trait Transport: Send + Sync + 'static {
    /// Fire and forget: must return without waiting on the network or a child process.
    fn publish(&self, bytes: Arc<[u8]>);
    fn health(&self) -> Health;
    /// Resolves once every message handed to `publish` so far has left or failed. The exit
    /// waits for it (bounded), so that a stopping node's last message, typically its resign,
    /// is not killed with the process. Transports that send before `publish` returns, or whose
    /// sends need no process of their own, need not override it.
    fn flushed(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(std::future::ready(()))
    }
}

/// Health shared between a transport's background tasks and its `health()`.
#[derive(Debug)]
pub(crate) struct HealthCell {
    kind: &'static str,
    inner: Mutex<(bool, Option<String>)>,
}

impl HealthCell {
    pub(crate) fn new(kind: &'static str, healthy: bool) -> Self {
        HealthCell {
            kind,
            inner: Mutex::new((healthy, None)),
        }
    }

    pub(crate) fn set(&self, healthy: bool, error: Option<String>) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.0 = healthy;
        if error.is_some() {
            g.1 = error;
        }
    }

    pub(crate) fn get(&self) -> Health {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        Health {
            kind: self.kind,
            healthy: g.0,
            last_error: g.1.clone(),
            reason: None,
            brokers: None,
        }
    }
}
