//! The shipped `deploy/haproxy.cfg` with the real HAProxy (Debian's 2.6) in front of three real
//! nodes: a client polling `GET /leader` through the proxy every 20 ms is only ever answered by
//! the leader (`"is_self": true`), across a kill -9, a SIGSTOP and a planned step-down of the
//! leader, and the proxy finds the new leader within a bound derived from the timings.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pilot_election::clock;
use tokio::time::Instant;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::app::{free_port, serial, wait_for, Cluster, TempDir, T};
use crate::cluster::hand_over;

/// The check interval and check timeout of deploy/haproxy.cfg (`h/2` and `0.4·h`), checked
/// against the file below.
const INTER: Duration = Duration::from_millis(250);
const CHECK_TIMEOUT: Duration = Duration::from_millis(200);

/// How often the client asks through the proxy.
const POLL: Duration = Duration::from_millis(20);

/// Start-up takes `T` plus staggers; generous for a loaded 2-core machine.
const FIRST_LEADER: Duration = Duration::from_secs(20);
/// A restarted or thawed node agrees with the others within this (its start-up guard is `T`).
const REJOIN: Duration = Duration::from_secs(20);

/// The leaderless time through the proxy after a kill -9 (or SIGSTOP) of the leader must stay
/// below this. The survivors campaign once they have not heard the leader for `T` (at most `T`
/// after the kill, as the last heartbeat came before it), then win within the stagger, jitter
/// and one round of votes; the cluster tests allow `T + 2 s` for that on a loaded machine. The
/// proxy then marks the winner UP at its next check, at most `INTER` later.
fn failover_bound() -> Duration {
    T + Duration::from_secs(2) + INTER
}

/// How long after an undrained step-down the old leader may still be UP in the proxy: until its
/// next check, at most `INTER + CHECK_TIMEOUT` later, plus slack for a loaded machine.
fn stale_window() -> Duration {
    INTER + CHECK_TIMEOUT + Duration::from_secs(1)
}

/// One `GET /leader` through the proxy.
#[derive(Clone, Debug)]
struct Sample {
    sent: Instant,
    done: Instant,
    /// 0: no HTTP answer (refused, cut, timed out).
    status: u16,
    node: Option<String>,
    is_self: Option<bool>,
}

impl Sample {
    fn by_leader(&self) -> bool {
        self.status == 200 && self.is_self == Some(true)
    }

    /// An answer from a node that does not lead: what must never reach a client.
    fn by_non_leader(&self) -> bool {
        self.status == 200 && self.is_self != Some(true)
    }
}

/// HAProxy running the rendered deploy/haproxy.cfg, killed (by its PID) on drop.
struct HaProxy {
    child: Child,
    dir: TempDir,
    url: String,
    socket: PathBuf,
}

impl HaProxy {
    fn start(c: &Cluster) -> HaProxy {
        let missing = "haproxy is not installed: `apt-get install -y haproxy` (Debian's 2.6; \
                       scripts/test installs it); this test needs the real HAProxy";
        match Command::new("haproxy").arg("-v").output() {
            Ok(out) if out.status.success() => {
                let v = String::from_utf8_lossy(&out.stdout);
                eprintln!("haproxy: {}", v.lines().next().unwrap_or(""));
            }
            Ok(out) => panic!("{missing} (haproxy -v: {:?})", out.status),
            Err(e) => panic!("{missing} ({e})"),
        }
        let dir = TempDir::new("haproxy");
        let socket = dir.0.join("admin.sock");
        let listen = format!("127.0.0.1:{}", free_port());
        let cfg = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/haproxy.cfg"),
        )
        .expect("deploy/haproxy.cfg");
        assert!(
            cfg.contains("inter 250ms") && cfg.contains("timeout check 200ms"),
            "deploy/haproxy.cfg changed its check timings: update INTER and CHECK_TIMEOUT"
        );
        let mut rendered = cfg
            .replace("@LISTEN@", &listen)
            .replace("@STATS_SOCKET@", &socket.display().to_string());
        for (i, n) in c.nodes.iter().enumerate() {
            rendered = rendered.replace(
                &format!("@NODE{}@", i + 1),
                &format!("127.0.0.1:{}", n.port),
            );
        }
        for p in [
            "@LISTEN@",
            "@STATS_SOCKET@",
            "@NODE1@",
            "@NODE2@",
            "@NODE3@",
        ] {
            assert!(
                !rendered.contains(p),
                "placeholder {p} left in the rendered config"
            );
        }
        let path = dir.0.join("haproxy.cfg");
        std::fs::write(&path, &rendered).expect("rendered config");
        let check = Command::new("haproxy")
            .arg("-c")
            .arg("-f")
            .arg(&path)
            .output()
            .expect("haproxy -c");
        assert!(
            check.status.success(),
            "haproxy -c rejects the rendered deploy/haproxy.cfg:\n{}{}\n{rendered}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        let log = std::fs::File::create(dir.0.join("haproxy.log")).expect("log file");
        let child = Command::new("haproxy")
            .arg("-f")
            .arg(&path)
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn haproxy");
        HaProxy {
            child,
            dir,
            url: format!("http://{listen}"),
            socket,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("haproxy.log")).unwrap_or_default()
    }

