//! `run --observe`: a node that follows the election without a vote, for the swarms of agents
//! that need to know who coordinates while only a few of them should vote
//! (docs/guide/observers.md).
//!
//! It never campaigns, never counts towards a quorum and never sends a message a member would
//! act on. Over pilot it subscribes to the election topic (the broker does the fan-out, so the
//! members pay nothing per observer) and announces itself every [`ANNOUNCE_EVERY`] with a
//! presence marked `observer`, which members record for `/status` and never hand to their core.
//! Over http it follows one member's `/events` (the client library's `observe`), starting at a
//! member picked by its id so that many observers spread over the members, and moves to the
//! next member when the stream breaks or stays silent: each member serves the observers that
//! follow it, one stream each, not every observer.
//!
//! What it knows is [`crate::election::observed::Observed`] (in the core, where the simulator
//! runs it too): the last leader it heard of, in which term, and when.
//! It publishes that as the same [`Snapshot`] a member does (a follower that votes for nobody),
//! so `/leader`, `/events`, `/history`, `/role/*` and `/metrics` answer from it unchanged. It
//! cannot vouch for any lease: a leader counts until its own election timeout has passed
//! unheard (over http: until the member it follows has been silent for [`HTTP_SILENCE`]), and
//! `/role/leader` never answers 200.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::clock::wall::{rfc3339, unix_ms_now};
use crate::directory::Directory;
use crate::election::{
    Advert, Announced, Body, Candidacy, MemberSet, Message, Timings, Transition,
};
use crate::inbound;
use crate::metrics::{MessageType, Metrics, Received};
use crate::runtime::{LastTurn, Reporter, Snapshot};
use crate::signing::KeyRing;
use crate::store::{HistoryEntry, HISTORY_LIMIT};
use crate::transport::http::Peer;
use crate::transport::pilot::PilotConfig;
use crate::transport::{Health, Link, Links, Start, Transport, TransportConfig, INBOUND_CAPACITY};

use crate::election::observed::Observed;

/// How often an observer over pilot announces itself to the members.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(10);
/// Over http: how long the member followed may say nothing (it sends a keep-alive every second
/// on an observer's stream) before the stream counts as dead and the next member is tried, and
/// how long the leader it reported counts without a word from it.
pub const HTTP_SILENCE: Duration = Duration::from_secs(3);

/// Where an observer learns about the election.
#[derive(Debug, Clone)]
pub enum Source {
    /// Follows the members' `/events`, one member at a time.
    Http { members: Vec<Peer> },
    /// Subscribes to the election topic through pilotctl.
    Pilot(PilotConfig),
}

/// What `run --observe` asks for, already validated.
#[derive(Debug, Clone)]
pub struct ObserverConfig {
    /// Its own name: in its announcements, its `/events` requests' header, its API's answers.
    pub node_id: String,
    /// The members' default group: over pilot, the topic every group's messages travel on.
    pub group: String,
    /// The group it follows (`--observe-group`; the default group unless told otherwise): the
    /// messages of any other group on the topic are not its business.
    pub follows: String,
    /// The voting members (the observer is not one).
    pub members: MemberSet,
    pub source: Source,
    /// With a cluster key: verify what arrives over pilot, and sign the announcements.
    pub cluster_keys: Option<KeyRing>,
    /// How long a leader that announced no timings counts unheard: `--election-timeout`.
    pub timings: Timings,
    /// Over http, the client for `https://` members (`--peer-ca`, the client certificate);
    /// `None` uses the built-in roots.
    pub http: Option<reqwest::Client>,
}

/// How the observer is doing, for its `/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observing {
    /// `pilot` or `http`.
    pub transport: &'static str,
    /// Over http: the member whose `/events` it follows now (its URL); `None` while it
    /// reconnects. Over pilot: `None`.
    pub following: Option<String>,
    /// Messages are checked with the cluster key (pilot); false without one.
    pub verified: bool,
    /// Messages dropped as forged, replayed or malformed (pilot).
    pub rejected: u64,
}

