//! `run --on-change 'COMMAND LINE'`: a command every node runs when the leader it knows or its
//! own role changes, to move what follows the leader outside the cluster (a VIP, a DNS record,
//! an HAProxy server's state, a label), the way Patroni's `on_role_change` and client-go's
//! `OnNewLeader` do.
//!
//! The runtime reports each change ([`Change`], numbered, on a `watch` channel); one task here
//! runs the command through `sh -c` in its own process group with the change in its
//! environment, one run at a time. Changes that arrive during a run collapse to the newest
//! ([`serial`]): a slow hook acts on the state as it is, not on a backlog. Each run ends when
//! `sh` exits or at `--on-change-timeout`, when the whole group is SIGKILLed.
//!
//! # Before the resign (rule 9)
//!
//! A leader that stops leading reports it ([`Change::lost_leadership`]) in the step that ends its
//! leadership, before the `resign` of that step is executed, and the runtime's release guard
//! ([`HooksHandle::release_guard`], next to `--exec`'s) holds the resign until that change is
//! settled: its run has ended (or been killed at its timeout). The resign is what lets the others
//! elect within milliseconds, so the hook that takes the VIP away is done before a successor can
//! even campaign on it. That covers a step-down, a candidacy withdrawal, a preemption, a lost
//! quorum and the node's own stop; on a stop the run is cut at [`EXIT_CAP`] from the signal, so
//! the node still exits within Docker's 10 s (`exit_budget`).
//!
//! Without a resign nothing can be held: after the lease ends, the others may elect on their
//! own once the promises they made run out, which is no earlier than `T·(1−r)/(1+r) − L` after
//! the lease end on this node's clock (714 ms with the defaults; `Timings::after_lease`). A hook
//! that is done within that window is done before anyone else leads on every path the node
//! survives; a slower one still holds the resign but may overlap a successor's run, and says so
//! in a warning. A leader that learns of a higher term stops leading without a resign (someone
//! else is already campaigning, or has won) and a node killed with `-9` or frozen runs nothing:
//! there the lease running out is the only protection, as for `--exec`. A hook run in progress
//! when the node dies is left to finish on its own.
//!
//! While the resign is held, the election loop waits with it (as it does for `--exec`'s child),
//! so a hook meant to run on the leader must be quick: the loop handles no message meanwhile and
//! `/healthz` reports it stalled after `L`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::clock;
use crate::clock::wall::unix_ms_now;
use crate::election::Timings;
use crate::metrics::{Metrics, OnChangeOutcome};
use crate::runtime::{Change, ReleaseGuard};

mod run;
mod serial;
use run::Ran;
use serial::Serial;

/// The default of `--on-change-timeout`: long enough for `ip addr` and an `arping` or an
/// `nsupdate` to a slow server, short enough that a hung hook is noticed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long after the node begins to stop a run may still go on (it is then SIGKILLed): its
/// share of the handover's grace in the exit budget (`exit_budget::HOOK_ON_EXIT`).
pub const EXIT_CAP: Duration = crate::exit_budget::HOOK_ON_EXIT;

/// What `--on-change` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookConfig {
    /// Run through `sh -c`.
    pub command: String,
    /// A run is killed (SIGKILL to its process group) this long after it started.
    pub timeout: Duration,
}

impl HookConfig {
    /// Validates the `--on-change` flags; the error is one line for the CLI.
    pub fn from_flags(
        command: Option<&str>,
        timeout: Duration,
    ) -> Result<Option<HookConfig>, String> {
        if timeout.is_zero() {
            return Err("--on-change-timeout must be more than 0 (e.g. 10s)".into());
        }
        let Some(command) = command else {
            return Ok(None);
        };
        Ok(Some(HookConfig {
            command: crate::exec::shell_command("--on-change", command)?,
            timeout,
        }))
    }
}

/// How a run ended, as metrics, logs and `/status` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `sh` exited 0.
    Ok,
    /// It exited non-zero, died of a signal not ours, or could not be started.
    Failed,
    /// Killed at `--on-change-timeout`.
    TimedOut,
    /// Killed because the node was exiting ([`EXIT_CAP`]).
    KilledAtExit,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::KilledAtExit => "killed_at_exit",
        }
    }
}

