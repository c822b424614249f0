//! The Pilot Protocol transport: the election runs over the overlay's event-stream brokers,
//! driven through the real `pilotctl`.
//!
//! Events reach a node only through a live `pilotctl subscribe` (never through `inbox`), so one
//! long-lived subscription per broker is kept running and restarted with capped exponential
//! backoff; readiness follows it, and [`broker_link`] explains what each one is doing (a broker
//! that refuses this node, one that dropped it silently, one that is down). Each message is one
//! `pilotctl publish` per broker, a separate process under a deadline that kills its whole
//! process group. With several brokers every message arrives once per broker, so duplicates
//! are dropped by `(from, seq)`; this node's own messages coming back are only used as proof
//! that the subscription works.

mod broker_link;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Health, Inbound, Links, Transport};
use crate::backoff::Backoff;
use crate::metrics::{MessageType, Metrics, Received};
use crate::pilotctl::Pilotctl;
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

/// Where and how to reach the overlay.
#[derive(Debug, Clone)]
pub struct PilotConfig {
    pub pilotctl: Pilotctl,
    /// Broker nodes (hostnames or addresses); every message goes to each of them.
    pub brokers: Vec<String>,
    /// `election:<group>`.
    pub topic: String,
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
    metrics: Arc<Metrics>,
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
            last_error: Mutex::new(None),
            metrics: metrics.clone(),
        });
        let dedup = Arc::new(Mutex::new(Dedup::default()));
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
            metrics,
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
                tracing::warn!(broker = %broker, "too many pilotctl publishes in flight; dropped one");
                continue;
            };
            let ctl = self.config.pilotctl.clone();
            let topic = self.config.topic.clone();
            let broker = broker.clone();
            let text = text.clone();
            let metrics = self.metrics.clone();
            let links = self.links.clone();
            let sent_at = crate::clock::now();
            links.update(index, |l| l.publishing(sent_at, hash));
            tokio::spawn(async move {
                let _permit = permit;
                let ok = publish_one(&ctl, &broker, &topic, &text, &metrics, &links).await;
                if let Some(sent_at) = ok {
                    links.update(index, |l| l.published(hash, sent_at));
                }
            });
        }
    }

    /// Every publish holds a permit of `in_flight` until its `pilotctl publish` is done.
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
        let ending = match config.pilotctl.subscribe(&broker, &config.topic) {
            Ok(mut sub) => {
                links.update(index, |l| l.started(crate::clock::now()));
                tracing::debug!(broker = %broker, topic = %config.topic, pid = sub.pid(), "pilotctl subscribe started");
                let ending = loop {
                    let next = tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tick.tick() => {
                            let (restart, notes) = links.update(index, |l| l.tick(crate::clock::now()));
                            log(notes, &broker);
                            if restart {
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
                let skipped = sub.garbage_lines() + sub.oversized_lines();
                if skipped > 0 {
                    tracing::warn!(broker = %broker, skipped, "pilotctl printed lines that were not events");
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
