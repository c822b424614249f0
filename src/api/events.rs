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

fn event_of(snap: &Snapshot) -> LeaderEvent {
    let now = crate::clock::now();
    LeaderEvent {
        node: snap.view.node_id.clone(),
        leader: current_leader(&snap.view, snap, now),
        term: snap.view.term,
        role: snap.view.role,
    }
}

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
        (rx, None::<LeaderEvent>, slot),
        |(mut rx, last, slot): (
            watch::Receiver<Snapshot>,
            Option<LeaderEvent>,
            OwnedSemaphorePermit,
        )| async move {
            loop {
                if last.is_some() && rx.changed().await.is_err() {
                    return None;
                }
                let ev = event_of(&rx.borrow_and_update());
                if last.as_ref() != Some(&ev) {
                    let data = serde_json::to_string(&ev).unwrap_or_default();
                    let sse = Event::default().event("leader").data(data);
                    return Some((Ok(sse), (rx, Some(ev), slot)));
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(10))))
}
