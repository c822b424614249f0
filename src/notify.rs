//! systemd's readiness and watchdog protocol (sd_notify(3)) for a `Type=notify` unit
//! (deploy/pilot-election.service).
//!
//! The protocol is one datagram of `KEY=VALUE` lines sent to the unix socket named in
//! `$NOTIFY_SOCKET`. std's `UnixDatagram` speaks it without libsystemd and without `unsafe` (the
//! crate forbids it), so no crate is needed. Without `$NOTIFY_SOCKET` (not started by systemd)
//! every call here does nothing.
//!
//! What is sent and when:
//! - `READY=1` once the election loop has published its first view and the API server task
//!   runs on its already bound listener ([`ready`], from `BuiltNode::serve`). Units ordered
//!   `After=` this one, and `systemctl start` itself, then find a node that answers `/healthz`
//!   rather than one still opening its data directory.
//! - `STOPPING=1` as soon as a stop begins ([`stopping`]). The handover that follows can take
//!   seconds, and systemd shows those seconds as "deactivating" rather than as a service that
//!   stopped answering.
//! - `WATCHDOG=1` from the election loop itself ([`Watchdog::pet`] on every turn), at most once
//!   per half of `$WATCHDOG_USEC`. A loop stuck on a disk write or a bug stops petting even
//!   though the process and its HTTP server still run, so systemd restarts it (`WatchdogSec=`).
//!   A timer task of its own would keep petting for a dead loop.
//!
//! Sends never block: the socket is non-blocking. A pet lost to a full queue costs nothing,
//! because the next one is due half a watchdog period later. A blocked send would stall the very
//! loop the watchdog watches.
//!
//! The three variables belong to this process and not to its children. [`take_from_env`] (the
//! first thing `cli::main` does, while the process has one thread) reads them and then removes
//! them from the environment, as `sd_notify(unset_environment=1)` does. Otherwise an `--exec`
//! command, its watcher and `pilotctl` would inherit them. With `NotifyAccess=main` systemd
//! ignores what such a child sends, but a child that is itself a notify-aware daemon would
//! still arm a watchdog, or report readiness, for a socket that is not its own.

use std::ffi::{OsStr, OsString};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// The variables systemd passes to a `Type=notify` service; no child inherits them.
pub const VARIABLES: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// Where `$NOTIFY_SOCKET` points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A socket file (an absolute path).
    Path(std::path::PathBuf),
    /// A Linux abstract socket (`@name` in the variable, a leading NUL byte on the wire).
    Abstract(Vec<u8>),
}

/// What the environment asks for, checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    pub target: Option<Target>,
    /// The watchdog period (`$WATCHDOG_USEC`), if it applies to this process and a socket is set.
    pub watchdog: Option<Duration>,
    /// Values that were set but could not be used, one sentence each, logged at [`ready`] (the
    /// environment is read before logging is set up).
    pub problems: Vec<String>,
}

/// Checks the three variables as sd_notify(3) and sd_watchdog_enabled(3) read them, for the
/// process `pid`. A `$WATCHDOG_PID` naming another process means the watchdog is not ours.
pub fn parse(
    notify_socket: Option<&OsStr>,
    watchdog_usec: Option<&OsStr>,
    watchdog_pid: Option<&OsStr>,
    pid: u32,
) -> Settings {
    let mut s = Settings::default();
    let bytes = notify_socket.map(OsStr::as_bytes).unwrap_or_default();
    s.target = match bytes.first() {
        None => None,
        Some(b'/') => Some(Target::Path(OsStr::from_bytes(bytes).into())),
        Some(b'@') if bytes.len() > 1 => Some(Target::Abstract(bytes[1..].to_vec())),
        Some(_) => {
            // systemd 256 added `vsock:` addresses; a unit on this host never gets one.
            s.problems.push(format!(
                "NOTIFY_SOCKET={} is neither an absolute path nor an abstract socket (@name): \
                 systemd is not told when this node is ready",
                String::from_utf8_lossy(bytes)
            ));
            None
        }
    };
    let Some(usec) = watchdog_usec else {
        return s;
    };
    let period = match usec.to_str().and_then(|u| u.parse::<u64>().ok()) {
        Some(u) if u > 0 => Duration::from_micros(u),
        _ => {
            s.problems.push(format!(
                "WATCHDOG_USEC={} is not a positive number of microseconds: the watchdog is not petted",
                usec.to_string_lossy()
            ));
            return s;
        }
    };
    if let Some(p) = watchdog_pid {
        match p.to_str().and_then(|p| p.parse::<u32>().ok()) {
            Some(p) if p == pid => {}
            // Set for another process (a parent that forwarded its environment): not ours.
            Some(_) => return s,
            None => {
                s.problems.push(format!(
                    "WATCHDOG_PID={} is not a process id: the watchdog is not petted",
                    p.to_string_lossy()
                ));
                return s;
            }
        }
    }
    if s.target.is_some() {
        s.watchdog = Some(period);
    }
    s
}

