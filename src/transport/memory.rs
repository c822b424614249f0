//! An in-process bus: every node attached to it receives every message, itself included.
//!
//! It lets tests run whole clusters inside one process without sockets.

use std::sync::{Arc, Mutex};

use super::{Health, Inbound, Transport};

/// The shared medium. Clone it to hand it to each node.
#[derive(Debug, Clone, Default)]
pub struct Bus {
    members: Arc<Mutex<Vec<Inbound>>>,
}

impl Bus {
    pub fn new() -> Self {
        Bus::default()
    }

    /// Attaches a node that receives on `inbound` and returns its transport.
    pub fn attach(&self, inbound: Inbound) -> MemoryTransport {
        self.members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(inbound);
        MemoryTransport { bus: self.clone() }
    }
}

/// One node's handle on a [`Bus`].
#[derive(Debug, Clone)]
pub struct MemoryTransport {
    bus: Bus,
}

impl Transport for MemoryTransport {
    fn publish(&self, bytes: Arc<[u8]>) {
        let mut members = self.bus.members.lock().unwrap_or_else(|e| e.into_inner());
        // A node whose receiver is gone has stopped: forget it. A full queue drops the message,
        // as a lossy network would.
        members.retain(|m| !m.is_closed());
        for m in members.iter() {
            let _ = m.try_send(bytes.to_vec());
        }
    }

    fn health(&self) -> Health {
        Health {
            io: None,
            kind: "memory",
            healthy: true,
            last_error: None,
            reason: None,
            links: None,
        }
    }
}
