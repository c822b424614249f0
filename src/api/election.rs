//! The elections the API answers for, and the extractor that resolves a request to one.
//!
//! Every per-election route is written once and resolved through [`Group`]: a route of today's
//! single election (`/leader`, `/step-down`, ...) answers for the node's default group, so that
//! every existing URL keeps its meaning whatever else the node runs.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use tokio::sync::{mpsc, watch};

use super::{ApiError, AppState, EventLog};
use crate::election::{CommandError, Input, Outcome};
use crate::runtime::{Command, MaintenanceRequest, Snapshot};

/// One election as the API reaches it: what its routes read and where its commands go.
pub struct ElectionApi {
    /// Its group's name.
    pub group: String,
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    pub commands: mpsc::Sender<Command>,
    /// Step-downs scheduled for later.
    pub scheduler: crate::scheduled::Scheduler,
    /// `POST /pause` and `DELETE /pause` to the election loop.
    pub maintenance: mpsc::Sender<MaintenanceRequest>,
    /// The log the `/events` streams send from.
    pub events: EventSource,
    /// The `--on-change` hook, for `/status`; `None` without one.
    pub hooks: Option<crate::hooks::HooksHandle>,
    /// The `--health-cmd`/`--health-url` checks, for `/status`; `None` without them.
    pub health: Option<crate::health_check::HealthHandle>,
    /// The observers this member knows of (`/status`, the metric); an `/events` stream that
    /// names its observer is recorded here while it is open.
    pub observers: crate::observer_table::Observers,
    /// The confirmation rounds its consistent reads share.
    pub reads: super::consistent::ReadRounds,
    /// The holds of its leader-only jobs (`pilot-election once`).
    pub holds: crate::jobs::Holds,
    /// Its `--schedule`, for `/status` and `/history`; `None` without one.
    pub schedule: Option<crate::schedule::ScheduleHandle>,
}

impl ElectionApi {
    /// The latest snapshot, out of the channel (one reference count): no reader holds the
    /// channel's lock while it answers.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }

    /// Judges the latest snapshot, then each new one, until `judge` settles (`Some`) or
    /// `deadline` passes: the verdict, or `Err` with the last snapshot judged. A loop that
    /// stopped settles it as [`ApiError::LoopStopped`].
    pub async fn settle<T>(
        &self,
        deadline: tokio::time::Instant,
        mut judge: impl FnMut(&Arc<Snapshot>) -> Option<Result<T, ApiError>>,
    ) -> Result<Result<T, ApiError>, Arc<Snapshot>> {
        let mut snapshots = self.snapshot.clone();
        loop {
            let snap = snapshots.borrow_and_update().clone();
            if let Some(verdict) = judge(&snap) {
                return Ok(verdict);
            }
            tokio::select! {
                changed = snapshots.changed() => {
                    if changed.is_err() {
                        return Ok(Err(ApiError::LoopStopped));
                    }
                }
                () = crate::clock::sleep_until(deadline) => return Err(snap),
            }
        }
    }

    /// Sends a command and waits for the loop's answer (a handover first waits for the holds of
    /// leader-only jobs, [`crate::jobs::command`]).
    pub async fn command(&self, input: Input) -> Result<Result<Outcome, CommandError>, ApiError> {
        let snap = self.snapshot();
        let sent = crate::jobs::command(&self.commands, &self.holds, &snap.view, input);
        // The holds wait at most their time to live; the loop answers within 5 s.
        let within = Duration::from_secs(5) + crate::jobs::ttl(&snap.timings);
        tokio::time::timeout(within, sent)
            .await
            .map_err(|_| ApiError::LoopStopped)?
            .ok_or(ApiError::LoopStopped)
    }
}

/// Where an election's `/events` streams read from: its event log, started with the election
/// (the default group) or by the first stream that asks (every other group: the log of a group
/// nobody watches would wake at every step of its election, and a thousand of them cost a
/// node more than the elections themselves). A log started late has nothing a watcher could
/// have missed: nobody held an event id of it before.
pub struct EventSource {
    log: std::sync::OnceLock<watch::Receiver<Arc<EventLog>>>,
    snapshot: watch::Receiver<Arc<Snapshot>>,
    /// The run id its event ids carry.
    run: String,
}

impl EventSource {
    /// A log started now.
    pub fn eager(snapshot: watch::Receiver<Arc<Snapshot>>, run: String) -> EventSource {
        let s = EventSource::lazy(snapshot, run);
        s.log();
        s
    }

    /// A log started by the first stream.
    pub fn lazy(snapshot: watch::Receiver<Arc<Snapshot>>, run: String) -> EventSource {
        EventSource {
            log: std::sync::OnceLock::new(),
            snapshot,
            run,
        }
    }

