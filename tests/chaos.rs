//! Chaos with real processes: on the http transport the leader is frozen (SIGSTOP for 1.5× the
//! lease, then SIGCONT) and killed and restarted; over the real pilotctl and pilot-devnet its
//! link to the broker is cut and healed. Every node is watched every 10 ms and a fenced
//! resource takes writes from whoever claims to lead. Nothing may ever show two leaders at once
//! or let a stale term write.
//!
//! `CHAOS_RUNS` (default 2) sets how many cycles of each fault run; CI keeps the default (well
//! under a minute), a soak sets it higher.

use support::app;
use support::devnet;
use support::pilot_cluster;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::time::Instant;

use app::{wait_for, wait_up, Cluster};
use devnet::Devnet;
use pilot_cluster::pilot_cluster;

/// Default lease `L` of the binary.
const LEASE: Duration = Duration::from_secs(2);
/// Start-up and each failover, with room for a loaded 2-core machine.
const AGREE_WITHIN: Duration = Duration::from_secs(30);

/// The storage a coordinator writes to: it keeps the highest term it has seen and refuses a
/// write with a lower one, which is what the term as a fencing token promises clients.
#[derive(Default)]
struct FencedResource {
    highest: u64,
    /// Accepted writes: (term, writer).
    accepted: Vec<(u64, String)>,
    rejected: usize,
}

impl FencedResource {
    fn write(&mut self, term: u64, writer: &str) -> bool {
        if term < self.highest {
            self.rejected += 1;
            return false;
        }
        self.highest = term;
        self.accepted.push((term, writer.to_string()));
        true
    }
}

/// One `/role/leader` answer: when the request left and when its answer arrived. The node
/// decided at some unknown instant in between.
#[derive(Clone, Copy)]
struct Sample {
    sent: Instant,
    received: Instant,
    leader: bool,
}

