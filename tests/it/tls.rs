//! TLS with real processes: a 3-node cluster over https with mutual TLS (election, kill -9
//! failover, a step-down, a rolling restart), the connections it refuses (no client certificate, another CA's, an expired one, plain HTTP, a handshake never
//! finished), the CLI against it, certificate rotation by SIGHUP under polling, and the bad
//! flags, each with its one-line exit-64 message. Certificates are made in the run (`support::certs`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::app::{bin, free_port, node_args, serial, wait_for, App, TempDir, TOKEN};
use crate::certs::{Ca, Leaf};

const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// Slack for a loaded machine on top of a deadline the node keeps.
const MARGIN: Duration = Duration::from_secs(6);
const FIRST_LEADER: Duration = Duration::from_secs(30);

/// Writes `text` to `dir/name` (through a rename, as a deployment tool would) and returns the path.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, &path).expect("rename");
    path
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The files of one node: its certificate and key, and the CA (the same for clients and peers).
struct Files {
    dir: TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Files {
    /// The flags that serve these files with client certificates required.
    fn server_args(&self) -> Vec<String> {
        [
            "--tls-cert",
            &s(&self.cert),
            "--tls-key",
            &s(&self.key),
            "--tls-client-ca",
            &s(&self.ca),
        ]
        .map(String::from)
        .to_vec()
    }
}

/// The files of member `id`, its certificate issued for `name` (its id, unless a test gives it
/// another member's).
fn files_named(ca: &Ca, id: &str, name: &str) -> Files {
    let dir = TempDir::new(&format!("tls-{id}"));
    let leaf = ca.leaf(name, false);
    Files {
        ca: write(&dir.0, "ca.pem", &ca.pem()),
        cert: write(&dir.0, "cert.pem", &leaf.cert),
        key: write(&dir.0, "key.pem", &leaf.key),
        dir,
    }
}

/// A TLS cluster: nodes `n1..n3` on https peers with mutual TLS, and each node's files.
struct TlsCluster {
    nodes: Vec<App>,
    files: Vec<Files>,
}

impl TlsCluster {
    fn start(ca: &Ca) -> TlsCluster {
        TlsCluster::start_named(ca, ["n1", "n2", "n3"])
    }

    /// Nodes n1..n3 whose certificates are issued for `names` (their ids, unless a test
    /// gives one another's).
    fn start_named(ca: &Ca, names: [&str; 3]) -> TlsCluster {
        let ports: Vec<(String, u16)> = (1..=3).map(|i| (format!("n{i}"), free_port())).collect();
        let mut nodes = Vec::new();
        let mut files = Vec::new();
        for ((id, port), name) in ports.iter().zip(names) {
            let f = files_named(ca, id, name);
            let dir = TempDir::new(id);
            let mut args = node_args(id, *port, &dir.0.join("data"), &[], &[]);
            for (pid, pport) in ports.iter().filter(|(p, _)| p != id) {
                args.push("--peer".into());
                args.push(format!("{pid}=https://127.0.0.1:{pport}"));
            }
            args.extend(f.server_args());
            args.extend(["--peer-ca", &s(&f.ca), "--header-timeout", "2s"].map(String::from));
            let mut n = App::new(id, *port, dir, args);
            n.env = vec![("PILOT_ELECTION_ADMIN_TOKEN".into(), TOKEN.into())];
            n.start();
            nodes.push(n);
            files.push(f);
        }
        TlsCluster { nodes, files }
    }

    fn url(&self, i: usize) -> String {
        format!("https://127.0.0.1:{}", self.nodes[i].port)
    }

    fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("==== {}\n{}", n.id, n.log()))
            .collect()
    }
}

/// A client that trusts `ca` and presents `identity`, opening a new connection (and so a full
/// handshake) for every request.
fn client(ca: &str, identity: Option<&Leaf>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .pool_max_idle_per_host(0)
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA"));
    if let Some(leaf) = identity {
        let pem = format!("{}\n{}", leaf.cert, leaf.key);
        b = b.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"));
    }
    b.build().expect("client")
}

