//! The Pilot Protocol transport: the election runs over the overlay's event-stream brokers.
//!
//! Events reach a node only through a live subscription (never through `inbox`), so one
//! long-lived subscription per broker is kept running and restarted with capped exponential
//! backoff; readiness follows it, and [`broker_link`] explains what each one is doing (a broker
//! that refuses this node, one that dropped it silently, one that is down). With several brokers
//! every message arrives once per broker, so duplicates are dropped by `(from, seq)`; this
//! node's own messages coming back are only used as proof that the subscription works.
//!
//! Two ways to the brokers, chosen at start ([`PilotIo`]): through the daemon's socket
//! ([`daemon`]), one subscribing and one publishing connection per broker for the node's whole
//! life; or, where the daemon does not answer as a 1.18 daemon does, through `pilotctl`: one
//! `pilotctl subscribe` per broker and one `pilotctl publish` process per message, each under a
//! deadline that kills its whole process group.

mod broker_link;
pub mod daemon;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Bucket, Health, Inbound, Links, Pace, Transport};
use crate::backoff::Backoff;
use crate::metrics::{MessageType, Metrics, Received};
use crate::pilotctl::{ErrorCode, Pilotctl, PilotctlError};
pub use broker_link::{BrokerHealth, LinkState};
use broker_link::{BrokerLink, Context, Ending, Note};

/// Publishes in flight at once (each is a process). Beyond this a message is dropped: the
/// protocol tolerates loss, a fork bomb under a stuck daemon it would not.
const MAX_IN_FLIGHT: usize = 32;
/// Attempts for one message to one broker when the error is worth retrying.
const PUBLISH_ATTEMPTS: u32 = 3;
/// The waits between those attempts: 50 ms, then 100 ms.
const PUBLISH_RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(200));
/// The waits before a subscription that ended is started again: 100 ms, doubling up to 2 s. A
/// node without a subscription hears nothing, which costs more than one pilotctl start every
/// two seconds; the cap also bounds how long a node waits once its trust is granted.
const SUBSCRIBE_RETRY: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
/// How often a running subscription's diagnosis looks at the clock.
const DIAGNOSIS_TICK: Duration = Duration::from_millis(250);
/// How many recent `(from, seq)` pairs are remembered for duplicate suppression.
const DEDUP_MEMORY: usize = 4096;
/// The broker's limit on what one connection may publish: 100 events a second with a burst of
/// 200; beyond it the broker drops events without a word. The socket path's publishing
/// connection holds itself to it (docs/pilot.md).
pub const BROKER_PACE: Pace = Pace {
    per_second: 100.0,
    burst: 200.0,
};
/// How long a publishing connection that this node cannot open through the socket for want of
/// trust leaves its publishes to pilotctl before it tries the socket again.
const TRUST_FALLBACK_FOR: Duration = Duration::from_secs(30);

/// Where and how to reach the overlay.
#[derive(Debug, Clone)]
pub struct PilotConfig {
    pub pilotctl: Pilotctl,
    /// Broker nodes (hostnames or addresses); every message goes to each of them.
    pub brokers: Vec<String>,
    /// `election:<group>`.
    pub topic: String,
    /// Through the daemon's socket or through pilotctl processes.
    pub io: PilotIo,
}

/// The way to the brokers, chosen at start (`--pilot-io`, docs/pilot.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PilotIo {
    /// One long-lived connection per broker and purpose through the daemon at this socket.
    Socket(std::path::PathBuf),
    /// A `pilotctl publish` process per message, a `pilotctl subscribe` per broker.
    Pilotctl,
}

impl PilotIo {
    pub fn as_str(&self) -> &'static str {
        match self {
            PilotIo::Socket(_) => "socket",
            PilotIo::Pilotctl => "pilotctl",
        }
    }
}

/// The topic a publishing connection subscribes to with its first frame: one nobody publishes
/// on (a group name cannot hold `/`), so that the broker sends it nothing. Its later frames
/// carry the election topic; the broker routes each event by its own topic.
fn publisher_topic(topic: &str) -> String {
    format!("{topic}/publisher")
}

