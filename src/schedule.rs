//! Leader-only jobs on a schedule (`run --schedule CRON -- CMD`): each firing of the schedule
//! runs CMD on the leader of the election, at most once across the cluster, or is reported
//! missed (docs/guide/jobs.md; the rule and its safety argument: docs/protocol.md, rule 19).
//!
//! The leader claims a firing by writing a record of it (its instant, the term) that every
//! member keeps on disk and sends on every message ([`crate::election::firing`]), and starts the
//! command only once a quorum has acknowledged the record in its term: a leader of any later
//! term hears of it in its own election and never claims it again. The command runs under a
//! hold of the election ([`crate::jobs`]), so every handover waits for it and it is stopped
//! before the lease that let it start can run out. Its outcome is written the same way.
//!
//! A firing that falls into a failover runs on the new leader if its grace (`--schedule-grace`)
//! has not passed; older firings that nobody ran are reported missed, never run late in a burst.
//! A leader that finds another's claim without an outcome reports that firing interrupted: it
//! may have run, once.

mod cron;

use std::collections::VecDeque;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use cron::Cron;

use crate::clock;
use crate::clock::wall::{rfc3339, unix_ms_now};
use crate::election::firing::{Firing, FiringState};
use crate::group::GroupSelection;
use crate::jobs::{run_held, End, HoldBody, Holds, Renewal};
use crate::metrics::{FiringOutcome, Metrics};
use crate::process_group::ProcessGroup;
use crate::runtime::{FiringRequest, Snapshot};
use crate::store::Store;

/// Finished firings kept for `/status` and `/history`.
pub const LOG_LIMIT: usize = 100;

/// The most firings counted one by one when reporting those nobody ran (a per-second schedule
/// after a day without a leader); beyond it the count says "at least".
const COUNT_LIMIT: u64 = 1_000_000;

/// `--schedule`, `--schedule-grace` and the command.
#[derive(Debug, Clone)]
pub struct ScheduleConfig {
    pub cron: Cron,
    /// The command and its arguments, run without a shell.
    pub command: Vec<OsString>,
    /// How late a firing may still start (after a failover, say); older ones are missed.
    pub grace: Duration,
    /// `--schedule-groups`: the elections whose leader runs it, each on its own firings.
    pub groups: GroupSelection,
}

impl ScheduleConfig {
    /// The command as `/status` shows it.
    fn shown(&self) -> String {
        let words: Vec<_> = self.command.iter().map(|w| w.to_string_lossy()).collect();
        words.join(" ")
    }
}

/// What happened to one firing, as this node saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finished {
    /// The firing's instant, RFC 3339.
    pub firing: String,
    pub outcome: String,
    pub term: u64,
    /// The command's exit code (absent when it did not exit by itself).
    pub code: Option<i32>,
    /// For `missed`: how many firings, the last of them this one.
    pub count: u64,
    /// When this node learned the outcome, RFC 3339.
    pub at: String,
    /// What happened, in words.
    pub detail: String,
}

/// The command of a firing running now.
#[derive(Debug, Clone, Serialize)]
pub struct Running {
    pub firing: String,
    pub term: u64,
    pub pid: u32,
    /// RFC 3339.
    pub since: String,
}

#[derive(Debug, Default)]
struct Log {
    running: Option<Running>,
    finished: VecDeque<Finished>,
}

/// How the API reads one election's schedule.
#[derive(Clone)]
pub struct ScheduleHandle {
    config: Arc<ScheduleConfig>,
    log: Arc<Mutex<Log>>,
}

/// `/status`'s `schedule`.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleStatus {
    pub cron: String,
    pub command: String,
    pub grace_ms: u64,
    /// The next firing, RFC 3339.
    pub next: Option<String>,
    pub running: Option<Running>,
    /// The newest firing record this node holds (every member converges on the same one).
    pub record: Option<RecordBody>,
    /// The members that acknowledged that record in this node's term (this node first).
    pub held_by: Vec<String>,
    /// The firings this node accounted for, newest last (at most [`LOG_LIMIT`]).
    pub finished: Vec<Finished>,
}

