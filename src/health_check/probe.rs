//! One check: `sh -c` in its own process group until it exits or its timeout (then SIGKILL to
//! the group), or one `GET` of the URL with the same timeout.

use std::os::unix::process::ExitStatusExt as _;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _};

use super::Check;
use crate::clock;
use crate::metrics::HealthCheckOutcome;
use crate::process_group::ProcessGroup;

/// What `/status` keeps of a check's output: enough for the first line of an error.
pub const DETAIL_MAX: usize = 512;
/// How long the output is still read after `sh` exited: a command that left something running
/// with the pipes open must not hold the check until its timeout.
const OUTPUT_GRACE: Duration = Duration::from_millis(100);

/// How one check ended, as metrics, logs and `/status` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0, or a 2xx answer.
    Pass,
    /// Another exit code, a signal, another status, no answer, or the command could not start.
    Fail,
    /// Still running at `--health-timeout`.
    TimedOut,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::TimedOut => "timed_out",
        }
    }
}

impl From<Outcome> for HealthCheckOutcome {
    fn from(outcome: Outcome) -> HealthCheckOutcome {
        match outcome {
            Outcome::Pass => HealthCheckOutcome::Pass,
            Outcome::Fail => HealthCheckOutcome::Fail,
            Outcome::TimedOut => HealthCheckOutcome::TimedOut,
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probed {
    pub outcome: Outcome,
    /// The command's exit code.
    pub exit_code: Option<i32>,
    /// The URL's HTTP status.
    pub http_status: Option<u16>,
    pub took: Duration,
    /// The start of the command's output (stdout, then stderr), or why it failed, at most
    /// [`DETAIL_MAX`] bytes, cut at a character boundary.
    pub detail: String,
}

/// Runs one check; never longer than `timeout` (plus the kill).
pub async fn probe(check: &Check, http: &reqwest::Client, timeout: Duration) -> Probed {
    match check {
        Check::Command(command) => probe_command(command, timeout).await,
        Check::Url(url) => probe_url(http, url, timeout).await,
    }
}

async fn probe_command(command: &str, timeout: Duration) -> Probed {
    let started = clock::now();
    let failed = |detail: String| Probed {
        outcome: Outcome::Fail,
        exit_code: None,
        http_status: None,
        took: clock::since(started),
        detail: cut(detail),
    };
    let mut cmd = crate::exec::shell(command);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut group = match ProcessGroup::spawn(&mut cmd) {
        Ok(g) => g,
        Err(e) => return failed(format!("could not start sh: {e}")),
    };
    let child = group.child_mut();
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let reading = async {
        let (out, err) = tokio::join!(read_capped(out), read_capped(err));
        let mut all = out;
        all.extend(err);
        all
    };
    tokio::pin!(reading);
    let deadline = started + timeout;
    // The pipes are read while the command runs, or a chatty one would block on a full pipe.
    let mut output = None;
    let mut timed_out = false;
    let status = loop {
        tokio::select! {
            status = group.wait() => break status,
            o = &mut reading, if output.is_none() => output = Some(o),
            _ = clock::sleep_until(deadline) => {
                timed_out = true;
                break group.kill_and_wait().await;
            }
        }
    };
    // Reaped: what the check left in the background is its own business.
    group.release();
    let output = match output {
        Some(o) => o,
        None => tokio::select! {
            o = &mut reading => o,
            _ = clock::sleep_until(clock::now() + OUTPUT_GRACE) => Vec::new(),
        },
    };
    if timed_out {
        return Probed {
            outcome: Outcome::TimedOut,
            exit_code: None,
            http_status: None,
            took: clock::since(started),
            detail: cut(text(&output)),
        };
    }
    let mut detail = text(&output);
    if let Some(sig) = status.signal() {
        detail = format!("killed by signal {sig}; {detail}");
    }
    Probed {
        outcome: if status.success() {
            Outcome::Pass
        } else {
            Outcome::Fail
        },
        exit_code: status.code(),
        http_status: None,
        took: clock::since(started),
        detail: cut(detail),
    }
}

async fn probe_url(http: &reqwest::Client, url: &str, timeout: Duration) -> Probed {
    let started = clock::now();
    let result = http.get(url).timeout(timeout).send().await;
    let took = clock::since(started);
    match result {
        Ok(resp) => {
            let status = resp.status();
            Probed {
                outcome: if status.is_success() {
                    Outcome::Pass
                } else {
                    Outcome::Fail
                },
                exit_code: None,
                http_status: Some(status.as_u16()),
                took,
                detail: cut(format!("HTTP {status}")),
            }
        }
        Err(e) => Probed {
            outcome: if e.is_timeout() {
                Outcome::TimedOut
            } else {
                Outcome::Fail
            },
            exit_code: None,
            http_status: None,
            took,
            detail: cut(error_chain(&e)),
        },
    }
}

/// The error and its causes on one line ("error sending request: connection refused").
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// Reads a pipe to its end, keeping the first [`DETAIL_MAX`] bytes: a chatty command must
/// neither grow the node's memory nor block on a full pipe.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = DETAIL_MAX.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

/// At most [`DETAIL_MAX`] bytes, cut at a character boundary.
fn cut(mut s: String) -> String {
    if s.len() > DETAIL_MAX {
        let mut end = DETAIL_MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> reqwest::Client {
        reqwest::Client::builder().build().unwrap()
    }

    async fn command(line: &str, timeout: Duration) -> Probed {
        probe(&Check::Command(line.into()), &client(), timeout).await
    }

    #[tokio::test]
    async fn exit_zero_passes_and_anything_else_fails_with_its_output() {
        let ok = command("echo fine", Duration::from_secs(10)).await;
        assert_eq!(ok.outcome, Outcome::Pass);
        assert_eq!((ok.exit_code, ok.detail.as_str()), (Some(0), "fine"));
        let bad = command("echo out; echo broken >&2; exit 3", Duration::from_secs(10)).await;
        assert_eq!(bad.outcome, Outcome::Fail);
        assert_eq!(bad.exit_code, Some(3));
        assert_eq!(bad.detail, "out\nbroken");
    }

    #[tokio::test]
    async fn a_check_past_its_timeout_is_killed_with_its_group() {
        let dir = std::env::temp_dir().join(format!("pe-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("child.pid");
        // A grandchild in the same group must die too, or it would hold the pipes open.
        let line = format!("sleep 30 & echo $! > {}; wait", marker.display());
        let started = clock::now();
        let r = command(&line, Duration::from_millis(300)).await;
        assert_eq!(r.outcome, Outcome::TimedOut);
        let took = clock::since(started);
        assert!(took < Duration::from_secs(10), "took {took:?}");
        let pid: u32 = std::fs::read_to_string(&marker)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed: gone, or a zombie nobody collected.
        let deadline = clock::now() + Duration::from_secs(10);
        while crate::process_group::runs(pid) {
            assert!(
                clock::now() < deadline,
                "the grandchild {pid} outlived the check"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_command_that_leaves_something_running_does_not_hold_the_check() {
        // The background sleep keeps stdout open; the check ends with sh.
        let r = command(
            "sleep 20 >/dev/stdout & echo started",
            Duration::from_secs(15),
        )
        .await;
        assert_eq!(r.outcome, Outcome::Pass, "{r:?}");
        assert!(r.took < Duration::from_secs(10), "took {:?}", r.took);
    }

    #[tokio::test]
    async fn output_is_cut_to_its_cap() {
        let r = command(
            "head -c 100000 /dev/zero | tr '\\0' x",
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(r.outcome, Outcome::Pass);
        assert_eq!(r.detail.len(), DETAIL_MAX);
        assert_eq!(
            cut("é".repeat(DETAIL_MAX)).len(),
            DETAIL_MAX,
            "on a boundary"
        );
    }

    #[tokio::test]
    async fn a_url_passes_on_2xx_and_fails_otherwise_or_when_nobody_answers() {
        use axum::{http::StatusCode, routing::get, Router};
        let app = Router::new()
            .route("/ok", get(|| async { "up" }))
            .route("/down", get(|| async { StatusCode::SERVICE_UNAVAILABLE }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    "late"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let url = |path: &str| Check::Url(format!("http://{addr}{path}"));
        let c = client();
        let t = Duration::from_secs(10);
        let ok = probe(&url("/ok"), &c, t).await;
        assert_eq!((ok.outcome, ok.http_status), (Outcome::Pass, Some(200)));
        let down = probe(&url("/down"), &c, t).await;
        assert_eq!((down.outcome, down.http_status), (Outcome::Fail, Some(503)));
        assert!(down.detail.contains("503"), "{}", down.detail);
        let slow = probe(&url("/slow"), &c, Duration::from_millis(300)).await;
        assert_eq!(slow.outcome, Outcome::TimedOut, "{slow:?}");
        server.abort();
        let _ = server.await;
        // Nobody listens there any more.
        let refused = probe(&url("/ok"), &c, t).await;
        assert_eq!(refused.outcome, Outcome::Fail, "{refused:?}");
        assert!(!refused.detail.is_empty());
    }
}
