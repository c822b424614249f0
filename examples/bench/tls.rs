//! `bench -- tls`: the cost of TLS, side by side in one run. A 3-node cluster over https with
//! mutual TLS between peers, and `examples/bare-axum` behind the very rustls configuration the
//! node builds from the same files (`pilot_election::tls`):
//!
//! 1. `GET /leader` over TLS with keep-alive (wrk, which presents no client certificate: both
//!    servers run with `--tls-anonymous-reads`, the set-up of a dashboard or a probe);
//! 2. new connections per second, each a full handshake with a client certificate (no session
//!    resumption), one `GET /leader` and a close;
//! 3. the leader's `GET /leader` (wrk, keep-alive) quiet and under a flood of 1000 connections
//!    that each handshake, ask once and close, again and again; after it, all three nodes must
//!    still name the same leader in the same term.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::Value;
use support::agree::Named;
use support::certs::{Ca, Leaf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::{wrk, Opts, Wrk};
use crate::app::{self, free_port, node_args, App, TempDir, TOKEN};

/// Handshaking clients of the throughput measure (as many as wrk's connections).
const CONNECTORS: usize = 32;
/// Clients of the handshake flood.
const FLOOD: usize = 1000;
/// How long the flood runs before wrk starts, so that wrk sees it at full strength.
const FLOOD_WARMUP: Duration = Duration::from_secs(3);

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a certificate");
    path
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The files one server is started with.
struct Files {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Files {
    fn new(dir: &Path, ca: &Ca, id: &str) -> Files {
        let leaf = ca.leaf(id, false);
        Files {
            ca: write(dir, "ca.pem", &ca.pem()),
            cert: write(dir, &format!("{id}.pem"), &leaf.cert),
            key: write(dir, &format!("{id}.key"), &leaf.key),
        }
    }

    /// The server flags both the node and bare-axum take.
    fn server_args(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            s(&self.cert),
            "--tls-key".into(),
            s(&self.key),
            "--tls-client-ca".into(),
            s(&self.ca),
            "--tls-anonymous-reads".into(),
        ]
    }
}

/// A client configuration that trusts `ca`, presents `leaf` and never resumes a session, so
/// that every connection is a full handshake.
fn connector(ca: &Ca, leaf: &Leaf) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).expect("CA"))
        .expect("root");
    let chain = vec![CertificateDer::from_pem_slice(leaf.cert.as_bytes()).expect("cert")];
    let key = PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).expect("key");
    let mut config = ClientConfig::builder_with_provider(pilot_election::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client cert");
    config.resumption = rustls::client::Resumption::disabled();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// One new connection: a full handshake, `GET /leader`, the whole answer, closed. Whether the
/// answer was a 200.
async fn one_exchange(tls: &TlsConnector, port: u16) -> Result<(), String> {
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut stream = tls
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    stream
        .write_all(b"GET /leader HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    if answer.starts_with(b"HTTP/1.1 200") {
        Ok(())
    } else {
        Err(format!(
            "answer: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(60)])
        ))
    }
}

/// Counts of a handshaking load: answered, and each way an exchange failed.
#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    /// The TCP connect failed (the accept queue was full).
    connect: AtomicU64,
    /// The handshake failed or the connection was closed during it (evicted at the cap).
    handshake: AtomicU64,
    /// Closed or answered with something other than 200 after the handshake.
    answer: AtomicU64,
    /// No answer within 5 s.
    timed_out: AtomicU64,
}