/// Recently seen messages, bounded. The key includes a hash of the exact text: copies of one
/// publish through several brokers are byte-identical, while a forged message that merely
/// reuses a real `(from, seq)` is not, so it cannot get the real one dropped here (it is then
/// refused by the signature check, and the real one still arrives).
#[derive(Debug, Default)]
struct Dedup {
    seen: HashSet<(String, u64, u64)>,
    order: VecDeque<(String, u64, u64)>,
}

/// A message's exact text, hashed: how copies and this node's own echoes are recognised.
fn text_hash(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(text, &mut h);
    std::hash::Hasher::finish(&h)
}

impl Dedup {
    /// True the first time a message is offered (`hash` is [`text_hash`] of its text).
    fn first(&mut self, from: &str, seq: u64, hash: u64) -> bool {
        let key = (from.to_string(), seq, hash);
        if self.seen.contains(&key) {
            return false;
        }
        if self.order.len() >= DEDUP_MEMORY {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.seen.insert(key.clone());
        self.order.push_back(key);
        true
    }
}

/// Just enough of a message to recognise a duplicate; everything else is the runtime's job.
#[derive(Deserialize)]
struct Identity {
    from: String,
    seq: u64,
}

/// Every broker's diagnosis, shared by its subscription task, the publishes and `health()`.
struct Brokers {
    brokers: Mutex<Vec<BrokerLink>>,
    /// `socket` or `pilotctl`, for `/status`.
    io: &'static str,
    /// Per broker: woken when its subscription was found silent, so that the socket path's
    /// publishing connection is opened afresh too (the echoes that went missing may have been
    /// lost on it rather than on the subscription).
    reopen: Vec<Arc<tokio::sync::Notify>>,
    /// The latest error of any publish or subscription.
    last_error: Mutex<Option<String>>,
    metrics: Arc<Metrics>,
}

/// The broker-state gauge: this link's state at 1, every other state at 0.
fn report_state(metrics: &Metrics, broker: &str, state: LinkState) {
    metrics.set_broker_state(
        broker,
        state.as_str(),
        &LinkState::ALL.map(LinkState::as_str),
    );
}
impl Brokers {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<BrokerLink>> {
        self.brokers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on one broker's diagnosis and keeps the state metric in step with it.
    fn update<R>(&self, index: usize, f: impl FnOnce(&mut BrokerLink) -> R) -> R {
        let mut g = self.lock();
        let link = &mut g[index];
        let before = link.state();
        let out = f(link);
        let after = link.state();
        let broker = link.ctx.broker.clone();
        drop(g);
        if before != after {
            report_state(&self.metrics, &broker, after);
        }
        out
    }

    fn set_error(&self, error: String) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
    }

    /// Tells every broker's explanations this node's Pilot id (for `pilotctl approve`).
    fn learn_pilot_id(&self, id: String) {
        for link in self.lock().iter_mut() {
            link.ctx.pilot_id = Some(id.clone());
        }
    }

    fn knows_pilot_id(&self) -> bool {
        self.lock().iter().all(|l| l.ctx.pilot_id.is_some())
    }

