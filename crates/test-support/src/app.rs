//! `spawn_app`-style helpers: free ports, temporary data dirs, processes killed on drop, and
//! waiting on conditions with deadlines instead of fixed sleeps.

use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;

/// The workspace root: where `.tools/` (the pinned pilotctl) and `target/` are.
pub const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The service binary the tests run.
pub fn bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| built("pilot-election"))
}

/// A binary of this workspace, from the build the running test or example belongs to.
///
/// Cargo tells a package's own integration tests where its binaries are, but not a library like
/// this one, and not the other packages' tests: so look beside the running executable (a test
/// runs from `target/<profile>/deps/`, an example from `target/<profile>/examples/`, the binaries
/// sit in `target/<profile>/`). `cargo test --workspace` builds them all before any test runs.
pub fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable");
    exe.ancestors()
        .skip(1)
        .take(3)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} is not built beside {}: run `cargo build --release --workspace`",
                exe.display()
            )
        })
}

/// The previous release's binary (protocol version 2 only: main at d9ce58b), which
/// `scripts/build-previous.sh` builds from git history for the rolling-upgrade tests;
/// `PILOT_ELECTION_PREVIOUS` overrides where it is.
pub fn previous_bin() -> PathBuf {
    let path = match std::env::var_os("PILOT_ELECTION_PREVIOUS") {
        Some(p) => PathBuf::from(p),
        None => Path::new(WORKSPACE).join(".tools/previous/pilot-election"),
    };
    assert!(
        path.is_file(),
        "the previous release's binary is missing at {}: run scripts/build-previous.sh \
         (or set PILOT_ELECTION_PREVIOUS; {})",
        path.display(),
        crate::SET_UP
    );
    path
}

pub const TOKEN: &str = "s3cret-admin-token";
/// Default election timeout `T` of the binary (checked against the core's default below).
pub const T: Duration = Duration::from_secs(3);
/// Default lease `L` of the binary (checked against the core's default below).
pub const LEASE: Duration = Duration::from_secs(2);

/// Holds clusters to one at a time.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// A port nobody listens on right now, never handed out before by this process, and below the
/// kernel's ephemeral range where it can be.
///
/// Why not simply `bind(0)`: the port is free only until the node that gets it binds it, and
/// `bind(0)` may hand the same port to the next caller in the meantime (two nodes of one cluster
/// were given one port in CI), or the kernel may give it to an outgoing connection before a
/// killed node is restarted on it. Ports below the ephemeral range are never chosen by the kernel
/// on its own; the set keeps this process from choosing one twice.
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<(u16, HashSet<u16>)>> = Mutex::new(None);
    let low = ephemeral_low();
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let (next, set) = given.get_or_insert_with(|| {
        // Start where another test process (the bench beside a test run) is unlikely to.
        let span = u32::from(low.saturating_sub(PRIVATE_FROM).max(1));
        let start = PRIVATE_FROM + (std::process::id().wrapping_mul(7919) % span) as u16;
        (start, HashSet::new())
    });
    if low > PRIVATE_FROM + 1000 {
        for _ in PRIVATE_FROM..low {
            let p = *next;
            *next = if p + 1 >= low { PRIVATE_FROM } else { p + 1 };
            if !set.contains(&p) && TcpListener::bind(("127.0.0.1", p)).is_ok() {
                set.insert(p);
                return p;
            }
        }
    }
    // No room below the ephemeral range: take the kernel's choice, still never twice.
    loop {
        let p = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if set.insert(p) {
            return p;
        }
    }
}

/// Where `free_port` starts looking: above the ports services usually take.
const PRIVATE_FROM: u16 = 10_000;

/// The first port of the kernel's ephemeral range (Linux's default when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The direct children of process `pid` (those of every thread, from
/// `/proc/<pid>/task/*/children`): a node's `pilotctl` processes, or an `--exec` child.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .flat_map(|task| {
            let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            list.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "pilot-election-it-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One node process.