async fn leader_at(client: &reqwest::Client, url: &str) -> Result<(String, u64), String> {
    let resp = client
        .get(format!("{url}/leader"))
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let v: Value = resp.json().await.map_err(|e| e.to_string())?;
    match (v["leader"].as_str(), v["term"].as_u64()) {
        (Some(l), Some(t)) => Ok((l.to_string(), t)),
        _ => Err(format!("no leader: {v}")),
    }
}

/// Waits until the nodes `which` all name one leader accepted by `accept`.
async fn agreed(
    c: &TlsCluster,
    client: &reqwest::Client,
    which: &[usize],
    within: Duration,
    accept: impl Fn(&str, u64) -> bool,
) -> (String, u64) {
    let ask = || async {
        let mut named = Vec::new();
        for &i in which {
            named.push(leader_at(client, &c.url(i)).await.ok());
        }
        named
    };
    crate::agree::wait(within, ask, accept)
        .await
        .unwrap_or_else(|last| panic!("no agreed leader within {within:?}: {last:?}\n{}", c.logs()))
}

/// Opens a TCP connection and waits for the node to close it; how long that took.
async fn closed_within(mut stream: TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(within, read).await.ok()?;
    Some(got)
}

fn refusals(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.contains("tls_handshake") && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutual_tls_cluster_elects_refuses_strangers_and_fails_over() {
    let _serial = serial().await;
    let ca = Ca::new("pilot-election test CA");
    let mut c = TlsCluster::start(&ca);
    let ca_pem = ca.pem();
    let operator = ca.leaf("operator", false);
    let good = client(&ca_pem, Some(&operator));
    let (leader, term) = agreed(&c, &good, &[0, 1, 2], FIRST_LEADER, |_, _| true).await;

    // Without a client certificate, with one of another CA, with an expired one: refused.
    let anonymous = client(&ca_pem, None);
    let other_ca = Ca::new("another CA");
    let stranger = client(&ca_pem, Some(&other_ca.leaf("stranger", false)));
    let expired = client(&ca_pem, Some(&ca.leaf("expired", true)));
    for (who, cl) in [
        ("no certificate", &anonymous),
        ("another CA's", &stranger),
        ("expired", &expired),
    ] {
        let r = leader_at(cl, &c.url(0)).await;
        assert!(
            r.is_err(),
            "a client with {who} certificate was served: {r:?}"
        );
    }

    // Plain HTTP to the TLS port: no HTTP answer, the connection is closed.
    let mut plain = TcpStream::connect(("127.0.0.1", c.nodes[0].port))
        .await
        .expect("connect");
    plain
        .write_all(b"GET /leader HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let answer = closed_within(plain, MARGIN)
        .await
        .expect("plain HTTP is closed");
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plain HTTP got an HTTP answer: {}",
        String::from_utf8_lossy(&answer)
    );

    // A client that starts a handshake and never finishes it is dropped by the header timeout.
    let started = pilot_election::clock::now();
    let mut slow = TcpStream::connect(("127.0.0.1", c.nodes[1].port))
        .await
        .expect("connect");
    slow.write_all(&[0x16, 0x03, 0x01, 0x00, 0xc8, 0x01])
        .await
        .expect("write");
    let silent = TcpStream::connect(("127.0.0.1", c.nodes[1].port))
        .await
        .expect("connect");
    for (what, stream) in [("a half handshake", slow), ("a silent connection", silent)] {
        assert!(
            closed_within(stream, HEADER_TIMEOUT + MARGIN)
                .await
                .is_some(),
            "{what} was not closed within the header timeout"
        );
    }
    let took = pilot_election::clock::since(started);
    assert!(
        took >= HEADER_TIMEOUT - Duration::from_millis(100),
        "closed before the header timeout: {took:?}"
    );

    // The refusals are counted and logged; with a certificate the node answers.
    let metrics = good
        .get(format!("{}/metrics", c.url(0)))
        .send()
        .await
        .expect("metrics over TLS")
        .text()
        .await
        .expect("text");
    assert!(refusals(&metrics) >= 4.0, "refusals counted:\n{metrics}");
    assert!(
        c.nodes[0].log().contains("TLS handshake refused"),
        "refusals logged:\n{}",
        c.nodes[0].log()
    );
    // The plain HTTP one is told for what it usually is (from the type of rustls's error).
    assert!(
        c.nodes[0]
            .log()
            .contains("not TLS (plain HTTP to the TLS port?)"),
        "plain HTTP named:\n{}",
        c.nodes[0].log()
    );

    // The CLI and the healthcheck, with --ca and a client certificate; without one it cannot.
    let dir = TempDir::new("tls-cli");
    let ca_file = write(&dir.0, "ca.pem", &ca_pem);
    let cert = write(&dir.0, "op.pem", &operator.cert);
    let key = write(&dir.0, "op.key", &operator.key);
    let cli = |cmd: &str, with_cert: bool| {
        let mut args = vec![
            cmd.to_string(),
            "--url".into(),
            c.url(2),
            "--ca".into(),
            s(&ca_file),
        ];
        if with_cert {
            args.extend(["--cert".into(), s(&cert), "--key".into(), s(&key)]);
        }
        std::process::Command::new(bin())
            .args(&args)
            .output()
            .expect("run the CLI")
    };
    for cmd in ["leader", "healthcheck", "status"] {
        let o = cli(cmd, true);
        assert_eq!(o.status.code(), Some(0), "{cmd}: {o:?}");
    }
    let o = cli("leader", false);
    assert_eq!(
        o.status.code(),
        Some(2),
        "leader without a certificate: {o:?}"
    );
    let env = std::process::Command::new(bin())
        .args(["leader", "--url", &c.url(2)])
        .env("PILOT_ELECTION_CA", &ca_file)
        .env("PILOT_ELECTION_CLIENT_CERT", &cert)
        .env("PILOT_ELECTION_CLIENT_KEY", &key)
        .output()
        .expect("run the CLI");
    assert_eq!(env.status.code(), Some(0), "the env twins: {env:?}");

    // None of it changed the term.
    let now = agreed(&c, &good, &[0, 1, 2], Duration::from_secs(10), |_, _| true).await;
    assert_eq!(
        now,
        (leader.clone(), term),
        "a refusal changed the term\n{}",
        c.logs()
    );

    // kill -9 the leader: the other two elect over https.
    let li = c.nodes.iter().position(|n| n.id == leader).expect("leader");
    c.nodes[li].kill9();
    let rest: Vec<usize> = (0..3).filter(|&i| i != li).collect();
    let (next, next_term) = agreed(&c, &good, &rest, FIRST_LEADER, |l, t| {
        l != leader && t > term
    })
    .await;
    assert_ne!(next, leader);
    assert!(next_term > term);

    // The killed node comes back, and a step-down over TLS hands leadership back to it.
    c.nodes[li].start();
    tls_ready(&c, &good, li).await;
    let ni = c.nodes.iter().position(|n| n.id == next).expect("next");
    // Ready is not yet eligible: the leader accepts the successor once its adverts show that
    // it hears the leader, so the request is repeated while it answers 422
    // successor_ineligible, as an operator would.
    let step_down = format!("{}/step-down", c.url(ni));
    let last = std::sync::Mutex::new(String::new());
    let accepted = wait_for(Duration::from_secs(10), || async {
        let r = good
            .post(&step_down)
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({ "successor": leader }))
            .send()
            .await
            .expect("step-down over TLS");
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        if status == 202 {
            return Some(());
        }
        assert!(
            status == 422 && body.contains("successor_ineligible"),
            "step-down over TLS answered {status}: {body}"
        );
        *last.lock().unwrap() = body;
        None
    })
    .await;
    assert!(
        accepted.is_some(),
        "step-down to {leader} kept being refused: {}",
        last.into_inner().unwrap()
    );
    let (back, back_term) = agreed(&c, &good, &[0, 1, 2], Duration::from_secs(10), |l, t| {
        l == leader && t > next_term
    })
    .await;

    // A rolling restart over TLS, one node at a time, each waited for with /readyz.
    for i in 0..3 {
        c.nodes[i].sigterm();
        c.nodes[i].wait_exit(Duration::from_secs(15)).await;
        c.nodes[i].start();
        tls_ready(&c, &good, i).await;
    }
    let (_, last_term) = agreed(&c, &good, &[0, 1, 2], FIRST_LEADER, |_, t| t >= back_term).await;
    eprintln!("over mutual TLS: {leader} -> {next} -> {back}; term {term} -> {last_term}");
    drop(c.files);
}

