//! The supervisor task: starts the child when this node leads, stops it (SIGTERM, then SIGKILL
//! by the kill delay) when leadership ends, restarts it with backoff, and answers the holds of
//! the gate and the release guard.

use super::*;
use crate::process_group::Watcher;

/// Whether a new child may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Free,
    /// Until released (a handover in progress) or for good (the node stops).
    Held,
    /// Until this node no longer leads in this term.
    UntilEnd(u64),
}

struct Restart {
    /// The term the backoff belongs to; a new term starts at once.
    term: u64,
    at: Option<Instant>,
    backoff: Backoff,
}

/// One run of the command: `sh -c` as the leader of its own process group.
struct Job {
    /// Dropped unfinished (the supervisor going away: a panic, an abort), it kills the group.
    group: ProcessGroup,
    pid: u32,
    watcher: Option<Watcher>,
    term: u64,
    started: Instant,
    /// The latest lease end seen while leading in `term`.
    lease_until: Instant,
    stop: Option<Stop>,
    /// `sh` has exited; the job ends once the rest of its group is gone too.
    exited: Option<Exited>,
}

struct Exited {
    status: ExitStatus,
    /// Before anything asked it to stop.
    on_its_own: bool,
}

struct Stop {
    since: Instant,
    kill_by: Instant,
    killed: bool,
}

/// Runs the command while this node leads; see the module documentation.
pub(super) struct Supervisor {
    config: ExecConfig,
    snapshot: watch::Receiver<Arc<Snapshot>>,
    commands: mpsc::Sender<Command>,
    metrics: Arc<Metrics>,
    control: mpsc::Receiver<Control>,
    control_tx: mpsc::Sender<Control>,
    job: Option<Job>,
    hold: Hold,
    /// Answered once no child runs.
    waiters: Vec<oneshot::Sender<()>>,
    restart: Restart,
}

impl Supervisor {
    /// A supervisor that takes its orders on `control` (`control_tx` is its own sender, for the
    /// step-down after a failure).
    pub(super) fn new(
        config: ExecConfig,
        snapshot: watch::Receiver<Arc<Snapshot>>,
        commands: mpsc::Sender<Command>,
        metrics: Arc<Metrics>,
        (control_tx, control): (mpsc::Sender<Control>, mpsc::Receiver<Control>),
    ) -> Supervisor {
        Supervisor {
            config,
            snapshot,
            commands,
            metrics,
            control,
            control_tx: control_tx.clone(),
            job: None,
            hold: Hold::Free,
            waiters: Vec::new(),
            restart: Restart {
                term: 0,
                at: None,
                backoff: RESTART_BACKOFF,
            },
        }
    }

    pub(super) async fn run(mut self) {
        // Set once the election loop has ended: the child is stopped for good.
        let mut closed = false;
        loop {
            let now = clock::now();
            let (view, timings) = {
                let snap = self.snapshot.borrow_and_update();
                (snap.view.clone(), snap.timings)
            };
            self.step(&view, &timings, now, closed).await;
            if self.job.is_none() {
                for w in self.waiters.drain(..) {
                    let _ = w.send(());
                }
                if closed {
                    return;
                }
            }
            let wake = self.next_wake(&view, now);
            tokio::select! {
                changed = self.snapshot.changed(), if !closed => {
                    if changed.is_err() {
                        closed = true;
                        self.hold = Hold::Held;
                    }
                }
                status = wait_sh(&mut self.job) => {
                    if let Some(job) = &mut self.job {
                        let on_its_own = job.stop.is_none();
                        job.exited = Some(Exited { status, on_its_own });
                    }
                }
                Some(c) = self.control.recv() => self.on_control(c),
                _ = clock::sleep_until(wake) => {}
            }
        }
    }

    /// Whether this node may run a child in `view.term` now.
    fn may_run(&mut self, view: &View, now: Instant) -> bool {
        let leading = view.is_leader_at(now);
        if let Hold::UntilEnd(t) = self.hold {
            if !leading || view.term != t {
                self.hold = Hold::Free;
            }
        }
        leading && self.hold == Hold::Free
    }