/// The process's notification socket, as the environment named it at start-up.
struct Notifier {
    settings: Settings,
    socket: Option<(UnixDatagram, SocketAddr)>,
    /// A failed pet is logged once, not every half period.
    pet_failed: AtomicBool,
}

impl Notifier {
    fn new(mut settings: Settings) -> Notifier {
        let socket = settings.target.as_ref().and_then(|t| {
            let addr = match t {
                Target::Path(p) => SocketAddr::from_pathname(p),
                Target::Abstract(name) => SocketAddr::from_abstract_name(name),
            };
            let sock = UnixDatagram::unbound().and_then(|s| s.set_nonblocking(true).map(|_| s));
            match sock.and_then(|s| addr.map(|a| (s, a))) {
                Ok(pair) => Some(pair),
                Err(e) => {
                    settings
                        .problems
                        .push(format!("cannot use NOTIFY_SOCKET ({t:?}): {e}"));
                    None
                }
            }
        });
        if socket.is_none() {
            settings.watchdog = None;
        }
        Notifier {
            settings,
            socket,
            pet_failed: AtomicBool::new(false),
        }
    }

    fn from_env() -> Notifier {
        let var = |k: &str| std::env::var_os(k);
        let [socket, usec, pid] = VARIABLES.map(var);
        Notifier::new(parse(
            socket.as_deref(),
            usec.as_deref(),
            pid.as_deref(),
            std::process::id(),
        ))
    }

    /// Sends one message; `None` when there is no socket.
    fn send(&self, message: &str) -> Option<std::io::Result<()>> {
        let (sock, addr) = self.socket.as_ref()?;
        Some(sock.send_to_addr(message.as_bytes(), addr).map(|_| ()))
    }
}

static NOTIFIER: OnceLock<Notifier> = OnceLock::new();

/// The process's notifier. Embedders that never call [`take_from_env`] get one read from the
/// environment on first use, and the variables stay in place.
fn notifier() -> &'static Notifier {
    NOTIFIER.get_or_init(Notifier::from_env)
}

/// Reads `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID` once, then removes them from the
/// environment so that no child inherits them (see the module documentation).
///
/// Call it only while the process has a single thread (`cli::main` does so before the async
/// runtime starts): changing the environment is a data race with any thread that reads it.
pub fn take_from_env() {
    notifier();
    // With one thread nothing can read the environment at the same time; see above.
    let cleared: Vec<OsString> = VARIABLES.iter().map(OsString::from).collect();
    for key in cleared {
        std::env::remove_var(key);
    }
}

/// `READY=1`: the API serves and the election loop runs.
pub fn ready() {
    let n = notifier();
    for p in &n.settings.problems {
        tracing::warn!("{p}");
    }
    let status = match n.settings.watchdog {
        Some(w) => format!(
            "READY=1\nSTATUS=serving; the election loop pets the watchdog ({} ms)",
            w.as_millis()
        ),
        None => "READY=1\nSTATUS=serving".to_string(),
    };
    match n.send(&status) {
        None => {}
        Some(Ok(())) => tracing::info!(
            watchdog_ms = n.settings.watchdog.map(|w| w.as_millis() as u64),
            "told systemd the node is ready"
        ),
        Some(Err(e)) => tracing::warn!(error = %e, "could not tell systemd the node is ready"),
    }
}

/// `STOPPING=1`: a stop began; the exit follows once leadership is handed over (or nobody
/// could take it).
pub fn stopping() {
    if let Some(Err(e)) =
        notifier().send("STOPPING=1\nSTATUS=stopping: handing leadership over if held")
    {
        tracing::warn!(error = %e, "could not tell systemd the node is stopping");
    }
}

/// The election loop's watchdog pets, at most one per half period (sd_watchdog_enabled(3)).
/// The loop turns at least every `2h` (a follower's heartbeat answers, or its own timers), so
/// pets are at most `period/2 + 2h` apart while it runs. A unit's `WatchdogSec=` must exceed
/// `4h` with room for a loaded host (deploy/pilot-election.service).
#[derive(Debug)]
pub struct Watchdog {
    every: Option<Duration>,
    last: Option<Instant>,
}

impl Watchdog {
    /// As the process's environment asks (nothing to do without a watchdog for this process).
    pub fn from_env() -> Watchdog {
        Watchdog::new(notifier().settings.watchdog)
    }

