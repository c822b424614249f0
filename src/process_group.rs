//! A child that leads its own process group, the one way this node starts a process: `--exec`,
//! `--on-change` hooks, health checks, pilotctl and leader-only jobs all go through it.
//!
//! Why a group: a command line runs as `sh -c`, which may start children of its own; a signal
//! to the group reaches all of them, where a signal to `sh` alone would leave them running. Why
//! one module: each of those owners used to start, time out and kill its group by hand, with
//! the same two traps each time: a group id must never be signalled once it may have been
//! reused (its leader reaped and every member gone), and never as 0 (that is this node's own
//! group); and a child whose owner goes away half-way (a task aborted at exit, a panic) must not
//! outlive it, so dropping a group that was not [released](ProcessGroup::release) kills it.

use std::io;
use std::process::ExitStatus;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// A running child and its process group; see the module documentation.
#[derive(Debug)]
pub struct ProcessGroup {
    child: Child,
    /// `None` once nothing may be signalled any more: released, known gone, or no valid id.
    pgid: Option<Pid>,
    /// The leader's exit status, once reaped.
    status: Option<ExitStatus>,
}

impl ProcessGroup {
    /// Starts `cmd` as the leader of a new process group.
    pub fn spawn(cmd: &mut Command) -> io::Result<ProcessGroup> {
        cmd.process_group(0);
        let child = cmd.spawn()?;
        // Never 0 (this node's own group) nor 1: such an id means the spawn told us nothing.
        let pgid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .filter(|p| *p > 1)
            .map(Pid::from_raw);
        Ok(ProcessGroup {
            child,
            pgid,
            status: None,
        })
    }

    /// The leader's process id, which is also the group's id.
    pub fn id(&self) -> Option<u32> {
        self.pgid.map(|p| p.as_raw() as u32)
    }

    /// The child, for its pipes.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Waits for the leader to exit and reaps it. The rest of the group, if any, is still
    /// guarded: [`ProcessGroup::release`] when what the leader left behind is not ours to stop.
    /// Cancel-safe. A leader that cannot be waited for (tokio fails only when it was reaped
    /// elsewhere) counts as exited with status 0.
    pub async fn wait(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let status = self.child.wait().await.unwrap_or_default();
        self.status = Some(status);
        status
    }

    /// Sends `signal` to every process of the group; nothing once the group is released or
    /// gone. After the leader was reaped, the group is signalled only while one of its processes
    /// still runs: until then the kernel keeps its id from being reused.
    pub fn signal(&mut self, signal: Signal) {
        let Some(pgid) = self.pgid else {
            return;
        };
        if self.status.is_some() && !group_alive(pgid) {
            self.pgid = None;
            return;
        }
        // ESRCH only means the group has just gone.
        let _ = killpg(pgid, signal);
    }

    /// SIGKILL to the whole group.
    pub fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
    }

    /// Whether any process of the group still runs (see [`group_alive`]).
    pub fn alive(&self) -> bool {
        self.pgid.is_some_and(group_alive)
    }

    /// The owner is done with the group: nothing of it is signalled from here on, dropping it
    /// included.
    pub fn release(&mut self) {
        self.pgid = None;
    }

    /// SIGKILL to the group, then the leader reaped; released after.
    pub async fn kill_and_wait(&mut self) -> ExitStatus {
        self.kill();
        let status = self.wait().await;
        self.release();
        status
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // The owner went away with the group still in its charge (an abort, a panic).
        if self.pgid.is_some() {
            self.kill();
        }
    }
}

/// A `sh` in its own process group that waits for end of file on its stdin, whose only writer
/// is this process: when this process dies however it dies (`kill -9` included), the kernel
/// closes the pipe and the watcher sends SIGTERM to the watched group, then SIGKILL after
/// `delay`. Nothing is ever written to the pipe. For children that must not outlive this
/// process: `--exec`'s, and the command of `pilot-election once`.
pub struct Watcher {
    group: ProcessGroup,
    /// Held open while the watched group runs; its end of file is the signal.
    stdin: Option<tokio::process::ChildStdin>,
}

/// `read` is a builtin: until this process dies the watcher is one process, no `cat` child that
/// would outlive it (and, where this node is PID 1 without an init, stay a zombie).
const WATCHER_SCRIPT: &str = r#"while read -r _; do :; done; kill -TERM -"$1" 2>/dev/null; sleep "$2"; kill -KILL -"$1" 2>/dev/null"#;

impl Watcher {
    /// Starts watching process group `pgid` on behalf of this process.
    pub fn spawn(pgid: u32, delay: std::time::Duration) -> io::Result<Watcher> {
        let mut group = ProcessGroup::spawn(
            Command::new("/bin/sh")
                .arg("-c")
                .arg(WATCHER_SCRIPT)
                .arg("pilot-election-watcher")
                .arg(pgid.to_string())
                .arg(format!("{:.3}", delay.as_secs_f64()))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        )?;
        let stdin = group.child_mut().stdin.take();
        Ok(Watcher { group, stdin })
    }

    /// Ends the watcher without letting it act.
    pub async fn dismiss(mut self) {
        self.group.kill_and_wait().await;
    }

    /// What the kernel does when this process dies (for tests).
    pub fn close_pipe(&mut self) {
        drop(self.stdin.take());
    }
}