    async fn step(&mut self, view: &View, timings: &Timings, now: Instant, closed: bool) {
        let may_run = self.may_run(view, now);
        let exit_bound = closed.then(|| now + DRAIN_GRACE);
        if let Some(job) = &mut self.job {
            let leading_in_term = view.is_leader_at(now) && view.term == job.term;
            if leading_in_term {
                if let Some(l) = view.lease_until {
                    job.lease_until = job.lease_until.max(l);
                }
            }
            let lease_bound = (!leading_in_term).then(|| job.lease_until + kill_delay(timings));
            let bound = [lease_bound, exit_bound].into_iter().flatten().min();
            let keep = may_run && view.term == job.term && job.exited.is_none();
            if !keep {
                let kill_by = bound.unwrap_or(now + DRAIN_GRACE);
                job.begin_stop(now, kill_by);
            }
            if let (Some(stop), Some(b)) = (&mut job.stop, bound) {
                stop.kill_by = stop.kill_by.min(b);
            }
            if let Some(stop) = &mut job.stop {
                if now >= stop.kill_by && !stop.killed {
                    stop.killed = true;
                    job.group.kill();
                }
            }
            let gone = job.exited.is_some()
                && (job.stop.as_ref().is_some_and(|s| s.killed) || !job.group.alive());
            if gone {
                if let Some(job) = self.job.take() {
                    self.finish(job, view, now).await;
                }
            }
        }
        // A failed child may just have put a hold in place.
        if self.job.is_none() && !closed && self.may_run(view, now) {
            if self.restart.term != view.term {
                self.restart = Restart {
                    term: view.term,
                    at: None,
                    backoff: RESTART_BACKOFF,
                };
            }
            if self.restart.at.is_none_or(|at| now >= at) {
                self.start(view, timings, now);
            }
        }
    }

    fn next_wake(&self, view: &View, now: Instant) -> Instant {
        let mut wake = now + Duration::from_secs(3600);
        if let Some(l) = view.lease_until.filter(|_| view.is_leader_at(now)) {
            // The lease end, in case no snapshot says otherwise (a stuck election loop).
            wake = wake.min(l);
        }
        match &self.job {
            Some(job) => {
                if let Some(stop) = &job.stop {
                    if !stop.killed {
                        wake = wake.min(stop.kill_by);
                    }
                }
                if job.exited.is_some() {
                    wake = wake.min(now + GROUP_POLL);
                }
            }
            None => {
                if let Some(at) = self.restart.at {
                    wake = wake.min(at.max(now));
                }
            }
        }
        wake
    }

    fn on_control(&mut self, c: Control) {
        match c {
            Control::Hold { grace, done } => {
                self.hold = Hold::Held;
                self.stop_now(grace, done);
            }
            Control::Stop { grace, done } => self.stop_now(grace, done),
            Control::Release => self.hold = Hold::Free,
            Control::ReleaseAfter { term } => self.hold = Hold::UntilEnd(term),
        }
    }

    fn stop_now(&mut self, grace: Duration, done: oneshot::Sender<()>) {
        let now = clock::now();
        if let Some(job) = &mut self.job {
            job.begin_stop(now, now + grace);
            if let Some(stop) = &mut job.stop {
                stop.kill_by = stop.kill_by.min(now + grace);
            }
        }
        self.waiters.push(done);
    }