/// Waits until node `i` answers 200 on `/readyz` over TLS.
async fn tls_ready(c: &TlsCluster, client: &reqwest::Client, i: usize) {
    let url = format!("{}/readyz", c.url(i));
    let ok = wait_for(FIRST_LEADER, || async {
        let r = client.get(&url).send().await.ok()?;
        (r.status().as_u16() == 200).then_some(())
    })
    .await;
    assert!(ok.is_some(), "node {i} never became ready\n{}", c.logs());
}

/// The served leaf certificate of `port`, read with a TLS handshake that presents `identity`.
async fn served_certificate(port: u16, ca_pem: &str, identity: &Leaf) -> Option<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).ok()?)
        .ok()?;
    let chain = vec![CertificateDer::from_pem_slice(identity.cert.as_bytes()).ok()?];
    let key = PrivateKeyDer::from_pem_slice(identity.key.as_bytes()).ok()?;
    let config = rustls::ClientConfig::builder_with_provider(pilot_election::tls::provider())
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .ok()?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let name = ServerName::try_from("127.0.0.1").ok()?.to_owned();
    let tls = tokio::time::timeout(Duration::from_secs(3), connector.connect(name, tcp))
        .await
        .ok()?
        .ok()?;
    let (_, session) = tls.get_ref();
    Some(session.peer_certificates()?.first()?.to_vec())
}