    /// Ready while at least one broker delivers: every message is published to all of them.
    /// Otherwise the reason names each broker, what it is doing and what to run.
    fn health(&self) -> Health {
        let brokers: Vec<BrokerHealth> = self.lock().iter().map(BrokerLink::view).collect();
        let healthy = brokers.iter().any(|b| b.state == LinkState::Subscribed);
        let reason = (!healthy).then(|| {
            let each: Vec<String> = brokers
                .iter()
                .map(|b| match (&b.cause, &b.fix) {
                    (Some(cause), Some(fix)) => format!(
                        "broker {} is {}: {cause}; to fix: {fix}",
                        b.broker,
                        b.state.as_str()
                    ),
                    _ => format!(
                        "broker {} is {}: no subscription has proven itself yet",
                        b.broker,
                        b.state.as_str()
                    ),
                })
                .collect();
            format!(
                "no broker delivers election messages to this node. {}",
                each.join(". ")
            )
        });
        Health {
            kind: "pilot",
            io: Some(self.io),
            healthy,
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            reason,
            links: Some(Links {
                list: "brokers",
                name: "broker",
                entries: brokers.iter().map(BrokerHealth::link).collect(),
            }),
        }
    }
}

fn log(notes: Vec<Note>, broker: &str) {
    for note in notes {
        match note {
            Note::Warn(line) => tracing::warn!(broker, "{line}"),
            Note::Info(line) => tracing::info!(broker, "{line}"),
        }
    }
}

pub struct PilotTransport {
    config: PilotConfig,
    links: Arc<Brokers>,
    in_flight: Arc<Semaphore>,
    /// "Too many in flight" at most once in 10 s, with the count of those left out.
    dropped_log: Mutex<crate::log_limit::LogLimit>,
    metrics: Arc<Metrics>,
    /// Over the socket: each broker's publishing connection's queue.
    outboxes: Vec<mpsc::Sender<Outgoing>>,
}

/// A message on its way to one broker's publishing connection; the permit bounds how many wait
/// and tells `flushed` when they have left.
struct Outgoing {
    text: Arc<str>,
    hash: u64,
    permit: OwnedSemaphorePermit,
}

impl PilotTransport {
    /// Starts one subscription task per broker; they stop with `stop`.
    pub fn start(
        config: PilotConfig,
        inbound: Inbound,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> PilotTransport {
        let brokers = config
            .brokers
            .iter()
            .map(|b| {
                report_state(&metrics, b, LinkState::Starting);
                BrokerLink::new(Context {
                    broker: b.clone(),
                    topic: config.topic.clone(),
                    pilot_id: None,
                })
            })
            .collect();
        let links = Arc::new(Brokers {
            brokers: Mutex::new(brokers),
            io: config.io.as_str(),
            reopen: config
                .brokers
                .iter()
                .map(|_| Arc::new(tokio::sync::Notify::new()))
                .collect(),
            last_error: Mutex::new(None),
            metrics: metrics.clone(),
        });
        metrics.set_pilot_io(config.io.as_str());
        let dedup = Arc::new(Mutex::new(Dedup::default()));
        let mut outboxes = Vec::new();
        if let PilotIo::Socket(socket) = &config.io {
            for (i, broker) in config.brokers.iter().enumerate() {
                let (tx, rx) = mpsc::channel(MAX_IN_FLIGHT);
                outboxes.push(tx);
                tokio::spawn(
                    Publisher {
                        index: i,
                        broker: broker.clone(),
                        socket: socket.clone(),
                        config: config.clone(),
                        links: links.clone(),
                        metrics: metrics.clone(),
                    }
                    .run(rx, stop.clone()),
                );
            }
        }
        for (i, broker) in config.brokers.iter().enumerate() {
            tokio::spawn(subscribe_loop(
                i,
                broker.clone(),
                config.clone(),
                inbound.clone(),
                links.clone(),
                dedup.clone(),
                metrics.clone(),
                stop.clone(),
            ));
        }
        PilotTransport {
            config,
            links,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            dropped_log: Mutex::new(crate::log_limit::LogLimit::new(1, Duration::from_secs(10))),
            metrics,
            outboxes,
        }
    }
}

/// The largest wire message published: one `--data=` argument of a `pilotctl` command line
/// (Linux caps one argument at 128 KiB) that still fits a subscription's line (256 KiB) once
/// pilotctl has escaped it into a JSON string.
pub const MAX_PUBLISH_BYTES: usize = 96 * 1024;

impl Transport for PilotTransport {
    fn max_batch_bytes(&self) -> usize {
        MAX_PUBLISH_BYTES
    }

