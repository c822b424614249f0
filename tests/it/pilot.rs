//! Real nodes electing over `--transport pilot`: the real pilotctl 1.18.0 against pilot-devnet's
//! emulated daemons, with one more daemon (`n4`, and `n5` for a second) as event-stream broker.

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::app::{
    bin, get_json, leader_of, metric, metrics_text, wait_for, wait_up, App, Cluster, TempDir, T,
};
use crate::contract::Spec;
use crate::devnet::{pilotctl_path, write_script, Devnet};
use crate::peers::{counted, forgeries, key_file, message};
use crate::pilot_cluster::{pilot_cluster, pilot_cluster_via, pilot_node_in};

async fn role_leader(url: &str) -> u16 {
    get_json(&format!("{url}/role/leader")).await.0
}

/// Through the daemon's socket (the default where the daemon answers as 1.18 does): one
/// connection per broker and purpose, no pilotctl process at all once the node runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_fail_over_and_survive_isolation_over_pilot() {
    elect_fail_over_and_survive_isolation(&[], "socket").await;
}

/// The same through today's path, a pilotctl process per message (`--pilot-io pilotctl`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_fail_over_and_survive_isolation_through_pilotctl_processes() {
    elect_fail_over_and_survive_isolation(&["--pilot-io", "pilotctl"], "pilotctl").await;
}

/// The pilotctl processes a node runs at this moment.
fn pilotctl_children(node: &App) -> usize {
    let pid = node.child.as_ref().expect("running").id();
    crate::app::children_of(pid)
        .into_iter()
        .filter(|c| {
            std::fs::read_to_string(format!("/proc/{c}/comm"))
                .is_ok_and(|comm| comm.trim() == "pilotctl")
        })
        .count()
}