impl Counts {
    fn failed(&self) -> u64 {
        [
            &self.connect,
            &self.handshake,
            &self.answer,
            &self.timed_out,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    fn failures(&self) -> String {
        format!(
            "connect {}, handshake {}, answer {}, timed out {}",
            self.connect.load(Ordering::Relaxed),
            self.handshake.load(Ordering::Relaxed),
            self.answer.load(Ordering::Relaxed),
            self.timed_out.load(Ordering::Relaxed)
        )
    }
}

/// `clients` tasks that each open connection after connection until `stop` is set.
fn handshakers(
    clients: usize,
    tls: &TlsConnector,
    port: u16,
    stop: &Arc<AtomicBool>,
    counts: &Arc<Counts>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|_| {
            let (tls, stop, counts) = (tls.clone(), stop.clone(), counts.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let r = tokio::time::timeout(Duration::from_secs(5), one_exchange(&tls, port))
                        .await
                        .unwrap_or_else(|_| Err("timed out".into()));
                    let counter = match r.as_ref().map_err(String::as_str) {
                        Ok(()) => &counts.ok,
                        Err(e) if e.starts_with("connect") => &counts.connect,
                        Err(e) if e.starts_with("handshake") => &counts.handshake,
                        Err(e) if e.starts_with("timed out") => &counts.timed_out,
                        Err(_) => &counts.answer,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

/// New connections per second, each a full handshake, for `secs`.
async fn handshake_rate(tls: &TlsConnector, port: u16, secs: u64) -> (f64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let tasks = handshakers(CONNECTORS, tls, port, &stop, &counts);
    let t0 = pilot_election::clock::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = pilot_election::clock::since(t0).as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    (
        counts.ok.load(Ordering::Relaxed) as f64 / elapsed,
        counts.failed(),
    )
}

fn wrk_async(url: String, secs: u64) -> tokio::task::JoinHandle<Wrk> {
    tokio::task::spawn_blocking(move || wrk(&url, secs))
}

/// What every node names, over TLS with the operator's certificate.
async fn named(client: &reqwest::Client, ports: &[u16]) -> Vec<Named> {
    let ask = |p: u16| async move {
        let v: Value = client
            .get(format!("https://127.0.0.1:{p}/leader"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        Some((v["leader"].as_str()?.to_string(), v["term"].as_u64()?))
    };
    futures_util::future::join_all(ports.iter().map(|p| ask(*p))).await
}

/// The leader and term every node names once they agree, within `within`.
async fn agreed(
    client: &reqwest::Client,
    ports: &[u16],
    within: Duration,
) -> Option<(String, u64)> {
    support::agree::wait(within, || named(client, ports), |_, _| true)
        .await
        .ok()
}

fn line(name: &str, w: &Wrk) -> String {
    format!(
        "{name}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms{}",
        w.rps,
        w.p50_ms,
        w.p99_ms,
        w.trouble()
    )
}

pub async fn tls(o: &Opts) {
    let bare_bin = app::built("examples/bare-axum");
    let ca = Ca::new("pilot-election bench CA");
    let dir = TempDir::new("bench-tls");
    let ports: Vec<(String, u16)> = (1..=3).map(|i| (format!("n{i}"), free_port())).collect();
    let mut nodes = Vec::new();
    for (id, port) in &ports {
        let f = Files::new(&dir.0, &ca, id);
        let data = TempDir::new(id);
        let mut args = node_args(id, *port, &data.0.join("data"), &[], &[]);
        for (pid, pport) in ports.iter().filter(|(p, _)| p != id) {
            args.extend(["--peer".into(), format!("{pid}=https://127.0.0.1:{pport}")]);
        }
        args.extend(f.server_args());
        args.extend([
            "--peer-ca".into(),
            s(&f.ca),
            "--preempt-after".into(),
            "0s".into(),
        ]);
        let mut n = App::new(id, *port, data, args);
        n.env = vec![("PILOT_ELECTION_ADMIN_TOKEN".into(), TOKEN.into())];
        n.start();
        nodes.push(n);
    }
    let operator = ca.leaf("operator", false);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).expect("CA"))
        .identity(
            reqwest::Identity::from_pem(format!("{}\n{}", operator.cert, operator.key).as_bytes())
                .expect("identity"),
        )
        .build()
        .expect("client");
    let node_ports: Vec<u16> = ports.iter().map(|(_, p)| *p).collect();
    let (leader, term) = agreed(&client, &node_ports, Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("no agreed leader over TLS:\n{}", app::logs_of(&nodes)));
    let leader_port = ports
        .iter()
        .find(|(id, _)| *id == leader)
        .expect("leader")
        .1;
    println!("3 nodes over https with mutual TLS between peers; leader {leader}, term {term}");

    let bare_port = free_port();
    let bare_files = Files::new(&dir.0, &ca, "bare");
    let mut bare = std::process::Command::new(&bare_bin)
        .arg(format!("127.0.0.1:{bare_port}"))
        .args(bare_files.server_args())
        .spawn()
        .expect("bare-axum");
    let tls = connector(&ca, &operator);
    let up = app::wait_for(Duration::from_secs(10), || async {
        one_exchange(&tls, bare_port).await.ok()
    })
    .await;
    assert!(up.is_some(), "bare-axum did not come up over TLS");

    // 1. Keep-alive throughput.
    let urls = [
        ("node", format!("https://127.0.0.1:{leader_port}/leader")),
        ("bare", format!("https://127.0.0.1:{bare_port}/leader")),
    ];
    let mut rps = [Vec::new(), Vec::new()];
    for round in 1..=o.rounds {
        for (i, (name, url)) in urls.iter().enumerate() {
            let w = wrk_async(url.clone(), o.secs).await.expect("wrk");
            println!("round {round} keep-alive {}", line(name, &w));
            rps[i].push(w.rps);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (node_rps, bare_rps) = (mean(&rps[0]), mean(&rps[1]));
    println!(
        "GET /leader over TLS, keep-alive: node {node_rps:.0} req/s, bare axum {bare_rps:.0} req/s, \
         ratio {:.0}% (wrk -t2 -c32, {}s x {} rounds each)",
        node_rps / bare_rps * 100.0,
        o.secs,
        o.rounds
    );

    // 2. Full handshakes per second.
    let mut hs = [Vec::new(), Vec::new()];
    for round in 1..=o.rounds {
        for (i, (name, port)) in [("node", leader_port), ("bare", bare_port)]
            .into_iter()
            .enumerate()
        {
            let (rate, failed) = handshake_rate(&tls, port, o.secs).await;
            println!(
                "round {round} new connections {name}: {rate:.0}/s (full handshake with a client \
                 certificate, GET /leader, close; {CONNECTORS} clients), {failed} failed"
            );
            hs[i].push(rate);
        }
    }
    println!(
        "New TLS connections: node {:.0}/s, bare axum {:.0}/s, ratio {:.0}%",
        mean(&hs[0]),
        mean(&hs[1]),
        mean(&hs[0]) / mean(&hs[1]) * 100.0
    );
    let _ = bare.kill();
    let _ = bare.wait();

    // 3. The leader under a handshake flood.
    let url = urls[0].1.clone();
    let quiet = wrk_async(url.clone(), o.secs).await.expect("wrk");
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let flood = handshakers(FLOOD, &tls, leader_port, &stop, &counts);
    let t0 = pilot_election::clock::now();
    tokio::time::sleep(FLOOD_WARMUP).await;
    let loaded = wrk_async(url, o.secs).await.expect("wrk");
    stop.store(true, Ordering::Relaxed);
    let elapsed = pilot_election::clock::since(t0).as_secs_f64();
    for t in flood {
        let _ = t.await;
    }
    println!("leader quiet:            {}", line("GET /leader", &quiet));
    println!("under a handshake flood: {}", line("GET /leader", &loaded));
    println!(
        "flood: {FLOOD} clients, {} exchanges completed ({:.0}/s), {} failed ({}), over {elapsed:.0}s",
        counts.ok.load(Ordering::Relaxed),
        counts.ok.load(Ordering::Relaxed) as f64 / elapsed,
        counts.failed(),
        counts.failures()
    );
    let metrics = client
        .get(format!("https://127.0.0.1:{leader_port}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    let series = |name: &str| app::metric(&metrics, name);
    println!(
        "leader: {:.0} connections evicted at the cap, {:.0} refused TLS handshakes, {:.0} header timeouts",
        series("pilot_election_connections_evicted_total{pool=\"api\"}")
            + series("pilot_election_connections_evicted_total{pool=\"peer\"}"),
        series("pilot_election_refused_total{reason=\"tls_handshake\"}"),
        series("pilot_election_connections_timed_out_total{phase=\"header\"}")
    );
    let after = agreed(&client, &node_ports, Duration::from_secs(10)).await;
    assert_eq!(
        after,
        Some((leader.clone(), term)),
        "the flood changed the leader or the term\n{}",
        app::logs_of(&nodes)
    );
    println!("after the flood all three still name {leader} in term {term}");
}
