//! The Rust client (`crates/client`, pilot-election-client) against real nodes: failover when
//! the member it talks to is killed, `watch()` across a `kill -9` of the leader and a restart
//! of the watched node (compared with every node's `/history`), `lead()` stopping its work
//! before another node leads (a sampler of the workers' marker files: never two at once), and
//! the `Fence` refusing a deposed leader's term.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pilot_election::clock::wall::{rfc3339, unix_ms_now};
use pilot_election_client::{ChangeSource, Client, Error, Fence, LeaderChange, StaleTerm};
use serde_json::json;
use tokio::time::Instant;

use crate::app::{get_json, serial, wait_for, wait_up, Cluster, TempDir};

/// Start-up and each failover, with room for a loaded 2-core machine.
const AGREE: Duration = Duration::from_secs(20);

fn urls(c: &Cluster, order: &[usize]) -> Vec<String> {
    order.iter().map(|i| c.nodes[*i].url()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_when_the_member_it_talks_to_is_killed() {
    let _serial = serial().await;
    let mut c = Cluster::start(3, &[]);
    let (leader, term) = c.agreed(&[0, 1, 2], AGREE, |_, _| true).await;
    let client = Client::builder(urls(&c, &[0, 1, 2]))
        .request_timeout(Duration::from_secs(2))
        .build()
        .expect("client");

    let first = client.leader().await.expect("answer").expect("a leader");
    assert_eq!((first.id.as_str(), first.term), (leader.as_str(), term));
    assert_eq!(first.answered_by, c.nodes[0].url());
    assert_eq!(first.is_self, leader == c.nodes[0].id);
    if first.is_self {
        assert!(first.lease_remaining.is_some() && first.last_heartbeat.is_none());
    } else {
        assert!(first.last_heartbeat.is_some() && first.lease_remaining.is_none());
    }

    // The member it talks to dies: the next question is answered by another, at once.
    c.nodes[0].kill9();
    let asked = pilot_election::clock::now();
    let answer = client.leader().await.expect("another member answers");
    let took = pilot_election::clock::since(asked);
    eprintln!("client: answered by the next member {took:?} after the kill of the first");
    assert_ne!(client.last_answered_by(), c.nodes[0].url());
    assert!(took < Duration::from_secs(2), "{took:?}");
    if let Some(l) = &answer {
        assert!(l.term >= term);
    }
    // Until the survivors agree on a leader that is alive (a new one if node 0 led).
    let dead = c.nodes[0].id.clone();
    let alive = wait_for(AGREE, || async {
        client
            .leader()
            .await
            .expect("a survivor answers")
            .filter(|l| l.id != dead)
    })
    .await
    .expect("a leader among the survivors");
    assert_ne!(alive.answered_by, c.nodes[0].url());

    // A second member dies: the last one up has no quorum, and says so (an answer, no error).
    let talking = c
        .nodes
        .iter()
        .position(|n| n.url() == client.last_answered_by())
        .expect("a member");
    c.nodes[talking].kill9();
    let none = wait_for(AGREE, || async {
        client
            .leader()
            .await
            .expect("the last member answers")
            .is_none()
            .then_some(())
    })
    .await;
    assert!(none.is_some(), "the last member kept naming a leader");
    let last = (0..3).find(|i| *i != 0 && *i != talking).unwrap();
    assert_eq!(client.last_answered_by(), c.nodes[last].url());

    // Nobody up: every member is named with its reason.
    c.nodes[last].kill9();
    match client.leader().await {
        Err(Error::Unavailable { attempts }) => {
            assert_eq!(attempts.len(), 3, "{attempts:?}");
            assert!(
                attempts.iter().all(|a| a.reason.contains("connect")),
                "{attempts:?}"
            );
        }
        other => panic!("no member is up, got {other:?}"),
    }
}

/// One look at the marker files: when, and which workers (node, term) ran.
type Sample = (Instant, Vec<(String, u64)>);

/// Marker files of the running workers (`run.<node>.<term>`), sampled every 10 ms by a thread
/// of its own, and the workers' start and stop lines with wall-clock times in the history's
/// format.
struct Workers {
    dir: TempDir,
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Workers {
    fn start() -> Workers {
        let dir = TempDir::new("client-lead");
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (path, samples, stop) = (dir.0.clone(), samples.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let running = running(&path);
                    samples
                        .lock()
                        .unwrap()
                        .push((pilot_election::clock::now(), running));
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        Workers {
            dir,
            samples,
            stop,
            thread: Some(thread),
        }
    }

    fn now(&self) -> Vec<(String, u64)> {
        running(&self.dir.0)
    }

    fn events(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.0.join("events"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// Waits until exactly one worker runs, that of `node` in `term`.
    async fn only(&self, node: &str, term: u64) {
        let want = vec![(node.to_string(), term)];
        let ok = wait_for(AGREE, || async { (self.now() == want).then_some(()) }).await;
        assert!(
            ok.is_some(),
            "never only {node}'s worker in term {term}: {:?}\n{:#?}",
            self.now(),
            self.events()
        );
    }

    /// Never two workers in one sample; returns how many samples there were.
    fn check_never_two(&self) -> usize {
        let samples = self.samples.lock().unwrap();
        for (_, running) in samples.iter() {
            assert!(running.len() <= 1, "two workers at once: {running:?}");
        }
        samples.len()
    }

    /// The wall time (history format) `node`'s worker of `term` logged as it stopped.
    fn stopped_at(&self, node: &str, term: u64) -> Option<String> {
        let prefix = format!("stop {node} {term} ");
        // The last one: under load a worker may have been restarted in the same term.
        self.events()
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix(&prefix).map(String::from))
    }

    /// The work `lead()` runs for `node`: a marker file while it runs, a fenced write every
    /// 20 ms, start and stop lines.
    fn work(
        &self,
        node: &str,
        fence: Arc<Fence>,
        refused: Arc<Mutex<Vec<StaleTerm>>>,
    ) -> impl FnMut(
        u64,
        tokio_util::sync::CancellationToken,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let (dir, node) = (self.dir.0.clone(), node.to_string());
        move |term, cancel| {
            let (dir, node, fence, refused) =
                (dir.clone(), node.clone(), fence.clone(), refused.clone());
            Box::pin(async move {
                let marker = dir.join(format!("run.{node}.{term}"));
                std::fs::write(&marker, "").expect("marker");
                log(
                    &dir,
                    &format!("start {node} {term} {}", rfc3339(unix_ms_now())),
                );
                while !cancel.is_cancelled() {
                    if let Err(e) = fence.check(term) {
                        refused.lock().unwrap().push(e);
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                    }
                }
                std::fs::remove_file(&marker).expect("marker");
                log(
                    &dir,
                    &format!("stop {node} {term} {}", rfc3339(unix_ms_now())),
                );
            })
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn running(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    let rest = name.strip_prefix("run.")?;
                    let (node, term) = rest.rsplit_once('.')?;
                    Some((node.to_string(), term.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn log(dir: &Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("events"))
        .expect("events file");
    writeln!(f, "{line}").expect("events line");
}

/// The `at` of the history entry in which `node` (asked) recorded `leader` leading `term`.
async fn elected_at(url: &str, term: u64, leader: &str) -> String {
    let (_, h) = get_json(&format!("{url}/history")).await;
    h["transitions"]
        .as_array()
        .and_then(|ts| {
            ts.iter()
                .find(|t| t["term"] == json!(term) && t["leader"] == json!(leader))
        })
        .and_then(|t| t["at"].as_str().map(String::from))
        .unwrap_or_else(|| panic!("{url} has no history entry of {leader} in term {term}: {h}"))
}

/// Every node runs `lead()` beside it. Across a `kill -9` of the leader's node and a SIGSTOP
/// of the next leader's node (frozen, it cannot answer, so its client cancels on the lease's
/// deadline), a worker stops before the next leader is even elected, and no sample shows two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_stops_the_work_before_another_node_leads() {
    let _serial = serial().await;
    let w = Workers::start();
    // Preemption off: a handover leaves no election timeout between two leaders (see
    // Client::lead_once), so the step-down at the end is measured, not asserted; the
    // failovers before it are.
    let mut c = Cluster::start(3, &["--preempt-after", "0s"]);
    let all = [0, 1, 2];
    let fence = Arc::new(Fence::new());
    let refused = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = c
        .nodes
        .iter()
        .map(|n| {
            let client = Client::builder([n.url()])
                .lead_poll_interval(Duration::from_millis(200))
                .build()
                .expect("client of one node");
            let work = w.work(&n.id, fence.clone(), refused.clone());
            tokio::spawn(async move { client.lead(work).await })
        })
        .collect();

    let (l1, t1) = c.agreed(&all, AGREE, |_, _| true).await;
    w.only(&l1, t1).await;

    // kill -9 of the leader's node: its worker's polls are refused, so it stops at the lease's
    // deadline; the survivors elect only a whole T after they last heard the leader.
    let i1 = c.index(&l1);
    c.nodes[i1].kill9();
    let survivors: Vec<usize> = all.iter().copied().filter(|&i| i != i1).collect();
    let (l2, t2) = c.agreed(&survivors, AGREE, |l, _| l != l1).await;
    w.only(&l2, t2).await;
    let stopped = w
        .stopped_at(&l1, t1)
        .expect("the killed node's worker stopped");
    let elected = elected_at(&c.nodes[c.index(&l2)].url(), t2, &l2).await;
    eprintln!("client lead: {l1}'s worker stopped at {stopped}, {l2} elected at {elected}");
    assert!(
        stopped < elected,
        "{stopped} !< {elected}\n{:#?}",
        w.events()
    );
    c.nodes[i1].start();
    wait_up(&c.nodes[i1]).await;
    c.agreed(&all, AGREE, |l, t| l == l2 && t == t2).await;

    // SIGSTOP of the leader's node: frozen, it answers nothing; its worker stops on the
    // deadline, before the others elect.
    let i2 = c.index(&l2);
    let pid = Pid::from_raw(c.nodes[i2].child.as_ref().expect("running").id() as i32);
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != i2).collect();
    let (l3, t3) = c.agreed(&others, AGREE, |l, _| l != l2).await;
    w.only(&l3, t3).await;
    kill(pid, Signal::SIGCONT).expect("SIGCONT");
    let stopped = w
        .stopped_at(&l2, t2)
        .expect("the frozen node's worker stopped");
    let elected = elected_at(&c.nodes[c.index(&l3)].url(), t3, &l3).await;
    eprintln!("client lead: {l2}'s worker stopped at {stopped}, {l3} elected at {elected}");
    assert!(
        stopped < elected,
        "{stopped} !< {elected}\n{:#?}",
        w.events()
    );
    // Thawed, its node follows: its worker does not come back.
    c.agreed(&all, AGREE, |l, t| l == l3 && t == t3).await;
    w.only(&l3, t3).await;

    let samples = w.check_never_two();
    eprintln!("client lead: {samples} samples, never two workers");

    // A step-down: the successor leads within milliseconds, and nothing orders two clients'
    // reactions (Client::lead_once), so this part measures rather than asserts. The old
    // worker learns it from its node's event stream, not at the next poll.
    let successor = c
        .nodes
        .iter()
        .map(|n| n.id.clone())
        .find(|id| *id != l3)
        .expect("another node");
    crate::cluster::hand_over(&c, &l3, &successor).await;
    let asked = pilot_election::clock::now();
    let (l4, t4) = c.agreed(&all, AGREE, |l, t| l == successor && t > t3).await;
    w.only(&l4, t4).await;
    let overlap = {
        let all_samples = w.samples.lock().unwrap();
        all_samples[samples..]
            .iter()
            .filter(|(_, running)| running.len() > 1)
            .count()
    };
    let stopped = w
        .stopped_at(&l3, t3)
        .expect("the old leader's worker stopped");
    eprintln!(
        "client lead: step-down {l3} -> {l4} (term {t4}) took {:?} to agree; {l3}'s worker \
         stopped at {stopped}; samples with two workers during the handover: {overlap}",
        pilot_election::clock::since(asked)
    );
    // No write was refused: each worker had stopped before the next one started (a write
    // of the old term during a handover overlap would be refused, and that is the point).
    assert!(
        overlap > 0 || refused.lock().unwrap().is_empty(),
        "{:?}",
        refused.lock()
    );
    // A write of a deposed leader that arrives late is refused, naming both terms.
    let highest = fence.highest();
    assert!(highest >= t3, "{highest}");
    assert_eq!(fence.check(t1), Err(StaleTerm { term: t1, highest }));
    assert!(fence.check(highest).is_ok());
    for t in tasks {
        t.abort();
    }
}

/// What a watcher collected, in order.
type Seen = Arc<Mutex<Vec<LeaderChange>>>;

fn collect(client: &Client) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let mut watch = client.watch();
    let s = seen.clone();
    let task = tokio::spawn(async move {
        while let Some(c) = watch.next().await {
            s.lock().unwrap().push(c);
        }
    });
    (seen, task)
}

fn pairs(seen: &Seen) -> Vec<(u64, String)> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|c| (c.term, c.leader.clone()))
        .collect()
}

async fn saw(seen: &Seen, term: u64, leader: &str, who: &str) {
    let ok = wait_for(AGREE, || async {
        pairs(seen)
            .iter()
            .any(|(t, l)| *t == term && l == leader)
            .then_some(())
    })
    .await;
    assert!(
        ok.is_some(),
        "{who} never saw {leader} in term {term}: {:?}",
        pairs(seen)
    );
}

/// Every (term, leader) of every node's `/history` from `from` on.
async fn history_pairs(c: &Cluster, from: u64) -> BTreeSet<(u64, String)> {
    let mut out = BTreeSet::new();
    for n in &c.nodes {
        let (status, h) = get_json(&format!("{}/history", n.url())).await;
        assert_eq!(status, 200, "{}: {h}", n.id);
        for t in h["transitions"].as_array().expect("transitions") {
            if let (Some(term), Some(leader)) = (t["term"].as_u64(), t["leader"].as_str()) {
                if term >= from {
                    out.insert((term, leader.to_string()));
                }
            }
        }
    }
    out
}

/// Two watchers: one of every member (it fails over) and one of a single follower (it must
/// resume on that node after its restart). Across a `kill -9` of the leader and a restart of
/// the watched node, during which leadership moves, each yields exactly the leaders every
/// node's history recorded, each term once and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_misses_no_leader_change_across_a_kill_and_a_restart() {
    let _serial = serial().await;
    let mut c = Cluster::start(3, &["--preempt-after", "0s", "--meta", "zone=it"]);
    let all = [0, 1, 2];
    let (l1, t1) = c.agreed(&all, AGREE, |_, _| true).await;
    let li = c.index(&l1);
    // The watched node: a follower, first in the list.
    let a = (0..3).find(|i| *i != li).unwrap();
    let rest: Vec<usize> = (0..3).filter(|i| *i != a).collect();
    let every = Client::builder(urls(&c, &[a, rest[0], rest[1]]))
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .build()
        .expect("client");
    let single = Client::builder([c.nodes[a].url()])
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .build()
        .expect("client");
    let (seen_every, task_every) = collect(&every);
    let (seen_single, task_single) = collect(&single);
    saw(&seen_every, t1, &l1, "the watcher of every member").await;
    saw(&seen_single, t1, &l1, "the watcher of one node").await;
    {
        let first = seen_every.lock().unwrap()[0].clone();
        assert_eq!(first.source, ChangeSource::Event);
        assert_eq!(
            first.leader_url.as_deref(),
            Some(c.nodes[li].url().as_str())
        );
        assert_eq!(first.answered_by, c.nodes[a].url());
    }
    // The leader's URL and labels, from a follower.
    let l = every.leader().await.expect("answer").expect("a leader");
    assert_eq!(l.url.as_deref(), Some(c.nodes[li].url().as_str()));
    assert_eq!(l.node_url.as_deref(), Some(c.nodes[a].url().as_str()));
    assert_eq!(l.meta.get("zone").map(String::as_str), Some("it"));

    // 1. kill -9 of the leader: the survivors elect; both watchers are on the watched node.
    c.nodes[li].kill9();
    let survivors: Vec<usize> = all.iter().copied().filter(|&i| i != li).collect();
    let (l2, t2) = c.agreed(&survivors, AGREE, |l, _| l != l1).await;
    saw(&seen_every, t2, &l2, "the watcher of every member").await;
    saw(&seen_single, t2, &l2, "the watcher of one node").await;
    c.nodes[li].start();
    wait_up(&c.nodes[li]).await;
    c.agreed(&all, AGREE, |l, t| l == l2 && t == t2).await;

    // An event id of the watched node's current run, to resume from after its restart.
    let old_id = {
        let mut probe = single.watch();
        let first = tokio::time::timeout(AGREE, probe.next())
            .await
            .expect("the current state")
            .expect("a change");
        assert_eq!((first.term, first.leader.as_str()), (t2, l2.as_str()));
        probe.status().last_event_id.expect("events carry ids")
    };

    // 2. The watched node goes down, and leadership moves while it is down: its own failover
    // if it leads, else a handover between the other two.
    let ids: Vec<String> = c.nodes.iter().map(|n| n.id.clone()).collect();
    c.nodes[a].kill9();
    let up: Vec<usize> = rest.clone();
    if ids[a] != l2 {
        let successor = up
            .iter()
            .map(|i| ids[*i].clone())
            .find(|id| *id != l2)
            .expect("the third node");
        crate::cluster::hand_over(&c, &l2, &successor).await;
    }
    let (l3, t3) = c.agreed(&up, AGREE, |_, t| t > t2).await;
    // The watcher of every member moved to another member and learned it there.
    saw(&seen_every, t3, &l3, "the watcher of every member").await;
    assert_ne!(every.last_answered_by(), c.nodes[a].url());
    // The watched node restarts: the single watcher resumes there with an id of its previous
    // run, which it cannot resume, so it gets a snapshot of what it missed.
    c.nodes[a].start();
    wait_up(&c.nodes[a]).await;
    c.agreed(&all, AGREE, |l, t| l == l3 && t == t3).await;
    saw(&seen_single, t3, &l3, "the watcher of one node").await;
    // Resuming from the id of its previous run, the restarted node cannot resume: its snapshot
    // names the leader it learned after the restart, from its history, first.
    let mut resumed = single.watch_resuming(Some(old_id), Some(t2));
    let change = tokio::time::timeout(AGREE, resumed.next())
        .await
        .expect("a change in time")
        .expect("a change");
    assert_eq!((change.term, change.leader.as_str()), (t3, l3.as_str()));
    assert!(
        matches!(&change.source, ChangeSource::History(t) if t.term == t3),
        "{change:?}"
    );
    if let ChangeSource::History(t) = &change.source {
        eprintln!(
            "client watch: resumed on the restarted node from an id of its previous run: term \
             {} {} from its history ({} at {})",
            change.term, change.leader, t.reason, t.at
        );
    }
    drop(resumed);

    // 3. One more kill -9 of the leader, with every node up again. A node that stays up
    // gives an id first: resumed from it afterwards, that node can resume from its log.
    let i3 = c.index(&l3);
    let x = (0..3).find(|i| *i != i3).unwrap();
    let of_x = Client::new([c.nodes[x].url()]).expect("client");
    let x_id = {
        let mut probe = of_x.watch();
        let first = tokio::time::timeout(AGREE, probe.next())
            .await
            .expect("the current state")
            .expect("a change");
        assert_eq!((first.term, first.leader.as_str()), (t3, l3.as_str()));
        probe.status().last_event_id.expect("events carry ids")
    };
    c.nodes[i3].kill9();
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != i3).collect();
    let (l4, t4) = c.agreed(&others, AGREE, |l, t| l != l3 && t > t3).await;
    saw(&seen_every, t4, &l4, "the watcher of every member").await;
    saw(&seen_single, t4, &l4, "the watcher of one node").await;
    let mut resumed = of_x.watch_resuming(Some(x_id), Some(t3));
    let change = tokio::time::timeout(AGREE, resumed.next())
        .await
        .expect("a change in time")
        .expect("a change");
    assert_eq!((change.term, change.leader.as_str()), (t4, l4.as_str()));
    assert_eq!(
        change.source,
        ChangeSource::Event,
        "resumed from the log: {change:?}"
    );
    drop(resumed);
    c.nodes[i3].start();
    wait_up(&c.nodes[i3]).await;
    c.agreed(&all, AGREE, |l, t| l == l4 && t == t4).await;

    // Each watcher yielded exactly the leaders the histories recorded, terms rising.
    let recorded = history_pairs(&c, t1).await;
    for (who, seen) in [("every member", &seen_every), ("one node", &seen_single)] {
        let got = pairs(seen);
        assert!(
            got.windows(2).all(|w| w[0].0 < w[1].0),
            "the watcher of {who} went back or repeated a term: {got:?}"
        );
        let got_set: BTreeSet<(u64, String)> = got.iter().cloned().collect();
        assert_eq!(
            got_set, recorded,
            "the watcher of {who} differs from the histories"
        );
        eprintln!("client watch ({who}): {got:?}");
    }
    task_every.abort();
    task_single.abort();
}
