//! `pilot-election once` with real processes: a command runs on the leader only, a handover
//! waits until it is gone, and a `once` killed with -9 takes its command with it. `run
//! --schedule`: a firing a second across the leader's faults, each run once or reported.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pilot_election::process_group::runs;
use serde_json::json;
use tokio::process::{Child, Command};

use pilot_election::clock::wall::parse_rfc3339;

use crate::app::{bin, client, get_json, post_json, serial, wait_for, Cluster, TempDir, TOKEN};
use crate::devnet::Devnet;
use crate::pilot_cluster::pilot_cluster;

/// Start-up and each failover, with room for a loaded 2-core machine.
const AGREE: Duration = Duration::from_secs(20);

fn once(url: &str, script: &str) -> Child {
    Command::new(bin())
        .args(["once", "--url", url, "--", "/bin/sh", "-c", script])
        .env("PILOT_ELECTION_ADMIN_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn once")
}

async fn exit_of(child: Child, within: Duration) -> (i32, String) {
    let out = tokio::time::timeout(within, child.wait_with_output())
        .await
        .expect("once ended in time")
        .expect("once ran");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The pid a long job wrote to `file`, once it did.
async fn pid_in(file: &Path) -> u32 {
    wait_for(Duration::from_secs(10), || async {
        std::fs::read_to_string(file).ok()?.trim().parse().ok()
    })
    .await
    .unwrap_or_else(|| panic!("the job never wrote {}", file.display()))
}

/// A job that writes its pid, then runs until it is told to stop.
fn long_job(dir: &Path, name: &str) -> String {
    format!(
        "echo $$ > '{}/{name}.pid'; trap 'exit 0' TERM; while :; do sleep 0.05; done",
        dir.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_runs_on_the_leader_only_and_a_handover_waits_until_it_is_gone() {
    let _serial = serial().await;
    let dir = TempDir::new("jobs");
    let c = Cluster::start(3, &["--preempt-after", "0s"]);
    let all = [0, 1, 2];
    let (l1, t1) = c.agreed(&all, AGREE, |_, _| true).await;
    let i1 = c.index(&l1);

    // 1. The same command on every node at once: only the leader's runs, with its term, and
    //    without the client's token in its environment.
    let runs_file = dir.0.join("runs");
    let script = format!(
        r#"echo "$PILOT_ELECTION_TERM $PILOT_ELECTION_NODE_ID ${{PILOT_ELECTION_ADMIN_TOKEN:-none}}" >> '{}'"#,
        runs_file.display()
    );
    let started: Vec<Child> = c.nodes.iter().map(|n| once(&n.url(), &script)).collect();
    for (i, child) in started.into_iter().enumerate() {
        let (code, err) = exit_of(child, Duration::from_secs(10)).await;
        let want = if i == i1 { 0 } else { 3 };
        assert_eq!(code, want, "node {i} (leader {l1}): {err}");
    }
    let lines = std::fs::read_to_string(&runs_file).unwrap();
    assert_eq!(lines, format!("{t1} {l1} none\n"), "exactly one run");

    // 2. A command that fails says so.
    let (code, err) = exit_of(once(&c.nodes[i1].url(), "exit 7"), Duration::from_secs(10)).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("exit status: 7"), "{err}");

    // 3. A step-down while a job runs is answered only once the job is gone, and `once` says
    //    leadership ended.
    let job = once(&c.nodes[i1].url(), &long_job(&dir.0, "a"));
    let pid = pid_in(&dir.0.join("a.pid")).await;
    assert!(runs(pid));
    let (status, body) = post_json(&c.nodes[i1].url(), "/step-down", Some(TOKEN), &json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert!(
        !runs(pid),
        "the step-down was answered with the job still running"
    );
    let (code, err) = exit_of(job, Duration::from_secs(10)).await;
    assert_eq!(code, 4, "{err}");
    let (l2, t2) = c.agreed(&all, AGREE, |l, t| l != l1 && t > t1).await;

    // 4. `once` killed with -9: its command goes with it, and the hold it leaves expires, so a
    //    handover still happens.
    let i2 = c.index(&l2);
    let job = once(&c.nodes[i2].url(), &long_job(&dir.0, "b"));
    let pid = pid_in(&dir.0.join("b.pid")).await;
    kill(Pid::from_raw(job.id().unwrap() as i32), Signal::SIGKILL).unwrap();
    let gone = wait_for(Duration::from_secs(5), || async {
        (!runs(pid)).then_some(())
    })
    .await;
    assert!(gone.is_some(), "the job outlived its once");
    let (status, body) = post_json(&c.nodes[i2].url(), "/step-down", Some(TOKEN), &json!({})).await;
    assert_eq!(status, 202, "{body}");
    c.agreed(&all, AGREE, |l, t| l != l2 && t > t2).await;

    // 5. Bad requests change nothing: a follower grants no hold, an unknown hold is a 404.
    let (l3, _) = c.agreed(&all, AGREE, |_, _| true).await;
    let follower = c.nodes.iter().find(|n| n.id != l3).unwrap();
    let (status, body) = post_json(&follower.url(), "/jobs/holds", Some(TOKEN), &json!({})).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("not_leader")),
        "{body}"
    );
    assert_eq!(body["leader"], json!(l3));
    let (status, _) = post_json(&follower.url(), "/jobs/holds", None, &json!({})).await;
    assert_eq!(status, 401);
    for id in ["999", "abc"] {
        let resp = client()
            .put(format!("{}/jobs/holds/{id}", follower.url()))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 404);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"], "unknown_hold");
    }
    // The usage errors of the command itself.
    let out = Command::new(bin())
        .args(["once", "--url", &follower.url()])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "no command: a usage error");
    let out = Command::new(bin())
        .args([
            "once",
            "--url",
            &follower.url(),
            "--group",
            "bad name",
            "--",
            "true",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

/// `run --schedule` with a firing every second, for about a minute over an emulated Pilot
/// network, while the leader is killed with -9, asked to step down and cut off from the others:
/// counted from an append-only file the firings' commands write, no firing runs twice, and
/// every firing from the first run to the last either ran or is reported missed or interrupted
/// by a leader (`/history`'s `firings`, kept across restarts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_a_second_runs_once_or_is_reported_across_kill_step_down_and_partition() {
    let _serial = serial().await;
    let dir = TempDir::new("schedule");
    let runs_file = dir.0.join("runs");
    let script = format!(
        r#"echo "$PILOT_ELECTION_FIRING $PILOT_ELECTION_NODE_ID $PILOT_ELECTION_TERM" >> '{}'"#,
        runs_file.display()
    );
    let net = Devnet::start(4);
    let mut c = pilot_cluster(
        &net,
        &[
            "--schedule",
            "* * * * * *",
            "--schedule-cmd",
            &script,
            "--schedule-grace",
            "2s",
            "--preempt-after",
            "0s",
        ],
    );
    let all = [0, 1, 2];
    let runs = |at_least: usize| {
        let file = runs_file.clone();
        async move {
            wait_for(Duration::from_secs(30), || async {
                let n = std::fs::read_to_string(&file).ok()?.lines().count();
                (n >= at_least).then_some(n)
            })
            .await
            .unwrap_or_else(|| panic!("fewer than {at_least} runs within 30 s"))
        }
    };
    let (l1, t1) = c.agreed(&all, AGREE, |_, _| true).await;
    let mut seen = runs(12).await;

    // 1. kill -9 of the leader (its running command, if any, dies with it), then back.
    let i1 = c.index(&l1);
    c.nodes[i1].kill9();
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != i1).collect();
    let (l2, t2) = c.agreed(&rest, AGREE, |l, t| l != l1 && t > t1).await;
    seen = runs(seen + 12).await;
    c.nodes[i1].start();
    c.agreed(&all, AGREE, |l, t| l == l2 && t == t2).await;

    // 2. A step-down of the leader: a firing running then ends before the handover.
    let i2 = c.index(&l2);
    let (status, body) = post_json(&c.nodes[i2].url(), "/step-down", Some(TOKEN), &json!({})).await;
    assert_eq!(status, 202, "{body}");
    let (l3, t3) = c.agreed(&all, AGREE, |l, t| l != l2 && t > t2).await;
    seen = runs(seen + 12).await;

    // 3. The leader cut off from the others, then healed.
    let i3 = c.index(&l3);
    net.post("/isolate", json!({"node": format!("n{}", i3 + 1)}))
        .await;
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != i3).collect();
    let (l4, t4) = c.agreed(&others, AGREE, |l, t| l != l3 && t > t3).await;
    seen = runs(seen + 12).await;
    net.post("/unisolate", json!({"node": format!("n{}", i3 + 1)}))
        .await;
    c.agreed(&all, AGREE, |l, t| l == l4 && t == t4).await;
    runs(seen + 12).await;

    // Every run, by firing.
    let text = std::fs::read_to_string(&runs_file).unwrap();
    let mut ran: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let firing: u64 = words.next().and_then(|w| w.parse().ok()).expect(line);
        ran.entry(firing).or_default().push(line.to_string());
    }
    let doubles: Vec<_> = ran.values().filter(|v| v.len() > 1).collect();
    assert!(
        doubles.is_empty(),
        "firings that ran twice: {doubles:?}\n{}",
        c.logs()
    );

    // Every report of every node, by firing: missed ones name the last of `count` firings.
    let mut reported: BTreeMap<u64, String> = BTreeMap::new();
    for n in &c.nodes {
        let (_, h) = get_json(&format!("{}/history", n.url())).await;
        for f in h["firings"].as_array().cloned().unwrap_or_default() {
            let at = parse_rfc3339(f["firing"].as_str().unwrap()).unwrap() / 1000;
            let outcome = f["outcome"].as_str().unwrap().to_string();
            let count = f["count"].as_u64().unwrap();
            if outcome == "missed" || outcome == "interrupted" {
                for s in at + 1 - count..=at {
                    reported.insert(s, format!("{outcome} by {}", n.id));
                }
            }
        }
    }
    let (first, last) = (*ran.keys().next().unwrap(), *ran.keys().last().unwrap());
    let unaccounted: Vec<u64> = (first..=last)
        .filter(|s| !ran.contains_key(s) && !reported.contains_key(s))
        .collect();
    assert!(
        unaccounted.is_empty(),
        "firings neither run nor reported: {unaccounted:?}\nreported: {reported:?}\n{}",
        c.logs()
    );
    let span = last - first + 1;
    eprintln!(
        "schedule: {span} firings from {first} to {last}: {} ran once, {} reported missed or \
         interrupted (of which {} ran), 0 twice; leaders {l1} {l2} {l3} {l4}",
        ran.len(),
        reported.len(),
        reported.keys().filter(|s| ran.contains_key(s)).count(),
    );
    assert!(
        ran.len() as u64 * 2 >= span,
        "most firings run: {} of {span}",
        ran.len()
    );
}