/// The observer's loop and the handles its API reads.
pub struct Observer {
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    pub observing: watch::Receiver<Observing>,
    pub clock: LastTurn,
    /// Every change of the leader it knows, for `--on-change` (role `observer`).
    pub changes: watch::Receiver<crate::runtime::Change>,
    task: tokio::task::JoinHandle<()>,
    stop: CancellationToken,
}

impl Observer {
    /// Starts following; `metrics` is the observer's own registry.
    pub fn start(config: ObserverConfig, metrics: Arc<Metrics>) -> Observer {
        let now = clock::now();
        let observed = Observed::new(
            &config.node_id,
            &config.follows,
            config.members.clone(),
            match config.source {
                Source::Http { .. } => HTTP_SILENCE,
                Source::Pilot(_) => config.timings.election_timeout,
            },
        );
        let view = observed.view();
        let (reporter, changes) = Reporter::observer(&view);
        let first = Snapshot {
            view,
            members: observed.members(now),
            member_set: Arc::new(config.members.clone()),
            transport: Arc::new(Health {
                io: None,
                kind: source_kind(&config.source),
                healthy: false,
                last_error: None,
                reason: Some("starting".into()),
                links: None,
            }),
            history: Arc::new(VecDeque::new()),
            timings: config.timings,
            info: None,
            directory: Arc::new(Directory::default()),
            maintenance: None,
            maintenance_held_by: Vec::new(),
            firing: None,
            firing_held_by: Vec::new(),
        };
        let (snap_tx, snapshot) = watch::channel(Arc::new(first));
        let (obs_tx, observing) = watch::channel(Observing {
            transport: source_kind(&config.source),
            following: None,
            verified: config.cluster_keys.is_some(),
            rejected: 0,
        });
        let clock = Arc::new(Mutex::new(now));
        let stop = CancellationToken::new();
        let follower = Follower {
            observed,
            config,
            snapshot: snap_tx,
            observing: obs_tx,
            clock: clock.clone(),
            reporter,
            metrics,
            history: Arc::new(VecDeque::new()),
            directory: Arc::new(Directory::default()),
            transport: None,
        };
        let task = tokio::spawn(follower.run(stop.clone()));
        Observer {
            snapshot,
            observing,
            clock,
            changes,
            task,
            stop,
        }
    }

    /// Stops following (the subscription or the stream ends with the task).
    pub async fn finish(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

fn source_kind(s: &Source) -> &'static str {
    match s {
        Source::Http { .. } => "http",
        Source::Pilot(_) => "pilot",
    }
}

/// The member an observer follows first: its id picks one, so that observers given the same
/// list spread over the members instead of all following the first.
pub fn first_member(node_id: &str, members: usize) -> usize {
    (crate::election::cksum(node_id.as_bytes()) as usize) % members.max(1)
}

struct Follower {
    observed: Observed,
    config: ObserverConfig,
    snapshot: watch::Sender<Arc<Snapshot>>,
    observing: watch::Sender<Observing>,
    clock: LastTurn,
    reporter: Reporter,
    metrics: Arc<Metrics>,
    history: Arc<VecDeque<HistoryEntry>>,
    directory: Arc<Directory>,
    transport: Option<Arc<dyn Transport>>,
}

impl Follower {
    async fn run(mut self, stop: CancellationToken) {
        match self.config.source.clone() {
            Source::Pilot(pilot) => self.follow_topic(pilot, stop).await,
            Source::Http { members } => self.follow_events(members, stop).await,
        }
    }

