//! [`Client::watch`]: a stream of leader changes over `GET /events`, resumed across reconnects
//! and members.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use reqwest::StatusCode;
use serde::Deserialize;
use tokio::time::Instant;

use crate::client::describe;
use crate::sse::{SseEvent, SseParser};
use crate::{clock, Client, Transition};

/// A new leader, as [`Client::watch`] yields it: each term once, in rising term order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderChange {
    /// The term the leader leads in.
    pub term: u64,
    /// The leader's node id.
    pub leader: String,
    /// The leader's URL when the event carried it (only the current state does; `None` from
    /// an older build, and for changes recovered from history).
    pub leader_url: Option<String>,
    /// The id of the node that reported it.
    pub node: String,
    /// The member URL (as given to the client) the stream was connected to.
    pub answered_by: String,
    /// How the change was learned.
    pub source: ChangeSource,
    /// When this client learned it (tokio's monotonic clock).
    pub received_at: Instant,
}

/// The fields of a change learned from history, under the names the Python client gives them
/// (docs/clients.md): `None` (or `false`) for a change seen as it happened.
impl LeaderChange {
    /// Whether it was learned after a reconnection, from the member's history.
    pub fn missed(&self) -> bool {
        matches!(self.source, ChangeSource::History(_))
    }

    fn history(&self) -> Option<&Transition> {
        match &self.source {
            ChangeSource::History(t) => Some(t),
            ChangeSource::Event => None,
        }
    }

    /// Why the member's history says it happened (`elected`, `step_down`, ...).
    pub fn reason(&self) -> Option<&str> {
        self.history().map(|t| t.reason.as_str())
    }

    /// The leader before it, as the member's history recorded it.
    pub fn previous(&self) -> Option<&str> {
        self.history().and_then(|t| t.previous.as_deref())
    }

    /// When it happened, RFC 3339 UTC, by the member's wall clock.
    pub fn at(&self) -> Option<&str> {
        self.history().map(|t| t.at.as_str())
    }
}

/// How a [`LeaderChange`] was learned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChangeSource {
    /// From a `leader` event: the node's state as it changed (or, right after a connection,
    /// the state it was in, and after a resumption the events the watcher had missed).
    Event,
    /// From the `missed` history of a `snapshot` event: the node could not resume the stream
    /// where the watcher left it (another member, or a node that restarted), and this is a
    /// transition its `/history` recorded since.
    History(Transition),
}

/// What a [`Watch`] is doing, for logs and tests ([`Watch::status`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchStatus {
    /// The member whose stream is open now (`None` while it reconnects).
    pub connected_to: Option<String>,
    /// The last event id received: what the next connection sends in `Last-Event-ID`.
    pub last_event_id: Option<String>,
    /// The term of the last change yielded.
    pub last_term: Option<u64>,
    /// How many streams have been opened, the first one included.
    pub connections: u64,
    /// Why the last stream ended or the last attempt failed.
    pub last_error: Option<String>,
    /// When bytes last arrived on a stream: an event, part of one, or a keep-alive comment.
    /// It is kept when the stream is lost, so that it says how long nothing has been heard.
    pub last_heard: Option<Instant>,
}

/// The stream [`Client::watch`] returns: [`LeaderChange`]s, for as long as it is polled.
///
/// It never ends by itself: a stream that breaks (the node is killed or restarts, the
/// connection drops or stays silent past [`watch_idle_timeout`]) is reopened, after a backoff,
/// on the same member and then on the next ones in turn, with the last event id in
/// `Last-Event-ID`. A node that can resume sends what came after that id; one that cannot
/// sends a `snapshot` whose `missed` history entries become the changes they stand for. Either
/// way each term's leader is yielded once, in rising term order, and never a term lower than
/// one already yielded (a member that is behind the others is simply not heard until it
/// catches up). Stretches without a leader are not yielded: ask [`Client::leader`] for the
/// present state.
///
/// Drop it to close the connection.
///
/// [`watch_idle_timeout`]: crate::ClientBuilder::watch_idle_timeout
pub struct Watch(Streamed<LeaderChange>);

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.debug("Watch", f)
    }
}