    /// Half the broker's rate and burst: every wire message is one event per broker, and
    /// several nodes' elections storming at once (a thousand groups electing after a restart)
    /// would otherwise publish one event per turn of the loop, past what a connection may
    /// send. Held messages leave with the next, packed together; through pilotctl this also
    /// bounds the processes started.
    fn pace(&self) -> Option<Pace> {
        Some(Pace {
            per_second: BROKER_PACE.per_second / 2.0,
            burst: BROKER_PACE.burst / 2.0,
        })
    }

    fn publish(&self, bytes: Arc<[u8]>) {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            self.metrics.publish_failed();
            return;
        };
        let text: Arc<str> = Arc::from(text);
        let hash = text_hash(&text);
        for (index, broker) in self.config.brokers.iter().enumerate() {
            let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
                self.metrics.publish_failed();
                let admitted = self
                    .dropped_log
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .admit(crate::clock::now());
                if let Some(left_out) = admitted {
                    tracing::warn!(broker = %broker, left_out, "too many publishes in flight ({MAX_IN_FLIGHT}); dropped one (and left_out more since the last warning)");
                }
                continue;
            };
            self.links
                .update(index, |l| l.publishing(crate::clock::now(), hash));
            let m = Outgoing {
                text: text.clone(),
                hash,
                permit,
            };
            match self.outboxes.get(index) {
                Some(outbox) => {
                    if outbox.try_send(m).is_err() {
                        self.metrics.publish_failed();
                    }
                }
                None => spawn_pilotctl_publish(
                    &self.config,
                    index,
                    broker,
                    m,
                    &self.metrics,
                    &self.links,
                ),
            }
        }
    }

    /// Every publish holds a permit of `in_flight` until its `pilotctl publish` is done, or its
    /// bytes are written to the daemon's socket.
    fn flushed(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let in_flight = self.in_flight.clone();
        Box::pin(async move {
            let _ = in_flight.acquire_many_owned(MAX_IN_FLIGHT as u32).await;
        })
    }

    fn health(&self) -> Health {
        self.links.health()
    }
}

/// Publishes with retries; returns when the successful attempt started.
async fn publish_one(
    ctl: &Pilotctl,
    broker: &str,
    topic: &str,
    text: &str,
    metrics: &Metrics,
    links: &Brokers,
) -> Option<Instant> {
    let mut retry = PUBLISH_RETRY;
    for attempt in 1..=PUBLISH_ATTEMPTS {
        let started = crate::clock::now();
        match ctl.publish(broker, topic, text).await {
            Ok(_) => {
                metrics.observe_publish(crate::clock::since(started));
                return Some(started);
            }
            Err(e) if e.is_retryable() && attempt < PUBLISH_ATTEMPTS => {
                tracing::debug!(broker, attempt, error = %e, "pilotctl publish failed; retrying");
                tokio::time::sleep(retry.next_delay()).await;
            }
            Err(e) => {
                metrics.publish_failed();
                let text = e.to_string();
                tracing::warn!(broker, error = %text, retryable = e.is_retryable(), "pilotctl publish failed");
                links.set_error(format!("{broker}: {text}"));
                return None;
            }
        }
    }
    None
}