    /// One command on the runtime API (the config's `stats socket`); its answer.
    fn runtime(&self, cmd: &str) -> String {
        let mut s = UnixStream::connect(&self.socket).expect("haproxy's stats socket");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(format!("{cmd}\n").as_bytes())
            .expect("runtime command");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("runtime answer");
        out
    }

    /// Drains server `id` (servers are named after the nodes): no new requests, while its
    /// checks go on (maintenance would stop them, and a server leaving maintenance comes back
    /// UP until its next check, answers from a follower included).
    fn drain(&self, id: &str) {
        self.run(&format!("set server pilot/{id} state drain"));
    }

    /// Whether the checks have marked server `id` DOWN (`srv_op_state` 0 in `show servers
    /// state`).
    fn is_down(&self, id: &str) -> bool {
        self.runtime("show servers state pilot").lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 5 && f[3] == id && f[5] == "0"
        })
    }

    /// Takes drained server `id` back once its check has marked it DOWN: from then on only a
    /// 200 of its check, that is leading again, brings it UP.
    async fn undrain_once_down(&self, id: &str) {
        let down = wait_for(Duration::from_secs(10), || async {
            self.is_down(id).then_some(())
        });
        assert!(
            down.await.is_some(),
            "server {id} was never marked DOWN after its step-down\n---- haproxy\n{}",
            self.log()
        );
        self.run(&format!("set server pilot/{id} state ready"));
    }

    /// A runtime command that answers nothing when it succeeds.
    fn run(&self, cmd: &str) {
        let out = self.runtime(cmd);
        assert!(out.trim().is_empty(), "haproxy runtime `{cmd}`: {out}");
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asks `GET /leader` through the proxy every [`POLL`], each request on its own task so that
/// one stuck on a frozen node does not hold the others back.
struct Poller {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Poller {
    fn start(url: &str) -> Poller {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("client");
        let url = format!("{url}/leader");
        let task = {
            let (samples, stop) = (samples.clone(), stop.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(POLL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut inflight = tokio::task::JoinSet::new();
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let (client, url, samples) = (client.clone(), url.clone(), samples.clone());
                    inflight.spawn(async move {
                        let sent = clock::now();
                        let (status, body) = match client.get(&url).send().await {
                            Ok(r) => {
                                let status = r.status().as_u16();
                                (status, r.json::<Value>().await.unwrap_or(Value::Null))
                            }
                            Err(_) => (0, Value::Null),
                        };
                        let s = Sample {
                            sent,
                            done: clock::now(),
                            status,
                            node: body["node"].as_str().map(String::from),
                            is_self: body["is_self"].as_bool(),
                        };
                        samples.lock().unwrap().push(s);
                    });
                    while inflight.try_join_next().is_some() {}
                }
                while inflight.join_next().await.is_some() {}
            })
        };
        Poller {
            samples,
            stop,
            task,
        }
    }

    fn samples(&self) -> Vec<Sample> {
        self.samples.lock().unwrap().clone()
    }

    /// The first answer from a leader other than `old`, to a request sent after `at`: how long
    /// after `at` it came, and from whom.
    fn new_leader_after(&self, at: Instant, old: &str) -> Option<(Duration, String)> {
        self.samples()
            .iter()
            .filter(|s| s.sent >= at && s.by_leader() && s.node.as_deref() != Some(old))
            .min_by_key(|s| s.done)
            .map(|s| (s.done - at, s.node.clone().unwrap_or_default()))
    }

    /// Waits for [`Poller::new_leader_after`].
    async fn wait_new_leader(
        &self,
        at: Instant,
        old: &str,
        within: Duration,
        what: &str,
        proxy: &HaProxy,
        c: &Cluster,
    ) -> (Duration, String) {
        match wait_for(within, || async { self.new_leader_after(at, old) }).await {
            Some(r) => r,
            None => panic!(
                "{what}: no answer from a new leader through the proxy within {within:?}\n\
                 ---- haproxy\n{}\n{}",
                proxy.log(),
                c.logs()
            ),
        }
    }

    /// Waits until `n` more answers from the leader came through the proxy (the steady state).
    async fn wait_answers(&self, n: usize, proxy: &HaProxy) {
        let count = || self.samples().iter().filter(|s| s.by_leader()).count();
        let target = count() + n;
        let ok = wait_for(Duration::from_secs(20), || async {
            (count() >= target).then_some(())
        })
        .await;
        assert!(
            ok.is_some(),
            "fewer than {n} answers from the leader through the proxy\n---- haproxy\n{}",
            proxy.log()
        );
    }

    async fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("poller");
        let mut s = self.samples.lock().unwrap().clone();
        s.sort_by_key(|s| s.sent);
        s
    }
}

