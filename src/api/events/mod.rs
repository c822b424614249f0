//! `GET /events`: server-sent events, the current state first, then one event per change of
//! leader, term or role, each with an id. Watchers read the event log ([`log`]), never the
//! election loop, so they cannot slow it; a watcher that reconnects with `Last-Event-ID` gets
//! what it missed from the log, or from the history when the log cannot say (docs/clients.md).
//!
//! Each stream holds a connection for as long as the watcher likes, so their number has its own
//! cap (`--max-event-subscribers`, below the connection cap): past it the answer is `503
//! too_many_subscribers` with `Retry-After`, and the other endpoints keep their connections.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use futures_util::stream::{BoxStream, StreamExt};
use serde::Serialize;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::{ApiError, AppState, Group};
use crate::runtime::Snapshot;
use crate::store::HistoryEntry;

mod groups;
mod log;
pub use log::{start as start_log, EventLog, LastId, LeaderEvent, Logged};

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

/// The events of one group, or of many on one connection (`?groups=`, [`groups`]).
type Events = BoxStream<'static, Result<Event, Infallible>>;

pub async fn get_events(
    State(s): State<AppState>,
    e: Group,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Sse<KeepAliveStream<Events>>, ApiError> {
    let wanted = groups::Wanted::from_query(&uri)?;
    if wanted.is_some() && uri.path().starts_with("/groups/") {
        return Err(ApiError::InvalidQuery(
            "groups: only GET /events follows many groups; /groups/{group}/events follows one"
                .into(),
        ));
    }
    let slot = s
        .subscribers
        .slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| {
            s.metrics.refused(crate::metrics::Refused::EventSubscribers);
            ApiError::TooManySubscribers {
                max: s.subscribers.max,
            }
        })?;
    if let Some(wanted) = wanted {
        let stream = groups::stream(s.clone(), wanted, slot)?.boxed();
        return Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)));
    }
    // An observer (`run --observe`) says who it is: recorded while its stream is open, and
    // kept alive every second so that it notices a silent member within its 3 s bound.
    let observer = headers
        .get(OBSERVER_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|id| crate::observer_table::valid_name(id))
        .map(|id| ObserverStream::open(e.observers.clone(), id));
    let keep_alive = match observer {
        Some(_) => OBSERVER_KEEP_ALIVE,
        None => KEEP_ALIVE,
    };
    let last_id = headers
        .get("last-event-id")
        .map(|v| LastId::parse(v.to_str().unwrap_or_default()));
    let mut events = e.events.log();
    let log = events.borrow_and_update().clone();
    let latest = log.latest().clone();
    let mut queue = VecDeque::new();
    match &last_id {
        None => queue.push_back(leader_event(&log, &latest)),
        Some(id) => match log.resumes(id).and_then(|seq| log.after(seq)) {
            Some(missed) => queue.extend(missed.iter().map(|l| leader_event(&log, l))),
            None => queue.push_back(snapshot_event(&log, &e.snapshot(), id.term)),
        },
    }
    let watcher = Watcher {
        events,
        snapshots: e.snapshot.clone(),
        cursor: latest.seq,
        term: latest.event.term,
        queue,
        _slot: slot,
        _observer: observer,
    };
    let stream = futures_util::stream::unfold(watcher, |mut w| async move {
        loop {
            if let Some(event) = w.queue.pop_front() {
                return Some((Ok(event), w));
            }
            if w.events.changed().await.is_err() {
                return None;
            }
            let log = w.events.borrow_and_update().clone();
            match log.after(w.cursor) {
                Some(new) => w.queue.extend(new.iter().map(|l| leader_event(&log, l))),
                // This watcher fell behind the whole log: what it missed, from the history.
                None => {
                    let snap = w.snapshots.borrow().clone();
                    w.queue.push_back(snapshot_event(&log, &snap, Some(w.term)));
                }
            }
            let latest = log.latest();
            (w.cursor, w.term) = (latest.seq, latest.event.term);
        }
    });
    Ok(Sse::new(stream.boxed()).keep_alive(KeepAlive::new().interval(keep_alive)))
}

/// The header an observer's `/events` request names it in (docs/clients.md, "Observers").
pub const OBSERVER_HEADER: &str = "x-pilot-election-observer";
/// A keep-alive comment this often on an ordinary stream.
const KEEP_ALIVE: Duration = Duration::from_secs(10);
/// And on an observer's, which takes a member silent for 3 s as gone.
const OBSERVER_KEEP_ALIVE: Duration = Duration::from_secs(1);

/// An observer's stream, in the member's table while it is open.
struct ObserverStream {
    table: crate::observer_table::Observers,
    id: String,
}

impl ObserverStream {
    fn open(table: crate::observer_table::Observers, id: &str) -> ObserverStream {
        table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .opened(crate::clock::now(), id);
        ObserverStream {
            table,
            id: id.to_string(),
        }
    }
}

impl Drop for ObserverStream {
    fn drop(&mut self) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed(crate::clock::now(), &self.id);
    }
}

/// One stream's place in the log.
struct Watcher {
    events: watch::Receiver<Arc<EventLog>>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    /// The last event sent (or skipped as already known).
    cursor: u64,
    term: u64,
    queue: VecDeque<Event>,
    _slot: OwnedSemaphorePermit,
    _observer: Option<ObserverStream>,
}

fn leader_event(log: &EventLog, l: &Logged) -> Event {
    let data = serde_json::to_string(&l.event).unwrap_or_default();
    Event::default().event("leader").id(log.id(l)).data(data)
}

/// What a watcher that cannot resume here is told: the current state, and every transition of
/// this node's history from the term it last heard of (all of them when it said none).
#[derive(Serialize)]
struct SnapshotBody<'a> {
    #[serde(flatten)]
    event: &'a LeaderEvent,
    resumed: bool,
    missed: Vec<&'a HistoryEntry>,
}

fn snapshot_event(log: &EventLog, snap: &Snapshot, since: Option<u64>) -> Event {
    let latest = log.latest();
    let body = SnapshotBody {
        event: &latest.event,
        resumed: false,
        missed: snap
            .history
            .iter()
            .filter(|h| since.is_none_or(|t| h.term >= t))
            .collect(),
    };
    let data = serde_json::to_string(&body).unwrap_or_default();
    Event::default()
        .event("snapshot")
        .id(log.id(latest))
        .data(data)
}