/// Polls one node every 10 ms; while it answers 200 on `/role/leader`, it writes to the fenced
/// resource with the term its `/leader` names (only when that answer names itself).
async fn watch(
    url: String,
    id: String,
    samples: Arc<Mutex<Vec<Sample>>>,
    resource: Arc<Mutex<FencedResource>>,
    stop: Arc<AtomicBool>,
) {
    // A frozen node does not answer; the timeout keeps the watcher going once it thaws.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    while !stop.load(Ordering::Relaxed) {
        let sent = pilot_election::clock::now();
        let status = client
            .get(format!("{url}/role/leader"))
            .send()
            .await
            .map(|r| r.status().as_u16());
        let received = pilot_election::clock::now();
        if let Ok(status) = status {
            samples.lock().unwrap().push(Sample {
                sent,
                received,
                leader: status == 200,
            });
            if status == 200 {
                if let Ok(r) = client.get(format!("{url}/leader")).send().await {
                    if let Ok(v) = r.json::<Value>().await {
                        if v["leader"] == id.as_str() {
                            if let Some(term) = v["term"].as_u64() {
                                resource.lock().unwrap().write(term, &id);
                            }
                        }
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Never two leaders at once, judged only on what the samples prove.
///
/// A 200 says the node led at some instant within `[sent, received]` of its request; which
/// instant is unknown. Take a run of consecutive 200s from node A (no 503 and no failed poll in
/// between). A led at an instant no later than the first answer's `received` and at one no
/// earlier than the last answer's `sent`; a leader that stops leading cannot lead again within
/// a 10 ms poll gap (a new term needs `T` of silence and a vote round), so A led throughout
/// `[first.received, last.sent]`. If a 200 from another node B has its whole window
/// `[sent, received]` inside that interval, B led at an instant when A also did: two leaders
/// at the same time. Windows that merely overlap the edges prove nothing and are not flagged
/// (a handover of a few ms legitimately has the old leader's last 200 and the new one's first
/// within one poll of each other). The looser lease bound — a 200 at `t1` and another node's
/// at `t2 > t1 + L` is fine — is implied: such samples never sit inside one run.
fn two_leaders_at_once(per_node: &[(String, Vec<Sample>)]) -> Option<String> {
    for (a, samples_a) in per_node {
        let mut i = 0;
        while i < samples_a.len() {
            if !samples_a[i].leader {
                i += 1;
                continue;
            }
            let mut j = i;
            while j + 1 < samples_a.len() && samples_a[j + 1].leader {
                j += 1;
            }
            let (from, to) = (samples_a[i].received, samples_a[j].sent);
            for (b, samples_b) in per_node.iter().filter(|(b, _)| b != a) {
                if let Some(s) = samples_b
                    .iter()
                    .find(|s| s.leader && s.sent >= from && s.received <= to)
                {
                    return Some(format!(
                        "{b} answered 200 within [{:?}, {:?}] while {a} led throughout [{:?}, {:?}] \
                         (times since its first sample)",
                        s.sent - samples_a[0].sent,
                        s.received - samples_a[0].sent,
                        from - samples_a[0].sent,
                        to - samples_a[0].sent
                    ));
                }
            }
            i = j + 1;
        }
    }
    None
}

fn signal(pid: u32, sig: Signal) {
    kill(Pid::from_raw(pid as i32), sig).unwrap_or_else(|e| panic!("kill -{sig} {pid}: {e}"));
}

fn chaos_runs() -> usize {
    std::env::var("CHAOS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// Watchers on every node of a cluster and the fenced resource they write to.
struct Watch {
    ids: Vec<String>,
    samples: Vec<Arc<Mutex<Vec<Sample>>>>,
    resource: Arc<Mutex<FencedResource>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Watch {
    fn start(c: &Cluster) -> Watch {
        let resource = Arc::new(Mutex::new(FencedResource::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let samples: Vec<_> = c
            .nodes
            .iter()
            .map(|_| Arc::new(Mutex::new(Vec::new())))
            .collect();
        let tasks = c
            .nodes
            .iter()
            .zip(&samples)
            .map(|(n, s)| {
                tokio::spawn(watch(
                    n.url(),
                    n.id.clone(),
                    s.clone(),
                    resource.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        Watch {
            ids: c.nodes.iter().map(|n| n.id.clone()).collect(),
            samples,
            resource,
            stop,
            tasks,
        }
    }

    /// Watches a just started cluster from before its first election, and returns once all
    /// its nodes agree on the first leader and that leader has written: faults injected before
    /// its first write would leave its term unwritten, and `finish` counts written terms.
    async fn first_leader(c: &Cluster) -> (Watch, (String, u64)) {
        for n in &c.nodes {
            wait_up(n).await;
        }
        let w = Watch::start(c);
        let all: Vec<usize> = (0..c.nodes.len()).collect();
        let first = c.agreed(&all, AGREE_WITHIN, |_, _| true).await;
        w.written(first.1, c).await;
        (w, first)
    }

    /// Waits until a leader of at least `term` has written: the writer path works, and a late
    /// write with a lower term now has something to be fenced against.
    async fn written(&self, term: u64, c: &Cluster) {
        let r = self.resource.clone();
        let done = wait_for(AGREE_WITHIN, || {
            let r = r.clone();
            async move { (r.lock().unwrap().highest >= term).then_some(()) }
        })
        .await;
        assert!(
            done.is_some(),
            "no leader of term {term} wrote\n{}",
            c.logs()
        );
    }

    /// Stops watching and checks everything seen: no two leaders at once, one writer per term,
    /// at least `min_terms` terms written. Returns the resource for further checks.
    async fn finish(self, c: &Cluster, min_terms: usize) -> FencedResource {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let per_node: Vec<(String, Vec<Sample>)> = self
            .ids
            .iter()
            .zip(&self.samples)
            .map(|(id, s)| (id.clone(), s.lock().unwrap().clone()))
            .collect();
        for (id, s) in &per_node {
            assert!(
                s.len() > 100,
                "{id} was hardly watched: {} samples",
                s.len()
            );
        }
        if let Some(overlap) = two_leaders_at_once(&per_node) {
            panic!("two leaders at once: {overlap}\n{}", c.logs());
        }
        let r = std::mem::take(&mut *self.resource.lock().unwrap());
        // One writer per term: a term with two writers would mean two leaders in it.
        let mut by_term = std::collections::BTreeMap::new();
        for (t, w) in &r.accepted {
            let first = by_term.entry(*t).or_insert_with(|| w.clone());
            assert_eq!(first, w, "term {t} written by {first} and {w}");
        }
        assert!(
            r.accepted.windows(2).all(|w| w[0].0 <= w[1].0),
            "accepted terms went down"
        );
        assert!(
            by_term.len() >= min_terms,
            "leaders of {} terms wrote ({:?}), expected at least {min_terms}",
            by_term.len(),
            by_term
        );
        eprintln!(
            "chaos: {} writes accepted over {} terms, {} rejected",
            r.accepted.len(),
            by_term.len(),
            r.rejected
        );
        r
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_and_killed_leaders_never_overlap_and_stale_terms_never_write() {
    let runs = chaos_runs();
    let mut c = Cluster::start(3, &[]);
    let all = [0, 1, 2];
    let (w, (mut leader, mut term)) = Watch::first_leader(&c).await;
    for cycle in 0..runs {
        // Freeze the leader past its lease; it resumes believing nothing happened.
        let li = c.index(&leader);
        let pid = c.nodes[li].child.as_ref().expect("running").id();
        signal(pid, Signal::SIGSTOP);
        let frozen = pilot_election::clock::now();
        pilot_election::clock::sleep_until(frozen + LEASE * 3 / 2).await;
        signal(pid, Signal::SIGCONT);
        let (l, t) = c.agreed(&all, AGREE_WITHIN, |_, t| t > term).await;
        w.written(t, &c).await;
        // The write the frozen leader had prepared while it led, delivered late: fenced off.
        let late = w.resource.lock().unwrap().write(term, &leader);
        assert!(!late, "late write of term {term} from {leader} accepted");
        eprintln!("freeze {cycle}: {leader} (term {term}) frozen; now {l} leads in term {t}");
        (leader, term) = (l, t);

        // kill -9 of the leader, then a restart that rejoins as a follower.
        let li = c.index(&leader);
        c.nodes[li].kill9();
        let survivors: Vec<usize> = all.iter().copied().filter(|&i| i != li).collect();
        let (l, t) = c
            .agreed(&survivors, AGREE_WITHIN, |l, t| l != leader && t > term)
            .await;
        w.written(t, &c).await;
        c.nodes[li].start();
        wait_up(&c.nodes[li]).await;
        let (l2, t2) = c.agreed(&all, AGREE_WITHIN, |_, _| true).await;
        eprintln!(
            "kill {cycle}: {leader} (term {term}) killed; {l} led in term {t}, now {l2}/{t2}"
        );
        (leader, term) = (l2, t2);
    }
    let r = w.finish(&c, 2 * runs + 1).await;
    assert!(r.rejected >= runs, "{} late writes fenced off", r.rejected);
}

/// Link cuts on the emulated Pilot network: the leader's daemon loses the broker (n4), the
/// majority elects another, the link heals, and the watch never sees two leaders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pilot_link_cuts_never_show_two_leaders() {
    let runs = chaos_runs();
    let net = Devnet::start(4);
    let c = pilot_cluster(&net, &[]);
    let all = [0, 1, 2];
    let (w, (mut leader, mut term)) = Watch::first_leader(&c).await;
    for cycle in 0..runs {
        let li = c.index(&leader);
        let daemon = format!("n{}", li + 1);
        net.post("/cut", json!({"a": daemon, "b": "n4"})).await;
        let majority: Vec<usize> = all.iter().copied().filter(|&i| i != li).collect();
        let (l, t) = c
            .agreed(&majority, AGREE_WITHIN, |l, t| l != leader && t > term)
            .await;
        w.written(t, &c).await;
        net.post("/heal", json!({})).await;
        let (l2, t2) = c.agreed(&all, AGREE_WITHIN, |_, t2| t2 >= t).await;
        eprintln!(
            "cut {cycle}: {leader} (term {term}) cut off; {l} led in term {t}, now {l2}/{t2}"
        );
        (leader, term) = (l2, t2);
    }
    w.finish(&c, runs + 1).await;
}

/// The overlap rule itself must be able to fail.
#[test]
fn the_overlap_rule_flags_a_claim_inside_another_nodes_run_and_only_that() {
    let t0 = pilot_election::clock::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let s = |a: u64, b: u64, leader: bool| Sample {
        sent: ms(a),
        received: ms(b),
        leader,
    };
    let a_run = (
        "a".to_string(),
        vec![s(0, 2, true), s(12, 14, true), s(24, 26, true)],
    );
    let inside = ("b".to_string(), vec![s(5, 8, true)]);
    assert!(two_leaders_at_once(&[a_run.clone(), inside]).is_some());
    // Straddling the edge of A's run proves nothing: a handover looks like this.
    let edge = (
        "b".to_string(),
        vec![s(1, 6, true), s(8, 10, false), s(20, 30, true)],
    );
    assert!(two_leaders_at_once(&[a_run.clone(), edge]).is_none());
    // A 503 splits A's run: B's claim between two separate runs of A is not an overlap.
    let split = (
        "a".to_string(),
        vec![s(0, 2, true), s(12, 14, false), s(24, 26, true)],
    );
    let between = ("b".to_string(), vec![s(15, 18, true)]);
    assert!(two_leaders_at_once(&[split, between]).is_none());
}
