//! What one broker's subscription is doing, and why, in words an operator can act on.
//!
//! On a real Pilot network a subscription can fail in ways that look alike from a distance (the
//! node hears nothing) but need different fixes: the broker's event stream closes the
//! connection of a node it does not trust right after its subscribe frame, without a word; it
//! drops a subscriber whose deliveries failed three times in a row while leaving its connection
//! open, so `pilotctl subscribe` keeps running and hears nothing; a broker that is down cannot be
//! dialled at all. This state machine tells them apart from what pilotctl reports and from one
//! more signal: every node hears its own publishes on its own subscription (the broker only
//! skips the connection an event came in on, and each `pilotctl publish` is a connection of its
//! own), so messages that stop coming back reveal a subscription that died silently.
//!
//! It is pure: callers pass the time in and log the [`Note`]s it returns, one warning per
//! episode rather than one per retry.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::clock::wall::{rfc3339, unix_ms_now};
use crate::pilotctl::{ErrorCode, PilotctlError};
use crate::transport::Link;

/// A new subscription that neither delivered anything nor ended within this long is trusted
/// to work. A broker that refuses a node closes the connection within a round trip of the
/// subscribe frame, but pilotctl 1.18 may spend up to about 21 s before it sends that frame: to
/// a public peer this node does not trust yet it first sends a handshake and waits for trust
/// (5 s, then up to 16 s more while the request is pending). Any line received, this node's
/// own messages included, proves a subscription long before that in a running cluster.
pub const PROVEN_AFTER: Duration = Duration::from_secs(25);
/// Subscriptions in a row that the broker closed before they were proven: then the broker
/// refuses this node (one could be a broker restart; three in a row are not).
pub const REJECT_AFTER: u32 = 3;
/// A publish through the broker should come back on our subscription within this long.
pub const ECHO_DEADLINE: Duration = Duration::from_secs(3);
/// Successful publishes that never came back, none in between that did, before the
/// subscription counts as silently dead. Two, so that one lost message proves nothing.
pub const SILENT_AFTER_UNECHOED: usize = 2;
/// A subscription must have run this long before a publish is expected to come back through it:
/// the subscribe frame reaches the broker some time after pilotctl starts.
const SUBSCRIBE_SETTLE: Duration = Duration::from_secs(1);
/// A replacement for a silent subscription proves itself only by hearing something; one that
/// stays silent from its start (the broker still does not deliver to this node) is replaced
/// again, but only after it ran this long, doubled for each replacement in a row that never
/// heard a thing, up to [`SILENT_RETRY_CAP`]: a node must not stay deaf for good once the
/// broker recovers, and a broker that keeps accepting subscriptions without delivering must not
/// get a new one every few seconds for ever.
pub const SILENT_RETRY_AFTER: Duration = Duration::from_secs(4);
/// The longest a replacement that never heard anything runs before the next one: also how long
/// a node may stay deaf after its broker delivers again.
pub const SILENT_RETRY_CAP: Duration = Duration::from_secs(16);
/// Subscribed without interruption this long ends an episode: the next problem is news again.
pub const EPISODE_ENDS_AFTER: Duration = Duration::from_secs(10);
/// Own publishes remembered per broker while they wait for their echo.
const SENT_MEMORY: usize = 64;

/// The state of one broker's subscription, as `/status` and the metric name it ([`Self::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// No subscription has proven itself yet since the node started.
    Starting,
    /// A subscription runs and delivers (or has run long enough to be trusted).
    Subscribed,
    /// A working subscription ended; the next one is on its way.
    Restarting,
    /// The subscription ran but this node's own messages stopped coming back through it.
    Silent,
    /// The broker will not let this node subscribe: it does not trust it.
    Rejected,
    /// The broker's event stream cannot be reached.
    Unreachable,
    /// The broker's name does not resolve.
    UnknownBroker,
    /// This machine's Pilot daemon is not running.
    DaemonDown,
    /// pilotctl fails in another way.
    Failing,
}

