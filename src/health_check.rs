//! `run --health-cmd 'CMD'` or `--health-url URL`: leadership follows the application's
//! health, not only the sidecar's (docs/protocol.md, rule 17).
//!
//! One task runs the check every `--health-interval`, one at a time, each cut at
//! `--health-timeout` ([`probe`]). `--health-failures` failures in a row make the node
//! unhealthy, `--health-successes` passes in a row make it healthy again ([`verdict`]); a node
//! starts unhealthy and becomes healthy at its first pass. Each change of the verdict goes to the
//! core as `Input::SetHealth` through the runtime's command channel, like an operator's command:
//! the core then ranks the node below every healthy member, and a leader hands over to the best
//! healthy member that could take over (rule 17). The resign that hands over waits for the
//! runtime's release guards (`--exec`, `--on-change`) like any other (rule 9).
//!
//! Unhealthy is not withdrawn: when no member is healthy, one of them still leads.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::clock::wall::unix_ms_now;
use crate::election::Input;
use crate::metrics::Metrics;
use crate::runtime::Command;

mod probe;
mod verdict;
pub use probe::{Outcome, Probed, DETAIL_MAX};
pub use verdict::Verdict;

/// The default of `--health-interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// The default of `--health-timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// The default of `--health-failures`.
pub const DEFAULT_FAILURES: u32 = 3;
/// The default of `--health-successes`.
pub const DEFAULT_SUCCESSES: u32 = 2;
/// The shortest `--health-interval`: a check is a process or a request, not a busy loop.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// What is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Run through `sh -c`; exit 0 passes.
    Command(String),
    /// `GET`; a 2xx answer passes.
    Url(String),
}

impl Check {
    pub fn kind(&self) -> &'static str {
        match self {
            Check::Command(_) => "command",
            Check::Url(_) => "url",
        }
    }
}

/// What `--health-*` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckConfig {
    pub check: Check,
    /// A check starts this long after the previous one started (or when it ends, if later).
    pub interval: Duration,
    /// A check still running this long after it started fails (the command's group is killed).
    pub timeout: Duration,
    /// Failures in a row that make a healthy node unhealthy.
    pub failures: u32,
    /// Passes in a row that make an unhealthy node healthy again.
    pub successes: u32,
}

/// The `--health-*` flags, as given.
#[derive(Debug, Clone, Default)]
pub struct HealthFlags<'a> {
    pub command: Option<&'a str>,
    pub url: Option<&'a str>,
    pub interval: Option<Duration>,
    pub timeout: Option<Duration>,
    pub failures: Option<u32>,
    pub successes: Option<u32>,
}

impl HealthCheckConfig {
    /// Validates the `--health-*` flags; the error is one line for the CLI.
    pub fn from_flags(flags: HealthFlags<'_>) -> Result<Option<HealthCheckConfig>, String> {
        let check = match (flags.command, flags.url) {
            (Some(_), Some(_)) => {
                return Err("--health-cmd and --health-url exclude each other: give one".into())
            }
            (Some(c), None) => Check::Command(crate::exec::shell_command("--health-cmd", c)?),
            (None, Some(u)) => Check::Url(check_url(u)?),
            (None, None) => {
                let tuning = [
                    (flags.interval.is_some(), "--health-interval"),
                    (flags.timeout.is_some(), "--health-timeout"),
                    (flags.failures.is_some(), "--health-failures"),
                    (flags.successes.is_some(), "--health-successes"),
                ];
                if let Some((_, flag)) = tuning.iter().find(|(given, _)| *given) {
                    return Err(format!(
                        "{flag} needs --health-cmd or --health-url (what to check)"
                    ));
                }
                return Ok(None);
            }
        };
        let interval = flags.interval.unwrap_or(DEFAULT_INTERVAL);
        let timeout = flags.timeout.unwrap_or(DEFAULT_TIMEOUT.min(interval));
        if interval < MIN_INTERVAL {
            return Err(format!(
                "--health-interval must be at least {} ms",
                MIN_INTERVAL.as_millis()
            ));
        }
        if interval > Duration::from_secs(24 * 3600) {
            return Err("--health-interval must be at most 24h".into());
        }
        if timeout.is_zero() {
            return Err("--health-timeout must be more than 0 (e.g. 2s)".into());
        }
        if timeout > interval {
            return Err(format!(
                "--health-timeout ({} ms) must not exceed --health-interval ({} ms): checks never overlap",
                timeout.as_millis(),
                interval.as_millis()
            ));
        }
        let failures = flags.failures.unwrap_or(DEFAULT_FAILURES);
        let successes = flags.successes.unwrap_or(DEFAULT_SUCCESSES);
        if failures == 0 || successes == 0 {
            return Err("--health-failures and --health-successes must be at least 1".into());
        }
        if failures > 1000 || successes > 1000 {
            return Err("--health-failures and --health-successes must be at most 1000".into());
        }
        Ok(Some(HealthCheckConfig {
            check,
            interval,
            timeout,
            failures,
            successes,
        }))
    }
}

