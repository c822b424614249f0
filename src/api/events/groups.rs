//! `GET /events?groups=a,b` (or `groups=all`): the leader events of many groups on one
//! connection, so that a dashboard or an agent watching a thousand shards holds one stream,
//! not a thousand (docs/groups.md, "Watching many groups").
//!
//! Each `leader` event is the one the group's own stream sends, with its `group` added. A
//! stream starts with the current state of every group it follows, and says `removed` when a
//! group it follows is removed; with `all` it takes in every group added while it is open, with
//! its current state first. It does not resume by `Last-Event-ID` (one id cannot hold a place
//! in a thousand logs): a watcher that reconnects gets every group's current state again, and
//! what happened in between is in each group's `/history`. Every group's events are read from
//! that group's event log, never from the election loop, as on a single group's stream.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::Query;
use axum::http::Uri;
use axum::response::sse::Event;
use futures_util::stream::{BoxStream, SelectAll};
use futures_util::{Stream, StreamExt};
use serde::Serialize;
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::{EventLog, LeaderEvent};
use crate::api::{ApiError, AppState, ElectionApi};
use crate::group::GroupName;

/// The groups a stream follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// Every group of the node, those added while the stream is open too.
    All,
    /// These, each of which the node must take part in when the stream opens.
    Names(BTreeSet<String>),
}

impl Wanted {
    /// The `groups` parameters of the query (`None`: there is none): `all`, or group names
    /// separated by commas; several parameters add up.
    pub fn from_query(uri: &Uri) -> Result<Option<Wanted>, ApiError> {
        let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map_err(|e| ApiError::InvalidQuery(format!("the query does not parse: {e}")))?;
        let values: Vec<&str> = pairs
            .iter()
            .filter(|(k, _)| k == "groups")
            .map(|(_, v)| v.as_str())
            .collect();
        if values.is_empty() {
            return Ok(None);
        }
        let mut names = BTreeSet::new();
        let mut all = false;
        for name in values.iter().flat_map(|v| v.split(',')).map(str::trim) {
            match name {
                "" => {}
                "all" => all = true,
                _ => {
                    GroupName::new(name).map_err(|e| ApiError::InvalidGroup(e.to_string()))?;
                    names.insert(name.to_string());
                }
            }
        }
        match (all, names.is_empty()) {
            (true, true) => Ok(Some(Wanted::All)),
            (true, false) => Err(ApiError::InvalidQuery(
                "groups: give `all` or group names, not both".into(),
            )),
            (false, true) => Err(ApiError::InvalidQuery(
                "groups: give `all` or one or more group names, separated by commas".into(),
            )),
            (false, false) => Ok(Some(Wanted::Names(names))),
        }
    }

    fn includes(&self, group: &str) -> bool {
        match self {
            Wanted::All => true,
            Wanted::Names(names) => names.contains(group),
        }
    }
}

/// A `leader` event of a stream of many groups: the group's own event and its name.
#[derive(Serialize)]
struct GroupEvent<'a> {
    group: &'a str,
    #[serde(flatten)]
    event: &'a LeaderEvent,
}

#[derive(Serialize)]
struct Removed<'a> {
    group: &'a str,
}

fn leader_event(group: &str, event: &LeaderEvent) -> Event {
    let data = serde_json::to_string(&GroupEvent { group, event }).unwrap_or_default();
    Event::default().event("leader").data(data)
}

fn removed_event(group: &str) -> Event {
    let data = serde_json::to_string(&Removed { group }).unwrap_or_default();
    Event::default().event("removed").data(data)
}