/// Whether any process of the group still runs. Zombies do not count: where this node is PID 1
/// without an init (a container started without `--init`), the command's orphans become this
/// process's zombies, which nothing reaps, and they would hold every stop until its SIGKILL.
pub fn group_alive(pgid: Pid) -> bool {
    if killpg(pgid, None).is_err() {
        return false;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return true;
    };
    procs.flatten().any(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let (running, group) = state_of(&stat);
        running && group == Some(pgid.as_raw())
    })
}

/// Whether process `pid` runs: it exists and is not a zombie (dead, only not collected yet).
pub fn runs(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    state_of(&stat).0
}

/// From the text of `/proc/PID/stat`: whether the process runs (a state other than zombie or
/// dead), and its process group. The fields after the command name, which may hold any
/// character but ends with the last `)`, are state, ppid, pgid.
fn state_of(stat: &str) -> (bool, Option<i32>) {
    let mut fields = stat.rsplit(')').next().unwrap_or("").split_whitespace();
    let state = fields.next();
    let group = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
    (state.is_some_and(|s| s != "Z" && s != "X"), group)
}

#[cfg(test)]
mod tests {
    use std::process::Stdio;
    use std::time::Duration;

    use tokio::io::AsyncBufReadExt as _;

    use super::*;
    use crate::clock;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script).stdin(Stdio::null());
        cmd
    }

    /// The pid of a background `sleep` the script prints first, read from its stdout.
    async fn spawn_with_grandchild(script: &str) -> (ProcessGroup, Pid) {
        let mut cmd = sh(script);
        cmd.stdout(Stdio::piped());
        let mut g = ProcessGroup::spawn(&mut cmd).unwrap();
        let out = g.child_mut().stdout.take().unwrap();
        let mut line = String::new();
        tokio::io::BufReader::new(out)
            .read_line(&mut line)
            .await
            .unwrap();
        (g, Pid::from_raw(line.trim().parse().unwrap()))
    }

    fn runs_pid(pid: Pid) -> bool {
        runs(pid.as_raw() as u32)
    }

    async fn until_gone(pid: Pid) {
        let deadline = clock::now() + Duration::from_secs(10);
        while runs_pid(pid) {
            assert!(clock::now() < deadline, "{pid} still runs");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn it_leads_its_own_group() {
        let mut g = ProcessGroup::spawn(&mut sh("exit 3")).unwrap();
        let pid = g.id().unwrap();
        assert_ne!(nix::unistd::getpgrp().as_raw() as u32, pid);
        assert_eq!(g.wait().await.code(), Some(3));
        // Waited for again, the status it was reaped with.
        assert_eq!(g.wait().await.code(), Some(3));
        // Reaped, and nothing of it runs: never signalled again.
        assert!(!g.alive());
        g.kill();
        assert_eq!(g.id(), None);
    }

    #[tokio::test]
    async fn a_kill_reaches_the_whole_group_and_releases_it() {
        let (mut g, grandchild) = spawn_with_grandchild("sleep 30 & echo $!; wait").await;
        assert!(!g.kill_and_wait().await.success());
        assert_eq!(g.id(), None, "released: nothing of it is signalled again");
        until_gone(grandchild).await;
    }

    #[tokio::test]
    async fn dropping_an_unreleased_group_kills_it() {
        let (g, grandchild) = spawn_with_grandchild("sleep 30 & echo $!; sleep 30").await;
        assert!(g.alive());
        drop(g);
        until_gone(grandchild).await;
    }

    #[tokio::test]
    async fn a_released_group_is_left_alone() {
        let (mut g, grandchild) = spawn_with_grandchild("sleep 30 & echo $!").await;
        assert!(g.wait().await.success());
        g.release();
        g.kill();
        drop(g);
        assert!(runs_pid(grandchild), "a released group was signalled");
        let _ = nix::sys::signal::kill(grandchild, Signal::SIGKILL);
        until_gone(grandchild).await;
    }

    #[tokio::test]
    async fn after_the_leader_exits_the_rest_of_the_group_is_still_guarded() {
        let (mut g, grandchild) = spawn_with_grandchild("sleep 30 & echo $!").await;
        assert!(g.wait().await.success());
        assert!(g.alive(), "the background sleep keeps the group alive");
        g.signal(Signal::SIGTERM);
        until_gone(grandchild).await;
        assert!(!g.alive());
    }

    #[tokio::test]
    async fn the_watcher_kills_the_group_when_its_pipe_closes() {
        let (mut g, grandchild) = spawn_with_grandchild("sleep 30 & echo $!; wait").await;
        let mut w = Watcher::spawn(g.id().unwrap(), Duration::from_millis(100)).unwrap();
        assert!(g.alive());
        w.close_pipe();
        let status = tokio::time::timeout(Duration::from_secs(5), g.wait())
            .await
            .expect("the group was signalled");
        assert!(!status.success());
        until_gone(grandchild).await;
        w.dismiss().await;
    }

    #[test]
    fn a_group_of_zombies_is_not_alive() {
        use std::os::unix::process::CommandExt as _;
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "exit 0"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = Pid::from_raw(child.id() as i32);
        let deadline = clock::now() + Duration::from_secs(5);
        while runs_pid(pgid) {
            assert!(clock::now() < deadline, "`sh -c 'exit 0'` still runs");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Not reaped: the kernel still counts it in the group.
        assert!(killpg(pgid, None).is_ok());
        assert!(!group_alive(pgid));
        child.wait().unwrap();
        assert!(!group_alive(pgid));
    }
}
