//! What outlives this process: a watcher `sh` that stops the child's process group when this
//! process dies however it dies, and the check of whether any process of a group still runs.

use super::*;

/// A `sh` in its own process group that waits for end of file on its stdin, whose only writer
/// is this process: when this process dies however it dies, the kernel closes the pipe and the
/// watcher sends SIGTERM to the child's group, then SIGKILL after the kill delay. Nothing is
/// ever written to the pipe.
pub(super) struct Watcher {
    pub(super) group: ProcessGroup,
    /// Held open for as long as the job runs; its end of file is the signal.
    pub(super) _stdin: Option<ChildStdin>,
}

/// `read` is a builtin: until this process dies the watcher is one process, no `cat` child that
/// would outlive it (and, where this node is PID 1 without an init, stay a zombie).
const WATCHER_SCRIPT: &str = r#"while read -r _; do :; done; kill -TERM -"$1" 2>/dev/null; sleep "$2"; kill -KILL -"$1" 2>/dev/null"#;

pub(super) fn spawn_watcher(pgid: u32, delay: Duration) -> std::io::Result<Watcher> {
    let mut group = ProcessGroup::spawn(
        Process::new("/bin/sh")
            .arg("-c")
            .arg(WATCHER_SCRIPT)
            .arg("pilot-election-exec-watcher")
            .arg(pgid.to_string())
            .arg(format!("{:.3}", delay.as_secs_f64()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    let stdin = group.child_mut().stdin.take();
    Ok(Watcher {
        group,
        _stdin: stdin,
    })
}

impl Watcher {
    /// Ends the watcher without letting it act.
    pub(super) async fn dismiss(mut self) {
        self.group.kill_and_wait().await;
    }
}
