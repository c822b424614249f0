//! A typed async wrapper around the real `pilotctl` binary (Pilot Protocol 1.18.0), for the pilot
//! transport.
//!
//! The CLI's `--json` output is Pilot's documented, stable surface (the versions it is tested
//! with: [`compat`]): the start-up checks use it, and so does the pilot transport where the
//! daemon's socket is not used (`--pilot-io`, `transport::pilot::daemon`, which speaks the
//! daemon's IPC as observed, no Pilot code being linked or copied: Pilot is AGPL). Every child runs in its own process group so that a timeout can kill it
//! together with anything it spawned: the pip console script, for one, is a Python wrapper
//! whose Go child would otherwise outlive it.

use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, BufReader};
use tokio::process::{ChildStderr, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::process_group::ProcessGroup;

pub mod compat;

/// The longest NDJSON line a subscription accepts. An election message is far smaller; a line
/// past this is garbage or an attack, and buffering it would let the broker exhaust our memory.
pub const DEFAULT_MAX_LINE: usize = 256 * 1024;

/// How much of a child's stderr we keep: enough for pilotctl's one-line JSON error, bounded so a
/// chatty child cannot grow it without end.
const MAX_STDERR: usize = 64 * 1024;
/// pilotctl's one-shot success output is one short JSON line.
const MAX_OUTPUT: usize = 1024 * 1024;
/// How long a subscriber that closed its stdout may take to exit before its group is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// The `code` of a pilotctl `--json` error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidArgument,
    NotFound,
    AlreadyExists,
    NotRunning,
    ConnectionFailed,
    Timeout,
    PermissionDenied,
    Internal,
    /// A code outside the documented list; 1.18.0 also emits `trust_required`.
    Other(String),
}

impl ErrorCode {
    pub fn parse(code: &str) -> ErrorCode {
        match code {
            "invalid_argument" => ErrorCode::InvalidArgument,
            "not_found" => ErrorCode::NotFound,
            "already_exists" => ErrorCode::AlreadyExists,
            "not_running" => ErrorCode::NotRunning,
            "connection_failed" => ErrorCode::ConnectionFailed,
            "timeout" => ErrorCode::Timeout,
            "permission_denied" => ErrorCode::PermissionDenied,
            "internal" => ErrorCode::Internal,
            other => ErrorCode::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NotFound => "not_found",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::NotRunning => "not_running",
            ErrorCode::ConnectionFailed => "connection_failed",
            ErrorCode::Timeout => "timeout",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::Internal => "internal",
            ErrorCode::Other(code) => code,
        }
    }

    /// Transient conditions (daemon restarting, link down, slow peer) that a later attempt may
    /// get past; everything else would fail the same way again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ErrorCode::ConnectionFailed | ErrorCode::Timeout | ErrorCode::NotRunning
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PilotctlError {
    /// Distinct from every runtime failure: the operator has to install or point at the
    /// binary, and the CLI maps this to exit 69 (EX_UNAVAILABLE).
    #[error("pilotctl not usable at {}: {reason}", path.display())]
    Unavailable { path: PathBuf, reason: String },
    #[error("spawning {}: {source}", path.display())]
    Spawn { path: PathBuf, source: io::Error },
    /// pilotctl ran and reported an error in its `--json` envelope on stderr.
    #[error("pilotctl {command}: {code}: {message}")]
    Cli {
        command: &'static str,
        code: ErrorCode,
        message: String,
        hint: Option<String>,
    },
    /// The daemon, spoken to over its socket (the pilot transport's path without a process per
    /// message), reported an error or broke off; the code is the one pilotctl would give.
    #[error("daemon socket {command}: {code}: {message}")]
    Daemon {
        command: &'static str,
        code: ErrorCode,
        message: String,
    },
    /// Our own deadline passed; the child's whole process group was killed.
    #[error("pilotctl {command} did not finish within {after:?}; process group {pgid} killed")]
    TimedOut {
        command: &'static str,
        after: Duration,
        pgid: u32,
    },
    /// pilotctl exited without the JSON we expect (a crash, a different version, a wrapper).
    #[error("pilotctl {command}: unexpected output ({status}): {detail}")]
    Unexpected {
        command: &'static str,
        status: String,
        detail: String,
    },
    #[error("reading pilotctl {command} output: {source}")]
    Io {
        command: &'static str,
        source: io::Error,
    },
}

impl PilotctlError {
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            PilotctlError::Cli { code, .. } | PilotctlError::Daemon { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether the transport should try again later. Our own timeout counts as pilotctl's
    /// `timeout`; a missing binary or garbled output will not fix itself.
    pub fn is_retryable(&self) -> bool {
        match self {
            PilotctlError::Cli { code, .. } | PilotctlError::Daemon { code, .. } => {
                code.is_retryable()
            }
            PilotctlError::TimedOut { .. } => true,
            _ => false,
        }
    }
}

/// `pilotctl --json info` → `.data`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct NodeInfo {
    pub node_id: u64,
    pub address: String,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
}

/// `pilotctl --json publish` → `.data`. Only says the bytes were written to the broker.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct PublishReceipt {
    pub bytes: u64,
    pub target: String,
    pub topic: String,
}

