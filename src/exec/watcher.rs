//! What outlives this process: a watcher `sh` that stops the child's process group when this
//! process dies however it dies, and the check of whether any process of a group still runs.

use super::*;

/// A `sh` in its own process group that waits for end of file on its stdin, whose only writer
/// is this process: when this process dies however it dies, the kernel closes the pipe and the
/// watcher sends SIGTERM to the child's group, then SIGKILL after the kill delay. Nothing is
/// ever written to the pipe.
pub(super) struct Watcher {
    pub(super) child: Child,
    /// Held open for as long as the job runs; its end of file is the signal.
    pub(super) _stdin: Option<ChildStdin>,
}

/// `read` is a builtin: until this process dies the watcher is one process, no `cat` child that
/// would outlive it (and, where this node is PID 1 without an init, stay a zombie).
const WATCHER_SCRIPT: &str = r#"while read -r _; do :; done; kill -TERM -"$1" 2>/dev/null; sleep "$2"; kill -KILL -"$1" 2>/dev/null"#;

pub(super) fn spawn_watcher(pgid: Pid, delay: Duration) -> std::io::Result<Watcher> {
    let mut child = Process::new("/bin/sh")
        .arg("-c")
        .arg(WATCHER_SCRIPT)
        .arg("pilot-election-exec-watcher")
        .arg(pgid.as_raw().to_string())
        .arg(format!("{:.3}", delay.as_secs_f64()))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let stdin = child.stdin.take();
    Ok(Watcher {
        child,
        _stdin: stdin,
    })
}

impl Watcher {
    /// Ends the watcher without letting it act.
    pub(super) async fn dismiss(mut self) {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.wait().await;
    }
}

/// Whether any process of the group still runs. Zombies do not count: where this node is PID 1
/// without an init (a container started without `--init`), the command's orphans become this
/// process's zombies, which nothing reaps, and they would hold every stop until its SIGKILL.
pub(super) fn group_alive(pgid: Pid) -> bool {
    if killpg(pgid, None).is_err() {
        return false;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return true;
    };
    procs.flatten().any(|e| {
        // After the command name: state, ppid, pgid.
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let mut fields = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = fields.next();
        let group = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
        group == Some(pgid.as_raw()) && state.is_some_and(|s| s != "Z" && s != "X")
    })
}