impl From<Outcome> for OnChangeOutcome {
    fn from(outcome: Outcome) -> OnChangeOutcome {
        match outcome {
            Outcome::Ok => OnChangeOutcome::Ok,
            Outcome::Failed => OnChangeOutcome::Failed,
            Outcome::TimedOut => OnChangeOutcome::TimedOut,
            Outcome::KilledAtExit => OnChangeOutcome::KilledAtExit,
        }
    }
}

/// The last run, for `/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastRun {
    pub change: Change,
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub duration: Duration,
    /// When it ended, on the wall clock.
    pub at_unix_ms: u64,
}

/// What `/status` shows of the hook.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookStatus {
    /// The change whose run is in progress.
    pub running: Option<Change>,
    pub last_run: Option<LastRun>,
}

/// The running hook task and its handle.
pub struct Hooks {
    handle: HooksHandle,
    task: JoinHandle<()>,
}

/// For the runtime's release guard, the node's stop and `/status`.
#[derive(Clone)]
pub struct HooksHandle {
    changes: watch::Receiver<Change>,
    /// The number every change up to which is settled.
    settled: watch::Receiver<u64>,
    exit_by: Arc<watch::Sender<Option<Instant>>>,
    status: Arc<Mutex<HookStatus>>,
}

impl HooksHandle {
    /// The runtime's [`ReleaseGuard`]: a resign leaves only once the newest change reported
    /// (the one that ended this node's leadership, reported in the same step) is settled. A
    /// run of an older change in progress ends first (serial runs), each within its timeout.
    pub fn release_guard(&self) -> ReleaseGuard {
        let handle = self.clone();
        Arc::new(move |term| {
            let handle = handle.clone();
            Box::pin(async move {
                let target = handle.changes.borrow().seq;
                let mut settled = handle.settled.clone();
                let since = clock::now();
                // An error: the task is gone, and nothing runs any more.
                let _ = settled.wait_for(|s| *s >= target).await;
                tracing::debug!(
                    term,
                    seq = target,
                    held_ms = clock::since(since).as_millis() as u64,
                    "on-change hook done before the resign"
                );
            })
        })
    }

    /// The node begins to stop: every run, the one in progress included, ends by [`EXIT_CAP`]
    /// from now.
    pub fn exiting(&self) {
        let by = clock::now() + EXIT_CAP;
        self.exit_by.send_if_modified(|e| match e {
            Some(_) => false,
            None => {
                *e = Some(by);
                true
            }
        });
    }