impl LinkState {
    pub const ALL: [LinkState; 9] = [
        LinkState::Starting,
        LinkState::Subscribed,
        LinkState::Restarting,
        LinkState::Silent,
        LinkState::Rejected,
        LinkState::Unreachable,
        LinkState::UnknownBroker,
        LinkState::DaemonDown,
        LinkState::Failing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Starting => "starting",
            LinkState::Subscribed => "subscribed",
            LinkState::Restarting => "restarting",
            LinkState::Silent => "silent",
            LinkState::Rejected => "rejected",
            LinkState::Unreachable => "unreachable",
            LinkState::UnknownBroker => "unknown_broker",
            LinkState::DaemonDown => "daemon_down",
            LinkState::Failing => "failing",
        }
    }

    /// States an operator has to do something about (the transient ones are not).
    fn is_problem(self) -> bool {
        !matches!(
            self,
            LinkState::Starting | LinkState::Subscribed | LinkState::Restarting
        )
    }
}

/// How a `pilotctl subscribe` ended, as far as the diagnosis cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The broker side closed the stream (pilotctl's `recv: EOF`), or pilotctl exited cleanly.
    Closed(String),
    /// pilotctl could not open the stream to the broker.
    Unreachable(String),
    /// pilotctl itself refused to reach the broker without trust (`trust_required`).
    TrustRequired(String),
    UnknownBroker(String),
    DaemonDown(String),
    Failed(String),
}

impl Ending {
    /// Sorts a subscription's end by pilotctl's error code and message.
    pub fn of(error: Option<&PilotctlError>) -> Ending {
        let Some(e) = error else {
            return Ending::Closed("pilotctl subscribe exited".into());
        };
        let text = e.to_string();
        match e {
            PilotctlError::Cli { code, message, .. }
            | PilotctlError::Daemon { code, message, .. } => match code {
                ErrorCode::NotRunning => Ending::DaemonDown(text),
                ErrorCode::NotFound => Ending::UnknownBroker(text),
                ErrorCode::Other(c) if c == "trust_required" => Ending::TrustRequired(text),
                // pilotctl reports a stream the far end closed as `recv: ...`; anything else
                // with this code failed before the stream existed.
                ErrorCode::ConnectionFailed if message.contains("recv") => Ending::Closed(text),
                ErrorCode::ConnectionFailed | ErrorCode::Timeout => Ending::Unreachable(text),
                _ => Ending::Failed(text),
            },
            _ => Ending::Failed(text),
        }
    }

    pub fn text(&self) -> &str {
        match self {
            Ending::Closed(t)
            | Ending::Unreachable(t)
            | Ending::TrustRequired(t)
            | Ending::UnknownBroker(t)
            | Ending::DaemonDown(t)
            | Ending::Failed(t) => t,
        }
    }
}

impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

/// A line for the log, decided here so that the policy (one warning per episode) is tested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    Warn(String),
    Info(String),
}

/// One broker as `/status` shows it: a link of the transport's [`Health`](crate::transport::Health)
/// named by `broker`, in `state`, the other fields serialized as its detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokerHealth {
    #[serde(skip)]
    pub broker: String,
    #[serde(skip)]
    pub state: LinkState,
    /// When the current state began (wall clock, RFC 3339; for display).
    pub since: String,
    /// When the subscription that works now started (RFC 3339), if one does.
    pub subscribed_since: Option<String>,
    /// Subscriptions started again after the first one.
    pub restarts: u64,
    pub last_error: Option<String>,
    /// What most likely causes a problem state, in words.
    pub cause: Option<String>,
    /// What to run to fix it.
    pub fix: Option<String>,
}

impl BrokerHealth {
    pub fn link(&self) -> Link {
        Link::new(self.broker.clone(), self.state.as_str(), self)
    }
}

/// Who this node is and how it subscribes, for the explanations.
#[derive(Debug, Clone)]
pub struct Context {
    pub broker: String,
    pub topic: String,
    /// This daemon's Pilot node id, once `pilotctl info` told it.
    pub pilot_id: Option<String>,
}

