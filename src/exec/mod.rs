//! `run --exec 'COMMAND LINE'`: run one command only while this node leads, the way `consul
//! lock` and `etcdctl elect NAME CMD` do, with the lease deciding when it must be gone.
//!
//! The command runs through `sh -c` as the leader of its own process group, with the term (the
//! fencing token), the leader and the node id in its environment. A [`Supervisor`] task starts it
//! when this node leads and stops it (SIGTERM to the group, SIGKILL when the grace is over) when
//! leadership ends. It reads only the snapshot channel and keeps its own timer on the lease end,
//! so a stuck election loop still stops the child when the lease runs out.
//!
//! # When the child must be gone
//!
//! Every clock's rate is within `1 ± r` of true time (`r` = max drift). A leader's lease ends
//! `L` after it *sent* the last heartbeat `s` a quorum acknowledged, on its own clock:
//! `lease_until = s + L`. Each follower that acknowledged that heartbeat received it after `s`
//! and refuses to vote for anyone else until `T` has passed on its clock, which is at least
//! `T/(1+r)` of true time; so no other node can be elected before true time `s + T/(1+r)`, which
//! this node's clock (running slow by at most `1 − r`) reads as no earlier than
//! `s + T·(1−r)/(1+r)`. The window between the end of the lease and the earliest election is
//!
//! ```text
//! gap = T·(1−r)/(1+r) − L  ≥  h·(1−r)/(1+r)  > 0      (start-up enforces T ≥ L·(1+r)/(1−r) + h)
//! ```
//!
//! and the child is SIGKILLed at `lease_until + gap/3` at the latest ([`kill_delay`]). With the
//! defaults (`h` = 500 ms, `L` = 2 s, `T` = 3 s, `r` = 5 %) the gap is 714 ms: SIGKILL comes
//! 238 ms after the lease ends and 476 ms before anyone else can be elected. If this process
//! dies (`kill -9`, a crash), a watcher process that only waits for its death sends SIGTERM to
//! the group at once and SIGKILL `gap/3` later: the node was either still leading (so
//! `lease_until` was not yet past) or had started stopping less than `gap/3` after it, so that
//! SIGKILL also lands at least `gap/3` before the earliest election.
//!
//! That bound holds only while this node says nothing: a resign lets the others elect within
//! milliseconds. The core sends one by itself when the lease runs out without a quorum or when a
//! better-ranked node preempts it, so every resign first waits for the child's process group to
//! be gone ([`ExecHandle::release_guard`], SIGKILL after `gap/3` at the latest). Handovers an
//! operator asks for (a step-down or candidacy withdrawal through the API, the stop of the node
//! itself) stop the child before they even reach the core ([`DRAIN_GRACE`] at most;
//! [`Exec::gate`], [`ExecHandle::drain_for_exit`]).
//!
//! What this cannot promise: a node that is frozen (SIGSTOP, a VM pause, swapped out) cannot
//! stop anything, and its child keeps running while another node leads. Fence writes with
//! `PILOT_ELECTION_TERM`.

use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::Command as Process;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::clock;
use crate::election::{Input, Timings, View};
use crate::metrics::{ExecExit, Metrics};
use crate::process_group::ProcessGroup;
use crate::runtime::{Command, ReleaseGuard, Snapshot};

mod gate;
mod supervisor;

use gate::gate;
use supervisor::Supervisor;

/// The longest a planned handover (API step-down or candidacy withdrawal, the node's own stop)
/// waits for the child after SIGTERM before SIGKILL. Short enough that the API answers well
/// within its 5 s and that a stopping node still exits within Docker's 10 s: this, the
/// handover's 4 s, the final writes' 1 s, the server's 2 s and the CLI's 0.5 s make 8.5 s
/// (`exit_budget`, which keeps the sum).
pub const DRAIN_GRACE: Duration = crate::exit_budget::EXEC_DRAIN;
/// First wait before restarting a child that exited while this node still leads.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// Restart waits double up to this; a child that ran at least this long starts over at
/// [`BACKOFF_FIRST`].
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The restart waits: [`BACKOFF_FIRST`], doubling up to [`BACKOFF_MAX`].
const RESTART_BACKOFF: Backoff = Backoff::new(BACKOFF_FIRST, BACKOFF_MAX);
/// How often a stopping child's process group is checked for stragglers after `sh` exited.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// What `--exec` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecConfig {
    /// Run through `sh -c`.
    pub command: String,
    /// The group whose leadership runs it (`PILOT_ELECTION_GROUP` in its environment).
    pub group: String,
    /// Step down when the child exits non-zero while leading, instead of restarting it.
    pub step_down_on_failure: bool,
}

