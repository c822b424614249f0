//! `GET /events`: server-sent events, the current state first, then one event per change of
//! leader, term or role. Each watcher only reads the snapshot channel, so watchers never slow
//! the election loop; a slow watcher simply skips intermediate snapshots.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Serialize;
use tokio::sync::watch;

use super::{current_leader, AppState};
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

pub async fn get_events(
    State(s): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = s.snapshot.clone();
    let stream = futures_util::stream::unfold(
        (rx, None::<LeaderEvent>),
        |(mut rx, last): (watch::Receiver<Snapshot>, Option<LeaderEvent>)| async move {
            loop {
                if last.is_some() && rx.changed().await.is_err() {
                    return None;
                }
                let ev = event_of(&rx.borrow_and_update());
                if last.as_ref() != Some(&ev) {
                    let data = serde_json::to_string(&ev).unwrap_or_default();
                    let sse = Event::default().event("leader").data(data);
                    return Some((Ok(sse), (rx, Some(ev))));
                }
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
}
