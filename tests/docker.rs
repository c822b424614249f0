//! The image `pilot-election:test` (made by `scripts/build-test-image.sh`) run as three containers
//! and hurt the way Docker users hurt it: `kill`, `network disconnect`, `stop`, `restart`.
//!
//! Each test gets two private bridge networks: `election` carries the nodes' own traffic (peers
//! are addressed by an alias that exists only there), `control` is how the test reaches each API
//! from the host. Cutting a node off `election` thus partitions it while the test can still ask it
//! whether it believes it leads. Nothing is published on the host's interfaces; the one test that
//! brings `compose.yaml` up publishes its ports on 127.0.0.1 only, as the file does.
//!
//! The tests run one at a time: the timing bounds are the service's promises, and two clusters
//! electing at once on a 2-core machine would measure the machine.

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use serde_json::Value;
use support::agree::{describe, Named};
use support::app::LEASE;
use support::blocking::{get_json, wait_for};
use support::watch::Watcher;

const IMAGE: &str = "pilot-election:test";
/// The service's defaults, which the containers run with.
const ELECTION_TIMEOUT: Duration = support::app::T;
/// One sampling round asks three nodes in turn; this much slack covers the round and the HTTP
/// latency of a loaded machine, so a measured time is at most this much late.
const SAMPLING_SLACK: Duration = Duration::from_millis(500);
/// For waits that bound nothing (start-up, a container's health), generous for a loaded machine.
const SETUP_DEADLINE: Duration = Duration::from_secs(60);
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

static SERIAL: Mutex<()> = Mutex::new(());
static RUN: AtomicUsize = AtomicUsize::new(0);
/// The tests drive Docker from plain threads; the shared leadership watcher and agreement wait
/// are async, and run here (a test enters it to start a watcher, and blocks on it to wait).
static RT: LazyLock<tokio::runtime::Runtime> =
    LazyLock::new(|| tokio::runtime::Runtime::new().expect("a tokio runtime"));

fn serial() -> MutexGuard<'static, ()> {
    // A failed test poisons the lock; the next one must still run.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn docker_output(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `docker` ({e}): the container tests need the Docker CLI and engine")
        })
}

