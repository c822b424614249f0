//! [`Client::lead`]: work that runs only while the service's own node leads.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Answer;
use crate::sse::{SseEvent, SseParser};
use crate::{clock, Client, Error, Leader};

/// One stretch of work under one term, as [`Client::lead_once`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tenure<T> {
    /// The term the node led in: the fencing token the work was given.
    pub term: u64,
    /// What the work returned.
    pub output: T,
    /// Why it ended.
    pub ended: TenureEnd,
}

/// Why a [`Tenure`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TenureEnd {
    /// The work returned by itself while the node still led; its token was not cancelled.
    Finished,
    /// The node answered that it no longer leads in the term: another node (or none, `None`)
    /// leads, in `term`. The token was cancelled at that answer.
    Lost {
        /// The leader the node named instead, if any.
        leader: Option<String>,
        /// The term of that answer.
        term: u64,
    },
    /// No answer renewed the lease in time (the node is unreachable, slow, or its lease was not
    /// renewed): the token was cancelled [`lead_margin`](crate::ClientBuilder::lead_margin)
    /// before the last reported lease would run out.
    LeaseExpired,
}

/// A lease deadline on both clocks (crate::clock): expired when either says so.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    wall: SystemTime,
}

impl Deadline {
    /// The end of `leader`'s lease counted from when its request left, less `margin`; `None`
    /// when the answer is not of a leader with a lease.
    fn of(leader: &Leader, wall_sent: SystemTime, margin: Duration) -> Option<Deadline> {
        let left = leader.lease_remaining?.checked_sub(margin)?;
        Some(Deadline {
            at: leader.requested_at + left,
            wall: wall_sent + left,
        })
    }

    fn passed(&self) -> bool {
        clock::now() >= self.at || clock::wall() >= self.wall
    }
}

impl Client {
    /// Runs `work` whenever this client's node leads, for as long as it leads; never returns
    /// but with an error ([`Error::NotOneMember`]: the client must have exactly one member,
    /// the service's own node).
    ///
    /// Each time the node leads (see [`Client::lead_once`]) `work` is called with the term and
    /// a [`CancellationToken`], which is cancelled when the node stops leading or before its
    /// lease could run out. Once the work has returned, `lead` waits for leadership again
    /// (work that returned by itself while the node still leads is started again one poll
    /// interval later, in the same term). To stop, drop the future `lead` returns, for example
    /// in a `tokio::select!` with a shutdown signal: the work in progress is dropped with it, at
    /// its next `.await`.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let own_node = pilot_election_client::Client::new(["http://127.0.0.1:7070"])?;
    /// own_node
    ///     .lead(|term, cancel| async move {
    ///         while !cancel.is_cancelled() {
    ///             // do one step of the coordinator's job, its writes fenced with `term`
    /// #           let _ = term;
    ///             tokio::select! {
    ///                 _ = cancel.cancelled() => {}
    ///                 _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
    ///             }
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn lead<F, Fut>(&self, mut work: F) -> Result<Infallible, Error>
    where
        F: FnMut(u64, CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        loop {
            let tenure = self.lead_once(&mut work).await?;
            if tenure.ended == TenureEnd::Finished {
                tokio::time::sleep(self.inner.opts.lead_poll_interval).await;
            }
        }
    }

