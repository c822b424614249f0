//! `run --exec` with real processes: every node runs a shell loop only while it leads. A
//! sampler reads `/proc` every 10 ms for the children (their command line carries a marker,
//! their environment the term and node id) and a fenced resource takes their writes: at no
//! sampled moment may two children run, except the child of a frozen node, whose stale writes
//! the fence must refuse.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde_json::json;
use tokio::time::Instant;

use crate::app::{get_json, metrics_text, post_json, serial, wait_for, Cluster, TempDir, TOKEN};
use crate::devnet::Devnet;
use crate::pilot_cluster::pilot_cluster;

/// Start-up and each failover, with room for a loaded 2-core machine.
const AGREE: Duration = Duration::from_secs(20);

/// A child as `/proc` shows it: the process group `sh -c` leads (its subshells are in it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) node: String,
    pub(crate) term: u64,
    /// `PILOT_ELECTION_GROUP`: the election the child runs for.
    pub(crate) group: String,
    pub(crate) pgid: i32,
}

#[derive(Debug)]
pub(crate) struct Sample {
    at: Instant,
    pub(crate) children: Vec<Seen>,
}

/// Stores the highest term it has seen and refuses writes with a lower one.
#[derive(Default, Debug)]
struct Fence {
    highest: u64,
    /// (term, node) → accepted and refused writes.
    accepted: HashMap<(u64, String), u64>,
    refused: HashMap<(u64, String), u64>,
}

impl Fence {
    fn write(&mut self, term: u64, node: &str) {
        let key = (term, node.to_string());
        if term < self.highest {
            *self.refused.entry(key).or_default() += 1;
        } else {
            self.highest = term;
            *self.accepted.entry(key).or_default() += 1;
        }
    }
}