/// The leader's server is cut out of the proxy within one check of its failure, and the new
/// leader's is put in within one check of its election: no answer ever from a non-leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_routes_to_the_leader_only() {
    let _serial = serial().await;
    // Preemption off: a better-ranked node coming back takes over by a handover, which behind
    // HAProxy is an undrained step-down (see below) at a moment the test does not choose.
    let mut c = Cluster::start(3, &["--preempt-after", "0s"]);
    let all = [0, 1, 2];
    let (l1, t1) = c.agreed(&all, FIRST_LEADER, |_, _| true).await;
    let proxy = HaProxy::start(&c);
    let poller = Poller::start(&proxy.url);
    let first = wait_for(Duration::from_secs(10), || async {
        poller
            .samples()
            .iter()
            .find(|s| s.by_leader())
            .and_then(|s| s.node.clone())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the proxy never answered from the leader\n---- haproxy\n{}",
            proxy.log()
        )
    });
    assert_eq!(
        first, l1,
        "the proxy's first answer came from {first}, not the leader"
    );
    poller.wait_answers(25, &proxy).await;

    // 1. kill -9 of the leader: its server is DOWN at the next check (connection refused);
    //    the survivors elect after T and the winner is UP at the check after that.
    let i1 = c.index(&l1);
    let killed = clock::now();
    c.nodes[i1].kill9();
    let (gap_kill, l2) = poller
        .wait_new_leader(killed, &l1, Duration::from_secs(20), "kill -9", &proxy, &c)
        .await;
    eprintln!("haproxy: kill -9 of {l1}: {l2} answers through the proxy after {gap_kill:?}");
    c.nodes[i1].start();
    let (l2b, t2) = c.agreed(&all, REJOIN, |_, t| t > t1).await;
    assert_eq!(
        l2b, l2,
        "the cluster's leader is not the one the proxy found"
    );
    poller.wait_answers(25, &proxy).await;

    // 2. SIGSTOP of the leader: frozen, it answers nothing; its check times out, its server is
    //    DOWN (and its sessions cut); the others elect after T.
    let i2 = c.index(&l2);
    let pid = Pid::from_raw(c.nodes[i2].child.as_ref().expect("running").id() as i32);
    let stopped = clock::now();
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
    let (gap_stop, l3) = poller
        .wait_new_leader(stopped, &l2, Duration::from_secs(20), "SIGSTOP", &proxy, &c)
        .await;
    eprintln!("haproxy: SIGSTOP of {l2}: {l3} answers through the proxy after {gap_stop:?}");
    kill(pid, Signal::SIGCONT).expect("SIGCONT");
    let (l3b, t3) = c.agreed(&all, REJOIN, |_, t| t > t2).await;
    assert_eq!(
        l3b, l3,
        "the cluster's leader is not the one the proxy found"
    );
    poller.wait_answers(25, &proxy).await;

    // 3. A planned step-down, drained first as docs/guide/deploy.md, "Behind HAProxy", says: the
    //    leader's server is drained, the leader hands over, the successor is UP at its first
    //    check, and the old server is undrained once its check has marked it DOWN (it follows
    //    now).
    let successor = |c: &Cluster, leader: &str| {
        c.nodes
            .iter()
            .map(|n| n.id.clone())
            .find(|id| id != leader)
            .expect("another node")
    };
    let s4 = successor(&c, &l3);
    let drained = clock::now();
    proxy.drain(&l3);
    hand_over(&c, &l3, &s4).await;
    let (gap_drained, l4) = poller
        .wait_new_leader(
            drained,
            &l3,
            Duration::from_secs(10),
            "drained step-down",
            &proxy,
            &c,
        )
        .await;
    assert_eq!(l4, s4, "the drained step-down elected another node");
    proxy.undrain_once_down(&l3).await;
    eprintln!("haproxy: drained step-down {l3} -> {l4}: {l4} answers after {gap_drained:?}");
    let (_, t4) = c.agreed(&all, REJOIN, |l, t| l == l4 && t > t3).await;
    poller.wait_answers(25, &proxy).await;

    // 4. The same step-down without draining: the old leader's server stays UP until its next
    //    check, so requests in that window reach a node that no longer leads. Measured, and
    //    bounded by the check timings.
    let s5 = successor(&c, &l4);
    let asked = clock::now();
    hand_over(&c, &l4, &s5).await;
    let (gap_undrained, l5) = poller
        .wait_new_leader(
            asked,
            &l4,
            Duration::from_secs(10),
            "undrained step-down",
            &proxy,
            &c,
        )
        .await;
    assert_eq!(l5, s5, "the step-down elected another node");
    c.agreed(&all, REJOIN, |l, t| l == l5 && t > t4).await;
    poller.wait_answers(25, &proxy).await;

    let samples = poller.stop().await;
    let window = asked..asked + stale_window();
    let (stale, wrong): (Vec<&Sample>, Vec<&Sample>) = samples
        .iter()
        .filter(|s| s.by_non_leader())
        .partition(|s| window.contains(&s.sent) && s.node.as_deref() == Some(l4.as_str()));
    let leader_answers = samples.iter().filter(|s| s.by_leader()).count();
    let unavailable = samples.iter().filter(|s| s.status == 503).count();
    let no_answer = samples.iter().filter(|s| s.status == 0).count();
    let mut other: Vec<u16> = samples
        .iter()
        .filter(|s| !s.by_leader() && !s.by_non_leader() && s.status != 503 && s.status != 0)
        .map(|s| s.status)
        .collect();
    other.dedup();
    let stale_span = stale
        .iter()
        .map(|s| s.sent - asked)
        .max()
        .unwrap_or_default();
    eprintln!(
        "haproxy: {} requests through the proxy: {leader_answers} answered by the leader, \
         {unavailable} 503 (no leader UP, or more than one), {no_answer} without an answer (cut or refused), \
         other statuses {other:?}, {} by a non-leader outside the undrained step-down",
        samples.len(),
        wrong.len()
    );
    eprintln!(
        "haproxy: gaps (no leader through the proxy): kill -9 {gap_kill:?}, SIGSTOP {gap_stop:?}, \
         drained step-down {gap_drained:?}, undrained step-down {gap_undrained:?} (bound for \
         kill -9 and SIGSTOP: {:?})",
        failover_bound()
    );
    eprintln!(
        "haproxy: undrained step-down {l4} -> {l5}: {} answers from {l4} after it stepped down \
         (requests sent up to {stale_span:?} after the 202; the drained one had none)",
        stale.len()
    );
    assert!(
        wrong.is_empty(),
        "answers from a non-leader through the proxy: {wrong:#?}\n---- haproxy\n{}",
        proxy.log()
    );
    assert!(
        gap_kill < failover_bound(),
        "after kill -9, no leader through the proxy for {gap_kill:?} (bound {:?})",
        failover_bound()
    );
    assert!(
        gap_stop < failover_bound(),
        "after SIGSTOP, no leader through the proxy for {gap_stop:?} (bound {:?})",
        failover_bound()
    );
}
