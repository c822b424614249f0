//! `pilot-election demo`: three real node processes on 127.0.0.1 and a timeline of what they do.
//!
//! Real processes, so that "the leader crashed" is a `kill -9` and not a simulation of one.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::time::{sleep, Instant};

use super::{DemoArgs, TransportKind, EXIT_OK, EXIT_REFUSED};

const IDS: [&str; 3] = ["node-a", "node-b", "node-c"];
/// How long each step of the timeline may take before the demo gives up.
const WAIT: Duration = Duration::from_secs(20);

struct Demo {
    exe: PathBuf,
    dir: PathBuf,
    ports: [u16; 3],
    children: [Option<Child>; 3],
    client: reqwest::Client,
    start: Instant,
    pilot: Option<PilotNet>,
}

/// The emulated Pilot network of `demo --transport pilot`: one daemon per node plus `n4`, the
/// broker. It exits when its stdin (held here) closes, so it never outlives the demo.
struct PilotNet {
    child: Child,
    pilotctl: PathBuf,
    sockets: Vec<PathBuf>,
}

impl PilotNet {
    async fn start(exe: &Path, dir: &Path, pilotctl: PathBuf) -> Result<PilotNet, String> {
        let devnet = exe.with_file_name("pilot-devnet");
        if !devnet.is_file() {
            return Err(format!(
                "{} is missing: build it with `cargo build --release --workspace` (it is the pilot-devnet package)",
                devnet.display()
            ));
        }
        crate::pilotctl::check_executable(&pilotctl)
            .map_err(|e| format!("{e} (run scripts/fetch-pilotctl.sh or pass --pilotctl)"))?;
        let mut child = Command::new(&devnet)
            .arg("--dir")
            .arg(dir.join("pilot"))
            .args(["--nodes", "4", "--exit-on-stdin-eof"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", devnet.display()))?;
        let stdout = child.stdout.take().ok_or("pilot-devnet has no stdout")?;
        let mut line = String::new();
        let mut reader = tokio::io::BufReader::new(stdout);
        let read = tokio::io::AsyncBufReadExt::read_line(&mut reader, &mut line);
        tokio::time::timeout(WAIT, read)
            .await
            .map_err(|_| "pilot-devnet did not start".to_string())?
            .map_err(|e| format!("pilot-devnet: {e}"))?;
        let announce: Value =
            serde_json::from_str(&line).map_err(|e| format!("pilot-devnet said {line:?}: {e}"))?;
        let sockets = (1..=3)
            .map(|i| {
                announce["nodes"]
                    .as_array()
                    .and_then(|nodes| nodes.iter().find(|n| n["hostname"] == format!("n{i}")))
                    .and_then(|n| n["socket"].as_str())
                    .map(PathBuf::from)
                    .ok_or_else(|| format!("pilot-devnet announced no node n{i}: {line}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PilotNet {
            child,
            pilotctl,
            sockets,
        })
    }
}

/// Where `scripts/fetch-pilotctl.sh` puts the pinned binary, if this runs from the repository;
/// otherwise `pilotctl` from PATH.
fn default_pilotctl() -> PathBuf {
    let fetched = Path::new(".tools/pilot/pilotctl");
    if fetched.is_file() {
        return fetched.to_path_buf();
    }
    super::config::resolve_in_path(Path::new("pilotctl"))
}

impl Demo {
    fn url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    fn spawn(&mut self, i: usize) -> std::io::Result<()> {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("run")
            .arg("--node-id")
            .arg(IDS[i])
            .arg("--group")
            .arg("demo")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.ports[i]))
            .arg("--data-dir")
            .arg(self.dir.join(IDS[i]))
            .arg("--allow-unauthenticated");
        match &self.pilot {
            Some(net) => {
                cmd.args([
                    "--transport",
                    "pilot",
                    "--broker",
                    "n4",
                    "--member",
                    "node-a,node-b,node-c",
                ])
                .arg("--pilotctl")
                .arg(&net.pilotctl)
                .arg("--pilot-socket")
                .arg(&net.sockets[i]);
            }
            None => {
                for j in (0..3).filter(|j| *j != i) {
                    cmd.arg("--peer").arg(format!("{}={}", IDS[j], self.url(j)));
                }
            }
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", IDS[i])))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        self.children[i] = Some(cmd.spawn()?);
        Ok(())
    }

    fn say(&self, what: &str) {
        println!(
            "[{:>7.3}s] {what}",
            crate::clock::since(self.start).as_secs_f64()
        );
    }

    async fn leader_of(&self, i: usize) -> Option<(String, u64)> {
        let resp = self
            .client
            .get(format!("{}/leader", self.url(i)))
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let v: Value = resp.json().await.ok()?;
        Some((v["leader"].as_str()?.to_string(), v["term"].as_u64()?))
    }

    /// Waits until every node in `nodes` names the same leader satisfying `accept`; fails at
    /// once, with the end of its log, if one of them exited (a port in use, typically).
    async fn agreed(
        &mut self,
        nodes: &[usize],
        within: Duration,
        what: &str,
        accept: impl Fn(&str, u64) -> bool,
    ) -> Result<(String, u64), String> {
        let deadline = crate::clock::now() + within;
        while crate::clock::now() < deadline {
            for &i in nodes {
                if let Some(Ok(Some(status))) = self.children[i].as_mut().map(Child::try_wait) {
                    let log = std::fs::read_to_string(self.dir.join(format!("{}.log", IDS[i])))
                        .unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(3).collect();
                    return Err(format!(
                        "{} exited ({status}): {}",
                        IDS[i],
                        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                    ));
                }
            }
            let mut seen = Vec::new();
            for &i in nodes {
                seen.push(self.leader_of(i).await);
            }
            if let Some(Some(first)) = seen.first() {
                if seen.iter().all(|s| s.as_ref() == Some(first)) && accept(&first.0, first.1) {
                    return Ok(first.clone());
                }
            }
            sleep(Duration::from_millis(20)).await;
        }
        Err(format!("{what} within {} s", within.as_secs()))
    }
}

fn index_of(id: &str) -> usize {
    IDS.iter().position(|i| *i == id).unwrap_or(0)
}

pub async fn demo(args: &DemoArgs) -> i32 {
    match run_demo(args).await {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("pilot-election demo: {e}");
            EXIT_REFUSED
        }
    }
}

async fn run_demo(args: &DemoArgs) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let dir = std::env::temp_dir().join(format!("pilot-election-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let base = args.base_port;
    let ports = [base, base + 1, base + 2];
    let mut d = Demo {
        exe,
        dir: dir.clone(),
        ports,
        children: [None, None, None],
        client: reqwest::Client::builder()
            .timeout(Duration::from_millis(500))
            .build()
            .map_err(|e| e.to_string())?,
        start: crate::clock::now(),
        pilot: None,
    };
    let over = match args.transport {
        TransportKind::Http => "the built-in http transport".to_string(),
        TransportKind::Pilot => {
            let pilotctl = args.pilotctl.clone().unwrap_or_else(default_pilotctl);
            let net = PilotNet::start(&d.exe, &dir, pilotctl).await;
            let net = match net {
                Ok(net) => net,
                Err(e) => {
                    remove_dir(&dir);
                    return Err(e);
                }
            };
            let text = format!(
                "the real pilotctl ({}) over an emulated Pilot network (broker n4)",
                net.pilotctl.display()
            );
            d.pilot = Some(net);
            text
        }
    };
    println!(
        "pilot-election demo: 3 nodes on 127.0.0.1 ports {}-{} over {over}",
        ports[0], ports[2]
    );
    println!("  started with --allow-unauthenticated: anyone on this machine may move leadership (demo only)");
    println!("  logs and data in {}", dir.display());
    let result = timeline(&mut d, args).await;
    for c in d.children.iter_mut().flatten() {
        let _ = c.start_kill();
        let _ = c.wait().await;
    }
    if let Some(net) = d.pilot.as_mut() {
        let _ = net.child.start_kill();
        let _ = net.child.wait().await;
    }
    remove_dir(&dir);
    result
}

fn remove_dir(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

async fn timeline(d: &mut Demo, args: &DemoArgs) -> Result<(), String> {
    for (i, id) in IDS.iter().enumerate() {
        d.spawn(i).map_err(|e| format!("cannot start {id}: {e}"))?;
    }
    d.say("started node-a, node-b, node-c");
    let t0 = crate::clock::now();
    let (first, term) = d
        .agreed(&[0, 1, 2], WAIT, "no leader agreed", |_, _| true)
        .await?;
    d.say(&format!(
        "first leader: {first} in term {term}, agreed by all 3 after {} ms",
        crate::clock::since(t0).as_millis()
    ));

    let li = index_of(&first);
    if let Some(c) = d.children[li].as_mut() {
        let _ = c.start_kill();
        let _ = c.wait().await;
    }
    let crashed = crate::clock::now();
    d.say(&format!("{first} crashed (kill -9)"));
    let survivors: Vec<usize> = (0..3).filter(|i| *i != li).collect();
    let (second, term2) = d
        .agreed(
            &survivors,
            WAIT,
            "the survivors did not agree on a new leader",
            |l, t| l != first && t > term,
        )
        .await?;
    d.say(&format!(
        "failover: {second} leads in term {term2}, {} ms after the crash",
        crate::clock::since(crashed).as_millis()
    ));

    d.spawn(li)
        .map_err(|e| format!("cannot restart {first}: {e}"))?;
    let (again, term3) = d
        .agreed(
            &[0, 1, 2],
            WAIT,
            "the restarted node did not rejoin",
            |l, _| l == second,
        )
        .await?;
    d.say(&format!(
        "{first} restarted and follows {again} in term {term3} (no new term)"
    ));

    let si = survivors
        .iter()
        .copied()
        .find(|i| IDS[*i] != second)
        .unwrap_or(li);
    let successor = IDS[si];
    let asked = crate::clock::now();
    let deadline = asked + Duration::from_secs(10);
    loop {
        let resp = d
            .client
            .post(format!("{}/step-down", d.url(index_of(&second))))
            .json(&serde_json::json!({"successor": successor}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if resp.status().as_u16() == 202 {
            break;
        }
        if crate::clock::now() > deadline {
            return Err(format!(
                "step-down refused: {}",
                resp.text().await.unwrap_or_default()
            ));
        }
        sleep(Duration::from_millis(200)).await;
    }
    let asked = crate::clock::now();
    d.say(&format!(
        "asked {second} to step down in favour of {successor}"
    ));
    let (third, term4) = d
        .agreed(
            &[0, 1, 2],
            WAIT,
            "the successor did not take over",
            |l, t| l == successor && t > term3,
        )
        .await?;
    d.say(&format!(
        "handover: {third} leads in term {term4}, {} ms after the step-down",
        crate::clock::since(asked).as_millis()
    ));
    match args.duration {
        Some(dur) => {
            d.say(&format!("serving for {} s more", dur.as_secs_f64()));
            tokio::select! {
                _ = sleep(dur) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        None => {
            d.say(&format!(
                "serving until Ctrl-C; try: curl -s {}/leader",
                d.url(0)
            ));
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    d.say("stopping");
    Ok(())
}