    pub fn status(&self) -> HookStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Hooks {
    /// Starts the task; it runs the current change (the runtime's `start` report) at once.
    pub fn start(
        config: HookConfig,
        changes: watch::Receiver<Change>,
        (node_id, group): (String, String),
        timings: Timings,
        metrics: Arc<Metrics>,
    ) -> Hooks {
        let (settled_tx, settled) = watch::channel(0);
        let (exit_tx, exit_rx) = watch::channel(None);
        let status = Arc::new(Mutex::new(HookStatus::default()));
        let handle = HooksHandle {
            changes: changes.clone(),
            settled,
            exit_by: Arc::new(exit_tx),
            status: status.clone(),
        };
        let runner = Runner {
            config,
            changes,
            settled: settled_tx,
            exit_by: exit_rx,
            status,
            serial: Serial::default(),
            node_id,
            group,
            window: timings.after_lease(),
            metrics,
        };
        Hooks {
            handle,
            task: tokio::spawn(runner.run()),
        }
    }

    pub fn handle(&self) -> HooksHandle {
        self.handle.clone()
    }

    /// Once the election loop has ended: the last change is run (if it was not), every run cut
    /// at [`EXIT_CAP`] from the stop; then the task is gone (any run left is killed).
    pub async fn finish(self) {
        self.handle.exiting();
        let bound = EXIT_CAP + Duration::from_millis(500);
        let mut task = self.task;
        if tokio::time::timeout(bound, &mut task).await.is_err() {
            // Aborting drops the run, which kills its group.
            task.abort();
            tracing::warn!("the on-change hook did not end in time at exit");
        }
    }
}

struct Runner {
    config: HookConfig,
    changes: watch::Receiver<Change>,
    settled: watch::Sender<u64>,
    exit_by: watch::Receiver<Option<Instant>>,
    status: Arc<Mutex<HookStatus>>,
    serial: Serial,
    node_id: String,
    group: String,
    /// How long after a lease ends nobody else can be elected without a resign.
    window: Duration,
    metrics: Arc<Metrics>,
}

impl Runner {
    async fn run(mut self) {
        let mut open = true;
        loop {
            let change = self.changes.borrow_and_update().clone();
            self.serial.offer(change.seq);
            let past_cap = self.exit_by.borrow().is_some_and(|by| clock::now() >= by);
            if past_cap && self.serial.running().is_none() {
                // It would be killed at once: the node exits now.
                if change.seq > self.serial.finished() {
                    tracing::warn!(
                        seq = change.seq,
                        reason = change.reason,
                        "on-change hook not run: the node is exiting"
                    );
                }
                return;
            }
            if let Some(start) = self.serial.next() {
                self.run_one(change, start.skipped).await;
                continue;
            }
            if !open {
                return;
            }
            // Closed: the loop has ended; one more look for a change it sent last.
            open = self.changes.changed().await.is_ok();
        }
    }

    async fn run_one(&mut self, change: Change, skipped: u64) {
        if skipped > 0 {
            self.metrics.on_change_coalesced.inc_by(skipped);
        }
        self.set_status(|s| s.running = Some(change.clone()));
        let env = run::env_of(&change, &self.node_id, &self.group);
        let ran = run::run(&self.config, env, &mut self.exit_by).await;
        let settled = self.serial.finished();
        self.metrics.on_change_run(ran.outcome.into(), ran.took);
        self.log(&change, &ran, skipped);
        let last = LastRun {
            change,
            outcome: ran.outcome,
            exit_code: ran.code,
            duration: ran.took,
            at_unix_ms: unix_ms_now(),
        };
        self.set_status(|s| {
            s.running = None;
            s.last_run = Some(last);
        });
        self.settled.send_replace(settled);
    }