#[derive(Deserialize)]
struct Envelope<T> {
    status: String,
    data: Option<T>,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    code: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    hint: Option<String>,
}

/// One line of `pilotctl --json subscribe` without `--count`: no envelope.
#[derive(Deserialize)]
struct EventLine {
    data: String,
}

/// How to run pilotctl: which binary, which daemon socket, how long a one-shot command may take.
#[derive(Debug, Clone)]
pub struct Pilotctl {
    path: PathBuf,
    socket: Option<PathBuf>,
    timeout: Duration,
}

impl Pilotctl {
    /// Checks up front that `path` is an executable file, so a misconfiguration is reported
    /// once, by path, rather than as a spawn failure on every message.
    pub fn new(path: impl Into<PathBuf>) -> Result<Pilotctl, PilotctlError> {
        let path = path.into();
        check_executable(&path)?;
        Ok(Pilotctl {
            path,
            socket: None,
            timeout: Duration::from_secs(5),
        })
    }

    /// The daemon socket, passed as `PILOT_SOCKET`; without it pilotctl uses its default.
    pub fn with_socket(mut self, socket: impl Into<PathBuf>) -> Pilotctl {
        self.socket = Some(socket.into());
        self
    }

    /// The deadline for one-shot commands (`info`, `publish`).
    pub fn with_timeout(mut self, timeout: Duration) -> Pilotctl {
        self.timeout = timeout;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.path);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(socket) = &self.socket {
            cmd.env("PILOT_SOCKET", socket);
        }
        cmd
    }

    fn spawn(&self, args: &[&str]) -> Result<ProcessGroup, PilotctlError> {
        ProcessGroup::spawn(&mut self.command(args)).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => {
                PilotctlError::Unavailable {
                    path: self.path.clone(),
                    reason: source.to_string(),
                }
            }
            _ => PilotctlError::Spawn {
                path: self.path.clone(),
                source,
            },
        })
    }

    fn spawn_piped(
        &self,
        args: &[&str],
    ) -> Result<(ProcessGroup, ChildStdout, ChildStderr), PilotctlError> {
        let mut group = self.spawn(args)?;
        let child = group.child_mut();
        match (child.stdout.take(), child.stderr.take()) {
            (Some(stdout), Some(stderr)) => Ok((group, stdout, stderr)),
            // Dropped unreleased: killed.
            _ => Err(PilotctlError::Spawn {
                path: self.path.clone(),
                source: io::Error::other("child pipes missing"),
            }),
        }
    }

    /// Runs a one-shot `pilotctl --json` command to completion under the deadline and returns
    /// its `.data`.
    async fn run<T: for<'de> Deserialize<'de>>(
        &self,
        command: &'static str,
        args: &[&str],
    ) -> Result<T, PilotctlError> {
        let (stdout, status) = self.run_raw(command, &[&["--json"], args].concat()).await?;
        let line = String::from_utf8_lossy(&stdout);
        match serde_json::from_str::<Envelope<T>>(line.trim()) {
            Ok(Envelope {
                status: outcome,
                data: Some(data),
            }) if outcome == "ok" => Ok(data),
            Ok(_) => Err(unexpected(command, status, "envelope without ok data")),
            Err(e) => Err(unexpected(command, status, &format!("{e}: {line}"))),
        }
    }

    /// Runs a one-shot command to completion under the deadline; its stdout when it succeeded.
    async fn run_raw(
        &self,
        command: &'static str,
        args: &[&str],
    ) -> Result<(Vec<u8>, ExitStatus), PilotctlError> {
        let (mut group, stdout, stderr) = self.spawn_piped(args)?;
        let pgid = group.id().unwrap_or(0);
        let finished = tokio::time::timeout(self.timeout, async {
            tokio::join!(
                read_bounded(stdout, MAX_OUTPUT),
                read_bounded(stderr, MAX_STDERR),
                group.wait()
            )
        })
        .await;
        let (stdout, stderr, status) = match finished {
            Ok(done) => {
                group.release();
                done
            }
            Err(_) => {
                // The join is unfinished: the leader is unreaped or a descendant still holds its
                // pipes, so the group is still there to be killed.
                group.kill();
                let _ = tokio::time::timeout(Duration::from_secs(2), group.wait()).await;
                group.release();
                return Err(PilotctlError::TimedOut {
                    command,
                    after: self.timeout,
                    pgid,
                });
            }
        };
        if !status.success() {
            return Err(failure(command, status, &stderr));
        }
        Ok((stdout, status))
    }

    /// `pilotctl version`: the CLI's own version string, printed as plain text (1.18.0 prints
    /// `1.18.0`, with or without `--json`); no daemon is needed.
    pub async fn version(&self) -> Result<String, PilotctlError> {
        let (stdout, _) = self.run_raw("version", &["version"]).await?;
        Ok(String::from_utf8_lossy(&stdout).trim().to_string())
    }

    /// `pilotctl --json info`: this node's id (a number at `.data.node_id`) and address.
    pub async fn info(&self) -> Result<NodeInfo, PilotctlError> {
        self.run("info", &["info"]).await
    }

    /// Publishes one event through `broker` (a hostname or address). The payload goes as a
    /// single `--data=` token so that text starting with `--` is never read as a flag.
    pub async fn publish(
        &self,
        broker: &str,
        topic: &str,
        data: &str,
    ) -> Result<PublishReceipt, PilotctlError> {
        let data_arg = format!("--data={data}");
        self.run("publish", &["publish", broker, topic, &data_arg])
            .await
    }

    /// Starts a long-lived `pilotctl --json subscribe`; events arrive only while it runs.
    pub fn subscribe(&self, broker: &str, topic: &str) -> Result<Subscription, PilotctlError> {
        let (group, stdout, stderr) = self.spawn_piped(&["--json", "subscribe", broker, topic])?;
        Ok(Subscription {
            lines: LineReader::new(stdout, DEFAULT_MAX_LINE),
            stderr: Some(tokio::spawn(read_bounded(stderr, MAX_STDERR))),
            pid: group.id().unwrap_or(0),
            group,
            garbage_lines: 0,
            oversized_lines: 0,
            finished: false,
        })
    }
}

