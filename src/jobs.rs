//! Leader-only jobs: `pilot-election once -- CMD` runs a command in a process of its own (the
//! client's, with the client's privileges: the node never runs a command an HTTP request names),
//! only while this node leads, and the node treats it as it treats its `--exec` child: nothing
//! lets another node lead before the command is gone.
//!
//! The client takes a *hold* on the election (`POST /jobs/holds`), renews it every quarter of
//! its time to live, and gives it back when its command is over. A hold is what the node waits
//! for wherever `--exec` would stop its child first:
//!
//! - a handover asked through the API (a step-down, a candidacy withdrawal, a scheduled step-down)
//!   reaches the loop ([`command`]) only once every hold is given back or has expired;
//! - every resign of the core (the lease ran out, a better-ranked node preempts, the node
//!   stops) waits for the same, through the runtime's release guard ([`Holds::release_guard`]);
//! - no hold is granted while one of those is under way, nor to a node that does not lead.
//!
//! The node cannot kill the client's command; the client's own deadline does. Each answer
//! carries how long the lease still runs and the hold's time to live `ttl`; the client kills its
//! command's whole process group at the first of (the send time of its last answered request)
//! plus the lease left, or plus three quarters of `ttl`. The node counts a hold as given back
//! `ttl` after it last answered it: by then the client, whose clock may run up to `2r` apart
//! (a quarter of `ttl` covers `r` up to 12 %), has killed it. So the node waits at most `ttl`
//! for a client that went silent, and no command outlives the lease that allowed it.
//!
//! What this cannot promise, as for `--exec`: a client that is frozen (SIGSTOP, a paused VM)
//! kills nothing. Fence writes with `PILOT_ELECTION_TERM`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;

use crate::clock;
use crate::election::{Input, Timings, View};
use crate::runtime::{Command, ReleaseGuard};

/// How long a hold lives without a renewal: twice the heartbeat interval (1 s by default), so
/// that a client renewing every quarter of it misses several renewals before it must stop.
pub fn ttl(timings: &Timings) -> Duration {
    timings.heartbeat * 2
}

/// Why a hold was refused or ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    #[error("this node is not the leader (term {term})")]
    NotLeader { term: u64, leader: Option<String> },
    #[error("the node is handing leadership over: the command must stop")]
    HandingOver { term: u64 },
    #[error("no hold {0} on this node: it was given back, or it expired")]
    Unknown(u64),
}

/// A granted or renewed hold, as [`Holds`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub id: u64,
    pub term: u64,
    /// How long the lease runs from the moment of the answer.
    pub lease_remaining: Duration,
    pub ttl: Duration,
}

/// A hold on the wire: what `POST` and `PUT /jobs/holds` answer and `pilot-election once`
/// reads (the `Hold` schema of openapi.yaml).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldBody {
    /// What the client renews and gives back.
    pub id: u64,
    /// The term the command runs in: its fencing token.
    pub term: u64,
    /// The node that granted it, the leader.
    pub leader: String,
    pub group: String,
    /// How long the lease runs from the answer: the command must be gone by then.
    pub lease_remaining_ms: u64,
    /// How long the hold lives without a renewal.
    pub ttl_ms: u64,
    /// How often the client renews it.
    pub renew_every_ms: u64,
}

impl HoldBody {
    pub fn new(g: &Granted, leader: &str, group: &str) -> HoldBody {
        HoldBody {
            id: g.id,
            term: g.term,
            leader: leader.to_string(),
            group: group.to_string(),
            lease_remaining_ms: g.lease_remaining.as_millis() as u64,
            ttl_ms: g.ttl.as_millis() as u64,
            renew_every_ms: (g.ttl / 4).as_millis() as u64,
        }
    }

    /// When the client must have killed its command, for an answer to a request it sent at
    /// `sent`: the lease as answered, or three quarters of the hold's time to live (see the
    /// module documentation), whichever ends first.
    pub fn kill_by(&self, sent: Instant) -> Instant {
        let ttl = Duration::from_millis(self.ttl_ms);
        sent + Duration::from_millis(self.lease_remaining_ms).min(ttl * 3 / 4)
    }
}

/// When holds may be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    Open,
    /// Not in this term (a handover or a resign of it is under way or done).
    Term(u64),
    /// Never again: the node stops.
    ForGood,
}

struct Hold {
    term: u64,
    /// Counted as given back from then on.
    expires: Instant,
    /// The node asked for the command to stop (the next renewal is refused).
    stop: bool,
}

struct State {
    next: u64,
    holds: BTreeMap<u64, Hold>,
    closed: Closed,
}