    /// Waits until this client's node leads, runs `work` once while it does, and returns when
    /// the work has returned.
    ///
    /// The client must have exactly one member: the node whose leadership the work follows,
    /// normally the service's own sidecar ([`Error::NotOneMember`] otherwise). It asks that
    /// node `GET /leader` every [`lead_poll_interval`](crate::ClientBuilder::lead_poll_interval)
    /// (errors and other nodes' leadership only mean "not yet"). Once the node answers that it
    /// leads itself (`is_self`) with a lease longer than the
    /// [`lead_margin`](crate::ClientBuilder::lead_margin), `work(term, token)` starts, and the
    /// node is asked again every poll interval. The token is cancelled:
    ///
    /// - at the first answer, or event of the node's `GET /events` (which it keeps open while
    ///   the work runs), that the node no longer leads in that term ([`TenureEnd::Lost`]), or
    /// - when no answer renewed the lease in time ([`TenureEnd::LeaseExpired`]): the deadline
    ///   is the lease the last answer reported, counted from when its request *left* (the
    ///   node's lease cannot end later than that), less the margin. A node that cannot be
    ///   reached, a slow answer, a lease that is not renewed all end the work there, before any
    ///   other node can be elected (an election needs `T` after the lease, `T` being longer).
    ///
    /// After the cancellation `lead_once` waits for the work to return, however long it takes:
    /// the work must stop promptly when its token is cancelled, and should fence its writes
    /// with the term (a process that is paused, or whose writes are in flight, can outlive its
    /// lease whatever this client does; see [`Fence`](crate::Fence)).
    ///
    /// What the deadline guarantees, and what it does not:
    ///
    /// - A node that dies, freezes, is cut off or stops renewing its lease leaves the others
    ///   a whole election timeout before they can elect; the work has been cancelled before
    ///   that (the lease less the margin).
    /// - A *handover* is faster: after a step-down (or a preemption by a better-ranked node,
    ///   `--preempt-after`) the successor can lead within milliseconds, and this node's next
    ///   event (milliseconds after the step-down; or, without the stream, the next answer, up
    ///   to one poll interval later) is what cancels the work here. The successor's client may
    ///   start its work before this one has stopped: nothing orders two processes' reactions.
    ///   The successor's term is higher, so fenced writes stay safe. (`--exec` on the node has
    ///   no such window: the node stops its child before it hands over.)
    ///
    /// The deadline is kept on the monotonic clock and on the wall clock, and passes when
    /// either says so, so that a host that was suspended wakes up with the work cancelled.
    pub async fn lead_once<F, Fut, T>(&self, work: F) -> Result<Tenure<T>, Error>
    where
        F: FnOnce(u64, CancellationToken) -> Fut,
        Fut: Future<Output = T>,
    {
        let members = self.inner.members.len();
        if members != 1 {
            return Err(Error::NotOneMember { members });
        }
        let poll = self.inner.opts.lead_poll_interval;
        let (term, mut deadline) = loop {
            if let Polled::Leads {
                term,
                deadline: Some(d),
                ..
            } = self.poll_self().await
            {
                if !d.passed() {
                    break (term, d);
                }
            }
            tokio::time::sleep(poll).await;
        };

        // The node's event stream tells of a step-down or a lost lease at once, sooner than
        // the next poll; the polls and the deadline still decide when it is not there.
        let mut events = self.role_events().await;
        let cancel = CancellationToken::new();
        let work = work(term, cancel.clone());
        tokio::pin!(work);
        let ended = 'leading: loop {
            // Wait out the poll interval (an event of the node can end the tenure meanwhile).
            tokio::select! {
                biased;
                output = &mut work => {
                    return Ok(Tenure { term, output, ended: TenureEnd::Finished });
                }
                _ = clock::sleep_until(deadline.at) => break 'leading TenureEnd::LeaseExpired,
                ev = next_role(&mut events), if events.is_some() => {
                    match lost_by(ev, term, &mut events) {
                        Some(lost) => break 'leading lost,
                        None => continue 'leading,
                    }
                }
                _ = tokio::time::sleep(poll) => {}
            }
            // A suspend stops the monotonic clock: the wall clock notices it here.
            if deadline.passed() {
                break TenureEnd::LeaseExpired;
            }
            // Then ask the node, the work, the deadline and the events still racing the answer.
            let asked = self.poll_self();
            tokio::pin!(asked);
            let answer = loop {
                tokio::select! {
                    biased;
                    output = &mut work => {
                        return Ok(Tenure { term, output, ended: TenureEnd::Finished });
                    }
                    _ = clock::sleep_until(deadline.at) => break 'leading TenureEnd::LeaseExpired,
                    ev = next_role(&mut events), if events.is_some() => {
                        if let Some(lost) = lost_by(ev, term, &mut events) {
                            break 'leading lost;
                        }
                    }
                    answer = &mut asked => break answer,
                }
            };
            match answer {
                Polled::Leads {
                    term: t,
                    deadline: d,
                    ..
                } if t == term => {
                    // The newest answer is the node's latest word on its lease; one without a
                    // lease (or a lease shorter than the margin) ends it.
                    deadline = d.unwrap_or(Deadline {
                        at: clock::now(),
                        wall: clock::wall(),
                    });
                    if deadline.passed() {
                        break TenureEnd::LeaseExpired;
                    }
                }
                // A node that leads again in a later term has lost this one in between.
                Polled::Leads { term: t, id, .. } => {
                    break TenureEnd::Lost {
                        leader: Some(id),
                        term: t,
                    };
                }
                Polled::Other { leader, term } => break TenureEnd::Lost { leader, term },
                Polled::NoAnswer => {} // the deadline decides
            }
        };
        cancel.cancel();
        let output = work.await;
        Ok(Tenure {
            term,
            output,
            ended,
        })
    }

    /// The node's answer to `GET /leader`, with its lease deadline when it leads itself.
    async fn poll_self(&self) -> Polled {
        let wall_sent = clock::wall();
        match self.leader_answer().await {
            Ok(Answer::Leader(l)) if l.is_self => {
                let d = Deadline::of(&l, wall_sent, self.inner.opts.lead_margin);
                Polled::Leads {
                    term: l.term,
                    id: l.id,
                    deadline: d,
                }
            }
            Ok(Answer::Leader(l)) => Polled::Other {
                leader: Some(l.id),
                term: l.term,
            },
            Ok(Answer::NoLeader { term }) => Polled::Other {
                leader: None,
                term: term.unwrap_or(0),
            },
            Err(_) => Polled::NoAnswer,
        }
    }
}