/// Verifies that `path` names an executable regular file.
pub fn check_executable(path: &Path) -> Result<(), PilotctlError> {
    let unavailable = |reason: String| PilotctlError::Unavailable {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| unavailable(e.to_string()))?;
    if !meta.is_file() {
        return Err(unavailable("not a regular file".into()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(unavailable("not executable".into()));
    }
    Ok(())
}

fn unexpected(command: &'static str, status: ExitStatus, detail: &str) -> PilotctlError {
    PilotctlError::Unexpected {
        command,
        status: status.to_string(),
        detail: detail.chars().take(512).collect(),
    }
}

/// Classifies a failed run by the JSON error pilotctl prints on stderr.
fn failure(command: &'static str, status: ExitStatus, stderr: &[u8]) -> PilotctlError {
    let text = String::from_utf8_lossy(stderr);
    let parsed = text
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<ErrorEnvelope>(line.trim()).ok());
    match parsed {
        Some(e) => PilotctlError::Cli {
            command,
            code: ErrorCode::parse(&e.code),
            message: e.message.or(e.error).unwrap_or_default(),
            hint: e.hint,
        },
        None => unexpected(command, status, text.trim()),
    }
}

/// Keeps the first `max` bytes and drains the rest, so a chatty child neither grows our memory
/// nor blocks on a full pipe.
async fn read_bounded<R: AsyncRead + Unpin>(mut reader: R, max: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let _ = (&mut reader).take(max as u64).read_to_end(&mut kept).await;
    let _ = tokio::io::copy(&mut reader, &mut tokio::io::sink()).await;
    kept
}

/// What one read from a line-oriented stream produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Text(Vec<u8>),
    /// A line longer than the limit; its bytes were discarded up to the next newline.
    Oversized,
    Eof,
}