/// The holds of one election.
#[derive(Clone)]
pub struct Holds {
    state: Arc<Mutex<State>>,
    /// Woken whenever a hold is given back.
    released: Arc<Notify>,
    ttl: Duration,
}

impl Holds {
    pub fn new(timings: &Timings) -> Holds {
        Holds {
            state: Arc::new(Mutex::new(State {
                next: 1,
                holds: BTreeMap::new(),
                closed: Closed::Open,
            })),
            released: Arc::new(Notify::new()),
            ttl: ttl(timings),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new hold, if this node leads under an unexpired lease and no handover is under way.
    pub fn take(&self, view: &View, now: Instant) -> Result<Granted, HoldError> {
        let lease = leading(view, now)?;
        let mut s = self.lock();
        match s.closed {
            Closed::ForGood => return Err(HoldError::HandingOver { term: view.term }),
            Closed::Term(t) if t >= view.term => {
                return Err(HoldError::HandingOver { term: view.term })
            }
            _ => {}
        }
        let id = s.next;
        s.next += 1;
        s.holds.insert(
            id,
            Hold {
                term: view.term,
                expires: now + self.ttl,
                stop: false,
            },
        );
        Ok(Granted {
            id,
            term: view.term,
            lease_remaining: lease,
            ttl: self.ttl,
        })
    }

    /// Renews hold `id` for another `ttl`; refused (and the hold left to be given back) once
    /// the node asked for its command to stop or no longer leads in its term.
    pub fn renew(&self, id: u64, view: &View, now: Instant) -> Result<Granted, HoldError> {
        let mut s = self.lock();
        let ttl = self.ttl;
        let Some(hold) = s.holds.get_mut(&id).filter(|h| h.expires > now) else {
            return Err(HoldError::Unknown(id));
        };
        let lease = match leading(view, now) {
            Ok(lease) if view.term == hold.term && !hold.stop => lease,
            _ => {
                hold.stop = true;
                return Err(HoldError::HandingOver { term: hold.term });
            }
        };
        hold.expires = now + ttl;
        Ok(Granted {
            id,
            term: hold.term,
            lease_remaining: lease,
            ttl,
        })
    }

    /// Hold `id` is given back: its command is gone.
    pub fn release(&self, id: u64) -> Result<(), HoldError> {
        let removed = self.lock().holds.remove(&id).is_some();
        self.released.notify_waiters();
        if removed {
            Ok(())
        } else {
            Err(HoldError::Unknown(id))
        }
    }

    /// How many holds are out (expired ones not counted).
    pub fn count(&self, now: Instant) -> usize {
        self.lock()
            .holds
            .values()
            .filter(|h| h.expires > now)
            .count()
    }

    /// Closes the holds as `closed` says, asks every hold out to stop, and waits until each is
    /// given back or has expired (at most `ttl` after its last renewal).
    async fn drain(&self, closed: Closed) {
        {
            let mut s = self.lock();
            s.closed = match (s.closed, closed) {
                (Closed::ForGood, _) | (_, Closed::ForGood) => Closed::ForGood,
                (Closed::Term(a), Closed::Term(b)) => Closed::Term(a.max(b)),
                (_, c) => c,
            };
            for hold in s.holds.values_mut() {
                hold.stop = true;
            }
        }
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let now = clock::now();
            let last = {
                let mut s = self.lock();
                s.holds.retain(|_, h| h.expires > now);
                s.holds.values().map(|h| h.expires).max()
            };
            let Some(last) = last else {
                return;
            };
            tokio::select! {
                _ = released => {}
                _ = clock::sleep_until(last) => {}
            }
        }
    }

    /// A handover asked through the API was refused: holds may be granted again in this term.
    fn reopen(&self, term: u64) {
        let mut s = self.lock();
        if s.closed == Closed::Term(term) {
            s.closed = Closed::Open;
        }
    }

    /// The runtime's [`ReleaseGuard`]: before a resign of `term` leaves, every hold is given
    /// back or expired, and none is granted in that term again.
    pub fn release_guard(&self) -> ReleaseGuard {
        let holds = self.clone();
        Arc::new(move |term| {
            let holds = holds.clone();
            Box::pin(async move {
                holds.drain(Closed::Term(term)).await;
            })
        })
    }

    /// The node stops: every hold is given back or expired, and none is granted again.
    pub async fn drain_for_exit(&self) {
        self.drain(Closed::ForGood).await;
    }
}

/// The lease left, if `view` leads at `now`.
fn leading(view: &View, now: Instant) -> Result<Duration, HoldError> {
    match view.lease_until {
        Some(until) if view.is_leader_at(now) => Ok(until - now),
        _ => Err(HoldError::NotLeader {
            term: view.term,
            leader: view.leader_at(now).map(str::to_string),
        }),
    }
}

/// How a command run under a hold ended.
#[derive(Debug)]
pub enum End {
    Exited(std::process::ExitStatus),
    /// The hold ended first (why, in words): the command was stopped.
    Lost(String),
    /// This process was asked to stop (the signal's number): the command was stopped.
    Signalled(i32),
}

/// What a renewal of a hold came back with.
#[derive(Debug)]
pub enum Renewal {
    /// Renewed: the command must be gone by then.
    Until(Instant),
    /// Refused (why, in words): the command must stop now.
    Refused(String),
    /// No answer: the deadline already in hand decides.
    NoAnswer,
}

/// Why a command was stopped when no renewal came back in time.
const LAPSED: &str = "the lease or the hold would have ended before it was renewed";

/// Runs the command of `group` (just started) under hold `held` until it exits, the hold
/// ends or `interrupted` resolves: renewed every quarter of its time to live through `renew`,
/// killed at `kill_by` (moved on by each renewal). Whatever ended it, its whole process group
/// is gone when this returns: SIGTERM, then SIGKILL a quarter of the hold's life later or at
/// the deadline. A watcher kills it too if this process dies. One loop for `pilot-election
/// once` (renewing over HTTP) and the node's schedule (renewing in-process).
pub async fn run_held<R, F>(
    mut group: crate::process_group::ProcessGroup,
    held: &HoldBody,
    mut kill_by: Instant,
    mut renew: R,
    interrupted: impl std::future::Future<Output = i32>,
) -> End
where
    R: FnMut() -> F,
    F: std::future::Future<Output = Renewal>,
{
    use nix::sys::signal::Signal;
    // If this process dies (kill -9), the command dies with it: the hold it leaves expires.
    let watcher =
        crate::process_group::Watcher::spawn(group.id().unwrap_or(0), Duration::from_millis(100))
            .ok();
    let renew_every = Duration::from_millis(held.renew_every_ms.max(1));
    let mut next_renew = clock::now() + renew_every;
    tokio::pin!(interrupted);
    let end = loop {
        tokio::select! {
            status = group.wait() => break End::Exited(status),
            _ = clock::sleep_until(kill_by) => break End::Lost(LAPSED.into()),
            sig = &mut interrupted => break End::Signalled(sig),
            _ = clock::sleep_until(next_renew) => {
                next_renew = clock::now() + renew_every;
                // A renewal that has not come back by the deadline in hand does not hold it up.
                let renewed = tokio::select! {
                    r = renew() => r,
                    _ = clock::sleep_until(kill_by) => break End::Lost(LAPSED.into()),
                };
                match renewed {
                    Renewal::Until(k) => kill_by = k,
                    Renewal::Refused(why) => break End::Lost(why),
                    Renewal::NoAnswer => {}
                }
            }
        }
    };
    // Whatever ended it, nothing of the command may run on once the hold is given back:
    // SIGTERM to what is left of the group, SIGKILL a quarter of the hold's life later (or at
    // the deadline, if that comes first), then wait until the whole group is gone.
    let grace = Duration::from_millis(held.ttl_ms / 4);
    let hard = kill_by.min(clock::now() + grace);
    if !matches!(end, End::Exited(_)) || group.alive() {
        group.signal(Signal::SIGTERM);
        tokio::select! {
            _ = group.wait() => {}
            _ = clock::sleep_until(hard) => {}
        }
        // What the command started gets until `hard` too.
        while group.alive() && clock::now() < hard {
            clock::sleep_until(clock::now() + Duration::from_millis(10)).await;
        }
        group.kill();
        group.wait().await;
        let stop_waiting = clock::now() + Duration::from_secs(5);
        while group.alive() && clock::now() < stop_waiting {
            clock::sleep_until(clock::now() + Duration::from_millis(10)).await;
        }
    }
    group.release();
    if let Some(w) = watcher {
        w.dismiss().await;
    }
    end
}

/// Sends `input` to the election loop through `commands` and waits for its answer; `None`
/// once the loop is gone. A command that would hand leadership over (a step-down, a candidacy
/// withdrawal, from the API or the scheduler) while a hold is out waits first until every hold
/// is given back or expired, holds being closed for the term meanwhile and opened again if the
/// loop refuses it. No task and no channel of its own: at a thousand groups, one per election
/// cost more memory than the holds ever need.
pub async fn command(
    commands: &mpsc::Sender<Command>,
    holds: &Holds,
    view: &View,
    input: Input,
) -> Option<Result<crate::election::Outcome, crate::election::CommandError>> {
    let now = clock::now();
    let term = view.term;
    let waited = view.hands_over(&input, now) && holds.count(now) > 0;
    if waited {
        holds.drain(Closed::Term(term)).await;
    }
    let (reply, answer) = oneshot::channel();
    commands.send(Command { input, reply }).await.ok()?;
    let result = answer.await.ok()?;
    if waited && result.is_err() {
        holds.reopen(term);
    }
    Some(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::Role;

    fn view(role: Role, term: u64, lease_until: Option<Instant>) -> View {
        let v = crate::runtime::test_view("n1", term, lease_until);
        View { role, ..v }
    }

    fn holds() -> Holds {
        Holds::new(&Timings::default())
    }

    #[test]
    fn only_a_leader_under_its_lease_grants_a_hold() {
        let now = clock::now();
        let h = holds();
        let lease = now + Duration::from_secs(2);
        let g = h.take(&view(Role::Leader, 3, Some(lease)), now).unwrap();
        assert_eq!((g.term, g.lease_remaining), (3, Duration::from_secs(2)));
        assert_eq!(g.ttl, ttl(&Timings::default()));
        assert!(matches!(
            h.take(&view(Role::Follower, 3, None), now),
            Err(HoldError::NotLeader { term: 3, .. })
        ));
        // A leader whose lease ran out (its loop is stuck) is no leader.
        assert!(h.take(&view(Role::Leader, 3, Some(now)), now).is_err());
    }

    #[test]
    fn a_renewal_ends_with_the_term_and_an_expired_hold_is_unknown() {
        let now = clock::now();
        let h = holds();
        let leader = view(Role::Leader, 3, Some(now + Duration::from_secs(2)));
        let g = h.take(&leader, now).unwrap();
        let later = now + Duration::from_millis(300);
        assert_eq!(h.renew(g.id, &leader, later).unwrap().id, g.id);
        let next_term = view(Role::Leader, 4, Some(now + Duration::from_secs(2)));
        assert_eq!(
            h.renew(g.id, &next_term, later),
            Err(HoldError::HandingOver { term: 3 })
        );
        // Once asked to stop, it stays asked.
        assert!(h.renew(g.id, &leader, later).is_err());
        assert_eq!(h.count(later), 1);
        let gone = later + h.ttl;
        assert_eq!(h.renew(g.id, &leader, gone), Err(HoldError::Unknown(g.id)));
        assert_eq!(h.count(gone), 0);
        assert_eq!(h.release(99), Err(HoldError::Unknown(99)));
    }

    #[tokio::test]
    async fn a_resign_waits_for_every_hold_and_none_is_granted_in_its_term_after() {
        let now = clock::now();
        let h = holds();
        let leader = view(Role::Leader, 5, Some(now + Duration::from_secs(60)));
        let g = h.take(&leader, now).unwrap();
        let guard = h.release_guard();
        let mut resign = guard(5);
        // Not before the hold is given back.
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut resign)
                .await
                .is_err(),
            "the resign left with a hold out"
        );
        assert_eq!(
            h.renew(g.id, &leader, clock::now()),
            Err(HoldError::HandingOver { term: 5 })
        );
        assert!(h.take(&leader, clock::now()).is_err());
        h.release(g.id).unwrap();
        tokio::time::timeout(Duration::from_secs(5), resign)
            .await
            .expect("released: the resign goes");
        // A later term grants again.
        let next = view(
            Role::Leader,
            6,
            Some(clock::now() + Duration::from_secs(60)),
        );
        assert!(h.take(&next, clock::now()).is_ok());
    }

    #[tokio::test]
    async fn a_silent_holder_holds_a_resign_for_at_most_its_ttl() {
        let now = clock::now();
        let h = holds();
        let leader = view(Role::Leader, 5, Some(now + Duration::from_secs(60)));
        h.take(&leader, now).unwrap();
        let started = clock::now();
        tokio::time::timeout(Duration::from_secs(10), h.drain_for_exit())
            .await
            .expect("an expired hold counts as given back");
        let waited = clock::since(started);
        assert!(waited <= h.ttl + Duration::from_millis(500), "{waited:?}");
        assert!(
            waited + Duration::from_millis(50) >= h.ttl,
            "{waited:?}: the hold had not expired yet"
        );
        assert!(h.take(&leader, clock::now()).is_err(), "closed for good");
    }
}