/// One group's events, from its current state on, until `stop`.
fn follow(e: &ElectionApi, stop: CancellationToken) -> BoxStream<'static, Event> {
    let group = e.group.clone();
    let mut events = e.events.log();
    let log = events.borrow_and_update().clone();
    let latest = log.latest().clone();
    let first = leader_event(&group, &latest.event);
    let state = (events, latest.seq, group, VecDeque::from([first]));
    let stream =
        futures_util::stream::unfold(state, |(mut events, mut cursor, group, mut queue)| {
            async move {
                loop {
                    if let Some(ev) = queue.pop_front() {
                        return Some((ev, (events, cursor, group, queue)));
                    }
                    if events.changed().await.is_err() {
                        return None;
                    }
                    let log: Arc<EventLog> = events.borrow_and_update().clone();
                    match log.after(cursor) {
                        Some(new) => {
                            queue.extend(new.iter().map(|l| leader_event(&group, &l.event)))
                        }
                        // Behind the whole log: the current state (the rest is in `/history`).
                        None => queue.push_back(leader_event(&group, &log.latest().event)),
                    }
                    cursor = log.latest().seq;
                }
            }
        });
    stream.take_until(stop.cancelled_owned()).boxed()
}

/// One stream's place among the groups.
struct Watcher {
    state: AppState,
    wanted: Wanted,
    changes: watch::Receiver<u64>,
    /// The groups followed now, each with the election followed (a group removed and added
    /// again is a new one) and what stops its part of the stream.
    followed: BTreeMap<String, (Arc<ElectionApi>, CancellationToken)>,
    streams: SelectAll<BoxStream<'static, Event>>,
    queue: VecDeque<Event>,
    _slot: OwnedSemaphorePermit,
}

impl Watcher {
    /// Follows the groups that are wanted and present, and says `removed` for those that went.
    fn rescan(&mut self) {
        let now: BTreeMap<String, Arc<ElectionApi>> = self
            .state
            .elections
            .all()
            .into_iter()
            .filter(|e| self.wanted.includes(&e.group))
            .map(|e| (e.group.clone(), e))
            .collect();
        let gone: Vec<String> = self
            .followed
            .iter()
            .filter(|(g, (e, _))| now.get(*g).is_none_or(|n| !Arc::ptr_eq(n, e)))
            .map(|(g, _)| g.clone())
            .collect();
        for g in gone {
            if let Some((_, stop)) = self.followed.remove(&g) {
                stop.cancel();
            }
            if !now.contains_key(&g) {
                self.queue.push_back(removed_event(&g));
            }
        }
        for (g, e) in now {
            if self.followed.contains_key(&g) {
                continue;
            }
            let stop = CancellationToken::new();
            self.streams.push(follow(&e, stop.clone()));
            self.followed.insert(g, (e, stop));
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        for (_, stop) in self.followed.values() {
            stop.cancel();
        }
    }
}

/// The stream for `wanted`: `404 unknown_group` if a group it names is not one of this
/// node's when it opens.
pub fn stream(
    state: AppState,
    wanted: Wanted,
    slot: OwnedSemaphorePermit,
) -> Result<impl Stream<Item = Result<Event, Infallible>>, ApiError> {
    if let Wanted::Names(names) = &wanted {
        if let Some(missing) = names.iter().find(|g| state.elections.get(g).is_none()) {
            return Err(ApiError::UnknownGroup(missing.clone()));
        }
    }
    let changes = state.elections.changes();
    let mut w = Watcher {
        state,
        wanted,
        changes,
        followed: BTreeMap::new(),
        streams: SelectAll::new(),
        queue: VecDeque::new(),
        _slot: slot,
    };
    w.changes.borrow_and_update();
    w.rescan();
    Ok(futures_util::stream::unfold(w, |mut w| async move {
        loop {
            if let Some(ev) = w.queue.pop_front() {
                return Some((Ok(ev), w));
            }
            tokio::select! {
                ev = w.streams.next(), if !w.streams.is_empty() => {
                    if let Some(ev) = ev {
                        w.queue.push_back(ev);
                    }
                }
                changed = w.changes.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    w.changes.borrow_and_update();
                    w.rescan();
                }
            }
        }
    }))
}