/// Reads newline-terminated lines while never holding more than `max` bytes of one line.
///
/// Cancel-safe: a partial line lives in the reader, not in the future, so `next_line` can sit
/// in a `select!` loop without losing or corrupting events.
pub struct LineReader<R> {
    inner: BufReader<R>,
    max: usize,
    line: Vec<u8>,
    oversized: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(inner: R, max: usize) -> LineReader<R> {
        LineReader {
            inner: BufReader::new(inner),
            max,
            line: Vec::new(),
            oversized: false,
        }
    }

    fn finish_line(&mut self) -> Line {
        let line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.oversized) {
            Line::Oversized
        } else {
            Line::Text(line)
        }
    }

    pub async fn next_line(&mut self) -> io::Result<Line> {
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                // A last line without a newline still counts; an empty tail is the end.
                return Ok(if self.line.is_empty() && !self.oversized {
                    Line::Eof
                } else {
                    self.finish_line()
                });
            }
            let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            if !self.oversized {
                if self.line.len() + chunk.len() > self.max {
                    self.oversized = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(chunk);
                }
            }
            let used = done.unwrap_or(buf.len());
            self.inner.consume(used);
            if done.is_some() {
                return Ok(self.finish_line());
            }
        }
    }
}

/// A running `pilotctl subscribe`. Dropping it kills the child's process group.
pub struct Subscription {
    group: ProcessGroup,
    pid: u32,
    lines: LineReader<ChildStdout>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    garbage_lines: u64,
    oversized_lines: u64,
    finished: bool,
}

impl Subscription {
    /// The next event's `data` string. `Some(Err(..))` reports how the child ended (pilotctl
    /// exits with `connection_failed` when the broker connection drops); `None` follows it, or
    /// a clean exit. Lines that are not events are counted and skipped. Cancel-safe, for use
    /// in `select!`.
    pub async fn next(&mut self) -> Option<Result<String, PilotctlError>> {
        if self.finished {
            return None;
        }
        loop {
            match self.lines.next_line().await {
                Ok(Line::Text(bytes)) => match serde_json::from_slice::<EventLine>(&bytes) {
                    Ok(event) => return Some(Ok(event.data)),
                    Err(_) => {
                        self.garbage_lines += 1;
                        tracing::warn!(
                            line = %String::from_utf8_lossy(&bytes[..bytes.len().min(200)]),
                            "skipping a pilotctl subscribe line that is not an event"
                        );
                    }
                },
                Ok(Line::Oversized) => {
                    self.oversized_lines += 1;
                    tracing::warn!(
                        max = self.lines.max,
                        "skipping an oversized pilotctl subscribe line"
                    );
                }
                Ok(Line::Eof) => {
                    let exit = self.exit().await;
                    self.finished = true;
                    return exit.err().map(Err);
                }
                Err(source) => {
                    self.finished = true;
                    self.group.kill();
                    self.group.release();
                    return Some(Err(PilotctlError::Io {
                        command: "subscribe",
                        source,
                    }));
                }
            }
        }
    }

