//! A client for pilot-election clusters: one coordinator among the
//! instances of a service, automatic failover, never two leaders at once.
//!
//! Each instance of the service runs a `pilot-election` node beside it; the nodes elect one
//! leader and tell anyone who asks over a small HTTP/JSON API. This crate speaks that API
//! (docs/clients.md in the repository is the contract):
//!
//! - [`Client::leader`]: who leads, where to reach it ([`Leader::url`], [`Leader::meta`]) and
//!   in which term, with how fresh the answer is, failing over between members.
//! - [`Client::watch`]: a [`Stream`](futures_util::Stream) of [`LeaderChange`]s that reconnects
//!   by itself, resumes with `Last-Event-ID`, fails over to other members, and recovers the
//!   changes it missed meanwhile: each term's leader once, in term order.
//! - [`Client::observe`]: a [`Stream`](futures_util::Stream) of [`Observation`]s over the same
//!   connections: every state a member reports, leaderless ones included, repeated at each
//!   keep-alive, for an observer that must know how fresh its knowledge is
//!   ([`ClientBuilder::observer`] marks its streams as an observer's).
//! - [`Client::watch_groups`]: the changes of many groups (one coordinator per shard or task)
//!   on one connection, each group's terms once and rising.
//! - [`Client::lead`]: runs work only while the service's own node leads, and cancels it
//!   before that node's lease can run out.
//! - [`Fence`]: refuses a term lower than one already seen.
//!
//! ```no_run
//! use futures_util::StreamExt;
//! use pilot_election_client::Client;
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = Client::new([
//!     "http://10.0.0.1:7070",
//!     "http://10.0.0.2:7070",
//!     "http://10.0.0.3:7070",
//! ])?;
//! match cluster.leader().await? {
//!     Some(l) => println!("{} leads in term {} (at {:?}), said {}", l.id, l.term, l.url, l.answered_by),
//!     None => println!("no leader right now (an election is under way)"),
//! }
//! let mut changes = cluster.watch();
//! while let Some(c) = changes.next().await {
//!     println!("term {}: {} leads", c.term, c.leader);
//! }
//! # Ok(()) }
//! ```
//!
//! # Running work only on the leader
//!
//! Build a client of the service's *own* node (one URL, its sidecar) and hand
//! [`Client::lead`] the work. The work gets the term and a
//! [`CancellationToken`]; the token is cancelled when the
//! node says it no longer leads, or when no answer has renewed its lease by the lease's end
//! less a margin ([`ClientBuilder::lead_margin`]), whichever comes first. After a crash, a
//! freeze or a partition another node can be elected only `T` (the election timeout, longer
//! than the lease) after the lease, so work that stops when its token is cancelled has stopped
//! before anyone else leads. A handover (step-down, preemption) can be faster than one poll
//! interval: the overlap it leaves is why writes are fenced (below, and
//! [`Client::lead_once`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use pilot_election_client::Client;
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let own = Client::builder(["http://127.0.0.1:7070"])
//!     .lead_poll_interval(Duration::from_millis(200))
//!     .build()?;
//! own.lead(|term, cancel| async move {
//!     while !cancel.is_cancelled() {
//!         // one step of the coordinator's job; every write carries `term`
//! #       let _ = term;
//!         tokio::select! {
//!             _ = cancel.cancelled() => {}
//!             _ = tokio::time::sleep(Duration::from_secs(1)) => {}
//!         }
//!     }
//! })
//! .await?;
//! # Ok(()) }
//! ```
//!
//! # Fencing the writes
//!
//! Cancelling the work is not enough on its own: a process that is paused (SIGSTOP, a VM
//! migration, a long GC pause) runs no timer, and a write sent just before the cancellation can
//! still be in flight when the next leader starts. So the resource itself must refuse the
//! writes of a deposed leader. The **term** is the fencing token: terms only grow, across
//! restarts too, so a deposed leader's writes always carry a lower term than its successor's.
//! Attach the term to every write and have the resource keep the highest term it has seen and
//! refuse anything lower, *in the same atomic step as the write*:
//!
//! - **SQL**: keep the term beside the data and make it part of the update's condition, so the
//!   check and the write are one statement:
//!
//!   ```sql
//!   UPDATE jobs SET state = $state, fence_term = $term
//!    WHERE id = $id AND fence_term <= $term;
//!   -- 0 rows updated: a newer leader has written; this one is deposed and must stop
//!   ```
//!
//!   For a table of many rows, a one-row `fence` table updated the same way in the same
//!   transaction (`UPDATE fence SET term = $term WHERE term <= $term`, then check the row
//!   count before the other writes) fences them all.
//! - **Compare-and-set** (a key-value store, an object store with conditional writes): read the
//!   value with its stored term and version, refuse if the stored term is higher than yours,
//!   and write `{value, term}` on the condition that the version is unchanged; retry on a
//!   conflict. etcd: a transaction comparing the key's `mod_revision`; S3/GCS: `If-Match` on
//!   the ETag or generation.
//! - **In one process** (a resource this process owns, or a server that takes writes from
//!   several workers): a [`Fence`], whose [`Fence::check`] accepts a term at least the highest
//!   seen and refuses a lower one with both terms in the error.
//!
//! ```
//! use pilot_election_client::Fence;
//!
//! let fence = Fence::new();
//! assert!(fence.check(7).is_ok()); // the leader of term 7 writes
//! assert!(fence.check(8).is_ok()); // its successor
//! let late = fence.check(7).unwrap_err(); // term 7's write that was still in flight
//! assert_eq!((late.term, late.highest), (7, 8));
//! ```
//!
//! # Failover and freshness
//!
//! Every request goes first to the member that answered last. A member that refuses the
//! connection, does not answer within [`ClientBuilder::request_timeout`], or answers a 5xx
//! other than `503 no_leader` is skipped and the next one asked; [`Error::Unavailable`] lists
//! every member's reason when none answered. A [`Leader`] says how old it is: when its request
//! left and its answer arrived, how long ago a follower last heard the leader
//! ([`Leader::last_heartbeat`]), how much lease the leader had left ([`Leader::lease_remaining`]).
//!
//! # Clocks
//!
//! Deadlines are measured on tokio's clock. Because a monotonic clock stops while the host is
//! suspended and a lease does not, [`Client::lead`] also keeps its deadline on the wall clock
//! and cancels when either clock says it passed.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod client;
mod clock;
mod error;
mod fence;
mod groups;
mod lead;
mod sse;
mod watch;

pub use client::{Client, ClientBuilder, Leader, Transition};
pub use error::{Attempt, ConfigError, Error, StaleTerm};
pub use fence::Fence;
pub use groups::{GroupChange, GroupEvent, GroupsWatch};
pub use lead::{Tenure, TenureEnd};
pub use watch::{ChangeSource, LeaderChange, Observation, Observe, Watch, WatchStatus};

/// The cancellation token [`Client::lead`] hands the work (re-exported from `tokio-util`).
pub use tokio_util::sync::CancellationToken;