impl Watch {
    /// What the stream is doing now.
    pub fn status(&self) -> WatchStatus {
        self.0.status()
    }
}

impl Stream for Watch {
    type Item = LeaderChange;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LeaderChange>> {
        self.0.inner.as_mut().poll_next(cx)
    }
}

/// A member's state of the election, as [`Client::observe`] yields it: who leads (or that
/// nobody does) in which term, according to which member, and when it said so.
///
/// It vouches for nothing beyond what that member said when the data arrived: it cannot
/// speak for the leader's lease, and the leader may have changed since. Its
/// [`age`](Observation::age) is how stale it is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Observation {
    /// The leader's node id; `None` while the member knows no leader (an election).
    pub leader: Option<String>,
    /// The leader's URL when the member announced it (`None` without a leader, or from an
    /// older build).
    pub leader_url: Option<String>,
    /// The member's term.
    pub term: u64,
    /// The id of the member that reported it.
    pub node: String,
    /// The member URL (as given to the client) the stream was connected to.
    pub answered_by: String,
    /// When the data arrived: the event, or for a repeat, the keep-alive.
    pub heard_at: Instant,
}

impl Observation {
    /// How long ago the data arrived.
    pub fn age(&self) -> Duration {
        clock::since(self.heard_at)
    }
}

/// The stream [`Client::observe`] returns: [`Observation`]s of the members' state, for as
/// long as it is polled.
///
/// Its connections are a [`Watch`]'s (reopened after a backoff on the same member, then on
/// the next ones, with `Last-Event-ID`; given up after [`watch_idle_timeout`] of silence), but
/// it yields states, not changes:
///
/// - the member's state at each `leader` event, and the current state of a `snapshot` (its
///   `missed` history is not yielded), states without a leader included;
/// - a state of a term lower than the highest already yielded is skipped (a member that is
///   behind the others); the same state again is yielded, as a fresh confirmation;
/// - once a stream has delivered a state, each keep-alive on it (bytes that complete no event
///   and leave the stream between events) yields that state again with a new
///   [`heard_at`](Observation::heard_at): the member is alive and still says so. Members
///   send an observer's stream ([`ClientBuilder::observer`]) a keep-alive every second,
///   others every 10 s;
/// - when a stream is lost, nothing is yielded until a new one has delivered its first state.
///
/// A member that resumes a stream sends the events it missed: they are yielded in order, its
/// current state last. [`Observe::status`] says which member is heard, and when it last was.
///
/// Drop it to close the connection.
///
/// [`watch_idle_timeout`]: crate::ClientBuilder::watch_idle_timeout
/// [`ClientBuilder::observer`]: crate::ClientBuilder::observer
pub struct Observe(Streamed<Observation>);

impl std::fmt::Debug for Observe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.debug("Observe", f)
    }
}

impl Observe {
    /// What the stream is doing now; [`WatchStatus::last_term`] is the term of the last
    /// observation yielded, [`WatchStatus::last_heard`] when bytes last arrived.
    pub fn status(&self) -> WatchStatus {
        self.0.status()
    }
}

impl Stream for Observe {
    type Item = Observation;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Observation>> {
        self.0.inner.as_mut().poll_next(cx)
    }
}

/// The stream of items and the status behind [`Watch`] and [`Observe`].
pub(crate) struct Streamed<T> {
    pub(crate) inner: Pin<Box<dyn Stream<Item = T> + Send>>,
    status: Arc<Mutex<WatchStatus>>,
}

impl<T> Streamed<T> {
    pub(crate) fn status(&self) -> WatchStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn debug(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A stream of leader changes, starting with the current leader (see [`Watch`]).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use futures_util::StreamExt;
    /// let client = pilot_election_client::Client::new(["http://10.0.0.1:7070", "http://10.0.0.2:7070"])?;
    /// let mut changes = client.watch();
    /// while let Some(change) = changes.next().await {
    ///     println!("term {}: {} leads", change.term, change.leader);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn watch(&self) -> Watch {
        self.watch_resuming(None, None)
    }

