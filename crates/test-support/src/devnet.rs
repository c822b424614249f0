//! A running pilot-devnet (emulated Pilot daemons) and the real pilotctl.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use pilot_election::pilotctl::Pilotctl;
use serde_json::Value;

/// The emulator binary (the `pilot-devnet` package).
pub fn devnet_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| crate::app::built("pilot-devnet"))
}

/// Generous: two other engineers compile on the same two cores.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn pilotctl_path() -> PathBuf {
    let path = match std::env::var_os("PILOTCTL") {
        Some(p) => PathBuf::from(p),
        None => Path::new(crate::app::WORKSPACE).join(".tools/pilot/pilotctl"),
    };
    assert!(
        path.is_file(),
        "the real pilotctl is missing at {}: run scripts/fetch-pilotctl.sh (or set PILOTCTL; {})",
        path.display(),
        crate::SET_UP
    );
    path
}

pub fn temp_dir(tag: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pdn-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running pilot-devnet, killed by PID when dropped.
pub struct Devnet {
    pub child: Child,
    pub dir: PathBuf,
    pub control: String,
    pub nodes: Vec<Value>,
    pub http: reqwest::Client,
}

impl Devnet {
    pub fn start(nodes: u32) -> Devnet {
        Devnet::start_with(nodes, &[])
    }

    /// A devnet started with more of its flags (`--daemon-version 1.17.0`, ...).
    pub fn start_with(nodes: u32, extra: &[&str]) -> Devnet {
        let dir = temp_dir("net");
        let mut child = Command::new(devnet_bin())
            .args(extra)
            .arg("--dir")
            .arg(&dir)
            .arg("--nodes")
            .arg(nodes.to_string())
            .arg("--exit-on-stdin-eof")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn pilot-devnet");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(DEADLINE)
            .expect("pilot-devnet printed no startup line");
        let announce: Value = serde_json::from_str(&line).expect("startup line is JSON");
        Devnet {
            child,
            dir,
            control: announce["control"].as_str().unwrap().to_string(),
            nodes: announce["nodes"].as_array().unwrap().clone(),
            http: reqwest::Client::new(),
        }
    }

    pub fn socket(&self, name: &str) -> PathBuf {
        let node = self.nodes.iter().find(|n| n["hostname"] == name).unwrap();
        PathBuf::from(node["socket"].as_str().unwrap())
    }

    pub fn ctl(&self, name: &str) -> Pilotctl {
        Pilotctl::new(pilotctl_path())
            .unwrap()
            .with_socket(self.socket(name))
            .with_timeout(DEADLINE)
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        let resp = self
            .http
            .post(format!("{}{path}", self.control))
            .json(&body)
            .send()
            .await
            .expect("control API");
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        resp.json().await.unwrap()
    }

    pub async fn status(&self) -> Value {
        let resp = self
            .http
            .get(format!("{}/status", self.control))
            .send()
            .await
            .expect("control API");
        resp.json().await.unwrap()
    }

    /// Waits until the emulator's status satisfies `done`: the CLI returns once its bytes are
    /// written, before the broker has acted on them.
    pub async fn wait_status(&self, what: &str, done: impl Fn(&Value) -> bool) {
        let start = pilot_election::clock::now();
        loop {
            let status = self.status().await;
            if done(&status) {
                return;
            }
            assert!(start.elapsed() < DEADLINE, "never saw {what}: {status}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Runs the real `pilotctl --json <args>` against node `node`'s daemon; returns `.data`.
    pub fn pilotctl(&self, node: &str, args: &[&str]) -> Value {
        let out = Command::new(pilotctl_path())
            .arg("--json")
            .args(args)
            .env("PILOT_SOCKET", self.socket(node))
            .output()
            .expect("run pilotctl");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "pilotctl {args:?} on {node}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_str(text.trim()).expect("pilotctl --json output");
        v["data"].clone()
    }

    /// Subscription frames reach the broker some time after the child starts; publishing
    /// before that would be (correctly) lost, so tests wait for the broker to see them.
    pub async fn wait_subscribers(&self, n: u64) {
        self.wait_status(&format!("{n} subscribers"), |s| {
            s["subscribed_connections"].as_u64() == Some(n)
        })
        .await;
    }
}

impl Drop for Devnet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Writes an executable script from a child process, never from this one: tests run in
/// parallel threads, and a thread forking while this process holds the file open for writing
/// would pass that descriptor to its child, making `exec` of the script fail with ETXTBSY
/// ("text file busy") until the child execs.
pub fn write_script(path: &Path, body: &str) {
    let mut sh = Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh");
    sh.stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .unwrap();
    let status = sh.wait().unwrap();
    assert!(status.success(), "writing {} failed", path.display());
}

pub use pilot_election::transport::pilot::daemon::event_frame;
use pilot_election::transport::pilot::daemon::{command, ipc_frame};

/// A long-lived event-stream connection opened through a node's daemon IPC directly, the way a
/// program linked against the Pilot driver would hold one (pilotctl opens one per publish):
/// what the broker's per-connection rate limit is about.
pub struct StreamClient {
    sock: UnixStream,
    conn: u32,
}

impl StreamClient {
    /// Dials `broker_id`'s event stream (port 1002) from the daemon at `socket` and sends the
    /// first frame, which subscribes the connection to `first_topic`.
    pub fn open(socket: &Path, broker_id: u32, first_topic: &str) -> StreamClient {
        let mut sock = UnixStream::connect(socket).expect("daemon socket");
        sock.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut dial = vec![0, 0];
        dial.extend_from_slice(&broker_id.to_be_bytes());
        dial.extend_from_slice(&1002u16.to_be_bytes());
        write_ipc(&mut sock, command::CMD_DIAL, &dial);
        let mut len = [0u8; 4];
        sock.read_exact(&mut len).expect("dial answer");
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        sock.read_exact(&mut body).expect("dial answer");
        assert_eq!(body[0], command::CMD_DIAL_OK, "dial refused: {body:?}");
        let conn = u32::from_be_bytes([body[1], body[2], body[3], body[4]]);
        let mut client = StreamClient { sock, conn };
        client.send(&event_frame(first_topic, b""));
        client
    }

    /// Writes stream bytes (any number of whole or partial event frames) in one IPC send.
    pub fn send(&mut self, bytes: &[u8]) {
        let mut payload = self.conn.to_be_bytes().to_vec();
        payload.extend_from_slice(bytes);
        write_ipc(&mut self.sock, command::CMD_SEND, &payload);
    }
}

fn write_ipc(sock: &mut UnixStream, cmd: u8, payload: &[u8]) {
    sock.write_all(&ipc_frame(cmd, payload))
        .expect("daemon socket write");
}
