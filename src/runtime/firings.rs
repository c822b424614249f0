//! The shell's half of rule 19 (docs/protocol.md): an election's scheduled firings, as records
//! every member keeps on disk before it sends them, sends on every message, takes from any
//! member's message when newer, and, as leader, counts who acknowledged in its term (the
//! [`FiringBook`]). The schedule itself (when a firing is due, running it) is
//! `src/schedule.rs`'s, which writes through [`FiringRequest`].

use super::*;
use crate::election::firing::Firing;

/// A firing record written on this node (a claim, or how a firing ended), answered once it is
/// on disk and in the election's snapshot.
#[derive(Debug)]
pub struct FiringRequest {
    pub write: Firing,
    pub reply: oneshot::Sender<Result<(), StoreError>>,
}

/// How an election's schedule writes: its records through the loop, its log to its directory.
#[derive(Clone)]
pub struct FiringWrites {
    pub records: mpsc::Sender<FiringRequest>,
    pub store: Store,
}

impl Election {
    /// A member's message: its record taken if newer (on disk first, so that what this node
    /// sends after it survives a restart), and, if it acknowledges this node's heartbeat, noted
    /// as what that member holds in the message's term.
    pub(super) async fn on_firing_heard(&mut self, msg: &Message) {
        if let Some(write) = &msg.firing {
            if self.firings.is_news(write) {
                let kept = self.save_firing(write).await;
                if let Err(e) = &kept {
                    tracing::warn!(error = %e, at = write.at,
                        "could not keep a scheduled firing's record on disk: obeyed, not sent");
                }
                self.firings.take(write.clone(), kept.is_ok());
            }
        }
        if let Body::Ack { leader, .. } = &msg.body {
            if leader == self.node.id() {
                self.firings.acked(&msg.from, msg.term, msg.firing.as_ref());
            }
        }
    }

    /// A record written on this node by its schedule.
    pub(super) async fn on_firing_request(&mut self, shared: &Shared, req: FiringRequest) {
        let answer = self.save_firing(&req.write).await;
        if answer.is_ok() {
            self.firings.take(req.write, true);
            self.publish_snapshot(shared, clock::now());
        }
        let _ = req.reply.send(answer);
    }

    async fn save_firing(&self, write: &Firing) -> Result<(), StoreError> {
        let (store, write) = (self.store.clone(), write.clone());
        tokio::task::spawn_blocking(move || store.save_firing(&write))
            .await
            .expect("the firing write does not panic")
    }

    /// Who holds the newest record (this node first), as acknowledged in the current term.
    pub(super) fn firing_holders(&self, term: u64) -> Vec<String> {
        match self.firings.record() {
            Some(r) => self
                .firings
                .held_by(self.node.id(), self.node.members().ids(), term, r.at),
            None => Vec::new(),
        }
    }
}
