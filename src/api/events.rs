//! `GET /events`: server-sent events, the current state first, then one event per change of
//! leader, term or role. Each watcher only reads the snapshot channel, so watchers never slow
//! the election loop; a slow watcher simply skips intermediate snapshots.
//!
//! Each stream holds a connection for as long as the watcher likes, so their number has its own
//! cap (`--max-event-subscribers`, below the connection cap): past it the answer is `503
//! too_many_subscribers` with `Retry-After`, and the other endpoints keep their connections.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Serialize;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{current_leader, ApiError, AppState};
use crate::election::Role;
use crate::runtime::Snapshot;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaderEvent {
    node: String,
    leader: Option<String>,
    term: u64,
    role: Role,
}

/// The event for `snap` as of `now`, and when the same snapshot would say something else (the
/// lease or the promise to the leader runs out): a stuck loop publishes no new snapshot, so the
/// stream wakes by itself then, as `/status` and `/role/leader` judge it at every read.
fn event_of(snap: &Snapshot, now: Instant) -> (LeaderEvent, Option<Instant>) {
    let v = &snap.view;
    let event = LeaderEvent {
        node: v.node_id.clone(),
        leader: current_leader(v, now),
        term: v.term,
        role: v.role_at(now),
    };
    (event, v.leader_until.filter(|u| *u > now))
}

/// The event a stream sent last, and when the same snapshot would say something else.
type Sent = (LeaderEvent, Option<Instant>);

/// The subscriber slots; a stream holds one until the watcher goes away.
#[derive(Debug, Clone)]
pub struct Subscribers {
    slots: Arc<Semaphore>,
    max: usize,
}

impl Subscribers {
    pub fn new(max: usize) -> Subscribers {
        Subscribers {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.max - self.slots.available_permits()
    }
}

pub async fn get_events(
    State(s): State<AppState>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let slot = s
        .subscribers
        .slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| {
            s.metrics.refused("event_subscribers");
            ApiError::TooManySubscribers {
                max: s.subscribers.max,
            }
        })?;
    let rx = s.snapshot.clone();
    let stream = futures_util::stream::unfold(
        (rx, None::<Sent>, slot),
        |(mut rx, last, slot): (
            watch::Receiver<Snapshot>,
            Option<Sent>,
            OwnedSemaphorePermit,
        )| async move {
            let mut wake = last.as_ref().and_then(|(_, w)| *w);
            loop {
                if last.is_some() {
                    tokio::select! {
                        changed = rx.changed() => if changed.is_err() {
                            return None;
                        },
                        _ = crate::clock::sleep_until(wake.unwrap_or_else(crate::clock::now)),
                            if wake.is_some() => {}
                    }
                }
                let (ev, next) = event_of(&rx.borrow_and_update(), crate::clock::now());
                wake = next;
                if last.as_ref().map(|(e, _)| e) != Some(&ev) {
                    let data = serde_json::to_string(&ev).unwrap_or_default();
                    let sse = Event::default().event("leader").data(data);
                    return Some((Ok(sse), (rx, Some((ev, next)), slot)));
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(10))))
}