fn check_url(url: &str) -> Result<String, String> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| format!("--health-url `{url}` is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(format!(
            "--health-url `{url}` must be an http:// or https:// URL with a host (e.g. http://127.0.0.1:8080/healthz)"
        ));
    }
    Ok(url.to_string())
}

/// The last check, for `/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastCheck {
    pub probed: Probed,
    /// When it ended, on the wall clock.
    pub at_unix_ms: u64,
}

/// What `/status` shows of the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthStatus {
    pub kind: &'static str,
    pub healthy: bool,
    /// When the verdict last changed (or the node started), on the wall clock.
    pub since_unix_ms: u64,
    pub failures_in_row: u32,
    pub passes_in_row: u32,
    pub interval: Duration,
    pub timeout: Duration,
    pub failures: u32,
    pub successes: u32,
    pub last_check: Option<LastCheck>,
}

/// The running checks: `/status` reads their state, the node's stop ends them.
pub struct HealthChecks {
    status: Arc<Mutex<HealthStatus>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// For `/status`.
#[derive(Clone)]
pub struct HealthHandle {
    status: Arc<Mutex<HealthStatus>>,
}

impl HealthHandle {
    pub fn status(&self) -> HealthStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl HealthChecks {
    /// Starts checking at once; verdict changes go to the core through `commands`.
    pub fn start(
        config: HealthCheckConfig,
        commands: mpsc::Sender<Command>,
        metrics: Arc<Metrics>,
    ) -> HealthChecks {
        let verdict = Verdict::new(config.failures, config.successes);
        let status = Arc::new(Mutex::new(HealthStatus {
            kind: config.check.kind(),
            healthy: verdict.healthy(),
            since_unix_ms: unix_ms_now(),
            failures_in_row: 0,
            passes_in_row: 0,
            interval: config.interval,
            timeout: config.timeout,
            failures: config.failures,
            successes: config.successes,
            last_check: None,
        }));
        metrics.enable_health_checks();
        metrics.app_healthy.set(0);
        let stop = CancellationToken::new();
        let checker = Checker {
            http: reqwest::Client::builder()
                .user_agent(concat!("pilot-election/", env!("CARGO_PKG_VERSION")))
                .build()
                .unwrap_or_default(),
            config,
            verdict,
            commands,
            metrics,
            status: status.clone(),
        };
        let task = tokio::spawn(checker.run(stop.clone()));
        HealthChecks { status, stop, task }
    }

    pub fn handle(&self) -> HealthHandle {
        HealthHandle {
            status: self.status.clone(),
        }
    }

    /// Once the election loop has ended: no further check (one in progress is killed).
    pub async fn finish(self) {
        self.stop.cancel();
        // Aborting drops the check in progress, which kills its group (kill_on_drop).
        self.task.abort();
        let _ = self.task.await;
    }
}

struct Checker {
    http: reqwest::Client,
    config: HealthCheckConfig,
    verdict: Verdict,
    commands: mpsc::Sender<Command>,
    metrics: Arc<Metrics>,
    status: Arc<Mutex<HealthStatus>>,
}

impl Checker {
    async fn run(mut self, stop: CancellationToken) {
        loop {
            let started = clock::now();
            let probed = tokio::select! {
                p = probe::probe(&self.config.check, &self.http, self.config.timeout) => p,
                _ = stop.cancelled() => return,
            };
            self.metrics
                .health_check(probed.outcome.into(), probed.took);
            let was_failing = self.verdict.failures_in_row() > 0;
            let change = self.verdict.record(probed.outcome == Outcome::Pass);
            self.log(&probed, was_failing, change);
            self.set_status(&probed, change);
            if let Some(healthy) = change {
                self.metrics.app_healthy.set(i64::from(healthy));
                // The core takes it like an operator's command; a closed channel means the
                // loop has ended and nothing is left to tell.
                if !self.tell_core(healthy, &stop).await {
                    return;
                }
            }
            let next = (started + self.config.interval).max(clock::now());
            tokio::select! {
                _ = clock::sleep_until(next) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    async fn tell_core(&self, healthy: bool, stop: &CancellationToken) -> bool {
        let (reply, answer) = oneshot::channel();
        let command = Command {
            input: Input::SetHealth { healthy },
            reply,
        };
        if self.commands.send(command).await.is_err() {
            return false;
        }
        tokio::select! {
            r = answer => r.is_ok(),
            _ = stop.cancelled() => false,
        }
    }

    fn log(&self, p: &Probed, was_failing: bool, change: Option<bool>) {
        let (outcome, took_ms) = (p.outcome.as_str(), p.took.as_millis() as u64);
        let (failures, needed) = (self.verdict.failures_in_row(), self.config.failures);
        match change {
            Some(false) => tracing::warn!(
                outcome,
                failures,
                exit_code = p.exit_code,
                http_status = p.http_status,
                detail = %p.detail,
                "application unhealthy: {failures} checks failed in a row; this node now ranks below every healthy member, and a leader hands over to a healthy one"
            ),
            Some(true) => tracing::info!(
                passes = self.verdict.passes_in_row(),
                took_ms,
                "application healthy: this node ranks by its priority again"
            ),
            // The first failure of a streak is worth a line; the rest are counted in metrics.
            None if p.outcome != Outcome::Pass && !was_failing => tracing::warn!(
                outcome,
                failures,
                needed,
                exit_code = p.exit_code,
                http_status = p.http_status,
                took_ms,
                detail = %p.detail,
                "health check failed"
            ),
            None if p.outcome != Outcome::Pass => tracing::debug!(
                outcome,
                failures,
                needed,
                detail = %p.detail,
                "health check failed again"
            ),
            None => tracing::trace!(took_ms, "health check passed"),
        }
    }

    fn set_status(&self, probed: &Probed, change: Option<bool>) {
        let mut s = self.status.lock().unwrap_or_else(|e| e.into_inner());
        let now = unix_ms_now();
        s.healthy = self.verdict.healthy();
        if change.is_some() {
            s.since_unix_ms = now;
        }
        s.failures_in_row = self.verdict.failures_in_row();
        s.passes_in_row = self.verdict.passes_in_row();
        s.last_check = Some(LastCheck {
            probed: probed.clone(),
            at_unix_ms: now,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> HealthFlags<'static> {
        HealthFlags::default()
    }

    #[test]
    fn flags_are_checked_with_one_line_each() {
        let err = |f: HealthFlags<'_>| HealthCheckConfig::from_flags(f).unwrap_err();
        assert_eq!(HealthCheckConfig::from_flags(flags()), Ok(None));
        let both = HealthFlags {
            command: Some("true"),
            url: Some("http://127.0.0.1:1/"),
            ..flags()
        };
        assert!(err(both).contains("exclude each other"));
        let alone = HealthFlags {
            failures: Some(2),
            ..flags()
        };
        assert_eq!(
            err(alone),
            "--health-failures needs --health-cmd or --health-url (what to check)"
        );
        let empty = HealthFlags {
            command: Some("  "),
            ..flags()
        };
        assert!(err(empty).starts_with("--health-cmd needs a command line"));
        for bad in ["localhost:8080/health", "ftp://x/", "http://"] {
            let f = HealthFlags {
                url: Some(bad),
                ..flags()
            };
            assert!(err(f).starts_with("--health-url"), "{bad}");
        }
        let cmd = |f: HealthFlags<'static>| HealthFlags {
            command: Some("true"),
            ..f
        };
        let fast = cmd(HealthFlags {
            interval: Some(Duration::from_millis(50)),
            ..flags()
        });
        assert!(err(fast).contains("at least 100 ms"));
        let long = cmd(HealthFlags {
            interval: Some(Duration::from_secs(1)),
            timeout: Some(Duration::from_secs(2)),
            ..flags()
        });
        assert!(err(long).contains("must not exceed --health-interval"));
        let zero = cmd(HealthFlags {
            timeout: Some(Duration::ZERO),
            ..flags()
        });
        assert!(err(zero).contains("more than 0"));
        let none = cmd(HealthFlags {
            successes: Some(0),
            ..flags()
        });
        assert!(err(none).contains("at least 1"));
    }

    #[test]
    fn defaults_and_a_timeout_that_fits_a_short_interval() {
        let c = HealthCheckConfig::from_flags(HealthFlags {
            url: Some("http://127.0.0.1:8080/healthz"),
            ..flags()
        })
        .unwrap()
        .unwrap();
        assert_eq!(c.check.kind(), "url");
        assert_eq!(
            (c.interval, c.timeout, c.failures, c.successes),
            (DEFAULT_INTERVAL, DEFAULT_TIMEOUT, 3, 2)
        );
        let short = HealthCheckConfig::from_flags(HealthFlags {
            command: Some("true"),
            interval: Some(Duration::from_millis(500)),
            ..flags()
        })
        .unwrap()
        .unwrap();
        assert_eq!(short.timeout, Duration::from_millis(500));
    }

    /// The task against a fake core: the verdict changes reach the command channel in order,
    /// and `/status` follows.
    #[tokio::test]
    async fn verdict_changes_reach_the_core_in_order() {
        let dir = std::env::temp_dir().join(format!("pe-health-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let flag = dir.join("up");
        std::fs::write(&flag, b"").unwrap();
        let config = HealthCheckConfig::from_flags(HealthFlags {
            command: Some(&format!("test -e {}", flag.display())),
            interval: Some(Duration::from_millis(100)),
            failures: Some(2),
            successes: Some(2),
            ..flags()
        })
        .unwrap()
        .unwrap();
        let (tx, mut rx) = mpsc::channel(4);
        let metrics = Arc::new(Metrics::new());
        let checks = HealthChecks::start(config, tx, metrics.clone());
        async fn next(rx: &mut mpsc::Receiver<Command>) -> bool {
            let cmd = tokio::time::timeout(Duration::from_secs(20), rx.recv())
                .await
                .expect("a verdict within 20 s")
                .expect("the channel is open");
            let _ = cmd.reply.send(Ok(crate::election::Outcome::Accepted));
            match cmd.input {
                Input::SetHealth { healthy } => healthy,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(next(&mut rx).await, "healthy at the first pass");
        assert!(checks.handle().status().healthy);
        std::fs::remove_file(&flag).unwrap();
        assert!(!next(&mut rx).await, "unhealthy after two failures");
        let s = checks.handle().status();
        assert!(!s.healthy);
        assert!(s.failures_in_row >= 2, "{s:?}");
        assert_eq!(
            s.last_check.as_ref().map(|l| l.probed.outcome),
            Some(Outcome::Fail)
        );
        std::fs::write(&flag, b"").unwrap();
        assert!(next(&mut rx).await, "healthy again after two passes");
        assert!(checks.handle().status().passes_in_row >= 2);
        checks.finish().await;
        let text = metrics.encode();
        assert!(
            text.contains("pilot_election_health_checks_total{outcome=\"fail\"}"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