    /// A stream of leader changes that carries on from an earlier one (of this process or of
    /// one before it): `last_event_id` and `last_term` as its [`WatchStatus`] last said. Only
    /// changes of terms above `last_term` are yielded, and the first connection sends
    /// `last_event_id`, so that what happened in between is recovered.
    pub fn watch_resuming(&self, last_event_id: Option<String>, last_term: Option<u64>) -> Watch {
        Watch(self.streamed(Tracker { last_term }, last_event_id, last_term))
    }

    /// A stream of the members' state: each state a member reports, states without a leader
    /// included, and the same state again at each keep-alive (see [`Observe`]).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use futures_util::StreamExt;
    /// let client = pilot_election_client::Client::builder(["http://10.0.0.1:7070", "http://10.0.0.2:7070"])
    ///     .observer("agent-17")
    ///     .build()?;
    /// let mut states = client.observe();
    /// while let Some(o) = states.next().await {
    ///     match &o.leader {
    ///         Some(l) => println!("term {}: {l} leads, says {}", o.term, o.node),
    ///         None => println!("term {}: no leader, says {}", o.term, o.node),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> Observe {
        Observe(self.streamed(Observer::default(), None, None))
    }

    /// The items `items` makes of the events of `GET /events`, over connections that are
    /// reopened and failed over (see [`Watch`]); the first one sends `last_event_id`.
    pub(crate) fn streamed<I: Items>(
        &self,
        items: I,
        last_event_id: Option<String>,
        last_term: Option<u64>,
    ) -> Streamed<I::Item> {
        let status = Arc::new(Mutex::new(WatchStatus {
            last_event_id: last_event_id.clone(),
            last_term,
            ..WatchStatus::default()
        }));
        let state = State {
            client: self.clone(),
            member: self.preferred(),
            resp: None,
            parser: SseParser::new(last_event_id.clone()),
            last_id: last_event_id,
            items,
            pending: VecDeque::new(),
            failures: 0,
            heard: false,
            status: status.clone(),
        };
        let inner = futures_util::stream::unfold(state, |mut s| async move {
            let item = s.next().await;
            Some((item, s))
        });
        Streamed {
            inner: Box::pin(inner),
            status,
        }
    }
}

/// What a stream of `GET /events` yields: the items it makes of the events (and of the bytes
/// between them) of each connection in turn.
pub(crate) trait Items: Send + Sync + 'static {
    type Item: Send + Sync + 'static;

    /// A new connection is open: what comes next is its member's.
    fn opened(&mut self) {}

    /// The items one complete event stands for; `answered_by` is the member's URL and `at`
    /// when the chunk that completed it arrived. An error is an event that does not parse.
    fn event(
        &mut self,
        ev: &SseEvent,
        answered_by: &str,
        at: Instant,
    ) -> Result<Vec<Self::Item>, String>;

    /// Bytes arrived at `at` on the open stream and left the parser between events without
    /// completing one (a keep-alive comment).
    fn heard(&mut self, _at: Instant) -> Option<Self::Item> {
        None
    }

    /// The term an item is of ([`WatchStatus::last_term`]).
    fn term(item: &Self::Item) -> u64;

    /// The `groups` parameter of a stream of many groups (`None`: the client's own group).
    fn groups(&self) -> Option<&str> {
        None
    }
}

/// The connections of one stream, and what has been taken from them.
struct State<I: Items> {
    client: Client,
    /// The member connected to, or tried next.
    member: usize,
    resp: Option<reqwest::Response>,
    parser: SseParser,
    last_id: Option<String>,
    items: I,
    pending: VecDeque<I::Item>,
    /// Attempts that failed since an event was last received.
    failures: u32,
    /// The open stream has delivered an event.
    heard: bool,
    status: Arc<Mutex<WatchStatus>>,
}

