//! The test plays systemd's part for a real node (deploy/pilot-election.service: `Type=notify`,
//! `WatchdogSec=`). It binds the notification socket, starts the node with `NOTIFY_SOCKET` and
//! `WATCHDOG_USEC` set, and reads what the node says: `READY=1` only once `/healthz` answers,
//! `WATCHDOG=1` at half the period, `STOPPING=1` after SIGTERM while the process still runs, and
//! no pets once the election loop stalls. The loop is stalled by a real blocking write with no
//! test hook: a FIFO in place of the state file's temp file holds the first election's persist
//! in `open(2)`, as a hung disk would. The `--exec` child must not inherit the variables.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pilot_election::clock;
use tokio::time::Instant;

use crate::app::{app, free_port, get_json, serial, wait_for, App, TempDir, LEASE, T};

/// Start-up of a single node, with room for a loaded 2-core machine.
const START: Duration = Duration::from_secs(20);

/// The socket systemd would listen on, in a directory of its own.
struct Systemd {
    dir: TempDir,
    path: PathBuf,
    socket: UnixDatagram,
}

impl Systemd {
    fn new() -> Systemd {
        let dir = TempDir::new("systemd");
        let path = dir.0.join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind the notification socket");
        Systemd { dir, path, socket }
    }

    /// What systemd puts into the environment of a `Type=notify` service with `WatchdogSec=`.
    fn env(&self, watchdog: Duration) -> Vec<(String, String)> {
        vec![
            ("NOTIFY_SOCKET".into(), self.path.display().to_string()),
            ("WATCHDOG_USEC".into(), watchdog.as_micros().to_string()),
        ]
    }

    /// The next message and when it arrived; `None` when none came within `within`.
    async fn next(&self, within: Duration) -> Option<(Instant, String)> {
        let socket = self.socket.try_clone().expect("socket");
        tokio::task::spawn_blocking(move || {
            socket
                .set_read_timeout(Some(within.max(Duration::from_millis(1))))
                .expect("timeout");
            let mut buf = [0u8; 4096];
            let n = socket.recv(&mut buf).ok()?;
            Some((
                clock::now(),
                String::from_utf8_lossy(&buf[..n]).into_owned(),
            ))
        })
        .await
        .expect("receiver")
    }

    /// Waits for a message that has the line `line`; returns when it arrived and every message
    /// before it.
    async fn until(&self, line: &str, within: Duration) -> (Instant, Vec<String>) {
        let deadline = clock::now() + within;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(clock::now());
            match self.next(left).await {
                Some((at, m)) if m.lines().any(|l| l == line) => return (at, before),
                Some((_, m)) => before.push(m),
                None => panic!("no {line} within {within:?}; before it: {before:?}"),
            }
        }
    }

    /// Messages already waiting, without waiting for more.
    fn drain(&self) -> Vec<String> {
        self.socket.set_nonblocking(true).expect("nonblocking");
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.socket.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        self.socket.set_nonblocking(false).expect("blocking");
        out
    }
}

/// A single node (its own quorum: it leads once its start-up guard is over) under `sd`.
fn node(sd: &Systemd, watchdog: Duration, extra: &[&str]) -> App {
    let mut a = app("sd1", free_port(), &[], extra);
    a.env = sd.env(watchdog);
    a
}