fn der_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("PEM")
        .to_vec()
}

fn sighup(app: &App) {
    let pid = app.child.as_ref().expect("running").id();
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -HUP {pid}");
}

/// Over mutual TLS a peer is known by its certificate: n3's names n1, so what n3 sends is
/// refused (403 `wrong_certificate`, counted) and never counts; n3 can still follow the leader
/// of the other two. An operator's certificate cannot speak for a member either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_certificate_names_another_member_is_refused() {
    let _serial = serial().await;
    let ca = Ca::new("pilot-election test CA");
    let c = TlsCluster::start_named(&ca, ["n1", "n2", "n1"]);
    let ca_pem = ca.pem();
    let operator = ca.leaf("operator", false);
    let good = client(&ca_pem, Some(&operator));
    let (leader, _) = agreed(&c, &good, &[0, 1], FIRST_LEADER, |_, _| true).await;
    assert_ne!(leader, "n3", "a node whose messages are refused led");
    let counted = wait_for(Duration::from_secs(10), || async {
        let text = good
            .get(format!("{}/metrics", c.url(0)))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let n: f64 = text
            .lines()
            .filter(|l| l.contains("outcome=\"wrong_certificate\"") && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        (n > 0.0).then_some(n)
    })
    .await;
    assert!(
        counted.is_some(),
        "n3's messages were not refused\n{}",
        c.logs()
    );
    let status: Value = good
        .get(format!("{}/status", c.url(0)))
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("json");
    let n3 = status["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["id"] == "n3"))
        .expect("n3 listed");
    assert_eq!(n3["last_seen_ms"], Value::Null, "n3 was heard: {n3}");
    // The operator's certificate names "operator": it cannot post as n2.
    use pilot_election::election::{Advert, Announced, Body, Candidacy, Message, Timings};
    let forged = Message {
        term: 99,
        seq: 1,
        members: "00000000".into(),
        timings: Some(Announced::of(&Timings::default())),
        ..Message::new(
            "it".into(),
            "n2".into(),
            Body::Presence {
                advert: Advert {
                    priority: 1,
                    candidacy: Candidacy::Eligible,
                    hears: Vec::new(),
                    member_ids: Vec::new(),
                    flapped: false,
                    unhealthy: false,
                },
            },
        )
    }
    .to_json();
    let resp = good
        .post(format!("{}/peer/messages", c.url(0)))
        .header("content-type", "application/json")
        .body(forged)
        .send()
        .await
        .expect("post");
    let code = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    assert_eq!(
        (code, body["error"].as_str()),
        (403, Some("wrong_certificate")),
        "{body}"
    );
}

/// One started member `solo` serving mutual TLS with a certificate of `ca`, with `extra`
/// arguments: the node, its `https://` URL and its files (kept while it runs).
fn solo(ca: &Ca, extra: &[&str]) -> (App, String, Files) {
    let f = files_named(ca, "solo", "solo");
    let port = free_port();
    let dir = TempDir::new("solo");
    let mut args = node_args("solo", port, &dir.0.join("data"), &[], &[]);
    args.extend(f.server_args());
    args.extend(extra.iter().map(|a| a.to_string()));
    let mut node = App::new("solo", port, dir, args);
    node.start();
    (node, format!("https://127.0.0.1:{port}"), f)
}

/// `--tls-anonymous-reads`: client certificates per route. Without one a connection may read
/// (a load balancer's health check, a dashboard), and everything else is refused before any
/// handler runs; with a bad one the handshake still fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_connections_may_read_and_nothing_else() {
    let _serial = serial().await;
    let ca = Ca::new("pilot-election test CA");
    let (mut node, url, _files) = solo(&ca, &["--tls-anonymous-reads"]);
    let ca_pem = ca.pem();
    let anonymous = client(&ca_pem, None);
    let led = wait_for(FIRST_LEADER, || async {
        leader_at(&anonymous, &url).await.ok()
    })
    .await;
    assert!(
        led.is_some(),
        "no leader read without a certificate\n{}",
        node.log()
    );
    for path in ["/role/leader", "/metrics", "/status"] {
        let r = anonymous
            .get(format!("{url}{path}"))
            .send()
            .await
            .expect("read");
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
    let operator = ca.leaf("operator", false);
    let certified = client(&ca_pem, Some(&operator));
    for (path, body) in [
        ("/step-down", "{}"),
        ("/pause", "{}"),
        ("/peer/messages", "{}"),
    ] {
        let post = |c: &reqwest::Client| {
            c.post(format!("{url}{path}"))
                .header("content-type", "application/json")
                .body(body)
                .send()
        };
        let r = post(&anonymous).await.expect("post");
        let code = r.status().as_u16();
        let answer: Value = r.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (code, answer["error"].as_str()),
            (401, Some("client_certificate_required")),
            "{path}: {answer}"
        );
        // With a certificate the same request reaches the route (which refuses it for its own
        // reasons: no admin token configured, a malformed message).
        let r = post(&certified).await.expect("post");
        let answer: Value = r.json().await.unwrap_or(Value::Null);
        assert_ne!(
            answer["error"].as_str(),
            Some("client_certificate_required"),
            "{path}"
        );
    }
    let other = Ca::new("another CA").leaf("intruder", false);
    let wrong = client(&ca_pem, Some(&other));
    assert!(
        wrong.get(format!("{url}/leader")).send().await.is_err(),
        "a certificate of another CA was let in"
    );
    node.kill9();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_on_sighup_without_a_failed_poll_or_a_new_term() {
    let _serial = serial().await;
    let ca = Ca::new("pilot-election rotation CA");
    let c = TlsCluster::start(&ca);
    let ca_pem = ca.pem();
    let operator = ca.leaf("operator", false);
    let good = client(&ca_pem, Some(&operator));
    let (leader, term) = agreed(&c, &good, &[0, 1, 2], FIRST_LEADER, |_, _| true).await;

    // A client polls every node's /leader, a new connection each time, throughout.
    let stop = tokio_util::sync::CancellationToken::new();
    let polls = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let poller = {
        let (stop, polls, failures, good) =
            (stop.clone(), polls.clone(), failures.clone(), good.clone());
        let urls: Vec<String> = (0..3).map(|i| c.url(i)).collect();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                for u in &urls {
                    match leader_at(&good, u).await {
                        Ok((l, t)) if t == term => {
                            let _ = l;
                        }
                        other => failures.lock().unwrap().push(format!("{u}: {other:?}")),
                    }
                    polls.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let mut rotated = Vec::new();
    for (i, n) in c.nodes.iter().enumerate() {
        let f = &c.files[i];
        let before = served_certificate(n.port, &ca_pem, &operator)
            .await
            .expect("the first certificate");
        assert_eq!(before, der_of(&std::fs::read_to_string(&f.cert).unwrap()));

        // A bad new key (not the certificate's): refused, the old pair stays in use.
        let new = ca.leaf(&format!("{}-rotated", n.id), false);
        write(&f.dir.0, "key.pem", &new.key);
        sighup(n);
        let refused = wait_for(Duration::from_secs(10), || async {
            n.log().contains("TLS reload refused").then_some(())
        })
        .await;
        assert!(
            refused.is_some(),
            "a mismatched key was not refused:\n{}",
            n.log()
        );
        assert_eq!(
            served_certificate(n.port, &ca_pem, &operator)
                .await
                .as_deref(),
            Some(before.as_slice()),
            "the old certificate stays after a refused reload"
        );

        // The matching certificate: after SIGHUP, new handshakes get it.
        write(&f.dir.0, "cert.pem", &new.cert);
        sighup(n);
        let want = der_of(&new.cert);
        let served = wait_for(Duration::from_secs(10), || async {
            (served_certificate(n.port, &ca_pem, &operator).await? == want).then_some(())
        })
        .await;
        assert!(
            served.is_some(),
            "{} does not serve its new certificate:\n{}",
            n.id,
            n.log()
        );
        // The log line follows the swap, so a handshake can see the new certificate first.
        let logged = wait_for(Duration::from_secs(10), || async {
            n.log()
                .contains("TLS certificates and keys reloaded")
                .then_some(())
        })
        .await;
        assert!(
            logged.is_some(),
            "no reload logged:
{}",
            n.log()
        );
        rotated.push(n.id.clone());
    }
    // Peers keep reaching each other with the new certificates (new peer connections included).
    let polled_before = polls.load(Ordering::Relaxed);
    let more = wait_for(Duration::from_secs(20), || async {
        (polls.load(Ordering::Relaxed) >= polled_before + 30).then_some(())
    })
    .await;
    assert!(more.is_some(), "the poller stalled");
    stop.cancel();
    poller.await.expect("poller");
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} of {} polls failed: {failures:?}\n{}",
        failures.len(),
        polls.load(Ordering::Relaxed),
        c.logs()
    );
    let now = agreed(&c, &good, &[0, 1, 2], Duration::from_secs(10), |_, _| true).await;
    assert_eq!(
        now,
        (leader, term),
        "rotation changed the term\n{}",
        c.logs()
    );
    assert_eq!(rotated.len(), 3);
}

#[test]
fn bad_tls_flags_exit_64_with_one_line() {
    let ca = Ca::new("flags CA");
    let dir = TempDir::new("tls-flags");
    let a = ca.leaf("a", false);
    let b = ca.leaf("b", false);
    let cert = s(&write(&dir.0, "a.pem", &a.cert));
    let key = s(&write(&dir.0, "a.key", &a.key));
    let other_key = s(&write(&dir.0, "b.key", &b.key));
    let junk = s(&write(&dir.0, "junk.pem", "not a certificate\n"));
    let missing = s(&dir.0.join("missing.pem"));
    let ca_file = s(&write(&dir.0, "ca.pem", &ca.pem()));
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let https_peer = format!("b=https://127.0.0.1:{}", free_port());
    let base = ["run", "--node-id", "a", "--listen", listen.as_str()];
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--tls-cert", &cert],
            "--tls-cert needs --tls-key".into(),
        ),
        (vec!["--tls-key", &key], "--tls-key needs --tls-cert".into()),
        (
            vec!["--tls-cert", &missing, "--tls-key", &key],
            format!("--tls-cert {missing}: cannot read it"),
        ),
        (
            vec!["--tls-cert", &cert, "--tls-key", &missing],
            format!("--tls-key {missing}: cannot read it"),
        ),
        (
            vec!["--tls-cert", &junk, "--tls-key", &key],
            format!("--tls-cert {junk}: no certificate in it"),
        ),
        (
            vec!["--tls-cert", &cert, "--tls-key", &cert],
            format!("--tls-key {cert}: no private key in it"),
        ),
        (
            vec!["--tls-cert", &cert, "--tls-key", &other_key],
            format!("--tls-key {other_key} does not match the certificate in --tls-cert {cert}"),
        ),
        (
            vec!["--tls-client-ca", &ca_file],
            "--tls-client-ca needs --tls-cert and --tls-key".into(),
        ),
        (
            vec![
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--tls-anonymous-reads",
            ],
            "--tls-anonymous-reads needs --tls-client-ca".into(),
        ),
        (
            vec![
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--tls-client-ca",
                &junk,
            ],
            format!("--tls-client-ca {junk}: no certificate in it"),
        ),
        (
            vec!["--peer", &https_peer],
            format!("--peer {https_peer} is https://: give --peer-ca FILE"),
        ),
        (
            vec!["--peer", &https_peer, "--peer-ca", &missing],
            format!("--peer-ca {missing}: cannot read it"),
        ),
        (
            vec![
                "--peer",
                &https_peer,
                "--peer-ca",
                &ca_file,
                "--peer-cert",
                &cert,
            ],
            "--peer-cert needs --peer-key".into(),
        ),
        (
            vec![
                "--peer",
                &https_peer,
                "--peer-ca",
                &ca_file,
                "--peer-cert",
                &cert,
                "--peer-key",
                &other_key,
            ],
            format!("--peer-key {other_key} does not match the certificate in --peer-cert {cert}"),
        ),
    ];
    for (extra, want) in &cases {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(extra.iter().copied());
        let o = std::process::Command::new(bin())
            .args(&args)
            .env_remove("PILOT_ELECTION_ADMIN_TOKEN")
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.contains(want.as_str()),
            "{args:?}: want {want:?} in {err}"
        );
    }
    // The client commands: a CA file without a certificate is a usage error too.
    let o = std::process::Command::new(bin())
        .args([
            "leader",
            "--url",
            &format!("https://{listen}"),
            "--ca",
            &junk,
        ])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(64), "{o:?}");
}