impl<I: Items> State<I> {
    fn set(&self, f: impl FnOnce(&mut WatchStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    async fn next(&mut self) -> I::Item {
        loop {
            if let Some(item) = self.pending.pop_front() {
                let term = I::term(&item);
                self.set(|s| s.last_term = Some(term));
                return item;
            }
            let Some(resp) = self.resp.as_mut() else {
                self.connect().await;
                continue;
            };
            let idle = self.client.inner.opts.watch_idle_timeout;
            match tokio::time::timeout(idle, resp.chunk()).await {
                Ok(Ok(Some(chunk))) => {
                    let at = clock::now();
                    self.set(|s| s.last_heard = Some(at));
                    let events = self.parser.feed(&chunk);
                    if events.is_empty() && self.parser.between_events() {
                        self.pending.extend(self.items.heard(at));
                    }
                    for ev in events {
                        self.on_event(ev, at);
                    }
                }
                Ok(Ok(None)) => self.lost("the stream ended".into()),
                Ok(Err(e)) => self.lost(describe(&e)),
                Err(_) => self.lost(format!("the stream was silent for {idle:?}")),
            }
        }
    }

    fn on_event(&mut self, ev: SseEvent, at: Instant) {
        if !self.heard {
            self.heard = true;
            self.failures = 0;
        }
        let member = self.client.inner.members[self.member].name.clone();
        match self.items.event(&ev, &member, at) {
            Ok(items) => self.pending.extend(items),
            Err(e) => self.set(|s| s.last_error = Some(e)),
        }
        // The id counts only once its event has been taken in (above).
        self.last_id = ev.id;
        let id = self.last_id.clone();
        self.set(|s| s.last_event_id = id);
    }

    /// The open stream broke: the next connection goes to the same member first (it may be
    /// able to resume), then to the next ones.
    fn lost(&mut self, reason: String) {
        self.resp = None;
        // An `id` line of an event that never completed was not committed (crate::sse).
        self.last_id = self.parser.last_id().map(String::from);
        let member = self.client.inner.members[self.member].name.clone();
        self.set(|s| {
            s.connected_to = None;
            s.last_error = Some(format!("{member}: {reason}"));
        });
    }

    async fn connect(&mut self) {
        let n = self.client.inner.members.len();
        loop {
            if self.failures > 0 {
                tokio::time::sleep(self.delay()).await;
            }
            let i = self.member;
            match self.open(i).await {
                Ok(resp) => {
                    self.resp = Some(resp);
                    self.heard = false;
                    self.items.opened();
                    self.parser = SseParser::new(self.last_id.clone());
                    self.client.set_preferred(i);
                    let name = self.client.inner.members[i].name.clone();
                    self.set(|s| {
                        s.connected_to = Some(name);
                        s.connections += 1;
                    });
                    return;
                }
                Err(reason) => {
                    self.failures = self.failures.saturating_add(1);
                    self.member = (i + 1) % n;
                    let name = self.client.inner.members[i].name.clone();
                    self.set(|s| s.last_error = Some(format!("{name}: {reason}")));
                }
            }
        }
    }

    /// The wait before the next attempt: the initial backoff (or the server's `retry`),
    /// doubled per failed attempt, capped, less up to half of it at random.
    fn delay(&self) -> Duration {
        let o = &self.client.inner.opts;
        let base = self.parser.retry().unwrap_or(o.backoff_initial);
        let doublings = self.failures.saturating_sub(1).min(16);
        let d = base
            .saturating_mul(1 << doublings)
            .min(o.backoff_max.max(base));
        d.mul_f64(1.0 - 0.5 * clock::jitter())
    }

    async fn open(&self, i: usize) -> Result<reqwest::Response, String> {
        let inner = &self.client.inner;
        let req = self
            .client
            .events_request(i, self.last_id.as_deref(), self.items.groups());
        let timeout = inner.opts.request_timeout;
        let resp = tokio::time::timeout(timeout, req.send())
            .await
            .map_err(|_| format!("no answer within {timeout:?}"))?
            .map_err(|e| describe(&e))?;
        let status = resp.status();
        if status != StatusCode::OK {
            let code = tokio::time::timeout(timeout, resp.json::<serde_json::Value>())
                .await
                .ok()
                .and_then(Result::ok)
                .and_then(|b| b["error"].as_str().map(String::from));
            return Err(format!(
                "GET /events answered {}{}",
                status.as_u16(),
                code.map(|c| format!(" {c}")).unwrap_or_default()
            ));
        }
        let is_sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            return Err("GET /events did not answer an event stream".into());
        }
        Ok(resp)
    }
}

/// The data of a `leader` event, and the current state in a `snapshot`.
#[derive(Deserialize)]
struct EventData {
    node: String,
    leader: Option<String>,
    #[serde(default)]
    leader_url: Option<String>,
    term: u64,
}

#[derive(Deserialize)]
struct SnapshotData {
    #[serde(flatten)]
    current: EventData,
    #[serde(default)]
    missed: Vec<Transition>,
}

/// Turns events into changes: each term's leader once, terms only rising.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    last_term: Option<u64>,
}

