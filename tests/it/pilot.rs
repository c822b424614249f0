//! Three real nodes electing over `--transport pilot`: the real pilotctl 1.18.0 against
//! pilot-devnet's emulated daemons, with a fourth daemon (`n4`) as the event-stream broker.

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::app::{get_json, leader_of, metrics_text, wait_for, wait_up, TempDir, BIN, T};
use crate::devnet::{pilotctl_path, Devnet};
use crate::peers::{counted, forgeries, key_file, message};
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
    shell_observer_sees_heartbeats(&net, &leader, term);

    // kill -9 of the leader: the survivors agree on a new leader with a higher term.
    c.nodes[li].kill9();
    let killed = pilot_election::clock::now();
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
    let cut = pilot_election::clock::now();
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
    // The cut broke the old leader's subscription; it was restarted, and that is counted.
    let metrics = metrics_text(&c.nodes[ni].url()).await;
    let restarts: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("pilot_election_subscription_restarts_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(restarts >= 1.0, "{metrics}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_replayed_messages_on_the_topic_change_nothing() {
    let _serial = crate::app::serial().await;
    let net = Devnet::start(4);
    let (_keys_dir, kf) = key_file();
    let c = pilot_cluster(&net, &["--cluster-key-file", &kf]);
    let all = [0, 1, 2];
    let (leader, term) = c.agreed(&all, T * 4, |_, _| true).await;

    // A real, validly signed heartbeat, captured off the topic as any subscriber could.
    let mut sub = net
        .ctl("n4")
        .subscribe("n4", "election:it")
        .expect("subscribe");
    let captured = loop {
        let data = tokio::time::timeout(T, sub.next())
            .await
            .expect("an event within T")
            .expect("subscription open")
            .expect("event");
        let v: Value = serde_json::from_str(&data).expect("our messages are JSON");
        if v["type"] == "heartbeat" {
            assert!(v["sig"].is_string(), "messages carry a signature: {v}");
            break data;
        }
    };
    drop(sub);

    let election = json!({"type": "election", "candidate": "mallory", "priority": 4_000_000_000u32,
                          "pre_vote": false});
    // Unsigned and wrongly signed, with a much higher term.
    let mut sends = forgeries(term + 100);
    sends.push(message(term + 100, 2, election).to_json());
    // The captured message with its term changed, and the captured message itself, replayed.
    let mut tampered: Value = serde_json::from_str(&captured).unwrap();
    tampered["term"] = json!(term + 100);
    sends.push(tampered.to_string());
    sends.push(captured.clone());
    sends.push(captured);
    let ctl = net.ctl("n2");
    for text in &sends {
        ctl.publish("n4", "election:it", text)
            .await
            .unwrap_or_else(|e| panic!("publish through the real pilotctl: {e}"));
    }

    // Nobody moves for a while: same leader, same term everywhere.
    let until = pilot_election::clock::now() + T;
    while pilot_election::clock::now() < until {
        for n in &c.nodes {
            assert_eq!(
                leader_of(&n.url()).await,
                Some((leader.clone(), term)),
                "{} changed after forged messages\n{}",
                n.id,
                c.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let follower = (c.index(&leader) + 1) % 3;
    let metrics = metrics_text(&c.nodes[follower].url()).await;
    assert!(counted(&metrics, "unsigned") >= 2.0, "{metrics}");
    assert!(counted(&metrics, "bad_signature") >= 2.0, "{metrics}");
    assert!(counted(&metrics, "unknown_key") >= 1.0, "{metrics}");
    // Exact copies of a real message are dropped as duplicates by the transport before the
    // replay window sees them; either way they never reach the core.
    let duplicates = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "pilot_election_messages_received_total{type=\"any\",outcome=\"duplicate\"} ",
            )
        })
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(
        counted(&metrics, "replayed") + duplicates >= 2.0,
        "{metrics}"
    );
}

/// The reference workflow's way of watching: `pilotctl subscribe | jq`, exactly as README.md
/// shows it (plus `--unbuffered`, since jq's output here is a pipe, not a terminal).
fn shell_observer_sees_heartbeats(net: &Devnet, leader: &str, term: u64) {
    let script = format!(
        "PILOT_SOCKET='{}' '{}' --json subscribe n4 election:it | jq --unbuffered -r \
         '.data | fromjson | select(.type == \"heartbeat\") | \"\\(.leader) \\(.term) \\(.timestamp)\"'",
        net.socket("n1").display(),
        pilotctl_path().display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("sh (and jq: apt-get install jq)");
    let pgid = child.id() as i32;
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = pilot_election::clock::now() + Duration::from_secs(10);
    while lines.len() < 3 && pilot_election::clock::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            lines.push(l);
        }
    }
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    let _ = child.wait();
    assert!(lines.len() >= 3, "the jq observer printed {lines:?}");
    let now = pilot_election::store::unix_ms_now() / 1000;
    for l in &lines {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f.len(), 3, "{l}");
        assert_eq!((f[0], f[1]), (leader, term.to_string().as_str()), "{l}");
        let ts: u64 = f[2].parse().expect("unix seconds");
        assert!(ts.abs_diff(now) < 60, "timestamp {ts} is not now ({now})");
    }
}