    /// Over pilot: every member's messages, from the topic.
    async fn follow_topic(&mut self, pilot: PilotConfig, stop: CancellationToken) {
        let (tx, mut inbound) = mpsc::channel(INBOUND_CAPACITY);
        let transport_stop = stop.child_token();
        // Started as a member's is: the same seam, the same subscription and publishing.
        let started = TransportConfig::Pilot(pilot).start(Start {
            inbound: tx,
            metrics: self.metrics.clone(),
            stop: transport_stop,
            quorum: self.config.members.quorum(),
            tls: None,
        });
        let transport = match started {
            Ok(started) => started.transport,
            Err(e) => {
                tracing::error!(error = %e, "cannot follow the election topic");
                return;
            }
        };
        self.transport = Some(transport.clone());
        let mut seq = (unix_ms_now() / 1000) << 32;
        let mut announce_at = clock::now();
        loop {
            let now = clock::now();
            self.tick(now);
            if now >= announce_at {
                seq += 1;
                transport.publish(self.announcement(seq));
                announce_at = now + ANNOUNCE_EVERY;
            }
            let wake = self
                .observed
                .deadline()
                .filter(|d| *d > now)
                .unwrap_or(announce_at)
                .min(announce_at)
                .min(now + Duration::from_secs(1));
            tokio::select! {
                Some(bytes) = inbound.recv() => self.on_bytes(&bytes),
                _ = clock::sleep_until(wake) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// A presence that tells the members an observer is there: withdrawn, hearing nobody, in
    /// the term it knows, marked `observer` so that no member hands it to its core.
    fn announcement(&self, seq: u64) -> Arc<[u8]> {
        let mut m = Message {
            term: self.observed.term(),
            seq,
            members: self.config.members.fingerprint().to_string(),
            timings: Some(Announced::of(&self.config.timings)),
            observer: true,
            ..Message::new(
                self.config.follows.clone(),
                self.config.node_id.clone(),
                Body::Presence {
                    advert: Advert {
                        priority: 0,
                        candidacy: Candidacy::Withdrawn,
                        hears: Vec::new(),
                        member_ids: self.config.members.ids().map(str::to_string).collect(),
                        flapped: false,
                        unhealthy: false,
                    },
                },
            )
        };
        m.stamp(unix_ms_now());
        if let Some(keys) = &self.config.cluster_keys {
            keys.sign(&mut m);
        }
        m.to_json().into_bytes().into()
    }

    /// A message alone, or a batch (docs/protocol.md, rule 18), each of whose messages is
    /// read as if it had come alone: read as a member's loop reads it ([`inbound::read`]).
    fn on_bytes(&mut self, bytes: &[u8]) {
        let keys = self.config.cluster_keys.clone();
        match inbound::read(bytes, keys.as_ref()) {
            Ok(reader) => {
                for checked in reader {
                    self.on_parsed(checked.map_err(|e| Received::from(&e)));
                }
            }
            Err(e) => {
                self.metrics
                    .received(MessageType::Unknown, Received::from(&e));
                self.observing.send_modify(|o| o.rejected += 1);
            }
        }
    }

    fn on_parsed(&mut self, parsed: Result<Message, Received>) {
        let m = match parsed {
            Ok(m) => m,
            Err(reason) => {
                self.metrics.received(MessageType::Unknown, reason);
                self.observing.send_modify(|o| o.rejected += 1);
                return;
            }
        };
        let now = clock::now();
        self.metrics.received((&m.body).into(), Received::Observed);
        if m.group == self.config.follows && self.config.members.contains(&m.from) {
            Arc::make_mut(&mut self.directory).record(&m.from, m.seq, m.info.as_ref());
        }
        let changes = self.observed.on_message(now, &m);
        self.apply(now, changes);
    }

    /// Over http: what the member it follows says, and that it still says it.
    async fn follow_events(&mut self, members: Vec<Peer>, stop: CancellationToken) {
        let urls: Vec<String> = members.iter().map(|p| p.url.clone()).collect();
        let mut builder = pilot_election_client::Client::builder(urls)
            .observer(self.config.node_id.clone())
            .start_at(first_member(&self.config.node_id, members.len()))
            .watch_idle_timeout(HTTP_SILENCE)
            .reconnect_backoff(Duration::from_millis(100), Duration::from_secs(2));
        if let Some(http) = self.config.http.clone() {
            builder = builder.http_client(http);
        }
        // The default group's routes name none, as members of every release serve them.
        if self.config.follows != self.config.group {
            builder = builder.group(self.config.follows.clone());
        }
        let client = match builder.build() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "cannot follow the members");
                return;
            }
        };
        let mut stream = client.observe();
        loop {
            let now = clock::now();
            self.tick(now);
            let status = stream.status();
            let following = status.connected_to.clone();
            self.observing.send_if_modified(|o| {
                let changed = o.following != following;
                o.following.clone_from(&following);
                changed
            });
            self.set_http_health(&members, &status);
            let wake = self
                .observed
                .deadline()
                .filter(|d| *d > now)
                .unwrap_or(now + Duration::from_secs(1))
                .min(now + Duration::from_secs(1));
            tokio::select! {
                item = stream.next() => {
                    let Some(o) = item else { return };
                    let now = clock::now();
                    if let (Some(leader), Some(url)) = (&o.leader, &o.leader_url) {
                        let info = crate::election::NodeInfo { url: url.clone(), meta: Default::default() };
                        Arc::make_mut(&mut self.directory).record(leader, u64::MAX, Some(&info));
                    }
                    let changes = self.observed.on_report(now, &o.node, o.leader.as_deref(), o.term);
                    self.apply(now, changes);
                }
                _ = clock::sleep_until(wake) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    fn set_http_health(&mut self, members: &[Peer], status: &pilot_election_client::WatchStatus) {
        let connected = status.connected_to.as_deref();
        let entries = members
            .iter()
            .map(|p| {
                let state = if connected == Some(p.url.trim_end_matches('/')) {
                    "following"
                } else {
                    "standby"
                };
                Link::new(p.id.clone(), state, &serde_json::json!({ "url": p.url }))
            })
            .collect();
        let health = Health {
            io: None,
            kind: "http",
            healthy: connected.is_some(),
            last_error: status.last_error.clone(),
            reason: connected
                .is_none()
                .then(|| "not connected to any member's /events yet".to_string()),
            links: Some(Links {
                list: "members",
                name: "member",
                entries,
            }),
        };
        self.snapshot.send_if_modified(|s| {
            let changed = *s.transport != health;
            Arc::make_mut(s).transport = Arc::new(health);
            changed
        });
    }

    /// The loop's heartbeat, and the leader's time running out.
    fn tick(&mut self, now: Instant) {
        *self.clock.lock().unwrap_or_else(|e| e.into_inner()) = now;
        if let Some(t) = self.observed.on_time(now) {
            self.apply(now, vec![t]);
        } else {
            self.publish(now);
        }
    }

    fn apply(&mut self, now: Instant, changes: Vec<Transition>) {
        for t in changes {
            self.on_transition(&t);
        }
        self.publish(now);
    }

    fn on_transition(&mut self, t: &Transition) {
        let view = self.observed.view();
        self.reporter.transition(t, &view);
        self.metrics.transition(t.reason.into());
        let reason = t.reason.as_str();
        tracing::info!(
            term = t.term,
            leader = t.leader.as_deref().unwrap_or(""),
            previous = t.previous.as_deref().unwrap_or(""),
            reason,
            "leader transition observed"
        );
        let entry = HistoryEntry {
            term: t.term,
            leader: t.leader.clone(),
            previous: t.previous.clone(),
            reason: reason.to_string(),
            at: rfc3339(unix_ms_now()),
            leaderless_ms: None,
        };
        let history = Arc::make_mut(&mut self.history);
        history.push_back(entry);
        while history.len() > HISTORY_LIMIT {
            history.pop_front();
        }
    }

    fn publish(&mut self, now: Instant) {
        let transport = self.transport.as_ref().map(|t| t.health());
        let view = self.observed.view();
        let members = self.observed.members(now);
        let (history, directory) = (self.history.clone(), self.directory.clone());
        self.metrics.term.set(view.term as i64);
        self.snapshot.send_if_modified(|s| {
            let changed = s.view != view
                || s.members
                    .iter()
                    .map(|m| m.live)
                    .ne(members.iter().map(|m| m.live))
                || !Arc::ptr_eq(&s.history, &history)
                || !Arc::ptr_eq(&s.directory, &directory)
                || transport.as_ref().is_some_and(|t| *t != *s.transport);
            // A copy only while a reader still holds the last one.
            let s = Arc::make_mut(s);
            s.view = view;
            s.members = members;
            s.history = history;
            s.directory = directory;
            if let Some(t) = transport {
                s.transport = Arc::new(t);
            }
            changed
        });
    }
}
