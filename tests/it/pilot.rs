//! Three real nodes electing over `--transport pilot`: the real pilotctl 1.18.0 against
//! pilot-devnet's emulated daemons, with a fourth daemon (`n4`) as the event-stream broker.

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::app::{get_json, leader_of, wait_for, wait_up, TempDir, BIN, T};
use crate::devnet::{pilotctl_path, Devnet};
use crate::pilot_cluster::pilot_cluster;

async fn role_leader(url: &str) -> u16 {
    get_json(&format!("{url}/role/leader")).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_fail_over_and_survive_isolation_over_pilot() {
    let _serial = crate::app::serial().await;
    let net = Devnet::start(4);
    let mut c = pilot_cluster(&net, &[]);
    for n in &c.nodes {
        wait_up(n).await;
    }
    let all = [0, 1, 2];
    let (leader, term) = c.agreed(&all, T * 4, |_, _| true).await;
    let li = c.index(&leader);
    assert!(
        ["1", "2", "3"].contains(&leader.as_str()),
        "node ids come from pilotctl info: {leader}"
    );
    let (_, status) = get_json(&format!("{}/status", c.nodes[li].url())).await;
    assert_eq!(status["transport"]["kind"], "pilot", "{status}");
    assert_eq!(status["transport"]["healthy"], true, "{status}");

    // kill -9 of the leader: the survivors agree on a new leader with a higher term.
    c.nodes[li].kill9();
    let killed = Instant::now();
    let survivors: Vec<usize> = all.iter().copied().filter(|&i| i != li).collect();
    let (next, next_term) = c
        .agreed(&survivors, T + Duration::from_secs(2), |l, t| {
            l != leader && t > term
        })
        .await;
    println!(
        "pilot: failover after kill -9 took {:?} (term {term} -> {next_term})",
        killed.elapsed()
    );

    // The killed node restarts and rejoins as a follower without raising the term.
    c.nodes[li].start();
    wait_up(&c.nodes[li]).await;
    let (l, t) = c.agreed(&all, T * 3, |_, _| true).await;
    assert_eq!(
        (l.as_str(), t),
        (next.as_str(), next_term),
        "rejoin changed the leader"
    );

    // Isolating the leader from the broker: it stops claiming within its lease, the majority
    // elects another.
    let ni = c.index(&next);
    let daemon = format!("n{}", ni + 1);
    net.post("/cut", json!({"a": daemon, "b": "n4"})).await;
    let cut = Instant::now();
    let stopped = wait_for(Duration::from_secs(2) + Duration::from_millis(700), || {
        let url = c.nodes[ni].url();
        async move { (role_leader(&url).await == 503).then_some(()) }
    })
    .await;
    assert!(
        stopped.is_some(),
        "isolated leader kept its lease\n{}",
        c.logs()
    );
    println!(
        "pilot: isolated leader stopped leading after {:?}",
        cut.elapsed()
    );
    let majority: Vec<usize> = all.iter().copied().filter(|&i| i != ni).collect();
    let (third, third_term) = c
        .agreed(&majority, T * 3, |l, t| l != next && t > next_term)
        .await;

    // Healing: exactly one leader, the old one a follower.
    net.post("/heal", json!({})).await;
    let (healed, _) = c.agreed(&all, T * 3, |_, _| true).await;
    assert_eq!(
        healed, third,
        "healing must not move leadership back by force"
    );
    let mut claims = 0;
    for n in &c.nodes {
        if role_leader(&n.url()).await == 200 {
            claims += 1;
        }
    }
    assert_eq!(claims, 1, "exactly one node answers /role/leader 200");
    assert_eq!(
        leader_of(&c.nodes[ni].url()).await.map(|x| x.0),
        Some(third.clone()),
        "the old leader follows"
    );
    let _ = third_term;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pilot_configuration_errors_exit_with_clear_codes() {
    let dir = TempDir::new("pilot-cfg");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--transport",
            "pilot",
            "--listen",
            "127.0.0.1:0",
            "--cluster-size",
            "3",
        ];
        args.extend_from_slice(extra);
        let data = dir.0.join("data").display().to_string();
        let out = Command::new(BIN)
            .args(&args)
            .args(["--data-dir", &data])
            .output()
            .expect("run the binary");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let missing = dir.0.join("no-such-pilotctl");
    let missing_s = missing.display().to_string();
    let (code, err) = run(&[
        "--broker",
        "hub",
        "--node-id",
        "a",
        "--pilotctl",
        &missing_s,
    ]);
    assert_eq!(code, Some(69), "{err}");
    assert!(err.contains(&missing_s), "names the path: {err}");

    let not_exec = dir.0.join("pilotctl");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    let not_exec_s = not_exec.display().to_string();
    let (code, err) = run(&[
        "--broker",
        "hub",
        "--node-id",
        "a",
        "--pilotctl",
        &not_exec_s,
    ]);
    assert_eq!(code, Some(69), "{err}");
    assert!(err.contains("not executable"), "{err}");

    let real = pilotctl_path().display().to_string();
    let (code, err) = run(&["--node-id", "a", "--pilotctl", &real]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("--broker"), "{err}");

    // No daemon behind the socket: the id cannot be learned, and that is a missing service.
    let sock = dir.0.join("none.sock").display().to_string();
    let (code, err) = run(&[
        "--broker",
        "hub",
        "--pilotctl",
        &real,
        "--pilot-socket",
        &sock,
    ]);
    assert_eq!(code, Some(69), "{err}");
    assert!(err.contains("pilotctl info"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}