    fn set_status(&self, f: impl FnOnce(&mut HookStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn log(&self, change: &Change, ran: &Ran, skipped: u64) {
        let (role, term, reason) = (change.role.as_str(), change.term, change.reason);
        let leader = change.leader.as_deref().unwrap_or("");
        let previous = change.previous.as_deref().unwrap_or("");
        let (outcome, took_ms) = (ran.outcome.as_str(), ran.took.as_millis() as u64);
        let (code, signal) = (ran.code, ran.signal);
        match ran.outcome {
            Outcome::Ok => tracing::info!(
                role,
                leader,
                term,
                previous,
                reason,
                outcome,
                took_ms,
                skipped,
                "on-change hook ran"
            ),
            _ => tracing::warn!(
                role,
                leader,
                term,
                previous,
                reason,
                outcome,
                code,
                signal,
                took_ms,
                skipped,
                error = ran.error.as_deref().unwrap_or(""),
                "on-change hook did not succeed"
            ),
        }
        if change.lost_leadership(&self.node_id) && ran.took > self.window {
            tracing::warn!(
                term,
                took_ms,
                window_ms = self.window.as_millis() as u64,
                "the on-change hook that reported the end of this node's leadership took longer than the time after a lease in which no other node can be elected without the resign: a successor may have led before it was done"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::runtime::ChangeRole;

    struct Fixture {
        hooks: Option<Hooks>,
        changes: watch::Sender<Change>,
        metrics: Arc<Metrics>,
        dir: PathBuf,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn change(seq: u64, role: ChangeRole, leader: Option<&str>, reason: &'static str) -> Change {
        Change {
            seq,
            role,
            leader: leader.map(String::from),
            term: seq,
            previous: None,
            reason,
        }
    }

    /// A hook task for `script` (its `$LOG` is the fixture's `log` file), with the start
    /// change already there.
    fn fixture(tag: &str, script: &str, timeout: Duration) -> Fixture {
        let dir = std::env::temp_dir().join(format!("pe-hooks-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let command = format!("LOG='{}'; {script}", dir.join("log").display());
        let (changes, rx) = watch::channel(change(1, ChangeRole::Follower, None, "start"));
        let metrics = Arc::new(Metrics::new());
        let config = HookConfig { command, timeout };
        let who = ("n1".to_string(), "g".to_string());
        let hooks = Hooks::start(config, rx, who, Timings::default(), metrics.clone());
        Fixture {
            hooks: Some(hooks),
            changes,
            metrics,
            dir,
        }
    }

    impl Fixture {
        fn handle(&self) -> HooksHandle {
            self.hooks.as_ref().unwrap().handle()
        }

        fn lines(&self) -> Vec<String> {
            std::fs::read_to_string(self.dir.join("log"))
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect()
        }

        fn metric(&self, series: &str) -> f64 {
            let text = self.metrics.encode();
            text.lines()
                .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
                .map_or(0.0, |v| v.parse().unwrap())
        }

        /// Waits (up to `within`) until the last run is of change `seq`.
        async fn ran(&self, seq: u64, within: Duration) -> LastRun {
            let deadline = clock::now() + within;
            loop {
                if let Some(r) = self
                    .handle()
                    .status()
                    .last_run
                    .filter(|r| r.change.seq == seq)
                {
                    return r;
                }
                assert!(
                    clock::now() < deadline,
                    "no run of {seq} within {within:?}: {:?}, {:?}",
                    self.handle().status(),
                    self.lines()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }

    const RECORD: &str = r#"echo "$PILOT_ELECTION_REASON $PILOT_ELECTION_TERM $PILOT_ELECTION_ROLE [$PILOT_ELECTION_LEADER] [$PILOT_ELECTION_PREVIOUS] $PILOT_ELECTION_NODE_ID $PILOT_ELECTION_GROUP" >>"$LOG"; sleep 0.3"#;

    #[test]
    fn flags_are_checked() {
        let t = DEFAULT_TIMEOUT;
        assert_eq!(HookConfig::from_flags(None, t), Ok(None));
        assert!(HookConfig::from_flags(Some(" \t"), t)
            .unwrap_err()
            .contains("--on-change needs a command line"));
        assert!(HookConfig::from_flags(Some("a\0b"), t).is_err());
        assert!(HookConfig::from_flags(Some("x"), Duration::ZERO)
            .unwrap_err()
            .contains("--on-change-timeout must be more than 0"));
        let c = HookConfig::from_flags(Some("vip.sh"), t).unwrap().unwrap();
        assert_eq!((c.command.as_str(), c.timeout), ("vip.sh", t));
    }

    #[tokio::test]
    async fn changes_during_a_run_collapse_to_the_newest_which_runs_next() {
        let f = fixture("coalesce", RECORD, DEFAULT_TIMEOUT);
        // The start run takes 300 ms; three changes arrive meanwhile.
        let deadline = clock::now() + Duration::from_secs(5);
        while f.handle().status().running.is_none() && f.lines().is_empty() {
            assert!(clock::now() < deadline, "the start run never began");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        f.changes
            .send_replace(change(2, ChangeRole::Candidate, None, "campaign"));
        f.changes
            .send_replace(change(3, ChangeRole::Leader, Some("n1"), "elected"));
        let mut lost = change(4, ChangeRole::Follower, None, "step_down");
        lost.previous = Some("n1".into());
        f.changes.send_replace(lost);
        let last = f.ran(4, Duration::from_secs(5)).await;
        assert_eq!(last.outcome, Outcome::Ok);
        assert_eq!(last.exit_code, Some(0));
        assert!(last.duration >= Duration::from_millis(300), "{last:?}");
        assert_eq!(
            f.lines(),
            [
                "start 1 follower [] [] n1 g",
                "step_down 4 follower [] [n1] n1 g"
            ]
        );
        assert_eq!(f.metric("pilot_election_on_change_coalesced_total"), 2.0);
        assert_eq!(
            f.metric("pilot_election_on_change_runs_total{outcome=\"ok\"}"),
            2.0
        );
        assert_eq!(
            f.metric("pilot_election_on_change_run_duration_seconds_count"),
            2.0
        );
    }

    #[tokio::test]
    async fn the_release_guard_waits_for_the_run_of_the_newest_change() {
        let f = fixture("guard", RECORD, DEFAULT_TIMEOUT);
        f.ran(1, Duration::from_secs(5)).await;
        let guard = f.handle().release_guard();
        // Nothing new: a resign leaves at once.
        tokio::time::timeout(Duration::from_millis(200), guard(1))
            .await
            .expect("nothing to wait for");
        let mut lost = change(2, ChangeRole::Follower, None, "step_down");
        lost.previous = Some("n1".into());
        f.changes.send_replace(lost);
        let since = clock::now();
        tokio::time::timeout(Duration::from_secs(5), guard(2))
            .await
            .expect("the run ends");
        let held = clock::since(since);
        assert!(held >= Duration::from_millis(300), "held only {held:?}");
        let last = f.handle().status().last_run.expect("a run");
        assert_eq!(last.change.seq, 2, "the run ended before the guard let go");
        assert_eq!(
            f.lines().last().unwrap(),
            "step_down 2 follower [] [n1] n1 g"
        );
    }

    #[tokio::test]
    async fn a_run_past_its_timeout_is_killed_with_its_whole_group() {
        let script = r#"sleep 30 & echo "$!" >>"$LOG"; sleep 30"#;
        let f = fixture("timeout", script, Duration::from_millis(300));
        let last = f.ran(1, Duration::from_secs(5)).await;
        assert_eq!(last.outcome, Outcome::TimedOut);
        assert_eq!(last.exit_code, None, "killed, no exit code");
        assert!(
            last.duration >= Duration::from_millis(300) && last.duration < Duration::from_secs(3),
            "{last:?}"
        );
        let pid: u32 = f.lines()[0].parse().unwrap();
        let deadline = clock::now() + Duration::from_secs(2);
        while crate::process_group::runs(pid) {
            assert!(
                clock::now() < deadline,
                "the background sleep {pid} survived"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            f.metric("pilot_election_on_change_runs_total{outcome=\"timed_out\"}"),
            1.0
        );
    }

    #[tokio::test]
    async fn at_exit_a_run_is_cut_short_and_nothing_starts_after_the_cap() {
        let script = r#"echo "$PILOT_ELECTION_REASON" >>"$LOG"; [ "$PILOT_ELECTION_REASON" = start ] && sleep 30; exit 3"#;
        let mut f = fixture("exit", script, Duration::from_secs(60));
        let deadline = clock::now() + Duration::from_secs(5);
        while f.lines().is_empty() {
            assert!(clock::now() < deadline, "the start run never began");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        f.changes
            .send_replace(change(2, ChangeRole::Follower, None, "leader_timeout"));
        let hooks = f.hooks.take().unwrap();
        let handle = hooks.handle();
        let since = clock::now();
        // What the builder does at exit: the loop (the sender) is gone, then finish.
        let (dead, _) = watch::channel(change(0, ChangeRole::Follower, None, "start"));
        drop(std::mem::replace(&mut f.changes, dead));
        hooks.finish().await;
        let took = clock::since(since);
        assert!(took >= EXIT_CAP - Duration::from_millis(50), "{took:?}");
        assert!(took < EXIT_CAP + Duration::from_secs(1), "{took:?}");
        assert_eq!(f.lines(), ["start"], "the newer change came too late");
        let last = handle.status().last_run.unwrap();
        assert_eq!((last.change.seq, last.outcome), (1, Outcome::KilledAtExit));
        assert_eq!(last.exit_code, None);
        assert_eq!(
            f.metric("pilot_election_on_change_runs_total{outcome=\"killed_at_exit\"}"),
            1.0
        );
    }
}