#[allow(clippy::too_many_arguments)]
async fn subscribe_loop(
    index: usize,
    broker: String,
    config: PilotConfig,
    inbound: Inbound,
    links: Arc<Brokers>,
    dedup: Arc<Mutex<Dedup>>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut backoff = SUBSCRIBE_RETRY;
    let mut tick = tokio::time::interval(DIAGNOSIS_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.is_cancelled() {
        if !links.knows_pilot_id() {
            if let Ok(info) = config.pilotctl.info().await {
                links.learn_pilot_id(info.node_id.to_string());
            }
        }
        // `None`: the diagnosis found the running subscription silent and wants a new one.
        let ending = match Feed::open(&config, &broker).await {
            Ok(mut sub) => {
                links.update(index, |l| l.started(crate::clock::now()));
                tracing::debug!(broker = %broker, topic = %config.topic, via = sub.via(), "subscription started");
                let ending = loop {
                    let next = tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tick.tick() => {
                            let (restart, notes) = links.update(index, |l| l.tick(crate::clock::now()));
                            log(notes, &broker);
                            if restart {
                                if let Some(reopen) = links.reopen.get(index) {
                                    reopen.notify_one();
                                }
                                break None;
                            }
                            continue;
                        }
                        next = sub.next() => next,
                    };
                    match next {
                        Some(Ok(data)) => {
                            let hash = text_hash(&data);
                            let (echo, notes) =
                                links.update(index, |l| l.received(crate::clock::now(), hash));
                            log(notes, &broker);
                            if echo {
                                metrics.received(MessageType::Any, Received::Own);
                            } else {
                                deliver(data, hash, &inbound, &dedup, &metrics);
                            }
                        }
                        Some(Err(e)) => break Some(Ending::of(Some(&e))),
                        None => break Some(Ending::of(None)),
                    }
                };
                let skipped = sub.skipped();
                if skipped > 0 {
                    tracing::warn!(broker = %broker, skipped, "the subscription received events that were not election messages (not text, or over 256 KiB)");
                }
                ending
            }
            Err(e) => Some(Ending::of(Some(&e))),
        };
        metrics.subscription_restarts.inc();
        let worked = links.update(index, |l| l.is_up());
        // One that worked ends the run of failures; a silent one is replaced at once (nothing
        // suggests waiting helps), and a failure after it waits the initial time again.
        let wait = if worked {
            backoff.reset();
            backoff.next_delay()
        } else if ending.is_none() {
            backoff.reset();
            Duration::ZERO
        } else {
            backoff.next_delay()
        };
        if let Some(how) = ending {
            links.set_error(format!("{broker}: {how}"));
            let notes = links.update(index, |l| l.ended(crate::clock::now(), &how));
            log(notes, &broker);
            tracing::debug!(broker = %broker, ending = %how, retry_in_ms = wait.as_millis() as u64, "subscription ended");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// One broker's subscription, by either path.
enum Feed {
    Process(Box<crate::pilotctl::Subscription>),
    Socket(daemon::EventStream),
}

impl Feed {
    /// Over the socket, unless this node does not trust the broker: pilotctl then decides
    /// (it asks the registry whether the broker is public, which the socket path does not).
    async fn open(config: &PilotConfig, broker: &str) -> Result<Feed, PilotctlError> {
        if let PilotIo::Socket(socket) = &config.io {
            match daemon::EventStream::open(socket, broker, &config.topic, "subscribe").await {
                Ok(stream) => return Ok(Feed::Socket(stream)),
                Err(e) if is_untrusted(&e) => {
                    tracing::debug!(broker, "broker not trusted; subscribing through pilotctl");
                }
                Err(e) => return Err(e),
            }
        }
        config
            .pilotctl
            .subscribe(broker, &config.topic)
            .map(|sub| Feed::Process(Box::new(sub)))
    }

    async fn next(&mut self) -> Option<Result<String, PilotctlError>> {
        match self {
            Feed::Process(sub) => sub.next().await,
            Feed::Socket(stream) => Some(stream.next().await),
        }
    }

    fn via(&self) -> &'static str {
        match self {
            Feed::Process(_) => "pilotctl",
            Feed::Socket(_) => "socket",
        }
    }

    /// Events received that were not text of a sane size.
    fn skipped(&self) -> u64 {
        match self {
            Feed::Process(sub) => sub.garbage_lines() + sub.oversized_lines(),
            Feed::Socket(stream) => stream.garbage_events() + stream.oversized_events(),
        }
    }
}

/// The socket path's refusal to reach a broker this node does not trust (its trust check), as
/// opposed to pilotctl's own `trust_required`.
fn is_untrusted(e: &PilotctlError) -> bool {
    matches!(e, PilotctlError::Daemon { code: ErrorCode::Other(c), .. } if c == "trust_required")
}

/// One broker's publishing connection over the daemon's socket: opened once, every message of
/// the node written on it in order, at most at the broker's rate; opened again after it broke,
/// after the subscription was found silent, or (through pilotctl meanwhile) after the broker
/// was not trusted.
struct Publisher {
    index: usize,
    broker: String,
    socket: std::path::PathBuf,
    config: PilotConfig,
    links: Arc<Brokers>,
    metrics: Arc<Metrics>,
}

impl Publisher {
    async fn run(self, mut outbox: mpsc::Receiver<Outgoing>, stop: CancellationToken) {
        let topic = publisher_topic(&self.config.topic);
        let mut backoff = SUBSCRIBE_RETRY;
        let mut bucket = Bucket::full(BROKER_PACE, crate::clock::now());
        let mut throttled = false;
        let reopen = self.links.reopen[self.index].clone();
        loop {
            let opened = tokio::select! {
                _ = stop.cancelled() => return,
                o = daemon::EventStream::open(&self.socket, &self.broker, &topic, "publish") => o,
            };
            let mut stream = match opened {
                Ok(stream) => stream,
                Err(e) if is_untrusted(&e) => {
                    // pilotctl knows whether an untrusted broker is public; let it publish.
                    self.through_pilotctl(&mut outbox, &stop).await;
                    continue;
                }
                Err(e) => {
                    tracing::debug!(broker = %self.broker, error = %e, "publishing connection not opened");
                    self.links.set_error(format!("{}: {e}", self.broker));
                    if !self.idle(&mut outbox, backoff.next_delay(), &stop).await {
                        return;
                    }
                    continue;
                }
            };
            tracing::debug!(broker = %self.broker, "publishing connection open");
            let mut sent = false;
            let broke = loop {
                let m = tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = reopen.notified() => break None,
                    // The broker sends nothing on this topic; reading still notices a close.
                    r = stream.next() => match r {
                        Ok(_) => continue,
                        Err(e) => break Some(e),
                    },
                    m = outbox.recv() => match m {
                        Some(m) => m,
                        None => return,
                    },
                };
                if let Err(wait) = bucket.take(crate::clock::now()) {
                    self.metrics.publish_throttled("delayed");
                    if !throttled {
                        throttled = true;
                        tracing::warn!(broker = %self.broker, "publishing faster than the broker's 100 events/s per connection; holding messages back");
                    }
                    tokio::time::sleep(wait).await;
                    let _ = bucket.take(crate::clock::now());
                } else if throttled && outbox.is_empty() {
                    throttled = false;
                }
                let started = crate::clock::now();
                match stream.send(&self.config.topic, m.text.as_bytes()).await {
                    Ok(()) => {
                        sent = true;
                        self.metrics.observe_publish(crate::clock::since(started));
                        self.links
                            .update(self.index, |l| l.published(m.hash, started));
                        backoff.reset();
                    }
                    Err(e) => {
                        self.metrics.publish_failed();
                        break Some(e);
                    }
                }
            };
            if let Some(e) = broke {
                // A connection that carried messages and broke is news; one the broker closes
                // as soon as it opens (it does not trust this node) is the subscription's
                // diagnosis to report, once.
                if sent {
                    tracing::warn!(broker = %self.broker, error = %e, "publishing connection broke; opening another");
                } else {
                    tracing::debug!(broker = %self.broker, error = %e, "publishing connection closed at once");
                }
                self.links.set_error(format!("{}: {e}", self.broker));
                if !self.idle(&mut outbox, backoff.next_delay(), &stop).await {
                    return;
                }
            }
        }
    }

    /// Waits `wait` before the next attempt to open; what the node publishes meanwhile is lost,
    /// as it would be on the wire (a queue of stale heartbeats would only arrive late). False
    /// when the transport stops.
    async fn idle(
        &self,
        outbox: &mut mpsc::Receiver<Outgoing>,
        wait: Duration,
        stop: &CancellationToken,
    ) -> bool {
        let wait = tokio::time::sleep(wait);
        tokio::pin!(wait);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = &mut wait => return true,
                m = outbox.recv() => match m {
                    Some(_) => self.metrics.publish_failed(),
                    None => return false,
                },
            }
        }
    }

    /// Publishes through pilotctl, a process per message, for [`TRUST_FALLBACK_FOR`].
    async fn through_pilotctl(
        &self,
        outbox: &mut mpsc::Receiver<Outgoing>,
        stop: &CancellationToken,
    ) {
        let until = tokio::time::sleep(TRUST_FALLBACK_FOR);
        tokio::pin!(until);
        loop {
            let m = tokio::select! {
                _ = stop.cancelled() => return,
                _ = &mut until => return,
                m = outbox.recv() => match m {
                    Some(m) => m,
                    None => return,
                },
            };
            spawn_pilotctl_publish(
                &self.config,
                self.index,
                &self.broker,
                m,
                &self.metrics,
                &self.links,
            );
        }
    }
}