/// The node's `GET /events` while it leads: each event says its role and term.
struct RoleEvents {
    resp: reqwest::Response,
    parser: SseParser,
    queue: VecDeque<SseEvent>,
}

/// The role and term one event reports.
#[derive(Deserialize)]
struct RoleData {
    leader: Option<String>,
    term: u64,
    role: String,
}

impl Client {
    /// Opens the node's event stream, if it answers one in time.
    async fn role_events(&self) -> Option<RoleEvents> {
        let req = self.events_request(0, None, None);
        let resp = tokio::time::timeout(self.inner.opts.request_timeout, req.send())
            .await
            .ok()?
            .ok()?;
        resp.status().is_success().then(|| RoleEvents {
            resp,
            parser: SseParser::new(None),
            queue: VecDeque::new(),
        })
    }
}

/// The next role the stream reports; `None` when it ended (or `events` is `None`).
async fn next_role(events: &mut Option<RoleEvents>) -> Option<RoleData> {
    let e = events.as_mut()?;
    loop {
        while let Some(ev) = e.queue.pop_front() {
            if ev.event == "leader" || ev.event == "snapshot" {
                if let Ok(d) = serde_json::from_str::<RoleData>(&ev.data) {
                    return Some(d);
                }
            }
        }
        let chunk = e.resp.chunk().await.ok()??;
        let parsed = e.parser.feed(&chunk);
        e.queue.extend(parsed);
    }
}

/// What an event means for a tenure in `term`: the end of it unless the node still leads in
/// that term. A stream that ended is dropped (the polls carry on).
fn lost_by(ev: Option<RoleData>, term: u64, events: &mut Option<RoleEvents>) -> Option<TenureEnd> {
    match ev {
        None => {
            *events = None;
            None
        }
        Some(d) if d.role == "leader" && d.term == term => None,
        Some(d) => Some(TenureEnd::Lost {
            leader: d.leader,
            term: d.term,
        }),
    }
}

/// One poll of the node.
enum Polled {
    /// It leads in this term; the deadline of its lease unless it reported none (or one
    /// shorter than the margin).
    Leads {
        term: u64,
        id: String,
        deadline: Option<Deadline>,
    },
    /// Another node leads, or none does.
    Other { leader: Option<String>, term: u64 },
    /// It did not answer (usably).
    NoAnswer,
}