    fn new(period: Option<Duration>) -> Watchdog {
        Watchdog {
            every: period.map(|p| p / 2),
            last: None,
        }
    }

    /// Whether a pet is due at `now`; records it if so.
    fn due(&mut self, now: Instant) -> bool {
        let Some(every) = self.every else {
            return false;
        };
        if self
            .last
            .is_some_and(|l| now.saturating_duration_since(l) < every)
        {
            return false;
        }
        self.last = Some(now);
        true
    }

    /// Called on every turn of the election loop: sends `WATCHDOG=1` when half a period has
    /// passed since the last pet.
    pub fn pet(&mut self, now: Instant) {
        if !self.due(now) {
            return;
        }
        let n = notifier();
        match n.send("WATCHDOG=1") {
            Some(Err(e)) if !n.pet_failed.swap(true, Ordering::Relaxed) => {
                tracing::warn!(error = %e, "could not pet systemd's watchdog (logged once)");
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn no_socket_means_nothing_to_do() {
        assert_eq!(parse(None, None, None, 7), Settings::default());
        assert_eq!(parse(os(""), os("1000000"), None, 7), Settings::default());
    }

    #[test]
    fn paths_and_abstract_names() {
        let s = parse(os("/run/systemd/notify"), None, None, 7);
        assert_eq!(
            s.target,
            Some(Target::Path(PathBuf::from("/run/systemd/notify")))
        );
        assert_eq!(s.watchdog, None);
        let s = parse(os("@/org/freedesktop/systemd1/notify/42"), None, None, 7);
        assert_eq!(
            s.target,
            Some(Target::Abstract(
                b"/org/freedesktop/systemd1/notify/42".to_vec()
            ))
        );
        for bad in ["relative/path", "vsock:2:1234", "@"] {
            let s = parse(os(bad), os("1000000"), None, 7);
            assert_eq!(s.target, None, "{bad}");
            assert_eq!(s.watchdog, None, "{bad}");
        }
        assert_eq!(parse(os("x"), None, None, 7).problems.len(), 1);
    }

    #[test]
    fn the_watchdog_applies_only_to_the_process_it_names() {
        let sock = os("/run/n");
        let w = |usec, pid| parse(sock, usec, pid, 4242);
        assert_eq!(
            w(os("3000000"), None).watchdog,
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            w(os("3000000"), os("4242")).watchdog,
            Some(Duration::from_secs(3))
        );
        // Another process's watchdog is not ours, and not a problem either.
        let other = w(os("3000000"), os("1"));
        assert_eq!((other.watchdog, other.problems.len()), (None, 0));
        for (usec, pid) in [("0", None), ("-5", None), ("3s", None), ("100", Some("x"))] {
            let s = w(os(usec), pid.and_then(os));
            assert_eq!(s.watchdog, None, "{usec} {pid:?}");
            assert_eq!(s.problems.len(), 1, "{usec} {pid:?}: {:?}", s.problems);
        }
        // No socket to pet through.
        assert_eq!(parse(None, os("3000000"), None, 4242).watchdog, None);
    }

    #[test]
    fn pets_come_at_most_every_half_period() {
        let t0 = crate::clock::now();
        let ms = Duration::from_millis;
        let mut w = Watchdog::new(Some(ms(1000)));
        assert!(w.due(t0), "the first turn pets at once");
        assert!(!w.due(t0 + ms(10)));
        assert!(!w.due(t0 + ms(499)));
        assert!(w.due(t0 + ms(500)));
        assert!(!w.due(t0 + ms(900)));
        // A late turn pets at once, and the next half period counts from it.
        assert!(w.due(t0 + ms(1700)));
        assert!(!w.due(t0 + ms(2100)));
        assert!(w.due(t0 + ms(2200)));
        let mut off = Watchdog::new(None);
        assert!(!off.due(t0) && !off.due(t0 + ms(10_000)));
    }

    #[test]
    fn messages_reach_a_socket_file_and_an_abstract_socket() {
        let dir = std::env::temp_dir().join(format!(
            "pe-notify-{}-{}",
            std::process::id(),
            crate::clock::wall::unix_ms_now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let file = UnixDatagram::bind(&path).unwrap();
        let name = format!("pilot-election-notify-test-{}", std::process::id());
        let abs =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        let targets = [
            (path.as_os_str().to_owned(), &file),
            (OsString::from(format!("@{name}")), &abs),
        ];
        for (var, receiver) in targets {
            let n = Notifier::new(parse(Some(&var), None, None, 1));
            n.send("READY=1").expect("a socket").expect("sent");
            receiver
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut buf = [0u8; 64];
            let len = receiver.recv(&mut buf).unwrap();
            assert_eq!(&buf[..len], b"READY=1", "{var:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