    fn start(&mut self, view: &View, timings: &Timings, now: Instant) {
        let Some(lease_until) = view.lease_until else {
            return;
        };
        let leader = view.leader.clone().unwrap_or_else(|| view.node_id.clone());
        let mut cmd = super::shell(&self.config.command);
        cmd.env("PILOT_ELECTION_TERM", view.term.to_string())
            .env("PILOT_ELECTION_LEADER", &leader)
            .env("PILOT_ELECTION_NODE_ID", &view.node_id)
            .env("PILOT_ELECTION_GROUP", &self.config.group);
        let group = match ProcessGroup::spawn(&mut cmd) {
            Ok(g) => g,
            Err(e) => {
                tracing::error!(error = %e, term = view.term, "could not start the exec command");
                self.metrics.exec_exit(ExecExit::Failed);
                self.schedule_restart(now, Duration::ZERO);
                return;
            }
        };
        let pid = group.id().unwrap_or_default();
        let watcher = match Watcher::spawn(pid, kill_delay(timings)) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "no watcher for the exec child: it would outlive a crash of this node");
                None
            }
        };
        tracing::info!(term = view.term, pid, "exec child started");
        self.metrics.exec_running.inc();
        self.job = Some(Job {
            group,
            pid,
            watcher,
            term: view.term,
            started: now,
            lease_until,
            stop: None,
            exited: None,
        });
    }

    fn schedule_restart(&mut self, now: Instant, ran: Duration) {
        if ran >= BACKOFF_MAX {
            self.restart.backoff.reset();
        }
        self.restart.at = Some(now + self.restart.backoff.next_delay());
    }

    /// Reports a job whose whole group is gone, then decides what comes next.
    async fn finish(&mut self, mut job: Job, view: &View, now: Instant) {
        // The whole group is gone: nothing of it may be signalled again.
        job.group.release();
        if let Some(w) = job.watcher.take() {
            w.dismiss().await;
        }
        self.metrics.exec_running.dec();
        let (status, on_its_own) = match &job.exited {
            Some(e) => (e.status, e.on_its_own),
            None => (ExitStatus::default(), false),
        };
        let ran = now.saturating_duration_since(job.started);
        let (code, signal) = exit_parts(&status);
        let (term, pid, ran_ms) = (job.term, job.pid, ran.as_millis() as u64);
        let outcome = match job.stop.as_ref().filter(|_| !on_its_own) {
            Some(stop) => {
                let stop_ms = now.saturating_duration_since(stop.since).as_millis() as u64;
                if stop.killed {
                    tracing::warn!(
                        term,
                        pid,
                        ran_ms,
                        stop_ms,
                        "exec child did not stop in time: killed (SIGKILL)"
                    );
                    ExecExit::Killed
                } else {
                    tracing::info!(
                        term,
                        pid,
                        ran_ms,
                        stop_ms,
                        code,
                        signal,
                        "exec child stopped"
                    );
                    ExecExit::Stopped
                }
            }
            None if status.success() => {
                tracing::info!(term, pid, ran_ms, "exec child exited (code 0)");
                ExecExit::Ok
            }
            None => {
                tracing::warn!(term, pid, ran_ms, code, signal, "exec child failed");
                ExecExit::Failed
            }
        };
        self.metrics.exec_exit(outcome);
        let still_leading = view.is_leader_at(now) && view.term == term;
        if !on_its_own || !still_leading {
            return;
        }
        // Also the wait if a step-down below is refused and the child runs here again.
        self.schedule_restart(now, ran);
        if outcome == ExecExit::Failed && self.config.step_down_on_failure {
            self.hold = Hold::Held;
            tokio::spawn(step_down_after_failure(
                self.commands.clone(),
                self.control_tx.clone(),
                term,
            ));
            return;
        }
        tracing::info!(
            term,
            backoff_ms = (self.restart.at.unwrap_or(now) - now).as_millis() as u64,
            "exec child will be restarted"
        );
    }
}

impl Job {
    /// SIGTERM to the whole group, once; SIGKILL follows at `kill_by`.
    fn begin_stop(&mut self, now: Instant, kill_by: Instant) {
        if self.stop.is_some() {
            return;
        }
        self.group.signal(Signal::SIGTERM);
        self.stop = Some(Stop {
            since: now,
            kill_by: kill_by.max(now),
            killed: false,
        });
    }
}

/// Resolves when the job's `sh` exits; never without a running `sh`.
async fn wait_sh(job: &mut Option<Job>) -> ExitStatus {
    match job {
        // One that cannot be waited for counts as gone; the group check decides the rest.
        Some(j) if j.exited.is_none() => j.group.wait().await,
        _ => std::future::pending().await,
    }
}

fn exit_parts(status: &ExitStatus) -> (Option<i32>, Option<i32>) {
    use std::os::unix::process::ExitStatusExt as _;
    (status.code(), status.signal())
}

/// `--exec-step-down-on-failure`: hand over so that another node runs the command; if the
/// election loop refuses (this node no longer leads, for one), the hold is lifted again.
async fn step_down_after_failure(
    commands: mpsc::Sender<Command>,
    control: mpsc::Sender<Control>,
    term: u64,
) {
    let (reply, answer) = oneshot::channel();
    let input = Input::StepDown {
        successor: None,
        expected_term: Some(term),
    };
    let sent = commands.send(Command { input, reply }).await.is_ok();
    let release = match (sent, answer.await) {
        (true, Ok(Ok(_))) => {
            tracing::info!(term, "stepped down because the exec child failed");
            Control::ReleaseAfter { term }
        }
        (_, result) => {
            tracing::warn!(
                term,
                ?result,
                "step-down after the exec child failed was refused"
            );
            Control::Release
        }
    };
    let _ = control.send(release).await;
}