pub struct App {
    pub id: String,
    pub port: u16,
    pub dir: TempDir,
    pub args: Vec<String>,
    /// Added to the environment the process inherits.
    pub env: Vec<(String, String)>,
    pub child: Option<Child>,
    /// Starts the process under this open-file limit, soft and hard (the node raises its soft
    /// limit to the hard one, so only a hard limit holds it).
    pub open_files: Option<u64>,
    /// Another binary than this build's (a rolling upgrade starts the previous release).
    pub binary: Option<PathBuf>,
    /// Runs inside this network namespace (`ip netns exec`, which execs: the PID is the
    /// node's), listening on `host` ([`crate::netns`]).
    pub netns: Option<String>,
    /// Where the node's API is reached: 127.0.0.1 unless it runs in a namespace.
    pub host: String,
}

impl App {
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
    }

    /// A node not started yet, with its own directory (data and log) and arguments.
    pub fn new(id: &str, port: u16, dir: TempDir, args: Vec<String>) -> App {
        App {
            id: id.into(),
            port,
            dir,
            args,
            env: Vec::new(),
            child: None,
            open_files: None,
            binary: None,
            netns: None,
            host: "127.0.0.1".into(),
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.0.join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("node.log")).unwrap_or_default()
    }

    /// Starts (or restarts) the process with the same arguments and data dir.
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.0.join("node.log"))
            .expect("log file");
        let binary = self.binary.clone().unwrap_or_else(|| bin().to_path_buf());
        let mut cmd = match self.open_files {
            // `exec` keeps the PID, so the node is still killed by the PID we hold.
            Some(n) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(&binary);
                c
            }
            None => match &self.netns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns]).arg(&binary);
                    c
                }
                None => Command::new(&binary),
            },
        };
        let child = cmd
            .args(&self.args)
            .envs(self.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn pilot-election");
        self.child = Some(child);
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn sigterm(&self) {
        let pid = self.child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -TERM {pid}");
    }

    /// Waits for the process to exit by itself.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = pilot_election::clock::now() + within;
        loop {
            let c = self.child.as_mut().expect("running");
            if let Some(status) = c.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            assert!(
                pilot_election::clock::now() < deadline,
                "{} did not exit within {within:?}",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Arguments for one node of a cluster; `extra` is appended.
pub fn node_args(
    id: &str,
    port: u16,
    data: &Path,
    peers: &[(String, u16)],
    extra: &[&str],
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "run".into(),
        "--node-id".into(),
        id.into(),
        "--group".into(),
        "it".into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--data-dir".into(),
        data.display().to_string(),
    ];
    for (pid, pport) in peers.iter().filter(|(p, _)| p != id) {
        a.push("--peer".into());
        a.push(format!("{pid}=http://127.0.0.1:{pport}"));
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// A new, not yet started node.
pub fn app(id: &str, port: u16, peers: &[(String, u16)], extra: &[&str]) -> App {
    let dir = TempDir::new(id);
    let args = node_args(id, port, &dir.0.join("data"), peers, extra);
    App::new(id, port, dir, args)
}

/// `n` started nodes `n1..nN` that know each other, with an admin token.
pub struct Cluster {
    pub nodes: Vec<App>,
    /// Kept so that the token file lives as long as the nodes that read it.
    pub _token_file: TempDir,
}

impl Cluster {
    pub fn start(n: usize, extra: &[&str]) -> Cluster {
        Cluster::start_with(n, extra, None, &[])
    }

    /// As [`Cluster::start`], every node under the open-file limit `open_files` if given.
    pub fn start_with_open_files(n: usize, extra: &[&str], open_files: Option<u64>) -> Cluster {
        Cluster::start_with(n, extra, open_files, &[])
    }

    /// As [`Cluster::start`], with `env` added to every node's environment.
    pub fn start_with_env(n: usize, extra: &[&str], env: &[(&str, &str)]) -> Cluster {
        Cluster::start_with(n, extra, None, env)
    }

    /// As [`Cluster::start`], with an open-file limit and environment for every node.
    pub fn start_with(
        n: usize,
        extra: &[&str],
        open_files: Option<u64>,
        env: &[(&str, &str)],
    ) -> Cluster {
        let token_file = TempDir::new("token");
        let tf = token_file.0.join("token");
        std::fs::write(&tf, format!("{TOKEN}\n")).expect("token file");
        let peers: Vec<(String, u16)> = (1..=n).map(|i| (format!("n{i}"), free_port())).collect();
        let tf = tf.display().to_string();
        let mut all_extra = vec!["--admin-token-file", tf.as_str()];
        all_extra.extend_from_slice(extra);
        let mut nodes: Vec<App> = peers
            .iter()
            .map(|(id, port)| app(id, *port, &peers, &all_extra))
            .collect();
        for n in &mut nodes {
            n.open_files = open_files;
            n.env = env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            n.start();
        }
        Cluster {
            nodes,
            _token_file: token_file,
        }
    }

    pub fn index(&self, id: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.id == id)
            .expect("known node")
    }

    pub fn logs(&self) -> String {
        logs_of(&self.nodes)
    }

    /// Waits until every node in `which` names the same leader, accepted by `accept`.
    pub async fn agreed(
        &self,
        which: &[usize],
        within: Duration,
        accept: impl Fn(&str, u64) -> bool,
    ) -> (String, u64) {
        let nodes: Vec<&App> = which.iter().map(|i| &self.nodes[*i]).collect();
        crate::agree::agree(&nodes, within, accept, || self.logs()).await
    }
}

/// Every node's log under a header with its id, for a failing assertion's message.
pub fn logs_of(nodes: &[App]) -> String {
    nodes
        .iter()
        .map(|n| format!("==== {}\n{}", n.id, n.log()))
        .collect()
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client")
}

/// `(leader, term)` as a node reports it, if it knows one.
pub async fn leader_of(url: &str) -> Option<(String, u64)> {
    let resp = client().get(format!("{url}/leader")).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let v: Value = resp.json().await.ok()?;
    Some((v["leader"].as_str()?.to_string(), v["term"].as_u64()?))
}

pub async fn metrics_text(url: &str) -> String {
    let resp = client().get(format!("{url}/metrics")).send().await;
    resp.expect("metrics").text().await.expect("metrics text")
}

/// The value of one series in a metrics text, by its exact name and labels (0 when absent).
pub fn metric(text: &str, series: &str) -> f64 {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Status 0 when the node cannot be reached (yet).
pub async fn get_json(url: &str) -> (u16, Value) {
    let Ok(resp) = client().get(url).send().await else {
        return (0, Value::Null);
    };
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

pub async fn post_json(url: &str, path: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
    let mut req = client().post(format!("{url}{path}")).json(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// POSTs `body` (JSON) to `url`: the status and the answer as text.
pub async fn post_raw(url: &str, body: &str) -> (u16, String) {
    let resp = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("POST");
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

/// The term a node reports, once it answers.
pub async fn term_of(url: &str, within: Duration) -> Option<u64> {
    let url = format!("{url}/term");
    wait_for(within, || {
        let url = url.clone();
        async move {
            let (s, b) = get_json(&url).await;
            (s == 200).then(|| b["term"].as_u64()).flatten()
        }
    })
    .await
}

/// Waits until the node's HTTP API answers `/healthz` with 200.
pub async fn wait_up(app: &App) {
    let url = format!("{}/healthz", app.url());
    let up = wait_for(Duration::from_secs(10), || {
        let url = url.clone();
        async move { (get_json(&url).await.0 == 200).then_some(()) }
    })
    .await;
    assert!(up.is_some(), "{} did not come up:\n{}", app.id, app.log());
}

/// Short timings for in-process clusters, still safe by `Timings::validate`.
pub fn fast_timings() -> pilot_election::election::Timings {
    let t = pilot_election::election::Timings {
        heartbeat: Duration::from_millis(100),
        lease: Duration::from_millis(400),
        election_timeout: Duration::from_millis(700),
        stagger: Duration::from_millis(100),
        ..Default::default()
    };
    t.validate().expect("safe timings");
    t
}

/// A single-node cluster inside the test process (runtime, memory bus and router on a real
/// socket), for tests that must reach into the node, such as stopping its loop dead.
pub struct InProcess {
    pub url: String,
    pub task: tokio::task::JoinHandle<Result<(), pilot_election::runtime::RuntimeError>>,
    pub dir: TempDir,
}

/// The configuration of a node whose members are `members` (this node added), for in-process
/// nodes built with [`pilot_election::NodeBuilder`].
pub fn node_config(
    id: &str,
    members: &[&str],
    data_dir: &Path,
    auth: &pilot_election::api::Auth,
) -> pilot_election::NodeConfig {
    pilot_election::NodeConfig {
        node_id: id.into(),
        group: "in-process".into(),
        extra_groups: Vec::new(),
        spread_priorities: false,
        max_groups: pilot_election::group::DEFAULT_MAX_GROUPS,
        transport: pilot_election::transport::TransportConfig::Http { peers: Vec::new() },
        members: pilot_election::election::MemberSet::new(id, members.iter().copied())
            .expect("valid members"),
        priority: 1,
        eligible: true,
        data_dir: data_dir.to_path_buf(),
        timings: fast_timings(),
        admin_token: auth.token.clone(),
        allow_unauthenticated: auth.allow_unauthenticated,
        reset_state: false,
        accept_member_change: false,
        cluster_keys: None,
        limits: pilot_election::server::Limits::default(),
        exec: None,
        exec_groups: Default::default(),
        schedule: None,
        on_change: None,
        on_change_groups: Default::default(),
        // Every group's own series, so that the API tests see them.
        metrics_groups: Some(pilot_election::group::GroupSelection::All),
        health_check: None,
        info: None,
        tls: None,
    }
}

/// A node the binary's own `NodeBuilder` builds from `config`, on the in-process memory `bus`.
pub fn memory_node(
    config: pilot_election::NodeConfig,
    seed: u64,
    bus: &pilot_election::transport::memory::Bus,
) -> pilot_election::builder::BuiltNode {
    let bus = bus.clone();
    pilot_election::NodeBuilder::new(config)
        .seed(seed)
        .transport(move |inbound, _, _| std::sync::Arc::new(bus.attach(inbound)))
        .build()
        .expect("node")
}

pub async fn in_process(id: &str, auth: pilot_election::api::Auth) -> InProcess {
    let dir = TempDir::new(id);
    let bus = pilot_election::transport::memory::Bus::new();
    let built = memory_node(node_config(id, &[], &dir.0, &auth), 1, &bus);
    let app = built.router();
    let task = tokio::spawn(
        built
            .runtime
            .run(tokio_util::sync::CancellationToken::new()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
    });
    InProcess { url, task, dir }
}

/// Polls `f` until it returns `Some` or `within` passes.
pub async fn wait_for<T, F, Fut>(within: Duration, f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_every(within, Duration::from_millis(25), f).await
}

/// [`wait_for`], polling every `every` (a benchmark measures to a finer resolution).
pub async fn wait_for_every<T, F, Fut>(within: Duration, every: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = pilot_election::clock::now() + within;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if pilot_election::clock::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// Waits for `url`'s `/readyz` to answer 200; the last answer when it did not in time.
pub async fn wait_ready(url: &str, within: Duration) -> Result<(), Value> {
    let readyz = format!("{url}/readyz");
    let last = std::sync::Mutex::new(Value::Null);
    let ok = wait_for(within, || {
        let readyz = readyz.clone();
        let last = &last;
        async move {
            let (code, body) = get_json(&readyz).await;
            *last.lock().unwrap() = body;
            (code == 200).then_some(())
        }
    })
    .await;
    match ok {
        Some(()) => Ok(()),
        None => Err(last.into_inner().unwrap()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn t_and_lease_are_the_cores_defaults() {
        let core = pilot_election::election::Timings::default();
        assert_eq!(super::T, core.election_timeout);
        assert_eq!(super::LEASE, core.lease);
    }
}
