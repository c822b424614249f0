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

use tokio::time::Instant;

use crate::election::batch;
use crate::election::Persistent;
use crate::metrics::Metrics;
use crate::store::{Book, Store, StoreError};
use crate::transport::{Bucket, Transport};

use super::RuntimeError;

/// One turn's messages and state, and who may be sent batches.
pub(super) struct Outbox {
    /// Every message of the turn, signed and serialised, in the order the elections made them.
    messages: Vec<Arc<[u8]>>,
    /// The default group's new state, if it changed this turn (its own files, not the book).
    own: Option<(Store, Persistent)>,
    /// The state of every other group (`None`: an observer's loop, which keeps nothing).
    book: Option<Arc<Mutex<Book>>>,
    /// Counts the flushes: an election that added to the turn of this number has actions that
    /// have not run yet.
    turn: u64,
    /// This node's id, named in its batches.
    node_id: String,
    /// The other members, each with whether its latest message said it reads batches.
    readers: BTreeMap<String, bool>,
    /// The transport's pace, if it has one: the wire messages it may still be handed.
    bucket: Option<Bucket>,
}

/// Whether a flush may hold the turn's messages back for the transport's pace. Commands, a
/// group's removal and everything while stopping send at once: their answer or the exit
/// follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pacing {
    Paced,
    Now,
}

impl Outbox {
    pub(super) fn new(node_id: String, book: Option<Arc<Mutex<Book>>>) -> Outbox {
        Outbox {
            messages: Vec::new(),
            own: None,
            book,
            turn: 0,
            node_id,
            readers: BTreeMap::new(),
            bucket: None,
        }
    }