/// A firing record as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RecordBody {
    pub firing: String,
    pub state: FiringState,
    pub term: u64,
    pub by: String,
    pub code: Option<i32>,
    pub missed: u64,
}

impl RecordBody {
    fn of(f: &Firing) -> RecordBody {
        RecordBody {
            firing: rfc3339(f.at * 1000),
            state: f.state,
            term: f.term,
            by: f.by.clone(),
            code: f.code,
            missed: f.missed,
        }
    }
}

impl ScheduleHandle {
    pub fn status(&self, snap: &Snapshot) -> ScheduleStatus {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        ScheduleStatus {
            cron: self.config.cron.to_string(),
            command: self.config.shown(),
            grace_ms: self.config.grace.as_millis() as u64,
            next: (self.config.cron)
                .next_after(unix_ms_now() / 1000)
                .map(|s| rfc3339(s * 1000)),
            running: log.running.clone(),
            record: snap.firing.as_ref().map(RecordBody::of),
            held_by: snap.firing_held_by.clone(),
            finished: log.finished.iter().cloned().collect(),
        }
    }

    /// The finished firings, newest last.
    pub fn finished(&self) -> Vec<Finished> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.finished.iter().cloned().collect()
    }
}

/// One election's schedule: the task that claims and runs its firings.
pub struct Schedule {
    handle: ScheduleHandle,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Schedule {
    pub fn start(
        config: Arc<ScheduleConfig>,
        election: Election,
        metrics: Arc<Metrics>,
    ) -> Schedule {
        let finished = election
            .store
            .firing_log::<Finished>()
            .into_iter()
            .collect();
        let handle = ScheduleHandle {
            config,
            log: Arc::new(Mutex::new(Log {
                running: None,
                finished,
            })),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(
            Runner {
                handle: handle.clone(),
                election,
                metrics,
                stop: stop.clone(),
            }
            .run(),
        );
        Schedule { handle, stop, task }
    }

    pub fn handle(&self) -> ScheduleHandle {
        self.handle.clone()
    }

    /// Claims nothing more from now on; a command running now ends with its hold (the exit
    /// drains the holds).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// [`Schedule::stop`], then waits for the task, its last outcome written.
    pub async fn finish(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// What the schedule of one election reaches.
pub struct Election {
    pub group: String,
    pub node_id: String,
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    pub writes: mpsc::Sender<FiringRequest>,
    pub holds: Holds,
    /// Its directory: the firings this node accounted for are kept there (`/history`).
    pub store: Store,
    /// How long a claim may wait for a quorum before it is given up (the election timeout).
    pub confirm_within: Duration,
}

struct Runner {
    handle: ScheduleHandle,
    election: Election,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
}

/// What the leader does next.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Nothing is due before `at` (unix seconds).
    Wait(u64),
    /// Another leader's claim has no outcome: report it interrupted.
    Interrupted(Firing),
    /// Firing `at` is due within its grace: claim it, the `missed` before it reported missed.
    Claim { at: u64, missed: u64 },
    /// Firing `at` and the `missed - 1` before it are past their grace.
    Missed { at: u64, missed: u64 },
}

/// What is due at `now` (unix seconds) after `record`: the decision of a leader in `term`.
fn next(cron: &Cron, grace: u64, record: Option<&Firing>, now: u64) -> Next {
    if let Some(r) = record.filter(|r| r.state == FiringState::Claimed) {
        return Next::Interrupted(r.clone());
    }
    // Before the first record, nothing counts as missed: only a firing within its grace runs.
    let after = match record {
        Some(r) => r.at,
        None => now.saturating_sub(grace + 1),
    };
    let mut newest = None;
    let mut due = 0u64;
    let mut t = after;
    #[allow(clippy::while_let_loop)]
    while let Some(f) = cron.next_after(t).filter(|f| *f <= now) {
        newest = Some(f);
        due += 1;
        t = f;
        if due >= COUNT_LIMIT {
            // The count is a floor from here; the newest is looked for in the last day only.
            if let Some(last) = previous(cron, now + 1).filter(|last| *last >= t) {
                newest = Some(last);
            }
            break;
        }
    }
    let Some(at) = newest else {
        return Next::Wait(cron.next_after(now.max(after)).unwrap_or(u64::MAX));
    };
    let skipped = if record.is_some() { due - 1 } else { 0 };
    if now - at <= grace {
        Next::Claim {
            at,
            missed: skipped,
        }
    } else {
        Next::Missed {
            at,
            missed: skipped + 1,
        }
    }
}

/// The last firing in `(t, now]`.
/// The last firing before `at` within two days, or `None`. Looked for in windows that grow
/// from a minute, so that a schedule of every second costs a minute's firings, not two days'
/// (a window with no firing costs one step).
fn previous(cron: &Cron, at: u64) -> Option<u64> {
    let mut window = 60;
    loop {
        if let Some(f) = last_before(cron, at.saturating_sub(window + 1), at.saturating_sub(1)) {
            return Some(f);
        }
        if window >= PREVIOUS_WITHIN || window >= at {
            return None;
        }
        window = (window * 16).min(PREVIOUS_WITHIN);
    }
}

/// How far back [`previous`] looks.
const PREVIOUS_WITHIN: u64 = 2 * 86_400;

fn last_before(cron: &Cron, mut t: u64, now: u64) -> Option<u64> {
    let mut last = None;
    while let Some(f) = cron.next_after(t).filter(|f| *f <= now) {
        last = Some(f);
        t = f;
    }
    last
}

impl Runner {
    async fn run(mut self) {
        let grace = self.handle.config.grace.as_secs();
        loop {
            // Lead first.
            let Some(snap) = self.leading().await else {
                return;
            };
            let term = snap.view.term;
            let now = unix_ms_now() / 1000;
            let cron = &self.handle.config.cron;
            match next(cron, grace, snap.firing.as_ref(), now) {
                Next::Wait(at) => self.wait_for(at, term).await,
                // Reported before the record that settles it is written: once every member
                // holds that record, no later leader reports it again, so the report must
                // already be on this node's disk.
                Next::Interrupted(r) => {
                    if r.missed > 0 {
                        self.report_missed_before(r.at, r.missed, term).await;
                    }
                    let detail = format!(
                        "claimed by {} in term {} with no outcome: it may have run, once",
                        r.by, r.term
                    );
                    self.report(r.at, FiringOutcome::Interrupted, term, None, 1, detail)
                        .await;
                    let write = self.record(r.at, FiringState::Interrupted, term, None, 0);
                    self.write(write).await;
                }
                Next::Missed { at, missed } => {
                    let detail = format!(
                        "{missed} firing(s) up to this one had no leader within their grace"
                    );
                    self.report(at, FiringOutcome::Missed, term, None, missed, detail)
                        .await;
                    let write = self.record(at, FiringState::Missed, term, None, missed);
                    self.write(write).await;
                }
                Next::Claim { at, missed } => self.fire(at, missed, term).await,
            }
            if self.stop.is_cancelled() {
                return;
            }
        }
    }

    /// The snapshot once this node leads (`None`: stopped, or the election is gone).
    async fn leading(&mut self) -> Option<Arc<Snapshot>> {
        loop {
            let snap = self.election.snapshot.borrow_and_update().clone();
            let now = clock::now();
            if snap.view.is_leader_at(now) {
                return Some(snap);
            }
            tokio::select! {
                _ = self.stop.cancelled() => return None,
                changed = self.election.snapshot.changed() => changed.ok()?,
            }
        }
    }

    /// Until wall-clock second `at`, or until leadership of `term` ends (re-checked every
    /// second, so a wall clock set forward fires within a second of its firing).
    async fn wait_for(&mut self, at: u64, term: u64) {
        loop {
            let now_ms = unix_ms_now();
            if now_ms >= at.saturating_mul(1000) {
                return;
            }
            let left = Duration::from_millis((at * 1000 - now_ms).min(1000));
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = clock::sleep_until(clock::now() + left) => {}
                changed = self.election.snapshot.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let snap = self.election.snapshot.borrow_and_update().clone();
                    if snap.view.term != term || !snap.view.is_leader_at(clock::now()) {
                        return;
                    }
                }
            }
        }
    }

    fn record(
        &self,
        at: u64,
        state: FiringState,
        term: u64,
        code: Option<i32>,
        missed: u64,
    ) -> Firing {
        Firing {
            at,
            state,
            term,
            by: self.election.node_id.clone(),
            code,
            missed,
        }
    }

    /// Keeps `write` through the election loop (on disk, then on every message); false if it
    /// could not be kept.
    async fn write(&self, write: Firing) -> bool {
        let (reply, answer) = oneshot::channel();
        if self
            .election
            .writes
            .send(FiringRequest { write, reply })
            .await
            .is_err()
        {
            return false;
        }
        match answer.await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::error!(error = %e, group = %self.election.group,
                    "could not keep a scheduled firing's record on disk: the firing does not run");
                // Not at once again: the disk may need a moment.
                clock::sleep_until(clock::now() + Duration::from_secs(1)).await;
                false
            }
            Err(_) => false,
        }
    }

    /// Claims firing `at`, waits for a quorum to hold the claim, then runs the command under a
    /// hold and writes its outcome.
    async fn fire(&mut self, at: u64, missed: u64, term: u64) {
        if missed > 0 {
            self.report_missed_before(at, missed, term).await;
        }
        let claim = self.record(at, FiringState::Claimed, term, None, missed);
        if !self.write(claim.clone()).await {
            return;
        }
        let Some(snap) = self.confirmed(&claim).await else {
            // Left as claimed: whoever leads next (this node too) reports it interrupted.
            tracing::warn!(group = %self.election.group, firing = %rfc3339(at * 1000), term,
                "a quorum did not acknowledge the claim in time: the firing did not run here");
            return;
        };
        let now = clock::now();
        let granted = match self.election.holds.take(&snap.view, now) {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(group = %self.election.group, error = %e,
                    "claimed, but no hold: the firing did not run here");
                return;
            }
        };
        let held = HoldBody::new(&granted, &self.election.node_id, &self.election.group);
        let (outcome, code, detail) = self.run_command(at, &held, now).await;
        let _ = self.election.holds.release(granted.id);
        let state = match outcome {
            FiringOutcome::Ok => FiringState::Ok,
            FiringOutcome::Failed => FiringState::Failed,
            FiringOutcome::Missed => FiringState::Missed,
            FiringOutcome::Interrupted => FiringState::Interrupted,
        };
        self.report(at, outcome, term, code, 1, detail).await;
        let done = self.record(at, state, term, code, missed);
        self.write(done).await;
    }

    /// The `missed` firings before firing `at` that nobody ran, reported as one entry named by
    /// the last of them.
    async fn report_missed_before(&mut self, at: u64, missed: u64, term: u64) {
        let cron = &self.handle.config.cron;
        let last = previous(cron, at).unwrap_or(at.saturating_sub(1));
        let detail = format!("{missed} firing(s) up to this one had no leader within their grace");
        self.report(last, FiringOutcome::Missed, term, None, missed, detail)
            .await;
    }

    /// The snapshot in which a quorum holds `claim` while this node still leads its term, or
    /// `None` within the election timeout.
    async fn confirmed(&mut self, claim: &Firing) -> Option<Arc<Snapshot>> {
        let until = clock::now() + self.election.confirm_within;
        loop {
            let snap = self.election.snapshot.borrow_and_update().clone();
            let now = clock::now();
            if snap.view.term != claim.term || !snap.view.is_leader_at(now) {
                return None;
            }
            if snap.firing.as_ref() == Some(claim)
                && snap.firing_held_by.len() >= snap.member_set.quorum()
            {
                return Some(snap);
            }
            if snap.firing.as_ref().is_some_and(|f| f != claim) {
                return None;
            }
            tokio::select! {
                _ = self.stop.cancelled() => return None,
                _ = clock::sleep_until(until) => return None,
                changed = self.election.snapshot.changed() => changed.ok()?,
            }
        }
    }

    /// Runs the command of firing `at` under `held` (granted at `granted`).
    async fn run_command(
        &mut self,
        at: u64,
        held: &HoldBody,
        granted: tokio::time::Instant,
    ) -> (FiringOutcome, Option<i32>, String) {
        let command = &self.handle.config.command;
        let mut cmd = tokio::process::Command::new(&command[0]);
        cmd.args(&command[1..]).stdin(std::process::Stdio::null());
        crate::exec::without_own_settings(&mut cmd);
        cmd.env("PILOT_ELECTION_TERM", held.term.to_string())
            .env("PILOT_ELECTION_LEADER", &held.leader)
            .env("PILOT_ELECTION_NODE_ID", &held.leader)
            .env("PILOT_ELECTION_GROUP", &held.group)
            .env("PILOT_ELECTION_FIRING", at.to_string())
            .env("PILOT_ELECTION_FIRING_AT", rfc3339(at * 1000));
        let group = match ProcessGroup::spawn(&mut cmd) {
            Ok(g) => g,
            Err(e) => {
                let detail = format!("could not start {}: {e}", command[0].to_string_lossy());
                return (FiringOutcome::Failed, Some(127), detail);
            }
        };
        let pid = group.id().unwrap_or(0);
        tracing::info!(group = %held.group, firing = %rfc3339(at * 1000), term = held.term, pid,
            "scheduled firing started");
        self.set_running(Some(Running {
            firing: rfc3339(at * 1000),
            term: held.term,
            pid,
            since: rfc3339(unix_ms_now()),
        }));
        let holds = self.election.holds.clone();
        let snapshot = self.election.snapshot.clone();
        let renew = || {
            let now = clock::now();
            let view = snapshot.borrow().view.clone();
            let answer = match holds.renew(held.id, &view, now) {
                Ok(g) => Renewal::Until(HoldBody::new(&g, &held.leader, &held.group).kill_by(now)),
                Err(e) => Renewal::Refused(e.to_string()),
            };
            std::future::ready(answer)
        };
        let end = run_held(
            group,
            held,
            held.kill_by(granted),
            renew,
            std::future::pending(),
        )
        .await;
        self.set_running(None);
        match end {
            End::Exited(status) if status.success() => {
                (FiringOutcome::Ok, Some(0), "exited 0".into())
            }
            End::Exited(status) => (
                FiringOutcome::Failed,
                status.code(),
                format!("the command failed ({status})"),
            ),
            End::Lost(why) => (
                FiringOutcome::Interrupted,
                None,
                format!("leadership ended before the command did ({why}): it was stopped"),
            ),
            End::Signalled(sig) => (
                FiringOutcome::Interrupted,
                None,
                format!("stopped by signal {sig}"),
            ),
        }
    }

    fn set_running(&self, running: Option<Running>) {
        // One gauge for every scheduled group of the node.
        if running.is_some() {
            self.metrics.scheduled_running.inc();
        } else {
            self.metrics.scheduled_running.dec();
        }
        self.handle
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .running = running;
    }

    /// Counts, logs and keeps on disk what happened to firing `at` (for missed ones, `count`
    /// firings up to it).
    async fn report(
        &self,
        at: u64,
        outcome: FiringOutcome,
        term: u64,
        code: Option<i32>,
        count: u64,
        detail: String,
    ) {
        self.metrics.scheduled_firings(outcome, count);
        let firing = rfc3339(at * 1000);
        match outcome {
            FiringOutcome::Ok => {
                tracing::info!(group = %self.election.group, %firing, term, "scheduled firing ran")
            }
            _ => tracing::warn!(group = %self.election.group, %firing, term,
                outcome = outcome.label(), count, %detail, "scheduled firing did not run as planned"),
        }
        let list: Vec<Finished> = {
            let mut log = self.handle.log.lock().unwrap_or_else(|e| e.into_inner());
            log.finished.push_back(Finished {
                firing,
                outcome: outcome.label().to_string(),
                term,
                code,
                count,
                at: rfc3339(unix_ms_now()),
                detail,
            });
            while log.finished.len() > LOG_LIMIT {
                log.finished.pop_front();
            }
            log.finished.iter().cloned().collect()
        };
        let store = self.election.store.clone();
        let saved = tokio::task::spawn_blocking(move || store.save_firing_log(&list)).await;
        if let Ok(Err(e)) = saved {
            tracing::warn!(error = %e, "could not keep the scheduled firings' log on disk");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(at: u64, state: FiringState) -> Firing {
        Firing {
            at,
            state,
            term: 2,
            by: "a".into(),
            code: None,
            missed: 0,
        }
    }

    /// The firing before an instant, for schedules from every second to once a year: what a
    /// scan of the whole two days gives, found in the first window that holds one.
    #[test]
    fn the_firing_before_is_the_last_of_the_two_days_before() {
        let at = 1_733_500_000; // 6 December 2024, 15:46:40 UTC
        for spec in [
            "* * * * * *",
            "*/7 * * * * *",
            "* * * * *",
            "17 * * * *",
            "0 3 * * *",
            "0 0 * * 1",
            "0 0 1 1 *",
        ] {
            let cron = Cron::parse(spec).unwrap();
            for t in [at, at + 1, at + 59, at + 3_600, at + 86_400 + 5] {
                let scanned = last_before(&cron, t - PREVIOUS_WITHIN - 1, t - 1);
                assert_eq!(previous(&cron, t), scanned, "{spec} before {t}");
            }
        }
        let every = Cron::parse("* * * * * *").unwrap();
        assert_eq!(previous(&every, at), Some(at - 1));
        assert_eq!(previous(&every, 0), None);
    }

    #[test]
    fn what_a_leader_does_next() {
        let every = Cron::parse("* * * * * *").unwrap();
        let minute = Cron::parse("* * * * *").unwrap();
        // Nothing recorded yet: the firing of this second, nothing missed before it.
        assert_eq!(
            next(&every, 5, None, 1000),
            Next::Claim {
                at: 1000,
                missed: 0
            }
        );
        assert_eq!(next(&minute, 5, None, 1001), Next::Wait(1020));
        assert_eq!(
            next(&minute, 5, None, 1020),
            Next::Claim {
                at: 1020,
                missed: 0
            }
        );
        // Ran up to 997: 998 and 999 were missed, 1000 runs.
        assert_eq!(
            next(&every, 5, Some(&rec(997, FiringState::Ok)), 1000),
            Next::Claim {
                at: 1000,
                missed: 2
            }
        );
        // Up to date: wait for the next one.
        assert_eq!(
            next(&every, 5, Some(&rec(1000, FiringState::Failed)), 1000),
            Next::Wait(1001)
        );
        // Past the grace: every one of them missed, none runs late.
        assert_eq!(
            next(&minute, 5, Some(&rec(960, FiringState::Ok)), 1090),
            Next::Missed {
                at: 1080,
                missed: 2
            }
        );
        assert_eq!(
            next(&minute, 5, Some(&rec(960, FiringState::Ok)), 1085),
            Next::Claim {
                at: 1080,
                missed: 1
            }
        );
        // Someone's claim with no outcome comes first.
        let claimed = rec(990, FiringState::Claimed);
        assert_eq!(
            next(&every, 5, Some(&claimed), 1000),
            Next::Interrupted(claimed)
        );
        // A day without a leader, a firing a second: counted, not looped over forever.
        assert_eq!(
            next(
                &every,
                5,
                Some(&rec(1000, FiringState::Ok)),
                1000 + COUNT_LIMIT + 10
            ),
            Next::Claim {
                at: 1000 + COUNT_LIMIT + 10,
                missed: COUNT_LIMIT - 1
            }
        );
        let day = 86_400;
        assert_eq!(
            next(&every, 5, Some(&rec(1000, FiringState::Ok)), 1000 + day),
            Next::Claim {
                at: 1000 + day,
                missed: day - 1
            }
        );
    }
}