/// Publishes `m` to broker `index` through a `pilotctl publish` process of its own, holding its
/// permit until the process is done.
fn spawn_pilotctl_publish(
    config: &PilotConfig,
    index: usize,
    broker: &str,
    m: Outgoing,
    metrics: &Arc<Metrics>,
    links: &Arc<Brokers>,
) {
    let (ctl, broker, topic) = (
        config.pilotctl.clone(),
        broker.to_string(),
        config.topic.clone(),
    );
    let (metrics, links) = (metrics.clone(), links.clone());
    tokio::spawn(async move {
        let _permit = m.permit;
        if let Some(sent_at) = publish_one(&ctl, &broker, &topic, &m.text, &metrics, &links).await {
            links.update(index, |l| l.published(m.hash, sent_at));
        }
    });
}

fn deliver(data: String, hash: u64, inbound: &Inbound, dedup: &Mutex<Dedup>, metrics: &Metrics) {
    // Duplicates from several brokers are dropped here; anything unparsable goes on to the
    // runtime, which counts it as malformed.
    if let Ok(id) = serde_json::from_str::<Identity>(&data) {
        let fresh = dedup
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .first(&id.from, id.seq, hash);
        if !fresh {
            metrics.received(MessageType::Any, Received::Duplicate);
            return;
        }
    }
    if inbound.try_send(data.into_bytes()).is_err() {
        metrics.received(MessageType::Any, Received::Dropped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_the_brokers_burst_then_its_rate_and_says_how_long_to_wait() {
        let t0 = crate::clock::now();
        let mut b = Bucket::full(BROKER_PACE, t0);
        for i in 0..200 {
            assert!(b.take(t0).is_ok(), "token {i} of the burst");
        }
        let wait = b.take(t0).expect_err("the burst is spent");
        assert!(
            wait > Duration::from_millis(9) && wait <= Duration::from_millis(10),
            "{wait:?}"
        );
        // A second later a hundred more, not one more.
        let t1 = t0 + Duration::from_secs(1);
        for i in 0..100 {
            assert!(b.take(t1).is_ok(), "token {i} of the second's rate");
        }
        assert!(b.take(t1).is_err());
        // Never more than the burst, however long it rested.
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!((0..300).filter(|_| b.take(t2).is_ok()).count(), 200);
    }

    #[test]
    fn the_publishing_connections_topic_is_one_no_group_can_have() {
        let topic = publisher_topic("election:shard-01");
        assert_eq!(topic, "election:shard-01/publisher");
        assert!(crate::group::GroupName::new(&topic["election:".len()..]).is_err());
    }

    #[test]
    fn dedup_remembers_a_bounded_window() {
        let mut d = Dedup::default();
        let (x, forged) = (text_hash("x"), text_hash("forged"));
        assert!(d.first("a", 1, x));
        assert!(!d.first("a", 1, x));
        assert!(d.first("a", 1, forged), "same id, other bytes: not a copy");
        assert!(d.first("b", 1, x));
        for s in 0..DEDUP_MEMORY as u64 {
            d.first("c", s, x);
        }
        assert!(d.first("a", 1, x), "forgotten after the window");
        assert!(d.order.len() <= DEDUP_MEMORY);
    }
}