    /// When messages held back for the transport's pace may leave; `None` when none are held.
    pub(super) fn release_at(&self) -> Option<Instant> {
        if self.messages.is_empty() {
            return None;
        }
        self.bucket.as_ref()?.ready_at()
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
        (self.book.as_ref())
            .expect("a node that takes part in elections has a book")
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
    ///
    /// With a transport that has a pace and `Pacing::Paced`, the messages stay in the outbox
    /// while the pace allows no wire message, and leave with a later turn's, packed together
    /// ([`Self::release_at`] says when). Their state is on disk already: held back, they are
    /// only late, as on a slow network (docs/protocol.md, rule 18).
    pub(super) async fn flush(
        &mut self,
        transport: &dyn Transport,
        metrics: &Metrics,
        send: Pacing,
    ) -> Result<(), RuntimeError> {
        self.flush_at(crate::clock::now(), transport, metrics, send)
            .await
    }

    /// [`Self::flush`] at `now`.
    async fn flush_at(
        &mut self,
        now: Instant,
        transport: &dyn Transport,
        metrics: &Metrics,
        send: Pacing,
    ) -> Result<(), RuntimeError> {
        self.turn += 1;
        let own = self.own.take();
        let book =
            (self.book.clone()).filter(|b| b.lock().unwrap_or_else(|e| e.into_inner()).is_dirty());
        if own.is_some() || book.is_some() {
            tokio::task::spawn_blocking(move || -> Result<(), StoreError> {
                if let Some((store, p)) = own {
                    store.persist(&p)?;
                }
                match book {
                    Some(book) => book.lock().unwrap_or_else(|e| e.into_inner()).write(),
                    None => Ok(()),
                }
            })
            .await
            .expect("the persist task does not panic")?;
        }
        if self.messages.is_empty() {
            return Ok(());
        }
        let mut tokens = f64::INFINITY;
        if let Some(pace) = transport.pace() {
            tokens = (self.bucket)
                .get_or_insert_with(|| Bucket::full(pace, now))
                .refill(now);
            if tokens < 1.0 && send == Pacing::Paced {
                metrics.publish_throttled("paced");
                return Ok(());
            }
        }
        let wires = if self.messages.len() == 1 || !self.batches_read_by_all() {
            // Alone, each message is a wire message: paced, only as many as there are tokens
            // leave now, the oldest first, and the rest wait in order (a node's first turn
            // in a thousand groups, before the others said they read batches).
            let n = match send {
                Pacing::Paced => self.messages.len().min(tokens.max(1.0) as usize),
                Pacing::Now => self.messages.len(),
            };
            for m in self.messages.drain(..n) {
                transport.publish(m);
            }
            n
        } else {
            let messages = std::mem::take(&mut self.messages);
            let packed = batch::pack(&self.node_id, &messages, transport.max_batch_bytes());
            metrics.batched(messages.len() as u64, packed.len() as u64);
            let n = packed.len();
            for wire in packed {
                transport.publish(wire.into());
            }
            n
        };
        if let Some(bucket) = &mut self.bucket {
            // A large turn is paid for by the turns after it (a burst's worth at most), and
            // the transport's own limit covers the rest.
            bucket.spend(wires as f64);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Health;
    use std::time::Duration;

    /// Counts what it is handed, at a pace of 10 a second with a burst of 2.
    #[derive(Default)]
    struct Paced(Mutex<Vec<Arc<[u8]>>>);

    impl Transport for Paced {
        fn publish(&self, bytes: Arc<[u8]>) {
            self.0.lock().unwrap().push(bytes);
        }
        fn health(&self) -> Health {
            Health {
                kind: "memory",
                io: None,
                healthy: true,
                last_error: None,
                reason: None,
                links: None,
            }
        }
        fn pace(&self) -> Option<crate::transport::Pace> {
            Some(crate::transport::Pace {
                per_second: 10.0,
                burst: 2.0,
            })
        }
    }

    fn outbox() -> (Outbox, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("pe-outbox-{}", std::process::id()));
        let book = Book::open(&dir, true).expect("book");
        (
            Outbox::new("n1".into(), Some(Arc::new(Mutex::new(book)))),
            dir,
        )
    }

    fn msg(i: usize) -> Arc<[u8]> {
        format!("{{\"type\":\"presence\",\"i\":{i}}}")
            .into_bytes()
            .into()
    }

    #[tokio::test]
    async fn a_paced_transport_gets_no_more_than_its_tokens_and_the_rest_leaves_in_order() {
        let (mut out, dir) = outbox();
        let t = Paced::default();
        let metrics = Metrics::new();
        let mut now = crate::clock::now();
        out.set_members(["n2"]);
        // Nobody said it reads batches: each message is a wire message; the burst of 2 leaves.
        for i in 0..5 {
            out.send(msg(i));
        }
        out.flush_at(now, &t, &metrics, Pacing::Paced)
            .await
            .unwrap();
        assert_eq!(t.0.lock().unwrap().len(), 2);
        let release = out.release_at().expect("three are held");
        assert_eq!(release - now, Duration::from_millis(100));
        // Nothing more before the release, one at it.
        out.flush_at(now, &t, &metrics, Pacing::Paced)
            .await
            .unwrap();
        assert_eq!(t.0.lock().unwrap().len(), 2);
        now += Duration::from_millis(100);
        out.flush_at(now, &t, &metrics, Pacing::Paced)
            .await
            .unwrap();
        assert_eq!(t.0.lock().unwrap().len(), 3);
        // Sent now (a command, a stopping node): everything, pace or not.
        out.flush_at(now, &t, &metrics, Pacing::Now).await.unwrap();
        let sent: Vec<Arc<[u8]>> = t.0.lock().unwrap().clone();
        assert_eq!(sent, (0..5).map(msg).collect::<Vec<_>>(), "all, in order");
        assert!(out.release_at().is_none());
        // The debt is bounded by a burst: once batches are read, a held turn leaves packed
        // with the next one as a single wire message.
        out.heard("n2", true);
        now += Duration::from_millis(300);
        out.send(msg(5));
        out.send(msg(6));
        out.flush_at(now, &t, &metrics, Pacing::Paced)
            .await
            .unwrap();
        assert_eq!(t.0.lock().unwrap().len(), 6, "one batch");
        out.send(msg(7));
        out.flush_at(now, &t, &metrics, Pacing::Paced)
            .await
            .unwrap();
        out.send(msg(8));
        out.flush_at(now, &t, &metrics, Pacing::Paced)
            .await
            .unwrap();
        assert_eq!(t.0.lock().unwrap().len(), 6, "held: no token");
        now = out.release_at().unwrap();
        out.flush_at(now, &t, &metrics, Pacing::Paced)
            .await
            .unwrap();
        let sent = t.0.lock().unwrap();
        assert_eq!(sent.len(), 7, "7 and 8 in one batch");
        let last = String::from_utf8_lossy(&sent[6]).to_string();
        assert!(
            last.contains("\"i\":7") && last.contains("\"i\":8"),
            "{last}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