fn alive(a: &mut App) -> bool {
    let c = a.child.as_mut().expect("started");
    c.try_wait().expect("try_wait").is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_after_the_api_answers_pets_at_half_the_period_and_stopping_before_the_exit() {
    let _serial = serial().await;
    let sd = Systemd::new();
    let period = Duration::from_secs(3);
    let env_file = sd.dir.0.join("exec-env");
    // The child ignores SIGTERM, so the stop waits out the drain (1 s) before SIGKILL: the
    // process is still there when STOPPING=1 arrives.
    let exec = format!(
        "env > '{}.tmp' && mv '{0}.tmp' '{0}'; trap '' TERM; exec sleep 600",
        env_file.display()
    );
    let mut n = node(&sd, period, &["--exec", &exec]);
    n.start();
    let url = format!("{}/healthz", n.url());

    let (ready_at, before) = sd.until("READY=1", START).await;
    // READY=1 means "serving": the API answers at once (the client's own timeout is 2 s).
    let (code, body) = get_json(&url).await;
    assert_eq!(
        code,
        200,
        "READY=1 before /healthz answered: {body}\n{}",
        n.log()
    );
    assert!(
        before.iter().all(|m| m == "WATCHDOG=1"),
        "before READY=1 only pets may come: {before:?}"
    );

    // Pets: at most one per half period (the loop turns every 500 ms as leader and more often
    // while it starts), and never a whole period apart. The first counts from READY=1.
    let mut pets = vec![ready_at];
    while pets.len() < 5 {
        let (at, others) = sd.until("WATCHDOG=1", period * 2).await;
        assert!(others.is_empty(), "unexpected messages: {others:?}");
        pets.push(at);
    }
    let gaps: Vec<Duration> = pets.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("pet intervals: {gaps:?}");
    // The first gap runs from READY=1 and may be short; the others are the rate limit's.
    for g in &gaps[1..] {
        // Half the period on the node's clock, less what delivery jitter can take off.
        assert!(*g >= period / 2 - Duration::from_millis(500), "{gaps:?}");
        assert!(
            *g < period,
            "a gap as long as the watchdog itself: {gaps:?}"
        );
    }

    // The --exec child (it runs once the node leads) got none of systemd's variables.
    let env = wait_for(START + T, || {
        let f = env_file.clone();
        async move { std::fs::read_to_string(f).ok() }
    })
    .await
    .unwrap_or_else(|| panic!("the --exec child never ran\n{}", n.log()));
    assert!(env.contains("PILOT_ELECTION_TERM="), "{env}");
    for var in pilot_election::notify::VARIABLES {
        assert!(
            !env.lines().any(|l| l.starts_with(&format!("{var}="))),
            "the --exec child inherited {var}:\n{env}"
        );
    }

    sd.drain();
    n.sigterm();
    let (_, others) = sd.until("STOPPING=1", Duration::from_secs(10)).await;
    assert!(
        others.iter().all(|m| m == "WATCHDOG=1"),
        "before STOPPING=1: {others:?}"
    );
    assert!(
        alive(&mut n),
        "STOPPING=1 came only once the process had exited"
    );
    let status = n.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "{status:?}\n{}", n.log());
}

/// The state file's temp file as `store.rs` names it (`.<name>.tmp`).
fn state_tmp(data: &Path) -> PathBuf {
    data.join(format!(".{}.tmp", pilot_election::store::STATE_FILE))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_election_loop_stops_petting_while_the_process_lives() {
    let _serial = serial().await;
    let sd = Systemd::new();
    let period = Duration::from_secs(2);
    // A longer start-up guard: the FIFO must be in place before the first election persists.
    let mut n = node(&sd, period, &["--election-timeout", "5s"]);
    n.start();
    sd.until("READY=1", START).await;
    let data = n.data_dir();
    let fifo = state_tmp(&data);
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo (coreutils)");
    assert!(made.success(), "mkfifo {}", fifo.display());
    // mkfifo succeeding means no write was under way (its temp file would exist); term 0 on
    // disk means none has happened yet. So the first election's write opens the FIFO, and
    // open(2) waits for a reader that never comes.
    let state =
        std::fs::read_to_string(data.join(pilot_election::store::STATE_FILE)).expect("state file");
    let term =
        serde_json::from_str::<serde_json::Value>(&state).expect("state json")["term"].as_u64();
    assert_eq!(
        term,
        Some(0),
        "the node elected itself before the FIFO was in place: {state}"
    );
    sd.until("WATCHDOG=1", period * 2).await;

    // The loop stalls in its first election; /healthz (served by other tasks) says so once the
    // loop has not run for the lease.
    let url = format!("{}/healthz", n.url());
    let stalled = wait_for(START + Duration::from_secs(5) + LEASE, || {
        let url = url.clone();
        async move {
            let (code, body) = get_json(&url).await;
            (code == 503 && body["status"] == "stalled").then_some(body)
        }
    })
    .await
    .unwrap_or_else(|| panic!("the loop never stalled\n{}", n.log()));
    eprintln!("stalled: {stalled}");
    // Pets sent before the stall began (at least a lease ago) have all arrived by now.
    sd.drain();
    let quiet = period * 2;
    if let Some((_, m)) = sd.next(quiet).await {
        panic!("a stalled loop still notified: {m}");
    }
    assert!(alive(&mut n), "the process must live on: {}", n.log());
    let (code, _) = get_json(&url).await;
    assert_eq!(code, 503, "the server still answers, the loop does not");
}