async fn elect_fail_over_and_survive_isolation(extra: &[&str], io: &str) {
    let _serial = crate::app::serial().await;
    let net = Devnet::start(4);
    let mut c = pilot_cluster(&net, extra);
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
    assert_eq!(status["transport"]["io"], io, "{status}");
    let metrics = metrics_text(&c.nodes[li].url()).await;
    assert_eq!(
        metric(&metrics, &format!("pilot_election_pilot_io{{io=\"{io}\"}}")),
        1.0,
        "{metrics}"
    );
    // Over the socket no node runs a pilotctl process (sampled for 2 s, some 4 heartbeats);
    // through pilotctl, the subscription alone is one per node.
    let mut most = 0;
    let until = pilot_election::clock::now() + Duration::from_secs(2);
    while pilot_election::clock::now() < until {
        most = most.max(c.nodes.iter().map(pilotctl_children).max().unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if io == "socket" {
        assert_eq!(most, 0, "pilotctl processes over the socket path");
        let devnet = net.status().await;
        assert_eq!(devnet["stats"]["rate_limited"], 0, "{devnet}");
        assert!(devnet["stats"]["published"].as_u64() > Some(0), "{devnet}");
    } else {
        assert!(most >= 1, "no pilotctl subscription through pilotctl");
    }
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
        pilot_election::clock::since(killed)
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
        pilot_election::clock::since(cut)
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
    let restarts = metric(&metrics, "pilot_election_subscription_restarts_total");
    assert!(restarts >= 1.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_answers_otherwise_is_used_through_pilotctl() {
    let _serial = crate::app::serial().await;
    // The devnet's daemons report another version in `info`: auto chooses pilotctl, says why,
    // and the cluster elects that way.
    let net = Devnet::start_with(4, &["--daemon-version", "1.17.3"]);
    let c = pilot_cluster(&net, &[]);
    for n in &c.nodes {
        wait_up(n).await;
    }
    let (leader, _) = c.agreed(&[0, 1, 2], T * 4, |_, _| true).await;
    let (_, status) = get_json(&format!("{}/status", c.nodes[c.index(&leader)].url())).await;
    assert_eq!(status["transport"]["io"], "pilotctl", "{status}");
    let why = log_lines(&c.nodes[0], "does not answer as a 1.18 daemon does");
    assert!(
        why.iter()
            .any(|l| l.contains("1.17.3") && l.contains("WARN")),
        "{}",
        c.nodes[0].log()
    );
    // `--pilot-io socket` refuses such a daemon: exit 69, saying why, in one line.
    let dir = TempDir::new("pilot-io");
    let socket = net.nodes[0]["socket"].as_str().unwrap().to_string();
    let out = Command::new(bin())
        .args(["run", "--transport", "pilot", "--listen", "127.0.0.1:0"])
        .args(["--member", "a,b,c", "--node-id", "a", "--broker", "n4"])
        .args(["--pilot-io", "socket", "--pilot-socket", &socket])
        .args(["--pilotctl", &pilotctl_path().display().to_string()])
        .args(["--data-dir", &dir.0.join("data").display().to_string()])
        .output()
        .expect("run the binary");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("1.17.3") && err.contains("--pilot-io socket"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
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
            "--member",
            "a,b,c",
        ];
        args.extend_from_slice(extra);
        let data = dir.0.join("data").display().to_string();
        let out = Command::new(bin())
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

/// The shell observer, `pilotctl subscribe | jq`, exactly as docs/guide/running.md ("Watch the
/// election from a shell") shows it (plus
/// `--unbuffered`, since jq's output here is a pipe, not a terminal); docs/pilot.md says why its
/// field names still work.
fn shell_observer_sees_heartbeats(net: &Devnet, leader: &str, term: u64) {
    let jq = Command::new("jq").arg("--version").output();
    assert!(
        jq.as_ref().is_ok_and(|o| o.status.success()),
        "jq is missing (apt-get install -y jq; {}): {jq:?}",
        support::SET_UP
    );
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
        .expect("sh");
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
    let now = pilot_election::clock::wall::unix_ms_now() / 1000;
    for l in &lines {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f.len(), 3, "{l}");
        assert_eq!((f[0], f[1]), (leader, term.to_string().as_str()), "{l}");
        let ts: u64 = f[2].parse().expect("unix seconds");
        assert!(ts.abs_diff(now) < 60, "timestamp {ts} is not now ({now})");
    }
}

/// The state one broker is in, as a node's `/status` shows it.
async fn broker_state(url: &str, broker: &str) -> Option<String> {
    let (_, status) = get_json(&format!("{url}/status")).await;
    status["transport"]["brokers"]
        .as_array()?
        .iter()
        .find(|b| b["broker"] == broker)
        .and_then(|b| b["state"].as_str().map(String::from))
}

/// Log lines of a node that contain `needle`.
fn log_lines(node: &App, needle: &str) -> Vec<String> {
    node.log()
        .lines()
        .filter(|l| l.contains(needle))
        .map(String::from)
        .collect()
}

/// Polls every node in `which` for `during` and fails if any of them names a leader other than
/// `expected` or a term other than `term`, or if anyone but `expected`'s node claims to lead.
async fn hold_steady(c: &Cluster, which: &[usize], expected: &str, term: u64, during: Duration) {
    let until = pilot_election::clock::now() + during;
    while pilot_election::clock::now() < until {
        for &i in which {
            let url = c.nodes[i].url();
            assert_eq!(
                leader_of(&url).await,
                Some((expected.to_string(), term)),
                "{} moved\n{}",
                c.nodes[i].id,
                c.logs()
            );
            if c.nodes[i].id != expected {
                assert_eq!(
                    role_leader(&url).await,
                    503,
                    "{} claims to lead",
                    c.nodes[i].id
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The only broker (n4) does not trust n3: n4's event stream closes n3's subscription right
/// after it starts and never reads n3's publishes, so n3 hears nobody and nobody hears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_the_broker_does_not_trust_never_leads_says_why_and_joins_once_trusted() {
    let _serial = crate::app::serial().await;
    let net = Devnet::start(4);
    // One-way, as after `pilotctl untrust 3` on n4: n3 still trusts n4, so pilotctl on n3
    // dials it, and the broker's gate is what refuses.
    net.post("/revoke-trust", json!({"node": "n4", "peer": "n3"}))
        .await;
    let c = pilot_cluster(&net, &[]);
    let (leader, term) = c.agreed(&[0, 1], T * 4, |_, _| true).await;
    assert_ne!(leader, "3");
    let n3 = c.nodes[2].url();

    // n3 never claims leadership and knows no leader, for several election timeouts, and its
    // subscription keeps being refused.
    let until = pilot_election::clock::now() + T * 2;
    while pilot_election::clock::now() < until {
        assert_eq!(
            role_leader(&n3).await,
            503,
            "n3 claims to lead\n{}",
            c.logs()
        );
        let (code, status) = get_json(&format!("{n3}/status")).await;
        assert_eq!(code, 200);
        assert_ne!(status["role"], "leader", "{status}");
        assert_eq!(status["leader"], Value::Null, "n3 heard a leader: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, ready) = get_json(&format!("{n3}/readyz")).await;
    assert_eq!(code, 503, "{ready}");
    Spec::load().check("get", "/readyz", 503, &ready);
    let reason = ready["reason"].as_str().expect("a reason");
    for needle in [
        "broker n4 is rejected",
        "does not trust",
        "pilotctl handshake n4",
        "pilotctl approve 3",
    ] {
        assert!(reason.contains(needle), "{needle:?} not in {reason}");
    }
    let (_, status) = get_json(&format!("{n3}/status")).await;
    Spec::load().check("get", "/status", 200, &status);
    let n4 = &status["transport"]["brokers"][0];
    assert_eq!(n4["state"], "rejected", "{status}");
    assert_eq!(n4["subscribed_since"], Value::Null);
    assert!(n4["restarts"].as_u64().unwrap() >= 3, "{status}");
    assert!(
        n4["last_error"].as_str().unwrap().contains("recv: EOF"),
        "{status}"
    );
    let metrics = metrics_text(&n3).await;
    assert_eq!(
        metric(
            &metrics,
            r#"pilot_election_broker_state{broker="n4",state="rejected"}"#
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            r#"pilot_election_broker_state{broker="n4",state="subscribed"}"#
        ),
        0.0
    );
    // `pilot-election status`, the check of docs/guide/pilot-network.md ("When it does not
    // work"), says the same.
    let out = crate::cli::run(&["status", "--url", &n3]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("broker n4 rejected since"), "{text}");
    assert!(
        text.contains("to fix: on this node run `pilotctl handshake n4"),
        "{text}"
    );
    // One warning for the whole episode, however many times the subscription was retried.
    let warned = log_lines(&c.nodes[2], "pilotctl handshake n4");
    assert_eq!(warned.len(), 1, "{warned:#?}\n{}", c.nodes[2].log());
    assert!(warned[0].contains("WARN"), "{}", warned[0]);
    // The trusted nodes see nothing wrong.
    let (code, _) = get_json(&format!("{}/readyz", c.nodes[0].url())).await;
    assert_eq!(code, 200);

    // The fix the warning names, run with the real pilotctl: n3 joins within seconds.
    let asked = net.pilotctl("n3", &["handshake", "n4", "pilot-election"]);
    assert_eq!(asked["trusted"], false, "the request waits for n4: {asked}");
    net.pilotctl("n4", &["approve", "3"]);
    let granted = pilot_election::clock::now();
    let joined = wait_for(Duration::from_secs(15), || {
        let n3 = n3.clone();
        let leader = leader.clone();
        async move { (leader_of(&n3).await.map(|l| l.0) == Some(leader)).then_some(()) }
    })
    .await;
    assert!(
        joined.is_some(),
        "n3 did not join after trust was granted\n{}",
        c.logs()
    );
    println!(
        "pilot: n3 follows {leader} {:?} after trust was granted",
        pilot_election::clock::since(granted)
    );
    // Ready once it also hears a quorum, which may come a moment after it follows the leader.
    let ready = wait_for(Duration::from_secs(15), || {
        let url = format!("{n3}/readyz");
        async move { (get_json(&url).await.0 == 200).then_some(()) }
    })
    .await;
    assert!(ready.is_some(), "n3 never became ready\n{}", c.logs());
    assert_eq!(broker_state(&n3, "n4").await.as_deref(), Some("subscribed"));
    assert_eq!(log_lines(&c.nodes[2], "subscribed to n4 again").len(), 1);
    // Joining did not disturb the leader's term.
    let _ = c
        .agreed(&[0, 1, 2], T, |l, t| l == leader && t == term)
        .await;
}

/// Two brokers: n5 carries the election alone while n4 refuses the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_brokers_revoking_trust_at_one_changes_nothing_and_shows_in_status() {
    let _serial = crate::app::serial().await;
    let net = Devnet::start(5);
    let c = pilot_cluster_via(&net, 3, "n4,n5", &[]);
    let all = [0, 1, 2];
    let (leader, term) = c.agreed(&all, T * 4, |_, _| true).await;
    let li = c.index(&leader);
    let lurl = c.nodes[li].url();
    // Both subscriptions prove themselves before the fault, so the change is attributable.
    let both = wait_for(T * 2, || {
        let lurl = lurl.clone();
        async move {
            let a = broker_state(&lurl, "n4").await;
            let b = broker_state(&lurl, "n5").await;
            (a.as_deref() == Some("subscribed") && b.as_deref() == Some("subscribed")).then_some(())
        }
    })
    .await;
    assert!(both.is_some(), "{}", c.logs());

    let daemon = format!("n{}", li + 1);
    let closed = net
        .post("/revoke-trust", json!({"node": "n4", "peer": daemon}))
        .await;
    assert_eq!(
        closed["closed"], 2,
        "the leader's subscribing and publishing connections to n4 were torn down"
    );
    // Longer than a lease and an election timeout: nobody moves, nobody else claims.
    hold_steady(&c, &all, &leader, term, Duration::from_secs(2) + T).await;
    let (_, status) = get_json(&format!("{lurl}/status")).await;
    Spec::load().check("get", "/status", 200, &status);
    let brokers = status["transport"]["brokers"].as_array().unwrap();
    assert_eq!(brokers[0]["broker"], "n4");
    assert_eq!(brokers[0]["state"], "rejected", "{status}");
    assert!(brokers[0]["fix"]
        .as_str()
        .unwrap()
        .contains(&format!("pilotctl approve {leader}")));
    assert_eq!(brokers[1]["state"], "subscribed", "{status}");
    assert_eq!(status["transport"]["healthy"], true, "n5 still carries it");
    let (code, ready) = get_json(&format!("{lurl}/readyz")).await;
    assert_eq!(code, 200, "{ready}");
    assert_eq!(log_lines(&c.nodes[li], "broker n4: rejected").len(), 1);

    // Trust back: the next subscription proves itself and the state says so.
    net.post("/grant-trust", json!({"node": "n4", "peer": daemon}))
        .await;
    let back =
        wait_for(Duration::from_secs(10), || {
            let lurl = lurl.clone();
            async move {
                (broker_state(&lurl, "n4").await.as_deref() == Some("subscribed")).then_some(())
            }
        })
        .await;
    assert!(back.is_some(), "{}", c.nodes[li].log());
    hold_steady(&c, &all, &leader, term, Duration::from_millis(500)).await;
}

/// A subscriber the broker dropped after failed deliveries keeps its connection and hears
/// nothing; the node notices that its own messages stopped coming back and subscribes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dropped_subscription_is_noticed_and_replaced() {
    let _serial = crate::app::serial().await;
    let net = Devnet::start(4);
    let c = pilot_cluster(&net, &[]);
    let all = [0, 1, 2];
    let (leader, _) = c.agreed(&all, T * 4, |_, _| true).await;
    let li = c.index(&leader);
    let daemon = format!("n{}", li + 1);
    // The leader publishes a heartbeat every 500 ms: its own echo is the signal.
    net.post("/fail-delivery", json!({"node": daemon})).await;
    net.wait_status("the leader's subscriber dropped", |s| {
        s["stats"]["subscribers_dropped"].as_u64() >= Some(1)
    })
    .await;
    net.post("/heal", json!({})).await;
    let noticed = wait_for(Duration::from_secs(15), || {
        let node = &c.nodes[li];
        async move { (!log_lines(node, "broker n4: silent").is_empty()).then_some(()) }
    })
    .await;
    assert!(noticed.is_some(), "{}", c.nodes[li].log());
    let back =
        wait_for(Duration::from_secs(10), || {
            let url = c.nodes[li].url();
            async move {
                (broker_state(&url, "n4").await.as_deref() == Some("subscribed")).then_some(())
            }
        })
        .await;
    assert!(back.is_some(), "{}", c.nodes[li].log());
    assert_eq!(log_lines(&c.nodes[li], "broker n4: silent").len(), 1);
    // One leader again, all agreeing (whoever it is: the old one may have lost its lease).
    let _ = c.agreed(&all, T * 3, |_, _| true).await;
}

/// A pilotctl that reports `version` and hands every other command to the real one.
fn fake_pilotctl(dir: &std::path::Path, name: &str, version_script: &str) -> String {
    let path = dir.join(name);
    write_script(
        &path,
        &format!(
            "#!/bin/sh\nif [ \"$1\" = version ]; then\n{version_script}\nexit $?\nfi\nexec '{}' \"$@\"\n",
            pilotctl_path().display()
        ),
    );
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pilotctl_versions_outside_the_tested_range_are_refused_or_warned() {
    let dir = TempDir::new("pilot-version");
    let data = dir.0.join("data").display().to_string();
    let refused = |pilotctl: &str| {
        let mut child = Command::new(bin())
            .args(["run", "--transport", "pilot", "--listen", "127.0.0.1:0"])
            .args(["--member", "a,b,c", "--broker", "hub", "--node-id", "a"])
            .args(["--pilotctl", pilotctl, "--data-dir", &data])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the binary");
        // A node that was not refused would run until killed.
        let deadline = pilot_election::clock::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if pilot_election::clock::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{pilotctl} was not refused: the node kept running");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        (status.code(), err)
    };
    for (name, script, needle) in [
        ("old", "echo 1.17.3", "older than the tested 1.18.x"),
        ("major", "echo 2.0.0", "different major version"),
        ("garbage", "echo 'usage: not pilotctl'", "not a version"),
        ("broken", "echo oops >&2; exit 3", "cannot read the version"),
    ] {
        let fake = fake_pilotctl(&dir.0, name, script);
        let (code, err) = refused(&fake);
        assert_eq!(code, Some(69), "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
        assert!(err.contains(&fake), "{name} names the binary: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: one line: {err}");
    }

    // The http transport never runs pilotctl: a refused one does not stop it.
    let old = fake_pilotctl(&dir.0, "old-again", "echo 1.17.3");
    let mut http = crate::app::app("a", crate::app::free_port(), &[], &["--pilotctl", &old]);
    http.start();
    wait_up(&http).await;
    assert!(log_lines(&http, "pilotctl").is_empty(), "{}", http.log());

    // A newer 1.x runs with a warning that says so; the tested one is logged as tested.
    let net = Devnet::start(1);
    let newer = fake_pilotctl(&dir.0, "newer", "echo 1.19.0; exit 0");
    let mut node = pilot_node_in(&net, "n1", "n1", 1, &[]);
    let at = node.args.iter().position(|a| a == "--pilotctl").unwrap();
    node.args[at + 1] = newer;
    node.start();
    wait_up(&node).await;
    let warned = log_lines(&node, "newer than the tested 1.18.x");
    assert_eq!(warned.len(), 1, "{}", node.log());
    assert!(
        warned[0].contains("WARN") && warned[0].contains("1.19.0"),
        "{}",
        warned[0]
    );
    node.kill9();
    let mut tested = pilot_node_in(&net, "n1", "n1", 1, &[]);
    tested.start();
    wait_up(&tested).await;
    let logged = log_lines(&tested, "pilotctl 1.18.0 (tested)");
    assert_eq!(logged.len(), 1, "{}", tested.log());
    assert!(logged[0].contains("INFO"), "{}", logged[0]);
}