impl Context {
    fn approve_arg(&self) -> String {
        self.pilot_id
            .clone()
            .unwrap_or_else(|| "<this node's id from `pilotctl info`>".into())
    }

    fn cause_and_fix(&self, state: LinkState, closes: u32) -> Option<(String, String)> {
        let b = &self.broker;
        let trust_fix = format!(
            "on this node run `pilotctl handshake {b} pilot-election`, then on {b} run `pilotctl approve {}` (`pilotctl pending` there lists the request)",
            self.approve_arg()
        );
        Some(match state {
            LinkState::Rejected if closes >= REJECT_AFTER => (
                format!("{b} closed the subscription right after it started, {closes} times in a row: its event stream does not let this node subscribe because {b} does not trust it (and it drops this node's publishes the same way)"),
                trust_fix,
            ),
            LinkState::Rejected => (
                format!("pilotctl refuses to reach {b} without trust: this node does not trust {b} and {b} is not public"),
                trust_fix,
            ),
            LinkState::Silent => (
                format!("the subscription to {b} runs, but this node's own messages published through {b} stopped coming back: {b} dropped the subscriber (it does after 3 failed deliveries in a row) or does not accept this node's publishes"),
                format!("nothing, the subscription is restarted automatically; if this persists, check on {b} that `pilotctl trust` lists this node and that its daemon is healthy (`pilotctl health`)"),
            ),
            LinkState::Unreachable => (
                format!("{b}'s event stream cannot be reached: its daemon is down or there is no path to it"),
                format!("check `pilotctl ping {b}` here and `pilotctl daemon status` on {b}"),
            ),
            LinkState::UnknownBroker => (
                format!("`{b}` does not resolve to a node: a wrong --broker, or a private node without mutual trust"),
                format!("check the name with `pilotctl find {b}` (or give its address), or establish trust with `pilotctl handshake {b}`"),
            ),
            LinkState::DaemonDown => (
                "the Pilot daemon on this machine is not running (or --pilot-socket points elsewhere)".into(),
                "start it with `pilotctl daemon start`, or fix --pilot-socket".into(),
            ),
            LinkState::Failing => (
                "pilotctl subscribe fails (see last_error)".into(),
                format!("run `pilotctl --json subscribe {b} {}` by hand to see why", self.topic),
            ),
            LinkState::Starting | LinkState::Subscribed | LinkState::Restarting => return None,
        })
    }
}

/// An operator-visible stretch of trouble, from the first problem to a stable subscription.
#[derive(Debug)]
struct Episode {
    started: Instant,
    /// The problem state last warned about in this episode.
    warned: Option<LinkState>,
    /// Subscribed again since; the episode ends when that lasts [`EPISODE_ENDS_AFTER`].
    healthy_since: Option<Instant>,
}

/// The running diagnosis of one broker.
#[derive(Debug)]
pub struct BrokerLink {
    pub ctx: Context,
    state: LinkState,
    state_since_ms: u64,
    /// The current `pilotctl subscribe`, if one runs: when it started.
    running_since: Option<Instant>,
    running_since_ms: u64,
    proven: bool,
    /// Subscriptions found silent in a row, none proven in between: how long the next
    /// replacement runs before it may be found silent too.
    silent_streak: u32,
    /// Subscriptions in a row the broker closed before they proved themselves.
    early_closes: u32,
    started_once: bool,
    restarts: u64,
    last_error: Option<String>,
    /// Hashes of our publishes through this broker that have not come back yet.
    sent: VecDeque<(u64, Instant)>,
    /// When each successful publish that has not come back was sent (oldest first).
    unechoed: VecDeque<Instant>,
    episode: Option<Episode>,
}

impl BrokerLink {
    pub fn new(ctx: Context) -> BrokerLink {
        BrokerLink {
            ctx,
            state: LinkState::Starting,
            state_since_ms: unix_ms_now(),
            running_since: None,
            running_since_ms: 0,
            proven: false,
            silent_streak: 0,
            early_closes: 0,
            started_once: false,
            restarts: 0,
            last_error: None,
            sent: VecDeque::new(),
            unechoed: VecDeque::new(),
            episode: None,
        }
    }