/// Runs a docker command that must succeed; its trimmed stdout.
fn docker(args: &[&str]) -> String {
    let out = docker_output(args);
    assert!(
        out.status.success(),
        "`docker {}` failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A missing image must fail loudly: a skipped container test would pass CI having shown nothing.
fn require_image() {
    let out = docker_output(&["image", "inspect", "--format", "{{.Id}}", IMAGE]);
    assert!(
        out.status.success(),
        "the image {IMAGE} is missing: run scripts/build-test-image.sh first ({}; docker said: {})",
        support::SET_UP,
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A prefix for everything one cluster makes: unique to this process and cluster, so that two
/// runs on one engine never touch each other's containers.
fn unique_name(kind: &str) -> String {
    format!(
        "{kind}-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::SeqCst)
    )
}

/// What one node answers on `GET /leader`: `None` when it could not be asked.
#[derive(Debug, Clone, PartialEq)]
struct View {
    leader: Option<String>,
    term: u64,
    is_self: bool,
}

struct Node {
    id: &'static str,
    container: String,
    volume: String,
    /// Looked up once per container start: `docker inspect` is too slow to sit inside a
    /// measured wait.
    api: Option<SocketAddr>,
}

/// Three containers on two private networks; everything it made is removed when it drops, by id.
struct Cluster {
    election_net: String,
    control_net: String,
    nodes: Vec<Node>,
}

impl Cluster {
    fn start() -> Cluster {
        require_image();
        let run = unique_name("pe-test");
        let label = format!("org.pilot-election.test={run}");
        let mut cluster = Cluster {
            election_net: String::new(),
            control_net: String::new(),
            nodes: Vec::new(),
        };
        cluster.election_net = docker(&[
            "network",
            "create",
            "--label",
            &label,
            &format!("{run}-election"),
        ]);
        cluster.control_net = docker(&[
            "network",
            "create",
            "--label",
            &label,
            &format!("{run}-control"),
        ]);
        for id in NODES {
            let volume = docker(&[
                "volume",
                "create",
                "--label",
                &label,
                &format!("{run}-{id}"),
            ]);
            // The volume is recorded before the container so that Drop removes it even if
            // `docker run` fails.
            cluster.nodes.push(Node {
                id,
                container: String::new(),
                volume,
                api: None,
            });
            let container = cluster.run_container(id, &label, &format!("{run}-{id}"));
            cluster.nodes.last_mut().unwrap().container = container;
            cluster.refresh_api(id);
        }
        cluster
    }

    /// A started cluster once all three agree on a leader: where every scenario begins.
    fn with_leader() -> (Cluster, String, u64) {
        let cluster = Cluster::start();
        let (leader, term, took) = cluster.agreed_leader(&NODES, 0, SETUP_DEADLINE);
        eprintln!("containers: {leader} leads term {term}, agreed {took:?} after start");
        (cluster, leader, term)
    }

    fn node_mut(&mut self, id: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .expect("known node")
    }

    /// After a container (re)starts: it may have another address on the control network.
    fn refresh_api(&mut self, id: &str) {
        let (addr, _) = wait_for(SETUP_DEADLINE, &format!("{id} has an address"), || {
            self.lookup_api(id).ok_or_else(|| "none yet".to_string())
        });
        self.node_mut(id).api = Some(addr);
    }

    fn run_container(&self, id: &str, label: &str, name: &str) -> String {
        let node = self.node(id);
        let peers: Vec<String> = NODES
            .iter()
            .filter(|p| **p != id)
            .map(|p| format!("{p}=http://{p}:7070"))
            .collect();
        let container = docker(&[
            "run",
            "--detach",
            "--name",
            name,
            "--label",
            label,
            "--network",
            &self.election_net,
            "--network-alias",
            id,
            "--volume",
            &format!("{}:/var/lib/pilot-election", node.volume),
            "--env",
            &format!("PILOT_ELECTION_NODE_ID={id}"),
            "--env",
            &format!("PILOT_ELECTION_PEERS={}", peers.join(",")),
            "--env",
            &format!("PILOT_ELECTION_ADVERTISE_URL=http://{id}:7070"),
            IMAGE,
        ]);
        docker(&["network", "connect", &self.control_net, &container]);
        container
    }

    fn node(&self, id: &str) -> &Node {
        self.nodes.iter().find(|n| n.id == id).expect("known node")
    }

    fn container(&self, id: &str) -> &str {
        &self.node(id).container
    }

    fn api(&self, id: &str) -> SocketAddr {
        self.node(id).api.expect("address looked up at start")
    }

    fn lookup_api(&self, id: &str) -> Option<SocketAddr> {
        let nets = docker_output(&[
            "inspect",
            "--format",
            "{{json .NetworkSettings.Networks}}",
            self.container(id),
        ]);
        let nets: Value = serde_json::from_slice(&nets.stdout).ok()?;
        let ip = nets
            .as_object()?
            .iter()
            .find(|(_, v)| v["NetworkID"].as_str() == Some(self.control_net.as_str()))?
            .1["IPAddress"]
            .as_str()?
            .to_string();
        format!("{ip}:7070").parse().ok()
    }

    /// The shared leadership watcher on every node's API, from now on (its report says whether
    /// two ever led at once, and every leaderless stretch).
    fn watch(&self) -> Watcher {
        let _rt = RT.enter();
        let nodes = NODES
            .iter()
            .map(|id| (id.to_string(), format!("http://{}", self.api(id))))
            .collect();
        let watch = Watcher::start(nodes);
        assert!(
            RT.block_on(watch.seen_leader(SETUP_DEADLINE)),
            "the watch saw no leader"
        );
        watch
    }

    fn addrs(&self, ids: &[&'static str]) -> Vec<SocketAddr> {
        ids.iter().map(|id| self.api(id)).collect()
    }

    fn agreed_leader(
        &self,
        ids: &[&'static str],
        above_term: u64,
        limit: Duration,
    ) -> (String, u64, Duration) {
        agreed_leader(ids, &self.addrs(ids), above_term, limit)
    }

    fn health(&self, id: &str) -> String {
        docker(&[
            "inspect",
            "--format",
            "{{if .State.Health}}{{.State.Health.Status}}{{end}}",
            self.container(id),
        ])
    }

    fn others(leader: &str) -> Vec<&'static str> {
        NODES.iter().copied().filter(|n| *n != leader).collect()
    }

    fn term_file(&self, id: &str) -> (u64, Option<String>) {
        let addr = self.api(id);
        let (_, body) = wait_for(SETUP_DEADLINE, &format!("{id} answers /term"), || {
            get_json(addr, "/term").ok_or_else(|| "no answer".to_string())
        })
        .0;
        (
            body["term"].as_u64().expect("term"),
            body["voted_for"].as_str().map(str::to_string),
        )
    }
}

fn view_at(addr: SocketAddr) -> Option<View> {
    let (status, body) = get_json(addr, "/leader")?;
    view_of(status, &body)
}

/// A `GET /leader` answer as a [`View`]: `None` for any status but 200 and 503.
fn view_of(status: u16, body: &Value) -> Option<View> {
    match status {
        200 => Some(View {
            leader: body["leader"].as_str().map(str::to_string),
            term: body["term"].as_u64()?,
            is_self: body["is_self"].as_bool()?,
        }),
        503 => Some(View {
            leader: None,
            term: body["term"].as_u64().unwrap_or(0),
            is_self: false,
        }),
        _ => None,
    }
}

fn views(ids: &[&'static str], addrs: &[SocketAddr]) -> Vec<(&'static str, Option<View>)> {
    ids.iter()
        .zip(addrs)
        .map(|(id, a)| (*id, view_at(*a)))
        .collect()
}

/// Waits until every node in `ids` names the same leader in the same term, above `above_term`,
/// and only that leader (if it is among them) says it is itself; checks on every sampling round
/// that no two of them claim to lead.
fn agreed_leader(
    ids: &[&'static str],
    addrs: &[SocketAddr],
    above_term: u64,
    limit: Duration,
) -> (String, u64, Duration) {
    agreed_leader_by(ids, above_term, limit, || views(ids, addrs))
}

/// [`agreed_leader`] with the views taken by `sample`, one call per sampling round: the shared
/// agreement wait (`support::agree`), where a node whose `is_self` is not exactly "I am the leader
/// I name" names nobody.
fn agreed_leader_by(
    ids: &[&'static str],
    above_term: u64,
    limit: Duration,
    mut sample: impl FnMut() -> Vec<(&'static str, Option<View>)>,
) -> (String, u64, Duration) {
    let start = pilot_election::clock::now();
    let ask = || {
        let views = sample();
        assert_at_most_one_self_leader(&views);
        std::future::ready(views.into_iter().map(|(id, v)| named(id, v)).collect())
    };
    let agreed = RT.block_on(support::agree::wait(limit, ask, |_, t| t > above_term));
    let (leader, term) = agreed.unwrap_or_else(|last| {
        panic!(
            "{ids:?} agree on one leader above term {above_term}: not within {limit:?}; last \
             seen: {}",
            describe(ids, &last)
        )
    });
    (leader, term, pilot_election::clock::since(start))
}

/// The leader a view names and its term, if its `is_self` says exactly whether `id` is it.
fn named(id: &str, view: Option<View>) -> Named {
    let v = view?;
    let leader = v.leader?;
    (v.is_self == (leader == id)).then_some((leader, v.term))
}

fn assert_at_most_one_self_leader(views: &[(&str, Option<View>)]) {
    let leaders: Vec<&str> = views
        .iter()
        .filter(|(_, v)| v.as_ref().is_some_and(|v| v.is_self))
        .map(|(id, _)| *id)
        .collect();
    assert!(
        leaders.len() <= 1,
        "split brain: {leaders:?} each report themselves leader in one sampling round: {views:?}"
    );
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut ids: Vec<&str> = self
            .nodes
            .iter()
            .map(|n| n.container.as_str())
            .filter(|c| !c.is_empty())
            .collect();
        if !ids.is_empty() {
            ids.splice(0..0, ["rm", "--force", "--volumes"]);
            let _ = docker_output(&ids);
        }
        for n in &self.nodes {
            let _ = docker_output(&["volume", "rm", "--force", &n.volume]);
        }
        for net in [&self.election_net, &self.control_net] {
            if !net.is_empty() {
                let _ = docker_output(&["network", "rm", net]);
            }
        }
    }
}

#[test]
fn three_containers_agree_on_one_leader_turn_healthy_and_run_as_non_root() {
    let _serial = serial();
    let (cluster, leader, term) = Cluster::with_leader();
    assert!(term >= 1);
    assert!(NODES.contains(&leader.as_str()));

    for id in NODES {
        let (status, took) = wait_for(SETUP_DEADLINE, &format!("{id} healthy"), || {
            match cluster.health(id).as_str() {
                "healthy" => Ok("healthy".to_string()),
                other => Err(other.to_string()),
            }
        });
        assert_eq!(status, "healthy");
        eprintln!("containers: {id} healthy {took:?} later");

        let uid = docker(&["exec", cluster.container(id), "id", "-u"]);
        assert_ne!(uid, "0", "{id}: `id -u` in the container says root");
        let status = docker(&["exec", cluster.container(id), "cat", "/proc/1/status"]);
        let uid_line = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .expect("Uid line");
        assert!(
            uid_line.split_whitespace().skip(1).all(|u| u == "10001"),
            "{id}: the node process (pid 1) must run as uid 10001 (real, effective, saved, fs): {uid_line}"
        );
    }
}

#[test]
fn killing_the_leader_container_elects_a_new_leader_within_t_plus_2s() {
    let _serial = serial();
    let (cluster, leader, term) = Cluster::with_leader();

    let start = pilot_election::clock::now();
    docker(&["kill", cluster.container(&leader)]);
    let survivors = Cluster::others(&leader);
    let limit = ELECTION_TIMEOUT + Duration::from_secs(2);
    let (next, next_term, _) = cluster.agreed_leader(&survivors, term, SETUP_DEADLINE);
    let took = pilot_election::clock::since(start);
    eprintln!("containers: docker kill {leader} (term {term}) -> {next} leads term {next_term} after {took:?}");
    assert_ne!(next, leader);
    assert!(
        took <= limit + SAMPLING_SLACK,
        "failover took {took:?}, more than T + 2 s"
    );
}

#[test]
fn a_disconnected_leader_stops_leading_within_the_lease_and_one_leader_remains_after_reconnect() {
    let _serial = serial();
    let (cluster, leader, term) = Cluster::with_leader();
    let old = cluster.api(&leader);
    let watch = cluster.watch();

    let start = pilot_election::clock::now();
    docker(&[
        "network",
        "disconnect",
        &cluster.election_net,
        cluster.container(&leader),
    ]);
    let cut = pilot_election::clock::since(start);
    wait_for(
        SETUP_DEADLINE,
        &format!("the cut-off leader {leader} stops reporting itself leader"),
        || match view_at(old) {
            Some(v) if !v.is_self => Ok(()),
            v => Err(format!("{v:?}")),
        },
    );
    // Measured from before the command: the cut happens somewhere inside it.
    let stepped_down = pilot_election::clock::since(start);
    eprintln!("containers: {leader} cut off (the command took {cut:?}); it stopped reporting itself leader {stepped_down:?} after the command began");
    assert!(
        stepped_down <= LEASE + SAMPLING_SLACK,
        "the cut-off leader kept reporting itself leader for {stepped_down:?}, longer than the lease"
    );

    let survivors = Cluster::others(&leader);
    let (next, next_term, took) = cluster.agreed_leader(&survivors, term, SETUP_DEADLINE);
    eprintln!("containers: {survivors:?} elected {next} in term {next_term} {took:?} after the old leader stepped down");
    assert_ne!(next, leader);
    assert!(
        view_at(old).is_some_and(|v| !v.is_self),
        "the cut-off node must not lead"
    );

    let alias = leader.clone();
    docker(&[
        "network",
        "connect",
        "--alias",
        &alias,
        &cluster.election_net,
        cluster.container(&leader),
    ]);
    let (after, after_term, took) = cluster.agreed_leader(&NODES, term, SETUP_DEADLINE);
    eprintln!("containers: reconnected {leader}; all three agree on {after} in term {after_term} after {took:?}");
    assert!(after_term >= next_term);
    // Agreement was reached; it must also last: the watch looks on for a lease more (an
    // observation, not a wait for a condition). One leader at most all along, cut and healed.
    thread::sleep(LEASE);
    let report = RT.block_on(watch.stop());
    report.assert_single_leader("a leader disconnected and reconnected", String::new);
}

#[test]
fn docker_stop_of_the_leader_hands_over_within_1s_and_exits_0() {
    let _serial = serial();
    let (cluster, leader, term) = Cluster::with_leader();
    let survivors = Cluster::others(&leader);
    let addrs = cluster.addrs(&survivors);

    let start = pilot_election::clock::now();
    let mut stop = Command::new("docker")
        .args(["stop", cluster.container(&leader)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("docker stop");
    let limit = Duration::from_secs(1);
    let (next, handover) = wait_for(
        SETUP_DEADLINE,
        &format!("a survivor of {leader} leads after docker stop"),
        || {
            let views = views(&survivors, &addrs);
            views
                .iter()
                .find(|(_, v)| v.as_ref().is_some_and(|v| v.is_self && v.term > term))
                .map(|(id, _)| id.to_string())
                .ok_or(format!("{views:?}"))
        },
    );
    let status = stop.wait().expect("docker stop");
    let stopped = pilot_election::clock::since(start);
    assert!(status.success(), "docker stop failed: {status}");
    let exit = docker(&[
        "inspect",
        "--format",
        "{{.State.ExitCode}}",
        cluster.container(&leader),
    ]);
    eprintln!("containers: docker stop {leader}: {next} leads after {handover:?}; container exited {exit} after {stopped:?}");
    assert_eq!(
        exit, "0",
        "the stopped leader must exit 0 (137 means Docker had to SIGKILL it)"
    );
    assert!(
        handover <= limit + SAMPLING_SLACK,
        "hand-over took {handover:?}"
    );
    let (agreed, _, _) = cluster.agreed_leader(&survivors, term, SETUP_DEADLINE);
    assert_eq!(agreed, next);
}

#[test]
fn docker_restart_keeps_the_term_and_vote_from_the_volume() {
    let _serial = serial();
    let (mut cluster, leader, _) = Cluster::with_leader();
    // With the others gone nobody can tell the restarted node the term: it must read it back.
    for id in Cluster::others(&leader) {
        docker(&["stop", cluster.container(id)]);
    }
    let before = cluster.term_file(&leader);
    assert!(
        before.0 >= 1,
        "an election happened, so the term is at least 1: {before:?}"
    );

    docker(&["restart", cluster.container(&leader)]);
    cluster.refresh_api(&leader);
    let after_restart = cluster.term_file(&leader);
    eprintln!("containers: {leader} term/vote before restart {before:?}, after {after_restart:?}");
    assert_eq!(
        after_restart, before,
        "docker restart lost the term or the vote"
    );

    // A new container on the same volume (an upgrade) keeps them too.
    docker(&["rm", "--force", cluster.container(&leader)]);
    let label = format!("org.pilot-election.test=recreated-{}", std::process::id());
    let name = format!("{}-recreated", cluster.node(&leader).volume);
    let container = cluster.run_container(&leader, &label, &name);
    cluster.node_mut(&leader).container = container;
    cluster.refresh_api(&leader);
    let after_recreate = cluster.term_file(&leader);
    assert_eq!(
        after_recreate, before,
        "a new container on the same volume lost the term or the vote"
    );
}

/// A rolling restart as Compose or an orchestrator does one: each container in turn, the
/// highest id first, `docker stop` (SIGTERM: a leader hands over), `docker start`, and the next
/// only when the restarted node's `/readyz` answers 200; two passes. Watched every 20 ms: never
/// two leaders, and every leaderless stretch under a second (a handover, not a failover); a
/// stopped container is not asked, and a started one is asked at its new address.
#[test]
fn a_rolling_restart_of_the_containers_never_shows_two_leaders_or_a_gap_of_a_second() {
    let _serial = serial();
    let (mut cluster, leader, term) = Cluster::with_leader();
    eprintln!("containers: rolling restart from {leader} in term {term}");
    let watch = cluster.watch();
    let mut log = Vec::new();
    for pass in 1..=2 {
        for id in NODES.iter().rev() {
            watch.mark(format!("pass {pass}: restart {id}"));
            watch.remove(id);
            docker(&["stop", cluster.container(id)]);
            docker(&["start", cluster.container(id)]);
            cluster.refresh_api(id);
            let addr = cluster.api(id);
            watch.add(id, &format!("http://{addr}"));
            let (_, took) = wait_for(
                SETUP_DEADLINE,
                &format!("{id} ready again"),
                || match get_json(addr, "/readyz") {
                    Some((200, _)) => Ok(()),
                    other => Err(format!("{other:?}")),
                },
            );
            log.push(format!("pass {pass}: {id} ready {took:?} after its start"));
        }
    }
    let (last, last_term, _) = cluster.agreed_leader(&NODES, term, SETUP_DEADLINE);
    let report = RT.block_on(watch.stop());
    for line in &log {
        eprintln!("containers: {line}");
    }
    eprintln!("containers: {last} leads term {last_term} at the end");
    report.assert_single_leader("containers: rolling restart", String::new);
    let second = Duration::from_secs(1);
    report.assert_gaps_under(second, "containers: rolling restart", String::new);
    assert!(
        report.before_first_leader.is_none_or(|d| d < second),
        "leaderless for {:?} before the watch saw the first leader",
        report.before_first_leader
    );
    assert!(
        last_term > term,
        "the leader's restarts must have moved leadership on"
    );
}

/// `compose.yaml` itself (with override files on top), brought up under a project name of its
/// own with the test image, free loopback ports and a throw-away admin token; taken down by
/// container id, then by project.
struct Compose {
    project: String,
    dir: std::path::PathBuf,
    files: Vec<&'static str>,
    env: Vec<(String, String)>,
    addrs: Vec<SocketAddr>,
}

impl Compose {
    fn up() -> Compose {
        Compose::up_with(&[], |_| Vec::new())
    }

    /// `overrides` (file names in the repository) go on top of `compose.yaml`; `prepare` gets the
    /// test's own directory before `up` and returns more variables for docker-compose.
    fn up_with(
        overrides: &[&'static str],
        prepare: impl FnOnce(&std::path::Path) -> Vec<(String, String)>,
    ) -> Compose {
        require_image();
        let project = unique_name("pe-compose");
        let dir = std::env::temp_dir().join(&project);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let token = dir.join("admin-token");
        std::fs::write(&token, "compose-test-token\n").expect("token");
        // The node runs as uid 10001 and reads the secret through a bind mount.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        let addrs: Vec<SocketAddr> = (0..NODES.len())
            .map(|_| {
                let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
                l.local_addr().expect("port")
            })
            .collect();
        let mut env = vec![
            ("PILOT_ELECTION_IMAGE".to_string(), IMAGE.to_string()),
            (
                "PILOT_ELECTION_ADMIN_TOKEN_PATH".to_string(),
                token.display().to_string(),
            ),
        ];
        for (suffix, addr) in ["A", "B", "C"].iter().zip(&addrs) {
            env.push((
                format!("PILOT_ELECTION_PORT_{suffix}"),
                addr.port().to_string(),
            ));
        }
        let mut files = vec!["compose.yaml"];
        files.extend_from_slice(overrides);
        // Made before `prepare` runs, so that Drop cleans up after a failed one too.
        let mut compose = Compose {
            project,
            dir,
            files,
            env,
            addrs,
        };
        let more = prepare(&compose.dir);
        compose.env.extend(more);
        compose.run(&["up", "--detach", "--no-build"]);
        compose
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("docker-compose");
        for f in &self.files {
            c.arg("--file")
                .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(f));
        }
        c.args(["--project-name", &self.project])
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.command(args).output().unwrap_or_else(|e| {
            panic!("cannot run docker-compose ({e}): install Debian's docker-compose package")
        });
        assert!(
            out.status.success(),
            "`docker-compose {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn container(&self, service: &str) -> String {
        self.run(&["ps", "--quiet", service])
    }

    /// The published 127.0.0.1 port of a node's API.
    fn addr(&self, id: &str) -> SocketAddr {
        self.addrs[NODES.iter().position(|n| *n == id).expect("node")]
    }

    /// Waits until the container's own healthcheck has passed.
    fn wait_healthy(&self, id: &str) -> Duration {
        let container = self.container(id);
        let ((), took) = wait_for(SETUP_DEADLINE, &format!("compose {id} healthy"), || {
            let health = docker(&[
                "inspect",
                "--format",
                "{{.State.Health.Status}}",
                &container,
            ]);
            if health == "healthy" {
                Ok(())
            } else {
                Err(health)
            }
        });
        took
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        if let Ok(out) = self.command(&["ps", "--quiet"]).output() {
            let ids = String::from_utf8_lossy(&out.stdout).to_string();
            let mut args = vec!["rm", "--force", "--volumes"];
            args.extend(ids.split_whitespace());
            if args.len() > 3 {
                let _ = docker_output(&args);
            }
        }
        // Now only the project's network and named volumes are left.
        let _ = self.command(&["down", "--volumes"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn the_compose_cluster_elects_one_leader_turns_healthy_and_hands_over_on_stop() {
    let _serial = serial();
    let compose = Compose::up();
    let (leader, term, took) = agreed_leader(&NODES, &compose.addrs, 0, SETUP_DEADLINE);
    eprintln!("compose: {leader} leads term {term}, agreed {took:?} after up");
    for id in NODES {
        compose.wait_healthy(id);
    }

    let container = compose.container(&leader);
    compose.run(&["stop", &leader]);
    let exit = docker(&["inspect", "--format", "{{.State.ExitCode}}", &container]);
    assert_eq!(exit, "0", "the stopped leader must exit 0");
    let survivors = Cluster::others(&leader);
    let idx: Vec<usize> = survivors
        .iter()
        .map(|s| NODES.iter().position(|n| n == s).expect("node"))
        .collect();
    let addrs: Vec<SocketAddr> = idx.iter().map(|i| compose.addrs[*i]).collect();
    let (next, next_term, _) = agreed_leader(&survivors, &addrs, term, SETUP_DEADLINE);
    eprintln!("compose: stop {leader} -> {next} leads term {next_term}");
    assert_ne!(next, leader);
}

/// curl on the host against a published port over TLS, trusting only the test's CA (the
/// node certificates name 127.0.0.1), with the operator's client certificate or without any.
struct Curl {
    tls: std::path::PathBuf,
}

impl Curl {
    /// curl's output: the body, then a line with the HTTP status (`000` when there was none).
    fn get(&self, addr: SocketAddr, path: &str, operator: bool) -> Output {
        let mut c = Command::new("curl");
        c.args(["--silent", "--show-error", "--max-time", "5"])
            .args(["--write-out", "\n%{http_code}"])
            .arg("--cacert")
            .arg(self.tls.join("ca.pem"));
        if operator {
            c.arg("--cert")
                .arg(self.tls.join("operator.pem"))
                .arg("--key")
                .arg(self.tls.join("operator.key"));
        }
        c.arg(format!("https://{addr}{path}"))
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run curl ({e}): apt-get install -y curl"))
    }

    /// The status and JSON body of a request with the operator's certificate.
    fn json(&self, addr: SocketAddr, path: &str) -> Option<(u16, Value)> {
        let out = self.get(addr, path, true);
        let text = String::from_utf8_lossy(&out.stdout);
        let (body, status) = text.rsplit_once('\n')?;
        let status: u16 = status.trim().parse().ok().filter(|s| *s != 0)?;
        Some((status, serde_json::from_str(body).ok()?))
    }

    fn views(&self, compose: &Compose, ids: &[&'static str]) -> Vec<(&'static str, Option<View>)> {
        ids.iter()
            .map(|id| {
                let view = self
                    .json(compose.addr(id), "/leader")
                    .and_then(|(status, body)| view_of(status, &body));
                (*id, view)
            })
            .collect()
    }
}

/// `compose.yaml` with `compose.tls.yaml` on top and the certificates made by
/// `scripts/make-tls-certs.sh` in the test's directory, as the steps of docs/guide/deploy.md ("Run
/// with Docker") do: all three agree on one leader over https with the operator's certificate and
/// turn healthy (their healthcheck speaks TLS), curl without a client certificate and plain HTTP
/// get no answer, the CLI inside a container reaches its node over TLS from the environment alone,
/// and after `docker kill` of the leader the other two elect another over their TLS peer links. The
/// failover's time is only logged: curl's process and handshake per sample make it too coarse a
/// clock for the T + 2 s bound, which the plain test above and tests/it/tls.rs assert.
#[test]
fn the_compose_cluster_over_mutual_tls_elects_refuses_clients_without_a_certificate_and_fails_over()
{
    let _serial = serial();
    let mut tls_dir = None;
    let compose = Compose::up_with(&["compose.tls.yaml"], |dir| {
        let tls = dir.join("tls");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/make-tls-certs.sh");
        let out = Command::new(script)
            .arg(&tls)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {script} ({e})"));
        assert!(
            out.status.success(),
            "make-tls-certs.sh failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        tls_dir = Some(tls.clone());
        vec![(
            "PILOT_ELECTION_TLS_DIR".to_string(),
            tls.display().to_string(),
        )]
    });
    let curl = Curl {
        tls: tls_dir.expect("certificates made"),
    };

    let (leader, term, took) =
        agreed_leader_by(&NODES, 0, SETUP_DEADLINE, || curl.views(&compose, &NODES));
    eprintln!("compose tls: {leader} leads term {term}, agreed over https {took:?} after up");
    for id in NODES {
        let took = compose.wait_healthy(id);
        eprintln!("compose tls: {id} healthy {took:?} later");
    }

    for id in NODES {
        let addr = compose.addr(id);
        let out = curl.get(addr, "/leader", false);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            !out.status.success() && stdout.trim() == "000",
            "{id} answered curl without a client certificate ({}): {stdout}",
            out.status
        );
        assert!(
            stderr.contains("certificate required"),
            "{id}: curl without a client certificate should be refused with the TLS alert `certificate required`: {stderr}"
        );
        assert_eq!(
            get_json(addr, "/leader"),
            None,
            "{id} answered plain HTTP on its TLS port"
        );
    }
    eprintln!("compose tls: curl without a client certificate refused by all three");

    // The CLI in a container: URL, CA and client certificate from compose.tls.yaml's environment.
    let inside: Value = serde_json::from_str(&compose.run(&[
        "exec",
        "-T",
        "node-a",
        "pilot-election",
        "leader",
        "--json",
    ]))
    .expect("`pilot-election leader --json` prints JSON");
    assert_eq!(inside["leader"].as_str(), Some(leader.as_str()), "{inside}");

    let container = compose.container(&leader);
    let start = pilot_election::clock::now();
    docker(&["kill", &container]);
    let survivors = Cluster::others(&leader);
    let (next, next_term, _) = agreed_leader_by(&survivors, term, SETUP_DEADLINE, || {
        curl.views(&compose, &survivors)
    });
    let took = pilot_election::clock::since(start);
    eprintln!("compose tls: docker kill {leader} (term {term}) -> {next} leads term {next_term} over TLS after {took:?}");
    assert_ne!(next, leader);
    let running = docker(&["inspect", "--format", "{{.State.Running}}", &container]);
    assert_eq!(
        running, "false",
        "the killed leader came back during the failover"
    );
}
