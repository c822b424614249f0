//! What one turn of the loop sends and keeps (docs/protocol.md, rule 18): every election's
//! messages and persisted state of the turn are gathered here, and [`Outbox::flush`] writes
//! the state first (one write of the book for every group beside the default one, and the
//! default group's own files if they changed) and then sends the messages, all of them in one
//! wire message per peer when every member reads batches. This is the one place where the
//! order "persisted before the message that depends on it leaves" (rules 2, 3, 8) is kept:
//! nothing of a turn leaves before everything the turn persisted is on disk, and an election
//! that has something in the outbox is flushed before it takes its next input, so the core's
//! "the previous step's actions have run" holds for every group.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::election::batch;
use crate::election::Persistent;
use crate::metrics::Metrics;
use crate::store::{Book, Store, StoreError};
use crate::transport::Transport;

use super::RuntimeError;

/// One turn's messages and state, and who may be sent batches.
pub(super) struct Outbox {
    /// Every message of the turn, signed and serialised, in the order the elections made them.
    messages: Vec<Arc<[u8]>>,
    /// The default group's new state, if it changed this turn (its own files, not the book).
    own: Option<(Store, Persistent)>,
    /// The state of every other group.
    pub(super) book: Arc<Mutex<Book>>,
    /// Counts the flushes: an election that added to the turn of this number has actions that
    /// have not run yet.
    turn: u64,
    /// This node's id, named in its batches.
    node_id: String,
    /// The other members, each with whether its latest message said it reads batches.
    readers: BTreeMap<String, bool>,
}

impl Outbox {
    pub(super) fn new(node_id: String, book: Arc<Mutex<Book>>) -> Outbox {
        Outbox {
            messages: Vec::new(),
            own: None,
            book,
            turn: 0,
            node_id,
            readers: BTreeMap::new(),
        }
    }

    /// This node's id.
    pub(super) fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The number of the turn under way: an election that adds to it notes it, and is flushed
    /// before its next input while it is still the same.
    pub(super) fn turn(&self) -> u64 {
        self.turn
    }

    /// Keeps the default group's `p` in its own files at the end of the turn.
    pub(super) fn persist_own(&mut self, store: &Store, p: Persistent) {
        self.own = Some((store.clone(), p));
    }

    /// Keeps `group`'s `p` in the book at the end of the turn.
    pub(super) fn persist_in_book(&mut self, group: &str, p: &Persistent) {
        self.book
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stage(group, p);
    }

    /// Sends `bytes` (one whole, signed message) at the end of the turn.
    pub(super) fn send(&mut self, bytes: Arc<[u8]>) {
        self.messages.push(bytes);
    }

    /// The members this node sends to: each starts as not reading batches until its first
    /// message says otherwise.
    pub(super) fn set_members<'a>(&mut self, others: impl IntoIterator<Item = &'a str>) {
        self.readers = others
            .into_iter()
            .map(|id| {
                (
                    id.to_string(),
                    self.readers.get(id).copied().unwrap_or(false),
                )
            })
            .collect();
    }

    /// Member `from`'s latest message said whether it reads batches.
    pub(super) fn heard(&mut self, from: &str, reads_batches: bool) {
        if let Some(r) = self.readers.get_mut(from) {
            *r = reads_batches;
        }
    }

    /// Whether every other member reads batches: only then does a turn's mail go as one.
    pub(super) fn batches_read_by_all(&self) -> bool {
        self.readers.values().all(|r| *r)
    }

    /// Writes what the turn persisted, then sends what it made: alone when there is one
    /// message or a member does not read batches, else as batches of at most the transport's
    /// size. A failed write is an error: the node must not go on (nothing of the turn leaves).
    pub(super) async fn flush(
        &mut self,
        transport: &dyn Transport,
        metrics: &Metrics,
    ) -> Result<(), RuntimeError> {
        self.turn += 1;
        let own = self.own.take();
        let book_dirty = self
            .book
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_dirty();
        if own.is_some() || book_dirty {
            let book = self.book.clone();
            tokio::task::spawn_blocking(move || -> Result<(), StoreError> {
                if let Some((store, p)) = own {
                    store.persist(&p)?;
                }
                book.lock().unwrap_or_else(|e| e.into_inner()).write()
            })
            .await
            .expect("the persist task does not panic")?;
        }
        if self.messages.is_empty() {
            return Ok(());
        }
        let messages = std::mem::take(&mut self.messages);
        if messages.len() == 1 || !self.batches_read_by_all() {
            for m in messages {
                transport.publish(m);
            }
            return Ok(());
        }
        let packed = batch::pack(&self.node_id, &messages, transport.max_batch_bytes());
        metrics.batched(messages.len() as u64, packed.len() as u64);
        for wire in packed {
            transport.publish(wire.into());
        }
        Ok(())
    }
}
