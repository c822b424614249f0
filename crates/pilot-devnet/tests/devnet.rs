//! pilot-devnet as its users start it: announces its nodes and control API on stdout, keeps link
//! faults as the control API sets them, refuses what it cannot do, and exits when its parent's
//! stdin closes. (The real pilotctl against it is tested in the service's `tests/pilotctl.rs`;
//! being an integration test, this one also makes `cargo test --workspace` build the binary
//! those tests run.)
#![allow(clippy::disallowed_methods)] // test deadlines on tokio's clock

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(20);

struct Devnet {
    child: Child,
    dir: std::path::PathBuf,
    announce: Value,
}

impl Devnet {
    fn start(nodes: u32) -> Devnet {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pilot-devnet-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut child = Command::new(env!("CARGO_BIN_EXE_pilot-devnet"))
            .arg("--dir")
            .arg(&dir)
            .args(["--nodes", &nodes.to_string(), "--exit-on-stdin-eof"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn pilot-devnet");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(DEADLINE).expect("a startup line");
        let announce = serde_json::from_str(&line).expect("the startup line is JSON");
        Devnet {
            child,
            dir,
            announce,
        }
    }

    fn control(&self) -> String {
        self.announce["control"]
            .as_str()
            .expect("control")
            .to_string()
    }

    fn sockets(&self) -> Vec<std::path::PathBuf> {
        let nodes = self.announce["nodes"].as_array().expect("nodes");
        nodes
            .iter()
            .map(|n| n["socket"].as_str().expect("socket").into())
            .collect()
    }

    /// Waits for the emulator to exit on its own; a clean stop removes every node's socket.
    async fn stops_cleanly(&mut self) {
        let start = tokio::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "exit {status}");
                break;
            }
            assert!(start.elapsed() < DEADLINE, "pilot-devnet did not stop");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for s in self.sockets() {
            assert!(!s.exists(), "{} is left behind", s.display());
        }
    }
}

impl Drop for Devnet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn announces_its_nodes_keeps_faults_refuses_bad_links_and_exits_with_its_parent() {
    let mut net = Devnet::start(3);
    let nodes = net.announce["nodes"].as_array().expect("nodes").clone();
    let names: Vec<&str> = nodes
        .iter()
        .map(|n| n["hostname"].as_str().expect("hostname"))
        .collect();
    assert_eq!(names, ["n1", "n2", "n3"]);
    for s in net.sockets() {
        assert!(s.exists(), "{} does not exist", s.display());
    }
    assert!(
        net.control().starts_with("http://127.0.0.1:"),
        "{}",
        net.control()
    );

    let http = reqwest::Client::new();
    let status = |http: reqwest::Client, url: String| async move {
        let r = http.get(url).send().await.expect("status");
        assert!(r.status().is_success());
        r.json::<Value>().await.expect("status JSON")
    };
    let before = status(http.clone(), format!("{}/status", net.control())).await;
    assert_eq!(before["cuts"], json!([]), "{before}");

    let r = http
        .post(format!("{}/cut", net.control()))
        .json(&json!({"a": "n1", "b": "n3"}))
        .send()
        .await
        .expect("cut");
    assert!(r.status().is_success(), "{}", r.status());
    let after = status(http.clone(), format!("{}/status", net.control())).await;
    assert_eq!(after["cuts"], json!([["n1", "n3"]]), "{after}");

    for bad in [json!({"a": "n1", "b": "n1"}), json!({"a": "n1", "b": "n9"})] {
        let r = http
            .post(format!("{}/cut", net.control()))
            .json(&bad)
            .send()
            .await
            .expect("cut");
        assert!(r.status().is_client_error(), "{bad}: {}", r.status());
    }
    let unchanged = status(http.clone(), format!("{}/status", net.control())).await;
    assert_eq!(unchanged["cuts"], after["cuts"]);

    // The parent goes away: its end of stdin closes and the emulator stops by itself.
    drop(net.child.stdin.take());
    net.stops_cleanly().await;
}

#[tokio::test]
async fn stops_cleanly_on_sigterm() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let mut net = Devnet::start(2);
    kill(Pid::from_raw(net.child.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    net.stops_cleanly().await;
}
