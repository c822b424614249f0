//! `run --on-change` with real processes: every node's hook appends what it was told to a file,
//! and the runs are compared with the node's own `/history` across a `kill -9`, a step-down, a
//! SIGTERM and a partition; and on the leader the run that reports the end of its leadership (and
//! its `--exec` child) has ended before any other node's "became leader" run begins.

use std::time::Duration;

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::app::{get_json, post_json, serial, wait_for, TempDir, TOKEN};
use crate::proxy::{LinkedCluster, Mode};

/// Start-up and each failover, with room for a loaded 2-core machine.
const AGREE: Duration = Duration::from_secs(20);

/// One run as the hook recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    term: u64,
    leader: Option<String>,
    previous: Option<String>,
    reason: String,
    role: String,
}

fn opt(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// The lines of `<dir>/<node>.runs`: `term|leader|previous|reason|role|group`.
fn runs_of(dir: &TempDir, node: &str) -> Vec<Run> {
    std::fs::read_to_string(dir.0.join(format!("{node}.runs")))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            assert_eq!(f.len(), 6, "a whole line: {l}");
            assert_eq!(f[5], "it", "the group: {l}");
            Run {
                term: f[0].parse().expect("a term"),
                leader: opt(f[1]),
                previous: opt(f[2]),
                reason: f[3].to_string(),
                role: f[4].to_string(),
            }
        })
        .collect()
}