impl ExecConfig {
    /// Validates the `--exec` flags; the error is one line for the CLI.
    pub fn from_flags(
        command: Option<&str>,
        step_down_on_failure: bool,
    ) -> Result<Option<ExecConfig>, String> {
        let Some(command) = command else {
            return match step_down_on_failure {
                true => Err("--exec-step-down-on-failure needs --exec".into()),
                false => Ok(None),
            };
        };
        Ok(Some(ExecConfig {
            command: shell_command("--exec", command)?,
            group: crate::group::DEFAULT_GROUP.to_string(),
            step_down_on_failure,
        }))
    }
}

/// A command line for `sh -c`, given with `flag` (`--exec`, `--on-change`), checked; the error
/// is one line for the CLI.
pub fn shell_command(flag: &str, command: &str) -> Result<String, String> {
    if command.trim().is_empty() {
        return Err(format!("{flag} needs a command line (run through sh -c)"));
    }
    if command.contains('\0') {
        return Err(format!("{flag} must not contain a NUL byte"));
    }
    Ok(command.to_string())
}

/// `sh -c command`, to be started with [`ProcessGroup::spawn`] (one signal then reaches
/// everything it starts), with stdin from `/dev/null` and without the node's own
/// `PILOT_ELECTION_*` settings, which may hold the admin token or the cluster keys.
pub fn shell(command: &str) -> Process {
    let mut cmd = Process::new("/bin/sh");
    cmd.arg("-c").arg(command).stdin(Stdio::null());
    without_own_settings(&mut cmd);
    cmd
}

/// Takes this process's own `PILOT_ELECTION_*` settings (the admin token, the cluster keys)
/// out of a command's environment: every command this binary starts for someone else, a
/// node's `sh -c` and the command of `pilot-election once`.
pub fn without_own_settings(cmd: &mut Process) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PILOT_ELECTION_") {
            cmd.env_remove(key);
        }
    }
}

/// `T·(1−r)/(1+r) − L`: how long after this node's lease ends no other node can be elected yet,
/// on this node's clock (see the module documentation; [`Timings::after_lease`]).
pub fn after_lease(t: &Timings) -> Duration {
    t.after_lease()
}

/// How long after the lease end (or after this process died) the child is SIGKILLed: a third
/// of [`after_lease`], leaving two thirds for the kill to land before anyone else is elected.
pub fn kill_delay(t: &Timings) -> Duration {
    after_lease(t) / 3
}

/// The running supervisor: its control handle and its task.
pub struct Exec {
    handle: ExecHandle,
    task: JoinHandle<()>,
}

/// Asks the supervisor to stop the child before a handover.
#[derive(Clone)]
pub struct ExecHandle {
    control: mpsc::Sender<Control>,
}

enum Control {
    /// Stop the child now (SIGKILL after `grace` at the latest) and start none until released;
    /// `done` is answered once the child's whole process group is gone.
    Hold {
        grace: Duration,
        done: oneshot::Sender<()>,
    },
    /// Stop the child now (SIGKILL after `grace` at the latest) without holding later ones back
    /// (this node no longer leads); `done` is answered once no child runs.
    Stop {
        grace: Duration,
        done: oneshot::Sender<()>,
    },
    /// The handover was refused: run the child again if this node still leads.
    Release,
    /// The handover happened: run a child again only once leadership in `term` has ended.
    ReleaseAfter { term: u64 },
}

impl ExecHandle {
    async fn hold(&self, grace: Duration) {
        self.until_gone(|done| Control::Hold { grace, done }).await;
    }

    /// Sends a stopping control and waits until the supervisor says no child runs.
    async fn until_gone(&self, control: impl FnOnce(oneshot::Sender<()>) -> Control) {
        let (done, gone) = oneshot::channel();
        if self.control.send(control(done)).await.is_ok() {
            let _ = gone.await;
        }
    }

    /// The runtime's [`ReleaseGuard`]: before a resign of `term` leaves, the child is stopped
    /// (SIGKILL after [`kill_delay`] at the latest) and waited for. The view already says this
    /// node does not lead, so no new child starts meanwhile.
    pub fn release_guard(&self, timings: Timings) -> ReleaseGuard {
        let handle = self.clone();
        Arc::new(move |term| {
            let handle = handle.clone();
            Box::pin(async move {
                let grace = kill_delay(&timings);
                handle
                    .until_gone(|done| Control::Stop { grace, done })
                    .await;
                tracing::debug!(term, "exec child gone before the resign");
            })
        })
    }

    /// Stops the child for good before the node hands over and exits.
    pub async fn drain_for_exit(&self) {
        self.hold(DRAIN_GRACE).await;
    }
}

