//! The Pilot Protocol transport: the election runs over the overlay's event-stream brokers,
//! driven through the real `pilotctl`.
//!
//! Events reach a node only through a live `pilotctl subscribe` (never through `inbox`), so one
//! long-lived subscription per broker is kept running and restarted with capped exponential
//! backoff; readiness follows it. Each message is one `pilotctl publish` per broker, a separate
//! process under a deadline that kills its whole process group. With several brokers every
//! message arrives once per broker, so duplicates are dropped by `(from, seq)`.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{Health, HealthCell, Inbound, Transport};
use crate::metrics::Metrics;
use crate::pilotctl::Pilotctl;

/// Publishes in flight at once (each is a process). Beyond this a message is dropped: the
/// protocol tolerates loss, a fork bomb under a stuck daemon it would not.
const MAX_IN_FLIGHT: usize = 32;
/// Attempts for one message to one broker when the error is worth retrying.
const PUBLISH_ATTEMPTS: u32 = 3;
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(5);
/// A subscription that ran this long counts as healthy again: the next failure starts the
/// backoff from the beginning.
const STABLE_AFTER: Duration = Duration::from_secs(10);
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

impl Dedup {
    /// True the first time a message is offered.
    fn first(&mut self, from: &str, seq: u64, text: &str) -> bool {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(text, &mut h);
        let key = (from.to_string(), seq, std::hash::Hasher::finish(&h));
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

/// Which brokers currently have a running subscription.
struct Links {
    up: Mutex<Vec<bool>>,
    health: HealthCell,
}

impl Links {
    fn set(&self, broker: usize, up: bool, error: Option<String>) {
        let mut g = self.up.lock().unwrap_or_else(|e| e.into_inner());
        g[broker] = up;
        // Ready while at least one broker delivers: every message is published to all of them.
        let any = g.iter().any(|u| *u);
        drop(g);
        self.health.set(any, error);
    }
}

pub struct PilotTransport {
    config: PilotConfig,
    links: Arc<Links>,
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
        let links = Arc::new(Links {
            up: Mutex::new(vec![false; config.brokers.len()]),
            health: HealthCell::new("pilot", false),
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

impl Transport for PilotTransport {
    fn publish(&self, bytes: Arc<[u8]>) {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            self.metrics.publish_failed();
            return;
        };
        let text: Arc<str> = Arc::from(text);
        for broker in &self.config.brokers {
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
            tokio::spawn(async move {
                let _permit = permit;
                publish_one(&ctl, &broker, &topic, &text, &metrics, &links).await;
            });
        }
    }

    fn health(&self) -> Health {
        self.links.health.get()
    }
}

async fn publish_one(
    ctl: &Pilotctl,
    broker: &str,
    topic: &str,
    text: &str,
    metrics: &Metrics,
    links: &Links,
) {
    let mut delay = Duration::from_millis(50);
    for attempt in 1..=PUBLISH_ATTEMPTS {
        let started = crate::clock::now();
        match ctl.publish(broker, topic, text).await {
            Ok(_) => {
                metrics.observe_publish(started.elapsed());
                return;
            }
            Err(e) if e.is_retryable() && attempt < PUBLISH_ATTEMPTS => {
                tracing::debug!(broker, attempt, error = %e, "pilotctl publish failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e) => {
                metrics.publish_failed();
                let text = e.to_string();
                tracing::warn!(broker, error = %text, retryable = e.is_retryable(), "pilotctl publish failed");
                links.health.set(links.health.get().healthy, Some(text));
                return;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn subscribe_loop(
    index: usize,
    broker: String,
    config: PilotConfig,
    inbound: Inbound,
    links: Arc<Links>,
    dedup: Arc<Mutex<Dedup>>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut backoff = BACKOFF_START;
    while !stop.is_cancelled() {
        let started = crate::clock::now();
        let error = match config.pilotctl.subscribe(&broker, &config.topic) {
            Ok(mut sub) => {
                links.set(index, true, None);
                tracing::info!(broker = %broker, topic = %config.topic, pid = sub.pid(), "subscribed");
                let ended = loop {
                    let next = tokio::select! {
                        _ = stop.cancelled() => return,
                        next = sub.next() => next,
                    };
                    match next {
                        Some(Ok(data)) => deliver(data, &inbound, &dedup, &metrics),
                        Some(Err(e)) => break e.to_string(),
                        None => break "subscription ended".to_string(),
                    }
                };
                let skipped = sub.garbage_lines() + sub.oversized_lines();
                if skipped > 0 {
                    tracing::warn!(broker = %broker, skipped, "pilotctl printed lines that were not events");
                }
                ended
            }
            Err(e) => e.to_string(),
        };
        links.set(index, false, Some(format!("{broker}: {error}")));
        metrics.subscription_restarts.inc();
        if started.elapsed() >= STABLE_AFTER {
            backoff = BACKOFF_START;
        }
        tracing::warn!(broker = %broker, error = %error, retry_in_ms = backoff.as_millis() as u64, "subscription lost");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_CAP);
    }
}

fn deliver(data: String, inbound: &Inbound, dedup: &Mutex<Dedup>, metrics: &Metrics) {
    // Duplicates from several brokers are dropped here; anything unparsable goes on to the
    // runtime, which counts it as malformed.
    if let Ok(id) = serde_json::from_str::<Identity>(&data) {
        let fresh = dedup
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .first(&id.from, id.seq, &data);
        if !fresh {
            metrics.received("any", "duplicate");
            return;
        }
    }
    if inbound.try_send(data.into_bytes()).is_err() {
        metrics.received("any", "dropped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedup_remembers_a_bounded_window() {
        let mut d = Dedup::default();
        assert!(d.first("a", 1, "x"));
        assert!(!d.first("a", 1, "x"));
        assert!(
            d.first("a", 1, "forged"),
            "same id, other bytes: not a copy"
        );
        assert!(d.first("b", 1, "x"));
        for s in 0..DEDUP_MEMORY as u64 {
            d.first("c", s, "x");
        }
        assert!(d.first("a", 1, "x"), "forgotten after the window");
        assert!(d.order.len() <= DEDUP_MEMORY);
    }
}