    /// The log, started if it was not.
    pub fn log(&self) -> watch::Receiver<Arc<EventLog>> {
        self.log
            .get_or_init(|| super::start_event_log(self.snapshot.clone(), self.run.clone()))
            .clone()
    }
}

/// Every election of the node, by group, and the one today's routes answer for. Groups come
/// and go while the node runs (`POST /groups`, `DELETE /groups/{group}`); the default one stays.
pub struct Elections {
    default: Arc<ElectionApi>,
    by_group: RwLock<BTreeMap<String, Arc<ElectionApi>>>,
    /// Counts the additions and removals, so that a stream of many groups (`GET
    /// /events?groups=`) notices them.
    changes: watch::Sender<u64>,
}

impl Elections {
    /// The node's elections: `default`'s and `others`.
    pub fn new(default: ElectionApi, others: Vec<ElectionApi>) -> Elections {
        let default = Arc::new(default);
        let mut by_group = BTreeMap::from([(default.group.clone(), default.clone())]);
        by_group.extend(others.into_iter().map(|e| (e.group.clone(), Arc::new(e))));
        Elections {
            default,
            by_group: RwLock::new(by_group),
            changes: watch::Sender::new(0),
        }
    }

    /// The election of the routes that name no group.
    pub fn default(&self) -> &Arc<ElectionApi> {
        &self.default
    }

    /// The name of the default group.
    pub fn default_group(&self) -> &str {
        &self.default.group
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<ElectionApi>>> {
        self.by_group.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<ElectionApi>>> {
        self.by_group.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The election of `group`, if this node takes part in it.
    pub fn get(&self, group: &str) -> Option<Arc<ElectionApi>> {
        self.read().get(group).cloned()
    }

    /// Every election, by group name, as of now.
    pub fn all(&self) -> Vec<Arc<ElectionApi>> {
        self.read().values().cloned().collect()
    }

    pub(super) fn insert(&self, election: Arc<ElectionApi>) {
        self.write().insert(election.group.clone(), election);
        self.changes.send_modify(|n| *n += 1);
    }

    pub(super) fn remove(&self, group: &str) {
        self.write().remove(group);
        self.changes.send_modify(|n| *n += 1);
    }

    /// Changes each time a group is added or removed.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// Why a group could not be added or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRefusal {
    /// The node takes part in it already.
    Exists(String),
    /// The node is at `--max-groups`.
    TooMany { max: usize },
    /// It is given by `--group` (or is the default group): the configuration decides it.
    Configured(String),
    /// The node takes no part in it.
    Unknown(String),
    /// The change could not be kept on disk, so it was not made.
    Storage(String),
    /// The election loop is not running.
    Stopped,
}

/// A future of a group change.
pub type GroupFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, GroupRefusal>> + Send + 'a>>;

/// Adds and removes the elections of a running node. The builder provides it (it knows how an
/// election is made: the configuration, the store, the loop); the API only asks.
pub trait GroupControl: Send + Sync {
    /// Takes part in `group`'s election from now on, and keeps that across restarts.
    fn add<'a>(&'a self, group: &'a str) -> GroupFuture<'a, ElectionApi>;
    /// Leaves `group`'s election (a leader resigns first) and keeps that across restarts.
    fn remove<'a>(&'a self, group: &'a str) -> GroupFuture<'a, ()>;
}

/// Where the per-election routes of a named group are mounted: `/groups/{group}/leader` is
/// `/leader` of that group.
pub const GROUP_PREFIX: &str = "/groups/{group}";

/// The election a request is for: the group a `/groups/{group}/...` path names, or the
/// default group for the routes that name none. A name that breaks the rule of group names is
/// a 400 (`invalid_group`), a group this node takes no part in a 404 (`unknown_group`).
pub struct Group(pub Arc<ElectionApi>);

impl FromRequestParts<AppState> for Group {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Group, ApiError> {
        let Some(rest) = parts.uri.path().strip_prefix("/groups/") else {
            return Ok(Group(s.elections.default().clone()));
        };
        // Read from the path itself rather than the router's captures: a percent-encoded name
        // stays encoded here, and no valid name has a '%'.
        let name = rest.split('/').next().unwrap_or_default();
        crate::group::GroupName::new(name).map_err(|e| ApiError::InvalidGroup(e.to_string()))?;
        s.elections
            .get(name)
            .map(Group)
            .ok_or_else(|| ApiError::UnknownGroup(name.to_string()))
    }
}

impl std::ops::Deref for Group {
    type Target = ElectionApi;

    fn deref(&self) -> &ElectionApi {
        &self.0
    }
}