impl Items for Tracker {
    type Item = LeaderChange;

    fn event(
        &mut self,
        ev: &SseEvent,
        answered_by: &str,
        _at: Instant,
    ) -> Result<Vec<LeaderChange>, String> {
        self.on_event(&ev.event, &ev.data, answered_by)
    }

    fn term(item: &LeaderChange) -> u64 {
        item.term
    }
}

impl Tracker {
    /// The changes one event stands for (none for an event of another name, a state without
    /// a leader, or a term not above the last one yielded).
    pub(crate) fn on_event(
        &mut self,
        name: &str,
        data: &str,
        answered_by: &str,
    ) -> Result<Vec<LeaderChange>, String> {
        let mut out = Vec::new();
        let current = match name {
            "leader" => serde_json::from_str::<EventData>(data)
                .map_err(|e| format!("a leader event that does not parse ({e}): {data}"))?,
            "snapshot" => {
                let snap = serde_json::from_str::<SnapshotData>(data)
                    .map_err(|e| format!("a snapshot event that does not parse ({e}): {data}"))?;
                let mut missed = snap.missed;
                // Oldest first (a history is, but a stable sort costs nothing to be sure).
                missed.sort_by_key(|t| t.term);
                for t in missed {
                    let Some(leader) = t.leader.clone() else {
                        continue;
                    };
                    let current = &snap.current;
                    let leader_url = (current.leader.as_deref() == Some(leader.as_str())
                        && current.term == t.term)
                        .then(|| current.leader_url.clone())
                        .flatten();
                    self.offer(
                        LeaderChange {
                            term: t.term,
                            leader,
                            leader_url,
                            node: current.node.clone(),
                            answered_by: answered_by.to_string(),
                            source: ChangeSource::History(t),
                            received_at: clock::now(),
                        },
                        &mut out,
                    );
                }
                snap.current
            }
            _ => return Ok(out),
        };
        if let Some(leader) = current.leader {
            self.offer(
                LeaderChange {
                    term: current.term,
                    leader,
                    leader_url: current.leader_url,
                    node: current.node,
                    answered_by: answered_by.to_string(),
                    source: ChangeSource::Event,
                    received_at: clock::now(),
                },
                &mut out,
            );
        }
        Ok(out)
    }

    fn offer(&mut self, change: LeaderChange, out: &mut Vec<LeaderChange>) {
        if self.last_term.is_none_or(|t| change.term > t) {
            self.last_term = Some(change.term);
            out.push(change);
        }
    }
}

/// Turns events into observations: every state of a term not below the highest yielded, and
/// the stream's last one again at each keep-alive.
#[derive(Debug, Default)]
struct Observer {
    /// The highest term yielded.
    highest: Option<u64>,
    /// The open stream's last state, when it was yielded: what a keep-alive repeats.
    current: Option<Observation>,
}