    pub fn state(&self) -> LinkState {
        self.state
    }

    pub fn is_up(&self) -> bool {
        self.state == LinkState::Subscribed
    }

    /// A new `pilotctl subscribe` runs.
    pub fn started(&mut self, now: Instant) {
        if self.started_once {
            self.restarts += 1;
        }
        self.started_once = true;
        self.running_since = Some(now);
        self.running_since_ms = unix_ms_now();
        self.proven = false;
        self.unechoed.clear();
    }

    /// A line arrived on the subscription; returns whether it is one of our own publishes
    /// coming back (which only the diagnosis needs).
    pub fn received(&mut self, now: Instant, hash: u64) -> (bool, Vec<Note>) {
        let echo = match self.sent.iter().position(|(h, _)| *h == hash) {
            Some(i) => {
                self.sent.remove(i);
                self.unechoed.clear();
                true
            }
            None => false,
        };
        (echo, self.prove(now))
    }

    /// Time passes: a quiet subscription proves itself by lasting; a proven one whose own
    /// messages stopped coming back is declared silent, and so is a replacement for a silent
    /// one that never heard its own messages once it ran [`Self::retry_after`]. Returns whether
    /// to restart it.
    pub fn tick(&mut self, now: Instant) -> (bool, Vec<Note>) {
        let Some(since) = self.running_since else {
            return (false, Vec::new());
        };
        // After a silent one, only evidence (a line received) proves a new subscription.
        if !self.proven
            && self.state != LinkState::Silent
            && now.saturating_duration_since(since) >= PROVEN_AFTER
        {
            return (false, self.prove(now));
        }
        let overdue = self
            .unechoed
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= ECHO_DEADLINE);
        // Unproven otherwise means "maybe not subscribed at the broker yet" (pilotctl may spend
        // seconds on trust first), so it only counts as silent when it replaces a silent one.
        let judged = self.proven
            || (self.silent_streak > 0
                && now.saturating_duration_since(since) >= self.retry_after());
        if judged && overdue && self.unechoed.len() >= SILENT_AFTER_UNECHOED {
            let error = format!(
                "{} messages published through {} did not come back within {:?}",
                self.unechoed.len(),
                self.ctx.broker,
                ECHO_DEADLINE
            );
            self.last_error = Some(error);
            self.running_since = None;
            self.silent_streak = self.silent_streak.saturating_add(1);
            let notes = self.enter(now, LinkState::Silent, 0);
            return (true, notes);
        }
        if self.episode.as_ref().is_some_and(|ep| {
            ep.healthy_since
                .is_some_and(|h| now.saturating_duration_since(h) >= EPISODE_ENDS_AFTER)
        }) {
            self.episode = None;
        }
        // Hashes that never came back only matter for a few deadlines.
        while self
            .sent
            .front()
            .is_some_and(|(_, t)| now.saturating_duration_since(*t) > ECHO_DEADLINE * 10)
        {
            self.sent.pop_front();
        }
        (false, Vec::new())
    }

    /// The current subscription ended.
    pub fn ended(&mut self, now: Instant, how: &Ending) -> Vec<Note> {
        let ran = self
            .running_since
            .take()
            .map(|s| now.saturating_duration_since(s))
            .unwrap_or_default();
        self.last_error = Some(format!("{}: {}", self.ctx.broker, how.text()));
        let was_proven = std::mem::replace(&mut self.proven, false);
        let (next, closes) = match how {
            Ending::Closed(_) if !was_proven && ran < PROVEN_AFTER => {
                self.early_closes += 1;
                if self.early_closes < REJECT_AFTER {
                    return Vec::new();
                }
                (LinkState::Rejected, self.early_closes)
            }
            Ending::Closed(_) | Ending::Failed(_) if was_proven => {
                let line = format!(
                    "subscription to {} ended after {:.1} s ({}); restarting it",
                    self.ctx.broker,
                    ran.as_secs_f64(),
                    how.text()
                );
                let mut notes = vec![Note::Info(line)];
                notes.extend(self.enter(now, LinkState::Restarting, 0));
                return notes;
            }
            Ending::Closed(_) => (LinkState::Restarting, 0),
            Ending::TrustRequired(_) => (LinkState::Rejected, 0),
            Ending::Unreachable(_) => (LinkState::Unreachable, 0),
            Ending::UnknownBroker(_) => (LinkState::UnknownBroker, 0),
            Ending::DaemonDown(_) => (LinkState::DaemonDown, 0),
            Ending::Failed(_) => (LinkState::Failing, 0),
        };
        if !matches!(how, Ending::Closed(_)) {
            self.early_closes = 0;
        }
        self.enter(now, next, closes)
    }

    /// Remembers a publish through this broker, before pilotctl runs (its echo may arrive
    /// before pilotctl returns).
    pub fn publishing(&mut self, now: Instant, hash: u64) {
        if self.sent.len() >= SENT_MEMORY {
            self.sent.pop_front();
        }
        self.sent.push_back((hash, now));
    }

    /// pilotctl reported the publish written. It must come back if the subscription was
    /// settled when it left and it has not come back already.
    pub fn published(&mut self, hash: u64, sent_at: Instant) {
        let settled = self
            .running_since
            .is_some_and(|s| sent_at.saturating_duration_since(s) >= SUBSCRIBE_SETTLE);
        let pending = self.sent.iter().any(|(h, _)| *h == hash);
        if settled && pending {
            self.unechoed.push_back(sent_at);
            if self.unechoed.len() > SENT_MEMORY {
                self.unechoed.pop_front();
            }
        }
    }

    /// How long a replacement for a silent subscription runs before it may be found silent.
    fn retry_after(&self) -> Duration {
        Backoff::new(SILENT_RETRY_AFTER, SILENT_RETRY_CAP).nth(self.silent_streak.saturating_sub(1))
    }

    fn prove(&mut self, now: Instant) -> Vec<Note> {
        if self.proven || self.running_since.is_none() {
            return Vec::new();
        }
        self.proven = true;
        self.silent_streak = 0;
        self.early_closes = 0;
        self.enter(now, LinkState::Subscribed, 0)
    }

    /// Moves to `next`, deciding what the log hears about it.
    fn enter(&mut self, now: Instant, next: LinkState, closes: u32) -> Vec<Note> {
        let previous = self.state;
        if previous != next {
            self.state = next;
            self.state_since_ms = unix_ms_now();
        }
        let b = self.ctx.broker.clone();
        if next == LinkState::Subscribed {
            return match &mut self.episode {
                Some(ep) if ep.healthy_since.is_none() => {
                    ep.healthy_since = Some(now);
                    let after = now.saturating_duration_since(ep.started).as_secs_f64();
                    let was = ep
                        .warned
                        .map(LinkState::as_str)
                        .unwrap_or(previous.as_str());
                    vec![Note::Info(format!(
                        "subscribed to {b} again after {after:.1} s (it was {was})"
                    ))]
                }
                Some(_) => Vec::new(),
                None if previous == LinkState::Starting => {
                    vec![Note::Info(format!("subscribed to {b}"))]
                }
                None => Vec::new(),
            };
        }
        let episode = self.episode.get_or_insert(Episode {
            started: now,
            warned: None,
            healthy_since: None,
        });
        episode.healthy_since = None;
        if !next.is_problem() || episode.warned == Some(next) {
            return Vec::new();
        }
        episode.warned = Some(next);
        let Some((cause, fix)) = self.ctx.cause_and_fix(next, closes) else {
            return Vec::new();
        };
        vec![Note::Warn(format!(
            "broker {b}: {}: {cause}. To fix: {fix}",
            next.as_str()
        ))]
    }

    pub fn view(&self) -> BrokerHealth {
        let closes = self.early_closes;
        let explained = self.ctx.cause_and_fix(self.state, closes);
        BrokerHealth {
            broker: self.ctx.broker.clone(),
            state: self.state,
            since: rfc3339(self.state_since_ms),
            subscribed_since: (self.proven && self.running_since.is_some())
                .then(|| rfc3339(self.running_since_ms)),
            restarts: self.restarts,
            last_error: self.last_error.clone(),
            cause: explained.as_ref().map(|(c, _)| c.clone()),
            fix: explained.map(|(_, f)| f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link() -> BrokerLink {
        BrokerLink::new(Context {
            broker: "hub".into(),
            topic: "election:g".into(),
            pilot_id: Some("7".into()),
        })
    }

    fn warnings(notes: &[Note]) -> usize {
        notes.iter().filter(|n| matches!(n, Note::Warn(_))).count()
    }

    fn closed() -> Ending {
        Ending::Closed("pilotctl subscribe: connection_failed: recv: EOF".into())
    }

    #[test]
    fn repeated_early_closes_are_a_rejection_warned_once_with_the_fix() {
        let mut l = link();
        let mut t = crate::clock::now();
        let mut notes = Vec::new();
        for _ in 0..10 {
            l.started(t);
            t += Duration::from_millis(20);
            notes.extend(l.ended(t, &closed()));
            t += Duration::from_millis(500);
        }
        assert_eq!(l.state(), LinkState::Rejected);
        assert_eq!(warnings(&notes), 1, "{notes:?}");
        let Note::Warn(line) = &notes[0] else {
            panic!("{notes:?}")
        };
        assert!(line.contains("pilotctl handshake hub"), "{line}");
        assert!(line.contains("pilotctl approve 7"), "{line}");
        let v = l.view();
        assert_eq!(v.restarts, 9);
        assert!(v.subscribed_since.is_none());
        assert!(v.cause.unwrap().contains("does not trust"));
        // Trust granted: the next subscription lasts and the state recovers, said once.
        l.started(t);
        let (restart, notes) = l.tick(t + PROVEN_AFTER);
        assert!(!restart);
        assert_eq!(l.state(), LinkState::Subscribed);
        assert!(
            matches!(&notes[..], [Note::Info(s)] if s.contains("again")),
            "{notes:?}"
        );
        assert!(l.view().subscribed_since.is_some());
    }

    #[test]
    fn two_early_closes_are_not_yet_a_rejection() {
        let mut l = link();
        let t = crate::clock::now();
        for _ in 0..2 {
            l.started(t);
            assert!(l.ended(t, &closed()).is_empty());
        }
        assert_eq!(l.state(), LinkState::Starting);
        // A proven subscription resets the count.
        l.started(t);
        l.received(t, 1);
        l.ended(t + Duration::from_secs(60), &closed());
        assert_eq!(l.state(), LinkState::Restarting);
        l.started(t);
        l.ended(t, &closed());
        assert_eq!(l.state(), LinkState::Restarting);
    }

    #[test]
    fn a_broker_that_cannot_be_dialled_is_unreachable_not_rejected() {
        let mut l = link();
        let t = crate::clock::now();
        let dial = Ending::Unreachable(
            "pilotctl subscribe: connection_failed: cannot subscribe on 0:0000.0000.0004".into(),
        );
        let mut notes = Vec::new();
        for _ in 0..5 {
            l.started(t);
            notes.extend(l.ended(t, &dial));
        }
        assert_eq!(l.state(), LinkState::Unreachable);
        assert_eq!(warnings(&notes), 1);
        assert!(l.view().fix.unwrap().contains("pilotctl ping hub"));
    }

    #[test]
    fn own_messages_that_stop_coming_back_make_a_silent_subscription() {
        let mut l = link();
        let t0 = crate::clock::now();
        l.started(t0);
        l.tick(t0 + PROVEN_AFTER);
        assert!(l.is_up());
        // Echoed publishes keep it healthy.
        let mut t = t0 + PROVEN_AFTER;
        for h in 0..5u64 {
            l.publishing(t, h);
            l.published(h, t);
            let (echo, _) = l.received(t + Duration::from_millis(5), h);
            assert!(echo);
            t += Duration::from_millis(500);
            assert!(!l.tick(t).0);
        }
        // One lost message is not enough.
        l.publishing(t, 100);
        l.published(100, t);
        assert!(!l.tick(t + ECHO_DEADLINE * 2).0);
        l.publishing(t + Duration::from_millis(500), 101);
        l.published(101, t + Duration::from_millis(500));
        let (restart, notes) = l.tick(t + ECHO_DEADLINE * 2);
        assert!(restart, "two unechoed publishes past the deadline");
        assert_eq!(l.state(), LinkState::Silent);
        assert_eq!(warnings(&notes), 1);
        // The restarted subscription does not prove itself by lasting, only by hearing.
        let t = t + ECHO_DEADLINE * 3;
        l.started(t);
        assert!(
            !l.tick(t + PROVEN_AFTER * 2).0,
            "nothing published: no verdict"
        );
        assert_eq!(l.state(), LinkState::Silent);
        l.received(t + PROVEN_AFTER * 2, 999);
        assert_eq!(l.state(), LinkState::Subscribed);
    }

    /// Publishes `hashes` through `l` at `at` (successfully, never echoed).
    fn unechoed(l: &mut BrokerLink, at: Instant, hashes: std::ops::Range<u64>) {
        for h in hashes {
            l.publishing(at, h);
            l.published(h, at);
        }
    }

    /// The first verdict on a working subscription that went silent; returns when it was.
    fn silenced(l: &mut BrokerLink, t0: Instant) -> Instant {
        l.started(t0);
        l.received(t0, 999);
        assert!(l.is_up());
        let t = t0 + SUBSCRIBE_SETTLE;
        unechoed(l, t, 0..2);
        assert!(l.tick(t + ECHO_DEADLINE).0);
        assert_eq!(l.state(), LinkState::Silent);
        t + ECHO_DEADLINE
    }

    #[test]
    fn a_replacement_that_is_silent_from_its_start_is_replaced_again_later_each_time() {
        let mut l = link();
        let mut t = silenced(&mut l, crate::clock::now());
        // Each replacement hears nothing, not even this node's own messages: it is replaced
        // too, once it ran SILENT_RETRY_AFTER, doubled each time up to SILENT_RETRY_CAP.
        let mut patience = SILENT_RETRY_AFTER;
        let mut notes = Vec::new();
        for k in 0..6u64 {
            l.started(t);
            // Publishes all through (the node publishes at least every heartbeat interval).
            let mut at = t + SUBSCRIBE_SETTLE;
            while at < t + patience {
                unechoed(&mut l, at, 10 * (k + 1)..10 * (k + 1) + 1);
                at += Duration::from_millis(500);
                if at < t + patience {
                    let (restart, n) = l.tick(at);
                    assert!(!restart, "replacement {k} replaced after {:?}", at - t);
                    notes.extend(n);
                }
            }
            let (restart, n) = l.tick(t + patience);
            assert!(restart, "replacement {k} not replaced after {patience:?}");
            notes.extend(n);
            assert_eq!(l.state(), LinkState::Silent);
            t += patience;
            patience = (patience * 2).min(SILENT_RETRY_CAP);
        }
        assert_eq!(patience, SILENT_RETRY_CAP);
        assert_eq!(warnings(&notes), 0, "one warning per episode: {notes:?}");
        // The broker delivers again: the next replacement hears its own message, and the one
        // after a later silence is judged at once again (the streak ended).
        l.started(t);
        l.publishing(t + SUBSCRIBE_SETTLE, 500);
        l.published(500, t + SUBSCRIBE_SETTLE);
        let (echo, _) = l.received(t + SUBSCRIBE_SETTLE, 500);
        assert!(echo);
        assert!(l.is_up());
        let t = silenced(&mut l, t + Duration::from_secs(60));
        l.started(t);
        unechoed(&mut l, t + SUBSCRIBE_SETTLE, 600..602);
        assert!(!l.tick(t + SILENT_RETRY_AFTER - Duration::from_millis(1)).0);
        assert!(l.tick(t + SILENT_RETRY_AFTER).0);
    }

    #[test]
    fn a_first_subscription_that_hears_nothing_is_never_found_silent() {
        // It may not be subscribed at the broker yet (pilotctl can spend seconds on trust
        // first): silence proves nothing until it lasted or heard something.
        let mut l = link();
        let t = crate::clock::now();
        l.started(t);
        unechoed(&mut l, t + SUBSCRIBE_SETTLE, 0..10);
        assert!(!l.tick(t + PROVEN_AFTER - Duration::from_millis(1)).0);
        assert_eq!(l.state(), LinkState::Starting);
    }

    #[test]
    fn publishes_before_the_subscription_settled_are_not_expected_back() {
        let mut l = link();
        let t0 = crate::clock::now();
        l.started(t0);
        l.tick(t0 + PROVEN_AFTER);
        for h in 0..3u64 {
            l.publishing(t0, h);
            l.published(h, t0);
        }
        assert!(!l.tick(t0 + ECHO_DEADLINE * 5).0);
    }

    #[test]
    fn a_changed_cause_is_news_but_flapping_is_not() {
        let mut l = link();
        let t = crate::clock::now();
        let dial = Ending::Unreachable("cannot subscribe".into());
        let mut notes = Vec::new();
        l.started(t);
        notes.extend(l.ended(t, &dial));
        for _ in 0..3 {
            l.started(t);
            notes.extend(l.ended(t, &closed()));
        }
        assert_eq!(l.state(), LinkState::Rejected);
        assert_eq!(warnings(&notes), 2, "unreachable, then rejected: {notes:?}");
        // Back for a moment, then rejected again: the same episode, no new warning.
        l.started(t);
        notes = l.tick(t + PROVEN_AFTER).1;
        l.ended(t + PROVEN_AFTER * 2, &closed());
        for _ in 0..3 {
            l.started(t);
            notes.extend(l.ended(t, &closed()));
        }
        assert_eq!(l.state(), LinkState::Rejected);
        assert_eq!(warnings(&notes), 0, "{notes:?}");
        // Stable long enough ends the episode: the next rejection is warned again.
        let t = t + Duration::from_secs(1);
        l.started(t);
        l.tick(t + PROVEN_AFTER);
        l.tick(t + PROVEN_AFTER + EPISODE_ENDS_AFTER);
        l.ended(t + PROVEN_AFTER + EPISODE_ENDS_AFTER, &closed());
        let mut notes = Vec::new();
        for _ in 0..3 {
            l.started(t);
            notes.extend(l.ended(t, &closed()));
        }
        assert_eq!(warnings(&notes), 1, "{notes:?}");
    }

    #[test]
    fn pilotctl_errors_are_sorted_by_code_and_message() {
        let cli = |code: &str, message: &str| PilotctlError::Cli {
            command: "subscribe",
            code: ErrorCode::parse(code),
            message: message.into(),
            hint: None,
        };
        assert!(matches!(
            Ending::of(Some(&cli("connection_failed", "recv: EOF"))),
            Ending::Closed(_)
        ));
        assert!(matches!(
            Ending::of(Some(&cli(
                "connection_failed",
                "cannot subscribe on 0:0000.0000.0004 (event stream port 1002)"
            ))),
            Ending::Unreachable(_)
        ));
        assert!(matches!(
            Ending::of(Some(&cli("trust_required", "refusing tunnel"))),
            Ending::TrustRequired(_)
        ));
        assert!(matches!(
            Ending::of(Some(&cli("not_found", "cannot resolve"))),
            Ending::UnknownBroker(_)
        ));
        assert!(matches!(
            Ending::of(Some(&cli("not_running", "daemon is not running"))),
            Ending::DaemonDown(_)
        ));
        assert!(matches!(Ending::of(None), Ending::Closed(_)));
    }
}