    async fn exit(&mut self) -> Result<(), PilotctlError> {
        let status = match tokio::time::timeout(EXIT_GRACE, self.group.wait()).await {
            Ok(status) => status,
            Err(_) => self.group.kill_and_wait().await,
        };
        self.group.release();
        let stderr = match self.stderr.as_mut() {
            Some(task) => task.await.unwrap_or_default(),
            None => Vec::new(),
        };
        self.stderr = None;
        if status.success() {
            Ok(())
        } else {
            Err(failure("subscribe", status, &stderr))
        }
    }

    /// Lines that were not JSON events (skipped).
    pub fn garbage_lines(&self) -> u64 {
        self.garbage_lines
    }

    /// Lines longer than the limit (skipped).
    pub fn oversized_lines(&self) -> u64 {
        self.oversized_lines
    }

    /// The child's process id, which is also its process group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_retry_policy() {
        for code in [
            "invalid_argument",
            "not_found",
            "already_exists",
            "not_running",
            "connection_failed",
            "timeout",
            "permission_denied",
            "internal",
            "trust_required",
        ] {
            assert_eq!(ErrorCode::parse(code).as_str(), code);
        }
        let retryable: Vec<&str> = ["connection_failed", "timeout", "not_running"].to_vec();
        for code in [
            "invalid_argument",
            "not_found",
            "internal",
            "trust_required",
        ] {
            assert!(!ErrorCode::parse(code).is_retryable(), "{code}");
        }
        for code in retryable {
            assert!(ErrorCode::parse(code).is_retryable(), "{code}");
        }
    }

    #[test]
    fn stderr_json_is_classified() {
        let stderr = br#"{"code":"connection_failed","error":"recv: EOF","message":"recv: EOF","status":"error"}"#;
        let status = std::process::ExitStatus::from_raw(256);
        let err = failure("subscribe", status, stderr);
        assert_eq!(err.code(), Some(&ErrorCode::ConnectionFailed));
        assert!(err.is_retryable());
        let err = failure("publish", status, b"segfault\n");
        assert!(matches!(err, PilotctlError::Unexpected { .. }));
        assert!(!err.is_retryable());
    }

    use std::os::unix::process::ExitStatusExt as _;

    #[tokio::test]
    async fn line_reader_bounds_lines() {
        let input: &[u8] = b"short\n0123456789abcdef\nok\ntail";
        let mut reader = LineReader::new(input, 8);
        assert_eq!(
            reader.next_line().await.unwrap(),
            Line::Text(b"short".to_vec())
        );
        assert_eq!(reader.next_line().await.unwrap(), Line::Oversized);
        assert_eq!(
            reader.next_line().await.unwrap(),
            Line::Text(b"ok".to_vec())
        );
        assert_eq!(
            reader.next_line().await.unwrap(),
            Line::Text(b"tail".to_vec())
        );
        assert_eq!(reader.next_line().await.unwrap(), Line::Eof);
    }

    #[tokio::test]
    async fn a_cancelled_read_keeps_its_partial_line() {
        use tokio::io::AsyncWriteExt as _;
        let (mut writer, reader) = tokio::io::duplex(64);
        let mut lines = LineReader::new(reader, 1024);
        writer.write_all(b"{\"data\":").await.unwrap();
        let cancelled = tokio::time::timeout(Duration::from_millis(20), lines.next_line()).await;
        assert!(
            cancelled.is_err(),
            "no newline yet, so the read must still be pending"
        );
        writer.write_all(b"\"x\"}\n").await.unwrap();
        assert_eq!(
            lines.next_line().await.unwrap(),
            Line::Text(br#"{"data":"x"}"#.to_vec())
        );
    }

    #[test]
    fn missing_binary_names_the_path() {
        let err = Pilotctl::new("/nonexistent/pilotctl").unwrap_err();
        assert!(matches!(err, PilotctlError::Unavailable { .. }));
        assert!(err.to_string().contains("/nonexistent/pilotctl"));
    }
}