impl Items for Observer {
    type Item = Observation;

    fn opened(&mut self) {
        self.current = None;
    }

    fn event(
        &mut self,
        ev: &SseEvent,
        answered_by: &str,
        at: Instant,
    ) -> Result<Vec<Observation>, String> {
        // A snapshot's data is the current state with `missed` beside it, which is not read.
        let kind = match ev.event.as_str() {
            "leader" => "a leader",
            "snapshot" => "a snapshot",
            _ => return Ok(Vec::new()),
        };
        let state = serde_json::from_str::<EventData>(&ev.data)
            .map_err(|e| format!("{kind} event that does not parse ({e}): {}", ev.data))?;
        if self.highest.is_some_and(|h| state.term < h) {
            // The member is behind: it no longer says what was yielded last.
            self.current = None;
            return Ok(Vec::new());
        }
        let o = Observation {
            leader: state.leader,
            leader_url: state.leader_url,
            term: state.term,
            node: state.node,
            answered_by: answered_by.to_string(),
            heard_at: at,
        };
        self.highest = Some(o.term);
        self.current = Some(o.clone());
        Ok(vec![o])
    }

    fn heard(&mut self, at: Instant) -> Option<Observation> {
        let mut again = self.current.clone()?;
        again.heard_at = at;
        Some(again)
    }