/// The node's history as (term, leader, previous, reason).
async fn history_of(url: &str) -> Vec<(u64, Option<String>, Option<String>, String)> {
    let (_, h) = get_json(&format!("{url}/history")).await;
    h["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .map(|t| {
            (
                t["term"].as_u64().unwrap(),
                t["leader"].as_str().map(String::from),
                t["previous"].as_str().map(String::from),
                t["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// What the node logged of its runs: (runs, changes skipped) summed over every start of it.
fn logged_runs(log: &str) -> (usize, u64) {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("on-change hook ran") || l.contains("on-change hook did not"))
        .collect();
    let skipped = lines
        .iter()
        .filter_map(|l| {
            l.split("skipped=")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    (lines.len(), skipped)
}

/// Waits until every node's last recorded run is the last entry of its history (the newest
/// change has been run everywhere) and no run is in progress.
async fn settled(c: &LinkedCluster, dir: &TempDir, which: &[usize]) {
    let ok = wait_for(Duration::from_secs(10), || async {
        for &i in which {
            let n = &c.cluster.nodes[i];
            let h = history_of(&n.url()).await;
            let last = runs_of(dir, &n.id)
                .into_iter()
                .rev()
                .find(|r| !matches!(r.reason.as_str(), "start" | "campaign" | "campaign_lost"));
            let same = match (h.last(), last) {
                (Some(e), Some(r)) => {
                    *e == (
                        r.term,
                        r.leader.clone(),
                        r.previous.clone(),
                        r.reason.clone(),
                    )
                }
                _ => false,
            };
            let (_, s) = get_json(&format!("{}/status", n.url())).await;
            if !same || !s["on_change"]["running"].is_null() {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(
        ok.is_some(),
        "the hooks never caught up:\n{}",
        c.cluster.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hook_run_matches_the_history_across_kill_step_down_sigterm_and_a_partition() {
    let _serial = serial().await;
    let dir = TempDir::new("hooks");
    let script = format!(
        r#"echo "$PILOT_ELECTION_TERM|$PILOT_ELECTION_LEADER|$PILOT_ELECTION_PREVIOUS|$PILOT_ELECTION_REASON|$PILOT_ELECTION_ROLE|$PILOT_ELECTION_GROUP" >>'{}'/"$PILOT_ELECTION_NODE_ID.runs""#,
        dir.0.display()
    );
    // Preemption is off, so that the only handovers are the ones made here.
    let mut c = LinkedCluster::start(3, &["--preempt-after", "0s", "--on-change", &script]).await;
    let all = [0, 1, 2];
    let others = |i: usize| -> Vec<usize> { all.iter().copied().filter(|&j| j != i).collect() };
    // How many times each node started: each start runs the hook once with reason `start`.
    let mut starts: HashMap<String, usize> =
        c.cluster.nodes.iter().map(|n| (n.id.clone(), 1)).collect();

    // 1. The first leader; every node ran its start hook, then the election.
    let (l1, _) = c.cluster.agreed(&all, AGREE, |_, _| true).await;
    settled(&c, &dir, &all).await;

    // 2. kill -9 of the leader, and its restart. The history file is written off the loop
    // (it is informational, and a kill -9 may lose its newest entries): wait until it holds
    // what `/history` shows, so that the runs are compared with a whole history.
    let i1 = c.cluster.index(&l1);
    let node = &c.cluster.nodes[i1];
    let shown = history_of(&node.url()).await.len();
    let file = node.data_dir().join("history.json");
    let on_disk = wait_for(Duration::from_secs(10), || async {
        let text = std::fs::read(&file).ok()?;
        let list: Vec<Value> = serde_json::from_slice(&text).ok()?;
        (list.len() == shown).then_some(())
    })
    .await;
    assert!(
        on_disk.is_some(),
        "{} never held {shown} entries",
        file.display()
    );
    c.cluster.nodes[i1].kill9();
    let (l2, t2) = c.cluster.agreed(&others(i1), AGREE, |l, _| l != l1).await;
    c.cluster.nodes[i1].start();
    *starts.get_mut(&l1).unwrap() += 1;
    c.cluster
        .agreed(&all, AGREE, |l, t| l == l2 && t == t2)
        .await;
    settled(&c, &dir, &all).await;

    // 3. A step-down through the API.
    let i2 = c.cluster.index(&l2);
    let url2 = c.cluster.nodes[i2].url();
    let (status, body) = post_json(&url2, "/step-down", Some(TOKEN), &json!({})).await;
    assert_eq!(status, 202, "{body}");
    let (l3, _) = c.cluster.agreed(&all, AGREE, |l, _| l != l2).await;
    settled(&c, &dir, &all).await;

    // 4. SIGTERM of the leader's node (it hands over), and its restart.
    let i3 = c.cluster.index(&l3);
    c.cluster.nodes[i3].sigterm();
    let (l4, t4) = c.cluster.agreed(&others(i3), AGREE, |l, _| l != l3).await;
    let exit = c.cluster.nodes[i3].wait_exit(Duration::from_secs(10)).await;
    assert!(exit.success(), "{exit:?}");
    c.cluster.nodes[i3].start();
    *starts.get_mut(&l3).unwrap() += 1;
    c.cluster
        .agreed(&all, AGREE, |l, t| l == l4 && t == t4)
        .await;
    settled(&c, &dir, &all).await;

    // 5. The leader is cut off both ways: it loses its quorum, the others elect; healed, it
    // follows.
    let i4 = c.cluster.index(&l4);
    c.links.deafen(i4, Mode::Refuse);
    c.links.mute(i4, Mode::Refuse);
    let (l5, t5) = c.cluster.agreed(&others(i4), AGREE, |l, _| l != l4).await;
    c.links.heal();
    c.cluster
        .agreed(&all, AGREE, |l, t| l == l5 && t == t5)
        .await;
    settled(&c, &dir, &all).await;

    // Every node: its runs, leaving out the ones that report no change of leader, are its
    // history in order, save only the changes a newer one overtook during a run (each counted
    // in the node's log), and the last run is the last entry.
    let mut total = (0, 0);
    for n in &c.cluster.nodes {
        let runs = runs_of(&dir, &n.id);
        let history = history_of(&n.url()).await;
        let (logged, skipped) = logged_runs(&n.log());
        assert_eq!(logged, runs.len(), "{}: one log line per run", n.id);
        let started = runs.iter().filter(|r| r.reason == "start").count();
        assert_eq!(started, starts[&n.id], "{}: {runs:#?}", n.id);
        for r in &runs {
            let leads = r.leader.as_deref() == Some(n.id.as_str());
            assert_eq!(r.role == "leader", leads, "{}: {r:?}", n.id);
            if r.role == "candidate" {
                assert_eq!((r.leader.as_deref(), r.reason.as_str()), (None, "campaign"));
            }
        }
        let changes: Vec<_> = runs
            .iter()
            .filter(|r| !matches!(r.reason.as_str(), "start" | "campaign" | "campaign_lost"))
            .map(|r| {
                (
                    r.term,
                    r.leader.clone(),
                    r.previous.clone(),
                    r.reason.clone(),
                )
            })
            .collect();
        let mut rest = history.iter();
        for ch in &changes {
            assert!(
                rest.any(|e| e == ch),
                "{}: the run {ch:?} is not next in its history\nruns {changes:#?}\nhistory {history:#?}",
                n.id
            );
        }
        let missing = (history.len() - changes.len()) as u64;
        assert!(
            missing <= skipped,
            "{}: {missing} history entries never run, {skipped} changes skipped\nruns {changes:#?}\nhistory {history:#?}",
            n.id
        );
        assert_eq!(changes.last(), history.last(), "{}", n.id);
        total.0 += changes.len();
        total.1 += history.len();
        // Its status shows the last run, as the contract says.
        let (_, status) = get_json(&format!("{}/status", n.url())).await;
        crate::contract::Spec::load().check("get", "/status", 200, &status);
        let last = &status["on_change"]["last_run"];
        assert_eq!(last["outcome"], json!("ok"), "{status}");
        assert_eq!(last["exit_code"], json!(0), "{status}");
        let ran = runs.last().unwrap();
        assert_eq!(
            (last["term"].as_u64(), last["reason"].as_str()),
            (Some(ran.term), Some(ran.reason.as_str())),
            "{status}"
        );
    }
    eprintln!(
        "hooks: {} of {} history entries were run on the 3 nodes (the rest overtaken by a newer change)",
        total.0, total.1
    );
    let metrics = crate::app::metrics_text(&c.cluster.nodes[c.cluster.index(&l5)].url()).await;
    assert!(
        metrics.contains("pilot_election_on_change_runs_total{outcome=\"ok\"}"),
        "{metrics}"
    );
}

/// The shared log of every node's runs: `begin|end NANOS NODE ROLE TERM REASON PREVIOUS`, and of
/// its `--exec` children's ends, `exec-end NANOS NODE TERM`; one `O_APPEND` write each, so their
/// order in the file is the order they happened in.
fn events(dir: &TempDir) -> Vec<Vec<String>> {
    std::fs::read_to_string(dir.0.join("events"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').map(String::from).collect())
        .collect()
}

/// Checks that `old`'s run reporting the end of its leadership in `term`, and its `--exec` child
/// of that term, ended before `new`'s run reporting its own leadership began; returns the gap
/// in ms.
async fn lost_before_won(
    dir: &TempDir,
    (old, term): (&str, u64),
    (new, new_term): (&str, u64),
    c: &LinkedCluster,
) -> f64 {
    let found = wait_for(Duration::from_secs(10), || async {
        let ev = events(dir);
        let end = ev.iter().position(|e| {
            e[0] == "end"
                && e[2] == old
                && e[3] != "leader"
                && e[6] == old
                && e[4] == term.to_string()
        })?;
        let exec_end = ev
            .iter()
            .position(|e| e[0] == "exec-end" && e[2] == old && e[3] == term.to_string())?;
        let begin = ev.iter().position(|e| {
            e[0] == "begin" && e[2] == new && e[3] == "leader" && e[4] == new_term.to_string()
        })?;
        Some((end, exec_end, begin, ev))
    })
    .await;
    let (end, exec_end, begin, ev) = found.unwrap_or_else(|| {
        panic!(
            "no lost-leadership run of {old} or no leadership run of {new}: {:#?}\n{}",
            events(dir),
            c.cluster.logs()
        )
    });
    assert!(
        end < begin,
        "{new} began its leader run before {old} ended its lost-leadership run: {ev:#?}"
    );
    assert!(
        exec_end < begin,
        "{new} began its leader run before {old}'s --exec child had stopped: {ev:#?}"
    );
    let ns = |i: usize| ev[i][1].parse::<u128>().expect("nanoseconds");
    assert!(ns(end) <= ns(begin), "{ev:#?}");
    let gap = (ns(begin) - ns(end)) as f64 / 1e6;
    // The lost-leadership run itself took its 300 ms.
    let began = ev
        .iter()
        .rposition(|e| e[0] == "begin" && e[2] == old && e[6] == old && e[4] == term.to_string())
        .expect("its begin");
    assert!(ns(end) - ns(began) >= 300_000_000, "{ev:#?}");
    gap
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_lost_leadership_run_ends_before_any_successor_run_begins() {
    let _serial = serial().await;
    let dir = TempDir::new("hooks-order");
    // The run that reports losing leadership (the previous leader was this node, and it no
    // longer leads) takes 300 ms, like an `ip addr del` plus a gratuitous ARP.
    let script = format!(
        r#"E='{}/events'; A="$PILOT_ELECTION_NODE_ID $PILOT_ELECTION_ROLE $PILOT_ELECTION_TERM $PILOT_ELECTION_REASON ${{PILOT_ELECTION_PREVIOUS:--}}"; echo "begin $(date +%s%N) $A" >>"$E"; if [ "$PILOT_ELECTION_PREVIOUS" = "$PILOT_ELECTION_NODE_ID" ] && [ "$PILOT_ELECTION_ROLE" != leader ]; then sleep 0.3; fi; echo "end $(date +%s%N) $A" >>"$E""#,
        dir.0.display()
    );
    // And an --exec child that takes 200 ms to stop: the resign waits for both.
    let exec = format!(
        r#"E='{}/events'; trap 'sleep 0.2; echo "exec-end $(date +%s%N) $PILOT_ELECTION_NODE_ID $PILOT_ELECTION_TERM" >>"$E"; exit 0' TERM; while :; do sleep 0.05; done"#,
        dir.0.display()
    );
    let args = [
        "--preempt-after",
        "0s",
        "--on-change",
        &script,
        "--exec",
        &exec,
    ];
    let mut c = LinkedCluster::start(3, &args).await;
    let all = [0, 1, 2];
    let others = |i: usize| -> Vec<usize> { all.iter().copied().filter(|&j| j != i).collect() };
    let (l1, t1) = c.cluster.agreed(&all, AGREE, |_, _| true).await;

    // A step-down: the resign waits for the 300 ms run.
    let i1 = c.cluster.index(&l1);
    let asked = pilot_election::clock::now();
    let (status, body) = post_json(
        &c.cluster.nodes[i1].url(),
        "/step-down",
        Some(TOKEN),
        &json!({}),
    )
    .await;
    let answered = pilot_election::clock::since(asked);
    assert_eq!(status, 202, "{body}");
    let (l2, t2) = c.cluster.agreed(&all, AGREE, |l, _| l != l1).await;
    let gap = lost_before_won(&dir, (&l1, t1), (&l2, t2), &c).await;
    // The answer comes once the resign has left, so after the hook.
    assert!(
        answered >= Duration::from_millis(300),
        "answered in {answered:?}"
    );
    eprintln!("hooks: step-down answered in {answered:?}; {l2} began leading {gap:.1} ms after {l1} was done");

    // A candidacy withdrawal.
    let i2 = c.cluster.index(&l2);
    let (status, body) = post_json(
        &c.cluster.nodes[i2].url(),
        "/candidacy",
        Some(TOKEN),
        &json!({"eligible": false}),
    )
    .await;
    assert!(status < 300, "{status} {body}");
    let (l3, t3) = c.cluster.agreed(&all, AGREE, |l, _| l != l2).await;
    let gap = lost_before_won(&dir, (&l2, t2), (&l3, t3), &c).await;
    eprintln!("hooks: withdrawal: {l3} began leading {gap:.1} ms after {l2} was done");
    let (status, body) = post_json(
        &c.cluster.nodes[i2].url(),
        "/candidacy",
        Some(TOKEN),
        &json!({"eligible": true}),
    )
    .await;
    assert!(status < 300, "{status} {body}");

    // SIGTERM of the leader's node, once the others are past the cooldown of their resigns (or
    // it would have nobody to hand over to, and the others would wait that out).
    let i3 = c.cluster.index(&l3);
    let cooled = wait_for(Duration::from_secs(10), || async {
        for &i in &others(i3) {
            let (_, s) = get_json(&format!("{}/status", c.cluster.nodes[i].url())).await;
            if s["candidacy"] != json!("eligible") {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(cooled.is_some(), "{}", c.cluster.logs());
    c.cluster.nodes[i3].sigterm();
    let (l4, t4) = c.cluster.agreed(&others(i3), AGREE, |l, _| l != l3).await;
    let exit = c.cluster.nodes[i3].wait_exit(Duration::from_secs(10)).await;
    assert!(exit.success(), "{exit:?}");
    let gap = lost_before_won(&dir, (&l3, t3), (&l4, t4), &c).await;
    eprintln!("hooks: SIGTERM: {l4} began leading {gap:.1} ms after {l3} was done");
    c.cluster.nodes[i3].start();
    c.cluster
        .agreed(&all, AGREE, |l, t| l == l4 && t == t4)
        .await;

    // Cut off: nobody hears its resign, so only the lease and the window after it protect; a
    // run of 300 ms is within the 714 ms window, so it still ends first.
    let i4 = c.cluster.index(&l4);
    c.links.deafen(i4, Mode::Refuse);
    c.links.mute(i4, Mode::Refuse);
    let (l5, t5) = c.cluster.agreed(&others(i4), AGREE, |l, _| l != l4).await;
    let gap = lost_before_won(&dir, (&l4, t4), (&l5, t5), &c).await;
    eprintln!("hooks: partition: {l5} began leading {gap:.1} ms after {l4} was done");
    c.links.heal();

    let lost_at: Vec<Value> = events(&dir)
        .iter()
        .filter(|e| e[0] == "end" && e[3] != "leader" && e[2] == e[6])
        .map(|e| json!(e[4..].join(" ")))
        .collect();
    eprintln!("hooks: lost-leadership runs (term reason previous): {lost_at:?}");
}
