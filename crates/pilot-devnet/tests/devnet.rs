//! pilot-devnet as its users start it (through the same `support::devnet::Devnet` the service's
//! tests use): announces its nodes and control API on stdout, keeps link faults as the control
//! API sets them, refuses what it cannot do, and exits cleanly when its parent's stdin closes or
//! on SIGTERM. (The real pilotctl against it is tested in the service's `tests/pilotctl.rs`;
//! being an integration test of this package, this one also makes `cargo test --workspace` build
//! the binary those tests run.)
#![allow(clippy::disallowed_methods)] // test deadlines on tokio's clock

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use support::devnet::{Devnet, DEADLINE};

/// Every node's socket, by the hostnames the emulator announced.
fn sockets(net: &Devnet) -> Vec<PathBuf> {
    net.nodes
        .iter()
        .map(|n| net.socket(n["hostname"].as_str().expect("hostname")))
        .collect()
}

/// Waits for the emulator to exit on its own; a clean stop removes every node's socket.
async fn stops_cleanly(net: &mut Devnet) {
    let start = pilot_election::clock::now();
    loop {
        if let Some(status) = net.child.try_wait().expect("wait") {
            assert!(status.success(), "exit {status}");
            break;
        }
        assert!(
            pilot_election::clock::since(start) < DEADLINE,
            "pilot-devnet did not stop"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for s in sockets(net) {
        assert!(!s.exists(), "{} is left behind", s.display());
    }
}

#[tokio::test]
async fn announces_its_nodes_keeps_faults_refuses_bad_links_and_exits_with_its_parent() {
    let mut net = Devnet::start(3);
    let names: Vec<&str> = net
        .nodes
        .iter()
        .map(|n| n["hostname"].as_str().expect("hostname"))
        .collect();
    assert_eq!(names, ["n1", "n2", "n3"]);
    for s in sockets(&net) {
        assert!(s.exists(), "{} does not exist", s.display());
    }
    assert!(
        net.control.starts_with("http://127.0.0.1:"),
        "{}",
        net.control
    );

    let before = net.status().await;
    assert_eq!(before["cuts"], json!([]), "{before}");
    net.post("/cut", json!({"a": "n1", "b": "n3"})).await;
    let after = net.status().await;
    assert_eq!(after["cuts"], json!([["n1", "n3"]]), "{after}");

    for bad in [json!({"a": "n1", "b": "n1"}), json!({"a": "n1", "b": "n9"})] {
        let r = net
            .http
            .post(format!("{}/cut", net.control))
            .json(&bad)
            .send()
            .await
            .expect("cut");
        assert!(r.status().is_client_error(), "{bad}: {}", r.status());
    }
    assert_eq!(net.status().await["cuts"], after["cuts"]);

    // The parent goes away: its end of stdin closes and the emulator stops by itself.
    drop(net.child.stdin.take());
    stops_cleanly(&mut net).await;
}

#[tokio::test]
async fn stops_cleanly_on_sigterm() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let mut net = Devnet::start(2);
    kill(Pid::from_raw(net.child.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    stops_cleanly(&mut net).await;
}