impl Exec {
    /// Starts the supervisor. `commands` is the election loop's command channel (for
    /// `--exec-step-down-on-failure`).
    pub fn start(
        config: ExecConfig,
        snapshot: watch::Receiver<Arc<Snapshot>>,
        commands: mpsc::Sender<Command>,
        metrics: Arc<Metrics>,
    ) -> Exec {
        let (control_tx, control) = mpsc::channel(8);
        let supervisor = Supervisor::new(
            config,
            snapshot,
            commands,
            metrics,
            (control_tx.clone(), control),
        );
        Exec {
            handle: ExecHandle {
                control: control_tx,
            },
            task: tokio::spawn(supervisor.run()),
        }
    }

    pub fn handle(&self) -> ExecHandle {
        self.handle.clone()
    }

    /// Puts a gate between the API and the election loop: a command that would hand leadership
    /// over waits until the child is gone. Returns the sender the API must use.
    pub fn gate(
        &self,
        to_loop: mpsc::Sender<Command>,
        snapshot: watch::Receiver<Arc<Snapshot>>,
    ) -> mpsc::Sender<Command> {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(gate(rx, to_loop, self.handle(), snapshot));
        tx
    }

    /// Waits until the supervisor has stopped the child, which it does once the election loop
    /// has ended (within [`DRAIN_GRACE`], sooner if the lease says so).
    pub async fn finish(self) {
        let bound = DRAIN_GRACE + Duration::from_millis(500);
        if tokio::time::timeout(bound, self.task).await.is_err() {
            tracing::warn!("the exec child was not confirmed gone at exit");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::path::PathBuf;

    use super::*;
    use crate::election::{CommandError, Outcome};
    use crate::transport::Health;

    fn timings() -> Timings {
        let t = Timings {
            heartbeat: Duration::from_millis(100),
            lease: Duration::from_millis(400),
            election_timeout: Duration::from_millis(700),
            ..Timings::default()
        };
        t.validate().expect("safe timings");
        t
    }

    /// This node's view: leading in `term` until `lease_until`, or following.
    fn view(term: u64, lease_until: Option<Instant>) -> View {
        View {
            can_campaign: true,
            ..crate::runtime::test_view("n1", term, lease_until)
        }
    }

    fn snapshot(view: View) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            view,
            members: Vec::new(),
            member_set: Arc::new(crate::election::MemberSet::new("n1", ["n2", "n3"]).unwrap()),
            transport: Arc::new(Health {
                io: None,
                kind: "memory",
                healthy: true,
                last_error: None,
                reason: None,
                links: None,
            }),
            history: Arc::new(VecDeque::new()),
            timings: timings(),
            info: None,
            maintenance: None,
            maintenance_held_by: Vec::new(),
            firing: None,
            firing_held_by: Vec::new(),
            directory: Default::default(),
        })
    }

    struct Fixture {
        exec: Exec,
        snap: watch::Sender<Arc<Snapshot>>,
        commands: mpsc::Receiver<Command>,
        metrics: Arc<Metrics>,
        dir: PathBuf,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// A supervisor for `script`, whose `$LOG` is the fixture's `log` file.
    fn fixture(tag: &str, script: &str, step_down_on_failure: bool, first: View) -> Fixture {
        let dir = std::env::temp_dir().join(format!("pe-exec-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let command = format!("LOG='{}'; {script}", dir.join("log").display());
        let (snap, rx) = watch::channel(snapshot(first));
        let (cmd_tx, commands) = mpsc::channel(8);
        let metrics = Arc::new(Metrics::new());
        let config = ExecConfig {
            command,
            group: crate::group::DEFAULT_GROUP.into(),
            step_down_on_failure,
        };
        let exec = Exec::start(config, rx, cmd_tx, metrics.clone());
        Fixture {
            exec,
            snap,
            commands,
            metrics,
            dir,
        }
    }

    impl Fixture {
        fn lines(&self) -> Vec<String> {
            std::fs::read_to_string(self.dir.join("log"))
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect()
        }

        /// Waits (up to 2 s) until the supervisor has counted `n` exits of `outcome`: the
        /// child's last log line comes before the supervisor has reaped it.
        async fn wait_exits(&self, outcome: &str, n: u64) -> u64 {
            let deadline = clock::now() + Duration::from_secs(2);
            while self.exits(outcome) < n && clock::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.exits(outcome)
        }

        fn exits(&self, outcome: &str) -> u64 {
            let text = self.metrics.encode();
            let prefix = format!("pilot_election_exec_exits_total{{outcome=\"{outcome}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map_or(0, |v| v.parse().unwrap())
        }

        /// Waits until the log has `n` lines starting with `prefix`; returns their last words.
        async fn wait_lines(&self, prefix: &str, n: usize, within: Duration) -> Vec<String> {
            let deadline = clock::now() + within;
            loop {
                let found: Vec<String> = self
                    .lines()
                    .iter()
                    .filter(|l| l.starts_with(prefix))
                    .filter_map(|l| l.split(' ').next_back().map(String::from))
                    .collect();
                if found.len() >= n {
                    return found;
                }
                assert!(
                    clock::now() < deadline,
                    "no {n} `{prefix}` lines within {within:?}: {:?}",
                    self.lines()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }

    /// Alive and not a zombie.
    fn alive(pid: &str) -> bool {
        pid.parse().is_ok_and(crate::process_group::runs)
    }

    async fn wait_dead(pid: &str, within: Duration) -> Instant {
        let deadline = clock::now() + within;
        while alive(pid) {
            assert!(
                clock::now() < deadline,
                "{pid} still alive after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        clock::now()
    }

    const RUNS: &str = r#"echo "start $PILOT_ELECTION_TERM $PILOT_ELECTION_LEADER $PILOT_ELECTION_NODE_ID $$" >>"$LOG"; trap 'echo "term $$" >>"$LOG"; exit 0' TERM; while :; do sleep 0.02; done"#;

    #[test]
    fn the_kill_delay_follows_the_timings() {
        let d = Timings::default();
        assert_eq!(after_lease(&d).as_millis(), 714);
        assert_eq!(kill_delay(&d).as_millis(), 238);
        // At the smallest safe T the window is still h·(1−r)/(1+r) wide (T rounded up to a
        // whole millisecond widens it by less than one).
        let mut t = Timings::default();
        t.election_timeout = t.min_election_timeout();
        let floor = t
            .heartbeat
            .mul_f64((1.0 - t.max_drift) / (1.0 + t.max_drift));
        let diff = after_lease(&t).as_secs_f64() - floor.as_secs_f64();
        assert!(
            (0.0..1e-3).contains(&diff),
            "{:?} vs {floor:?}",
            after_lease(&t)
        );
        assert!(kill_delay(&t) > Duration::ZERO);
    }

    #[test]
    fn flags_are_checked() {
        assert_eq!(ExecConfig::from_flags(None, false), Ok(None));
        assert!(ExecConfig::from_flags(None, true)
            .unwrap_err()
            .contains("needs --exec"));
        assert!(ExecConfig::from_flags(Some("  "), false).is_err());
        assert!(ExecConfig::from_flags(Some("a\0b"), false).is_err());
        let c = ExecConfig::from_flags(Some("run-job --x"), true).unwrap();
        assert_eq!(c.unwrap().command, "run-job --x");
    }

    #[tokio::test]
    async fn the_child_runs_while_leading_and_stops_when_the_lease_runs_out() {
        let lease_until = clock::now() + Duration::from_millis(600);
        // One snapshot and never another: the election loop is stuck.
        let f = fixture("lease", RUNS, false, view(7, Some(lease_until)));
        let start = f
            .wait_lines("start 7 n1 n1", 1, Duration::from_secs(5))
            .await;
        let died = wait_dead(&start[0], Duration::from_secs(5)).await;
        assert!(
            died >= lease_until,
            "stopped {:?} early",
            lease_until - died
        );
        let late = died - lease_until;
        assert!(
            late < Duration::from_millis(500),
            "stopped {late:?} after the lease"
        );
        f.wait_lines("term", 1, Duration::from_secs(2)).await;
        assert_eq!(
            f.wait_exits("stopped", 1).await,
            1,
            "{}",
            f.metrics.encode()
        );
    }

    #[tokio::test]
    async fn a_child_that_ignores_sigterm_is_killed_after_the_lease_and_the_kill_delay() {
        let lease_until = clock::now() + Duration::from_millis(500);
        let script = r#"trap '' TERM; echo "start $$" >>"$LOG"; while :; do sleep 0.02; done"#;
        let f = fixture("kill", script, false, view(3, Some(lease_until)));
        let start = f.wait_lines("start", 1, Duration::from_secs(5)).await;
        let died = wait_dead(&start[0], Duration::from_secs(5)).await;
        let kill_at = lease_until + kill_delay(&timings());
        assert!(
            died >= kill_at,
            "killed {:?} before its deadline",
            kill_at - died
        );
        assert!(died - kill_at < Duration::from_millis(500));
        let deadline = clock::now() + Duration::from_secs(2);
        while f.exits("killed") != 1 {
            assert!(clock::now() < deadline, "{}", f.metrics.encode());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_new_term_waits_for_the_old_child_to_exit() {
        let far = clock::now() + Duration::from_secs(60);
        // The first child takes 300 ms to stop after SIGTERM.
        let script = r#"echo "start $PILOT_ELECTION_TERM" >>"$LOG"; trap 'sleep 0.3; echo "exit $PILOT_ELECTION_TERM" >>"$LOG"; exit 0' TERM; while :; do sleep 0.02; done"#;
        let f = fixture("terms", script, false, view(1, Some(far)));
        f.wait_lines("start", 1, Duration::from_secs(5)).await;
        f.snap.send_replace(snapshot(view(2, Some(far))));
        f.wait_lines("start", 2, Duration::from_secs(5)).await;
        assert_eq!(f.lines(), ["start 1", "exit 1", "start 2"]);
    }

    #[tokio::test]
    async fn a_child_that_exits_while_leading_is_restarted_with_backoff() {
        let far = clock::now() + Duration::from_secs(60);
        let script = r#"echo "start $$" >>"$LOG"; exit 0"#;
        let f = fixture("restart", script, false, view(4, Some(far)));
        let t0 = clock::now();
        f.wait_lines("start", 1, Duration::from_secs(5)).await;
        f.wait_lines("start", 2, Duration::from_secs(5)).await;
        let t2 = clock::now();
        f.wait_lines("start", 3, Duration::from_secs(6)).await;
        let t3 = clock::now();
        assert!(t2 - t0 >= BACKOFF_FIRST, "{:?}", t2 - t0);
        assert!(
            t3 - t2 >= BACKOFF_FIRST * 2 - Duration::from_millis(50),
            "{:?}",
            t3 - t2
        );
        assert!(f.exits("ok") >= 2);
    }

    #[tokio::test]
    async fn a_failing_child_makes_the_leader_step_down_and_runs_again_if_refused() {
        let far = clock::now() + Duration::from_secs(60);
        let script = r#"echo "start $$" >>"$LOG"; exit 3"#;
        let mut f = fixture("fail", script, true, view(9, Some(far)));
        let cmd = tokio::time::timeout(Duration::from_secs(5), f.commands.recv())
            .await
            .expect("a step-down")
            .expect("open channel");
        assert!(
            matches!(
                cmd.input,
                Input::StepDown {
                    successor: None,
                    expected_term: Some(9)
                }
            ),
            "{:?}",
            cmd.input
        );
        assert_eq!(f.exits("failed"), 1);
        let _ = cmd.reply.send(Err(CommandError::NotLeader {
            term: 9,
            leader: None,
        }));
        // Refused while the snapshot still says this node leads: the child runs again.
        f.wait_lines("start", 2, Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_step_down_through_the_gate_reaches_the_loop_only_once_the_child_is_gone() {
        let far = clock::now() + Duration::from_secs(60);
        let mut f = fixture("gate", RUNS, false, view(5, Some(far)));
        let pid = f.wait_lines("start", 1, Duration::from_secs(5)).await[0].clone();
        let (to_loop, mut from_gate) = mpsc::channel(8);
        let api = f.exec.gate(to_loop, f.snap.subscribe());
        let (reply, answer) = oneshot::channel();
        let input = Input::StepDown {
            successor: None,
            expected_term: None,
        };
        api.send(Command { input, reply }).await.unwrap();
        let cmd = tokio::time::timeout(Duration::from_secs(5), from_gate.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(
            !alive(&pid),
            "the step-down reached the loop before the child stopped"
        );
        assert_eq!(
            f.lines().last().map(String::as_str),
            Some(format!("term {pid}").as_str())
        );
        let _ = cmd.reply.send(Ok(Outcome::SteppedDown {
            term: 5,
            successor: None,
        }));
        let answered = tokio::time::timeout(Duration::from_secs(5), answer).await;
        assert!(matches!(answered, Ok(Ok(Ok(_)))), "{answered:?}");
        // Still shown as leader in term 5 (the loop has not published yet): no new child. Once
        // leadership comes back in a later term, one starts.
        f.snap.send_replace(snapshot(view(5, None)));
        f.snap.send_replace(snapshot(view(6, Some(far))));
        let starts = f.wait_lines("start", 2, Duration::from_secs(5)).await;
        assert!(
            f.lines().iter().any(|l| l.starts_with("start 6")),
            "{starts:?}"
        );
        assert!(!f
            .lines()
            .iter()
            .any(|l| l.starts_with("start 5") && !l.ends_with(&pid)));
        assert!(
            f.commands.try_recv().is_err(),
            "nothing else went to the loop"
        );
    }
}