/// The Rust client (`crates/client`, its default `tls` feature) against a member that requires
/// client certificates: given the CA and a certificate it reads the leader and follows its
/// changes over `https://`; without the certificate, or without the CA, it finds no member it
/// can use and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_reads_and_watches_over_mutual_tls() {
    use futures_util::StreamExt as _;
    use pilot_election_client::{Client, Error};
    let _serial = serial().await;
    let ca = Ca::new("pilot-election test CA");
    let (mut node, url, _files) = solo(&ca, &[]);
    let me = ca.leaf("service", false);
    let identity = format!("{}\n{}", me.cert, me.key);
    let client = Client::builder([url.as_str()])
        .root_certificates_pem(ca.pem())
        .identity_pem(identity.clone())
        .build()
        .expect("a client");
    let led = wait_for(FIRST_LEADER, || async {
        client.leader().await.ok().flatten()
    })
    .await
    .unwrap_or_else(|| panic!("no leader read over TLS\n{}", node.log()));
    assert_eq!(
        (led.id.as_str(), led.answered_by.as_str()),
        ("solo", url.as_str())
    );
    let mut changes = client.watch();
    let first = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("a change within 10 s")
        .expect("the stream goes on");
    assert_eq!((first.leader.as_str(), first.term), ("solo", led.term));
    for (what, b) in [
        (
            "no client certificate",
            Client::builder([url.as_str()]).root_certificates_pem(ca.pem()),
        ),
        (
            "no CA",
            Client::builder([url.as_str()]).identity_pem(identity.clone()),
        ),
    ] {
        let c = b.build().expect("a client");
        assert!(
            matches!(c.leader().await, Err(Error::Unavailable { .. })),
            "{what}: the member was used"
        );
    }
    node.kill9();
}