    fn term(item: &Observation) -> u64 {
        item.term
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(changes: &[LeaderChange]) -> Vec<(u64, &str)> {
        changes
            .iter()
            .map(|c| (c.term, c.leader.as_str()))
            .collect()
    }

    fn live(t: &mut Tracker, json: &str) -> Vec<LeaderChange> {
        t.on_event("leader", json, "http://a").unwrap()
    }

    #[test]
    fn live_events_yield_each_term_once_and_never_go_back() {
        let mut t = Tracker::default();
        let a = live(
            &mut t,
            r#"{"node":"a","leader":"b","term":5,"role":"follower"}"#,
        );
        assert_eq!(terms(&a), [(5, "b")]);
        assert_eq!(a[0].source, ChangeSource::Event);
        assert_eq!(a[0].leader_url, None, "an older build sends no URL");
        // The same state again (a role change), a leaderless stretch, a lagging member.
        assert!(live(
            &mut t,
            r#"{"node":"a","leader":"b","term":5,"role":"candidate"}"#
        )
        .is_empty());
        assert!(live(
            &mut t,
            r#"{"node":"a","leader":null,"term":6,"role":"follower"}"#
        )
        .is_empty());
        assert!(live(
            &mut t,
            r#"{"node":"c","leader":"x","term":4,"role":"follower"}"#
        )
        .is_empty());
        let b = live(
            &mut t,
            r#"{"node":"a","leader":"c","leader_url":"http://c:1","term":6,"role":"follower","extra":1}"#,
        );
        assert_eq!(terms(&b), [(6, "c")]);
        assert_eq!(b[0].leader_url.as_deref(), Some("http://c:1"));
        assert!(t
            .on_event("other", "not json", "http://a")
            .unwrap()
            .is_empty());
        assert!(t.on_event("leader", "not json", "http://a").is_err());
    }

    #[test]
    fn a_snapshot_turns_missed_history_into_changes_deduplicated_and_in_term_order() {
        let mut t = Tracker::default();
        assert_eq!(
            terms(&live(
                &mut t,
                r#"{"node":"a","leader":"b","term":5,"role":"follower"}"#
            )),
            [(5, "b")]
        );
        // The history from term 5 on, out of order, with the known term 5, a leaderless
        // stretch, the same term twice (its leader heard again after a silence) and the
        // current leader, which the current state repeats.
        let snap = r#"{"node":"c","leader":"d","leader_url":"http://d:1","term":8,"role":"follower","resumed":false,"missed":[
            {"term":7,"leader":"c","previous":null,"reason":"elected","at":"2026-12-01T17:20:02Z","leaderless_ms":3012},
            {"term":5,"leader":"b","previous":null,"reason":"elected","at":"2026-12-01T17:19:00Z","leaderless_ms":10},
            {"term":6,"leader":null,"previous":"b","reason":"leader_timeout","at":"2026-12-01T17:20:00Z","leaderless_ms":null},
            {"term":6,"leader":"a","previous":null,"reason":"elected","at":"2026-12-01T17:20:01Z","leaderless_ms":1000},
            {"term":7,"leader":null,"previous":"a","reason":"leader_timeout","at":"2026-12-01T17:20:01.5Z"},
            {"term":7,"leader":"c","previous":null,"reason":"heard","at":"2026-12-01T17:20:03Z","leaderless_ms":5},
            {"term":8,"leader":"d","previous":"c","reason":"step_down","at":"2026-12-01T17:20:04Z","leaderless_ms":20}
        ]}"#;
        let got = t.on_event("snapshot", snap, "http://c").unwrap();
        assert_eq!(terms(&got), [(6, "a"), (7, "c"), (8, "d")]);
        match &got[1].source {
            ChangeSource::History(tr) => {
                assert_eq!(tr.reason, "elected");
                assert_eq!(tr.leaderless_ms, Some(3012));
            }
            other => panic!("from history: {other:?}"),
        }
        // The same under the names the Python client gives them.
        assert!(got[1].missed());
        assert_eq!(got[1].reason(), Some("elected"));
        assert_eq!(got[1].at(), Some("2026-12-01T17:20:02Z"));
        assert_eq!(got[2].previous(), Some("c"));
        assert_eq!(got[2].reason(), Some("step_down"));
        assert_eq!(got[0].leader_url, None, "history carries no URLs");
        assert_eq!(
            got[2].leader_url.as_deref(),
            Some("http://d:1"),
            "the current one's"
        );
        assert_eq!(got[2].node, "c");
        assert_eq!(got[2].answered_by, "http://c");
        // The live stream after the snapshot repeats the current state: nothing new.
        assert!(live(
            &mut t,
            r#"{"node":"c","leader":"d","term":8,"role":"follower"}"#
        )
        .is_empty());
    }

    #[test]
    fn a_snapshot_without_missed_entries_is_the_current_state() {
        let mut t = Tracker::default();
        let got = t
            .on_event(
                "snapshot",
                r#"{"node":"a","leader":"a","term":3,"role":"leader","resumed":false,"missed":[]}"#,
                "http://a",
            )
            .unwrap();
        assert_eq!(terms(&got), [(3, "a")]);
        assert_eq!(got[0].source, ChangeSource::Event);
        assert!(!got[0].missed());
        assert_eq!(
            (got[0].reason(), got[0].previous(), got[0].at()),
            (None, None, None)
        );
        let mut t = Tracker::default();
        let got = t
            .on_event(
                "snapshot",
                r#"{"node":"a","leader":null,"term":3,"role":"follower","resumed":false}"#,
                "http://a",
            )
            .unwrap();
        assert!(got.is_empty());
    }

    #[test]
    fn resuming_from_a_term_skips_what_came_before() {
        let mut t = Tracker { last_term: Some(7) };
        assert!(live(
            &mut t,
            r#"{"node":"a","leader":"b","term":7,"role":"follower"}"#
        )
        .is_empty());
        assert_eq!(
            terms(&live(
                &mut t,
                r#"{"node":"a","leader":"b","term":9,"role":"follower"}"#
            )),
            [(9, "b")]
        );
    }

    fn sse(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: name.into(),
            data: data.into(),
            id: None,
        }
    }

    /// What the observer yields for one `leader` event, as (leader, term).
    fn observed(o: &mut Observer, json: &str, at: Instant) -> Vec<(Option<String>, u64)> {
        o.event(&sse("leader", json), "http://a", at)
            .unwrap()
            .into_iter()
            .map(|x| (x.leader, x.term))
            .collect()
    }

    fn state(leader: Option<&str>, term: u64) -> Vec<(Option<String>, u64)> {
        vec![(leader.map(String::from), term)]
    }

    #[test]
    fn observe_yields_every_state_leaderless_included_and_skips_lower_terms() {
        let mut o = Observer::default();
        let t0 = clock::now();
        let got = o
            .event(
                &sse(
                    "leader",
                    r#"{"node":"a","leader":"b","leader_url":"http://b:1","term":5,"role":"follower"}"#,
                ),
                "http://a",
                t0,
            )
            .unwrap();
        assert_eq!(
            got,
            [Observation {
                leader: Some("b".into()),
                leader_url: Some("http://b:1".into()),
                term: 5,
                node: "a".into(),
                answered_by: "http://a".into(),
                heard_at: t0,
            }]
        );
        assert_eq!(Observer::term(&got[0]), 5);
        // The same state again (a role change) is a confirmation; so is a leaderless one.
        let same = r#"{"node":"a","leader":"b","term":5,"role":"candidate"}"#;
        assert_eq!(observed(&mut o, same, t0), state(Some("b"), 5));
        let none = r#"{"node":"a","leader":null,"term":6,"role":"candidate"}"#;
        assert_eq!(observed(&mut o, none, t0), state(None, 6));
        // A lagging member's term 5 is skipped, and leaves nothing for a keep-alive to repeat.
        assert!(observed(&mut o, same, t0).is_empty());
        assert_eq!(o.heard(t0), None);
        let c = r#"{"node":"a","leader":"c","term":6,"role":"follower","extra":1}"#;
        assert_eq!(observed(&mut o, c, t0), state(Some("c"), 6));
        assert!(o
            .event(&sse("other", "not json"), "http://a", t0)
            .unwrap()
            .is_empty());
        let e = o
            .event(&sse("leader", "not json"), "http://a", t0)
            .unwrap_err();
        assert!(e.contains("a leader event"), "{e}");
        assert_eq!(o.highest, Some(6));
    }

    #[test]
    fn observe_takes_the_current_state_of_a_snapshot_and_not_its_history() {
        let mut o = Observer::default();
        let snap = r#"{"node":"c","leader":null,"term":8,"role":"follower","resumed":false,"missed":[
            {"term":7,"leader":"c","previous":null,"reason":"elected","at":"2026-12-01T17:20:02Z"},
            {"term":8,"leader":null,"previous":"c","reason":"leader_timeout","at":"2026-12-01T17:20:04Z"}
        ]}"#;
        let at = clock::now();
        let got = o.event(&sse("snapshot", snap), "http://c", at).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((&got[0].leader, got[0].term), (&None, 8));
        assert_eq!(
            (got[0].node.as_str(), got[0].answered_by.as_str()),
            ("c", "http://c")
        );
        let e = o.event(&sse("snapshot", "{}"), "http://c", at).unwrap_err();
        assert!(e.contains("a snapshot event"), "{e}");
    }

    #[test]
    fn keep_alives_repeat_the_open_streams_last_state_only() {
        let mut o = Observer::default();
        let t0 = clock::now();
        let (t1, t2) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        assert_eq!(o.heard(t0), None, "nothing heard yet");
        let b = r#"{"node":"a","leader":"b","term":5,"role":"follower"}"#;
        let first = o.event(&sse("leader", b), "http://a", t0).unwrap();
        for at in [t1, t2] {
            let again = o.heard(at).expect("a repeat");
            assert_eq!(again.heard_at, at);
            assert_eq!(
                Observation {
                    heard_at: t0,
                    ..again
                },
                first[0]
            );
        }
        // A new stream repeats nothing until it has delivered a state of its own.
        o.opened();
        assert_eq!(o.heard(t2), None);
        let got = o.event(&sse("leader", b), "http://b", t2).unwrap();
        assert_eq!(o.heard(t2), Some(got[0].clone()));
        assert_eq!(got[0].answered_by, "http://b");
    }
}