/// The children's shared directory, the sampler and the fence.
pub(crate) struct Watch {
    pub(crate) dir: TempDir,
    /// In every child's command line, so that the sampler finds them and nothing else.
    pub(crate) mark: String,
    pub(crate) samples: Arc<Mutex<Vec<Sample>>>,
    fence: Arc<Mutex<Fence>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    pub(crate) fn start() -> Watch {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = TempDir::new("exec");
        let mark = format!(
            "exec-it-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let samples = Arc::new(Mutex::new(Vec::new()));
        let fence = Arc::new(Mutex::new(Fence::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (dir, mark) = (dir.0.clone(), mark.clone());
            let (samples, fence, stop) = (samples.clone(), fence.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut offsets: HashMap<PathBuf, usize> = HashMap::new();
                while !stop.load(Ordering::Relaxed) {
                    let children = scan(&mark);
                    samples.lock().unwrap().push(Sample {
                        at: pilot_election::clock::now(),
                        children,
                    });
                    take_writes(&dir, &mut offsets, &mut fence.lock().unwrap());
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        Watch {
            dir,
            mark,
            samples,
            fence,
            stop,
            thread: Some(thread),
        }
    }

    /// The command every node runs: a loop that writes its term to the fence every 50 ms and
    /// logs its start (with the PILOT_ELECTION_* variables it got), its SIGTERM (with the time
    /// in the history's format, so that the two compare as strings) and, 200 ms later (a
    /// graceful stop that takes a while), its exit.
    fn script(&self) -> String {
        format!(
            r#"MARK={mark}; D='{dir}'; echo "start $PILOT_ELECTION_NODE_ID $PILOT_ELECTION_TERM $$ $PILOT_ELECTION_LEADER $(env | grep '^PILOT_ELECTION_' | sort | tr '\n' ' ')" >>"$D/events"; trap 'echo "term $PILOT_ELECTION_NODE_ID $PILOT_ELECTION_TERM $$ $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" >>"$D/events"; sleep 0.2; echo "exit $PILOT_ELECTION_NODE_ID $PILOT_ELECTION_TERM $$" >>"$D/events"; exit 0' TERM; while :; do echo "$PILOT_ELECTION_TERM $PILOT_ELECTION_NODE_ID" >>"$D/w.$$"; sleep 0.05; done"#,
            mark = self.mark,
            dir = self.dir.0.display()
        )
    }

    fn events(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.0.join("events"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// The children of the latest sample.
    pub(crate) fn now(&self) -> Vec<Seen> {
        self.samples
            .lock()
            .unwrap()
            .last()
            .map(|s| s.children.clone())
            .unwrap_or_default()
    }

    /// Waits until exactly one child runs, that of `node` in `term`.
    async fn only(&self, node: &str, term: u64, within: Duration) -> Seen {
        let found = wait_for(within, || async {
            let now = self.now();
            (now.len() == 1 && now[0].node == node && now[0].term == term).then(|| now[0].clone())
        })
        .await;
        found.unwrap_or_else(|| {
            panic!(
                "never exactly one child of {node} in term {term}; now {:?}\nevents {:#?}",
                self.now(),
                self.events()
            )
        })
    }

    /// Never two children at once, apart from `except` (a frozen node's child).
    fn check_at_most_one(&self, except: &[(String, u64)]) -> usize {
        let samples = self.samples.lock().unwrap();
        for s in samples.iter() {
            let counted: Vec<&Seen> = s
                .children
                .iter()
                .filter(|c| !except.contains(&(c.node.clone(), c.term)))
                .collect();
            assert!(counted.len() <= 1, "two children at once: {counted:?}");
        }
        samples.len()
    }

    fn first_seen(&self, node: &str, term: u64) -> Option<Instant> {
        let samples = self.samples.lock().unwrap();
        samples
            .iter()
            .find(|s| s.children.iter().any(|c| c.node == node && c.term == term))
            .map(|s| s.at)
    }

    fn last_seen(&self, node: &str, term: u64) -> Option<Instant> {
        let samples = self.samples.lock().unwrap();
        samples
            .iter()
            .rev()
            .find(|s| s.children.iter().any(|c| c.node == node && c.term == term))
            .map(|s| s.at)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Whatever is left (a test that failed half-way) goes, by its process group.
        for c in scan(&self.mark) {
            let _ = killpg(Pid::from_raw(c.pgid), Signal::SIGKILL);
        }
    }
}

/// The running children: process groups of `/proc` entries whose command line has the marker
/// and whose environment has a term (the node itself has the marker only in its arguments).
fn scan(mark: &str) -> Vec<Seen> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let path = entry.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(mark) {
            continue;
        }
        // After the command name: state, ppid, pgid.
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let running = fields.first().is_some_and(|s| *s != "Z" && *s != "X");
        let Some(pgid) = fields.get(2).and_then(|g| g.parse().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(path.join("environ")) else {
            continue;
        };
        let env: HashMap<String, String> = environ
            .split(|b| *b == 0)
            .filter_map(|kv| {
                let kv = String::from_utf8_lossy(kv);
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        let (Some(term), Some(node)) = (
            env.get("PILOT_ELECTION_TERM").and_then(|t| t.parse().ok()),
            env.get("PILOT_ELECTION_NODE_ID"),
        ) else {
            continue;
        };
        let seen = Seen {
            node: node.clone(),
            term,
            group: env.get("PILOT_ELECTION_GROUP").cloned().unwrap_or_default(),
            pgid,
        };
        if running && !out.contains(&seen) {
            out.push(seen);
        }
    }
    out.sort_by_key(|s| s.pgid);
    out
}

/// Feeds the fence the lines the children appended since the last call.
fn take_writes(dir: &Path, offsets: &mut HashMap<PathBuf, usize>, fence: &mut Fence) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if !e.file_name().to_string_lossy().starts_with("w.") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let done = offsets.entry(path).or_default();
        // Only whole lines; a line being written is taken next time.
        let fresh = &text[*done..];
        let complete = fresh.rfind('\n').map_or(0, |i| i + 1);
        for line in fresh[..complete].lines() {
            if let Some((term, node)) = line.split_once(' ') {
                if let Ok(term) = term.parse() {
                    fence.write(term, node);
                }
            }
        }
        *done += complete;
    }
}

fn signal(pid: u32, s: Signal) {
    kill(Pid::from_raw(pid as i32), s).expect("signal the node");
}

fn pid_of(c: &Cluster, i: usize) -> u32 {
    c.nodes[i].child.as_ref().expect("running").id()
}

/// The line of `events` that starts with `prefix`, and its position.
fn event(events: &[String], prefix: &str) -> Option<(usize, String)> {
    events
        .iter()
        .position(|l| l.starts_with(prefix))
        .map(|i| (i, events[i].clone()))
}

/// Waits for the line that starts with `prefix` (a child shows in `/proc` a moment before its
/// first `echo` ran); returns its position and text.
async fn wait_event(w: &Watch, prefix: &str) -> (usize, String) {
    let found = wait_for(Duration::from_secs(5), || async {
        event(&w.events(), prefix)
    })
    .await;
    found.unwrap_or_else(|| panic!("no `{prefix}` line: {:#?}", w.events()))
}

/// Asserts that the line starting with `first` came before the one starting with `then`.
async fn in_order(w: &Watch, first: &str, then: &str) {
    let (a, _) = wait_event(w, first).await;
    let (b, _) = wait_event(w, then).await;
    assert!(a < b, "`{then}` came before `{first}`: {:#?}", w.events());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_child_runs_across_kill_freeze_step_down_and_sigterm() {
    let _serial = serial().await;
    let w = Watch::start();
    let script = w.script();
    // The command comes through the environment, next to a token the child must not see.
    // Preemption is off: it is the one handover the core makes by itself (see
    // docs/guide/hooks-and-health.md, "Run a job only on the leader").
    let env = [
        ("PILOT_ELECTION_EXEC", script.as_str()),
        ("PILOT_ELECTION_ADMIN_TOKEN", "must-not-reach-the-child"),
    ];
    let mut c = Cluster::start_with_env(3, &["--preempt-after", "0s"], &env);
    let all = [0, 1, 2];

    // 1. One leader, one child, with the term and nothing else of ours in its environment.
    let (l1, t1) = c.agreed(&all, AGREE, |_, _| true).await;
    w.only(&l1, t1, Duration::from_secs(5)).await;
    let (_, start) = wait_event(&w, &format!("start {l1} {t1} ")).await;
    assert!(
        start.ends_with(&format!(
            " {l1} PILOT_ELECTION_GROUP=it PILOT_ELECTION_LEADER={l1} PILOT_ELECTION_NODE_ID={l1} PILOT_ELECTION_TERM={t1} "
        )),
        "{start}"
    );

    // 2. kill -9 of the leader: the watcher ends its child; the next leader's child starts.
    let i1 = c.index(&l1);
    c.nodes[i1].kill9();
    let survivors: Vec<usize> = all.iter().copied().filter(|&i| i != i1).collect();
    let (l2, t2) = c.agreed(&survivors, AGREE, |l, _| l != l1).await;
    w.only(&l2, t2, Duration::from_secs(5)).await;
    let (old_gone, new_seen) = (w.last_seen(&l1, t1), w.first_seen(&l2, t2));
    assert!(old_gone < new_seen, "{old_gone:?} {new_seen:?}");
    c.nodes[i1].start();
    c.agreed(&all, AGREE, |l, t| l == l2 && t == t2).await;

    // 3. SIGSTOP of the leader: its child keeps running (nothing can stop it), the new
    // leader's child gets a higher term and the fence refuses the old term's writes.
    let i2 = c.index(&l2);
    signal(pid_of(&c, i2), Signal::SIGSTOP);
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != i2).collect();
    let (l3, t3) = c.agreed(&others, AGREE, |l, _| l != l2).await;
    assert!(t3 > t2);
    let refused = wait_for(Duration::from_secs(5), || async {
        let f = w.fence.lock().unwrap();
        let n = f.refused.get(&(t2, l2.clone())).copied().unwrap_or(0);
        (n > 0 && f.highest >= t3).then_some(n)
    })
    .await;
    assert!(
        refused.is_some(),
        "the fence refused nothing of {l2} term {t2}: {:?}",
        w.fence.lock().unwrap()
    );
    let both: Vec<(String, u64)> = w.now().into_iter().map(|s| (s.node, s.term)).collect();
    assert!(
        both.contains(&(l2.clone(), t2)) && both.contains(&(l3.clone(), t3)),
        "while {l2} is frozen its child runs next to the new one: {both:?}"
    );
    signal(pid_of(&c, i2), Signal::SIGCONT);
    let thawed = pilot_election::clock::now();
    // Thawed, the node sees its lease long over and kills its child at once.
    w.only(&l3, t3, Duration::from_secs(5)).await;
    eprintln!(
        "exec: the thawed node's child was gone {:?} after SIGCONT",
        pilot_election::clock::since(thawed)
    );
    c.agreed(&all, AGREE, |l, t| l == l3 && t == t3).await;
    {
        let f = w.fence.lock().unwrap();
        assert!(f.accepted.keys().all(|(t, _)| *t <= f.highest));
        eprintln!("exec: fence {f:?}");
    }

    // 4. Step-down: the child has stopped (it takes 200 ms) before the successor is elected.
    let i3 = c.index(&l3);
    let (status, body) = post_json(&c.nodes[i3].url(), "/step-down", Some(TOKEN), &json!({})).await;
    assert_eq!(status, 202, "{body}");
    let (l4, t4) = c.agreed(&all, AGREE, |l, _| l != l3).await;
    w.only(&l4, t4, Duration::from_secs(5)).await;
    in_order(
        &w,
        &format!("exit {l3} {t3} "),
        &format!("start {l4} {t4} "),
    )
    .await;

    // 5. SIGTERM of the leader's node: child stopped, handed over, exit 0 within Docker's 10 s.
    let i4 = c.index(&l4);
    c.nodes[i4].sigterm();
    let sent = pilot_election::clock::now();
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != i4).collect();
    let (l5, t5) = c.agreed(&rest, AGREE, |l, _| l != l4).await;
    w.only(&l5, t5, Duration::from_secs(5)).await;
    let exit = c.nodes[i4].wait_exit(Duration::from_secs(10)).await;
    assert!(exit.success(), "{exit:?}\n{}", c.logs());
    eprintln!(
        "exec: SIGTERM to exit took {:?}",
        pilot_election::clock::since(sent)
    );
    in_order(
        &w,
        &format!("exit {l4} {t4} "),
        &format!("start {l5} {t5} "),
    )
    .await;

    let n = w.check_at_most_one(&[(l2.clone(), t2)]);
    eprintln!("exec: {n} samples, never two children at once (the frozen node's aside)");
    let metrics = metrics_text(&c.nodes[c.index(&l5)].url()).await;
    assert!(
        metrics.contains("pilot_election_exec_running 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("pilot_election_ready{transport=\"http\"} 1"),
        "{metrics}"
    );
}

/// Over pilot-devnet the leader's links are cut: it loses its quorum, and its child must be
/// gone before the others elect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_quorum_stops_its_child_before_the_others_elect() {
    let _serial = serial().await;
    let w = Watch::start();
    let script = w.script();
    let net = Devnet::start(4);
    let c = pilot_cluster(&net, &["--exec", &script, "--preempt-after", "0s"]);
    let all = [0, 1, 2];
    let (l1, t1) = c.agreed(&all, AGREE, |_, _| true).await;
    w.only(&l1, t1, Duration::from_secs(5)).await;
    let i1 = c.index(&l1);
    net.post("/isolate", json!({"node": format!("n{}", i1 + 1)}))
        .await;
    let cut = pilot_election::clock::now();
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != i1).collect();
    let (l2, t2) = c.agreed(&others, AGREE, |l, t| l != l1 && t > t1).await;
    w.only(&l2, t2, Duration::from_secs(5)).await;

    // When the cut-off node had its child gone (its log line, written once the child's group
    // was gone, by the wall clock) against the new leader's election (its history, by the same
    // clock), both to the millisecond; and against the new child in the samples.
    let logged = wait_for(Duration::from_secs(5), || async {
        c.nodes[i1]
            .log()
            .lines()
            .find(|l| {
                l.contains("pilot_election::exec")
                    && (l.contains("exec child stopped") || l.contains("exec child did not stop"))
                    && l.contains(&format!("term={t1} "))
            })
            .map(String::from)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the cut-off node never logged its child's end:\n{}",
            c.logs()
        )
    });
    let stopped_at = logged.get(..23).expect("a timestamp").to_string();
    let (_, h) = get_json(&format!("{}/history", c.nodes[c.index(&l2)].url())).await;
    let elected = h["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["term"] == json!(t2) && e["leader"] == json!(l2))
        .unwrap_or_else(|| panic!("no election of {l2} in {h}"))
        .clone();
    let elected_at = elected["at"]
        .as_str()
        .expect("at")
        .get(..23)
        .expect("ms")
        .to_string();
    eprintln!(
        "exec: links cut {:?} ago; child of {l1} gone at {stopped_at}, {l2} elected at {elected_at}",
        pilot_election::clock::since(cut)
    );
    assert!(
        stopped_at < elected_at,
        "gone at {stopped_at}, elected at {elected_at}: {logged}"
    );
    let (last_old, first_new) = (w.last_seen(&l1, t1), w.first_seen(&l2, t2));
    assert!(last_old < first_new, "{last_old:?} {first_new:?}");

    net.post("/unisolate", json!({"node": format!("n{}", i1 + 1)}))
        .await;
    c.agreed(&all, AGREE, |l, t| l == l2 && t == t2).await;
    w.only(&l2, t2, Duration::from_secs(5)).await;
    w.check_at_most_one(&[]);
}
