//! Connection-level hardening, with real processes held at an open-file limit of 1024: slow,
//! idle and numerous clients are closed, capped or refused, while `GET /leader`, event
//! subscribers and the election carry on.
//!
//! Nothing here asserts on latency: deadlines are generous (a loaded 2-core machine), and what
//! is checked is that answers come, connections close, and no term changes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::app::{
    app, free_port, get_json, leader_of, metrics_text, post_raw, serial, wait_for, wait_up,
    Cluster, TempDir, TOKEN,
};
use crate::cluster::{hand_over, Events};
use crate::flood::{
    closing_times, dripping_body, half_open, open_files_of, post_flood, probe_leader,
    raise_open_files, read_answer, sample, subscribe, Attempt, Post,
};
use crate::peers::{forgeries, key_file};

/// The nodes' open-file limit: the common soft limit, held as a hard one.
const OPEN_FILES: u64 = 1024;
const HEADER_TIMEOUT: Duration = Duration::from_secs(3);
/// Slack on top of a deadline for a loaded machine (the node closes at the deadline; this
/// process may notice later).
const MARGIN: Duration = Duration::from_secs(7);
const FIRST_LEADER: Duration = Duration::from_secs(20);

/// Three nodes at [`OPEN_FILES`], agreed on a leader: the cluster, the leader and its term.
async fn cluster(extra: &[&str]) -> (Cluster, String, u64) {
    raise_our_limit();
    let c = Cluster::start_with_open_files(3, extra, Some(OPEN_FILES));
    let (leader, term) = settled(&c).await;
    (c, leader, term)
}

/// Three nodes at [`OPEN_FILES`] whose peers reach each other on `--peer-listen` addresses.
async fn cluster_with_peer_listeners(extra: &[&str]) -> (Cluster, Vec<u16>, String, u64) {
    raise_our_limit();
    let peer_ports: Vec<(String, u16)> = (1..=3).map(|i| (format!("n{i}"), free_port())).collect();
    let nodes = peer_ports
        .iter()
        .map(|(id, peer_port)| {
            let listen = format!("127.0.0.1:{peer_port}");
            let mut args = extra.to_vec();
            args.extend(["--peer-listen", &listen]);
            // The peers' URLs name their peer listeners.
            let mut n = app(id, free_port(), &peer_ports, &args);
            n.open_files = Some(OPEN_FILES);
            n.start();
            n
        })
        .collect();
    let c = Cluster {
        nodes,
        _token_file: TempDir::new("no-token"),
    };
    let (leader, term) = settled(&c).await;
    (
        c,
        peer_ports.into_iter().map(|p| p.1).collect(),
        leader,
        term,
    )
}

/// The floods need a few thousand sockets of this process.
fn raise_our_limit() {
    let have = raise_open_files();
    assert!(
        have >= 4096,
        "this test process needs a few thousand open files; its hard limit is {have}"
    );
}

/// Waits for a leader, and checks that every node runs (and says it runs) at [`OPEN_FILES`].
async fn settled(c: &Cluster) -> (String, u64) {
    let agreed = c.agreed(&[0, 1, 2], FIRST_LEADER, |_, _| true).await;
    for n in &c.nodes {
        let pid = n.child.as_ref().expect("running").id();
        assert_eq!(
            open_files_of(pid),
            Some((OPEN_FILES, OPEN_FILES)),
            "{} must run at the open-file limit under test",
            n.id
        );
        assert!(
            n.log().contains(&format!("open_files={OPEN_FILES}")),
            "{} logs its open-file limit:\n{}",
            n.id,
            n.log()
        );
    }
    agreed
}

fn addr(c: &Cluster, i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], c.nodes[i].port))
}

/// Every node still names `leader` in `term`: nothing the flood did started an election.
async fn same_leader_and_term(c: &Cluster, leader: &str, term: u64) {
    let (l, t) = c
        .agreed(&[0, 1, 2], Duration::from_secs(10), |_, _| true)
        .await;
    assert_eq!(
        (l.as_str(), t),
        (leader, term),
        "a new term or leader\n{}",
        c.logs()
    );
}

/// The sample `name` of the metrics text `m` is at least `n`.
fn at_least(m: &str, name: &str, n: f64, why: &str) {
    let v = sample(m, name);
    assert!(v >= n, "{why}: {name} is {v}, expected at least {n}\n{m}");
}

fn all_200(probes: &[u16]) {
    assert!(probes.len() >= 3, "too few probes ran: {probes:?}");
    assert!(
        probes.iter().all(|s| *s == 200),
        "GET /leader must keep answering 200: {probes:?}"
    );
}

#[tokio::test]
async fn half_open_connections_are_closed_and_the_leader_keeps_answering() {
    let _serial = serial().await;
    let (c, leader, term) = cluster(&["--header-timeout", "3s"]).await;
    let li = c.index(&leader);
    let url = c.nodes[li].url();
    let acks = r#"pilot_election_messages_received_total{type="ack",outcome="accepted"}"#;
    let acks_before = sample(&metrics_text(&url).await, acks);

    // More half-open connections than the node has descriptors.
    let conns = half_open(addr(&c, li), 1100, 100).await;
    assert_eq!(conns.len(), 1100, "every connection was opened");
    let closing = tokio::spawn(closing_times(conns, HEADER_TIMEOUT + MARGIN));
    // While the last of them are still open: new clients get answers.
    let probes = probe_leader(
        &url,
        Duration::from_millis(200),
        pilot_election::clock::now() + HEADER_TIMEOUT,
    )
    .await;
    let closed = closing.await.expect("closing times");

    all_200(&probes);
    let open = closed.iter().filter(|c| c.is_none()).count();
    assert_eq!(
        open,
        0,
        "{open} half-open connections outlived the header timeout ({HEADER_TIMEOUT:?} + {MARGIN:?})"
    );
    let m = metrics_text(&url).await;
    let timed_out = r#"pilot_election_connections_timed_out_total{phase="header"}"#;
    at_least(&m, timed_out, 1.0, "the header timeout closed some");
    let evicted = r#"pilot_election_connections_evicted_total{pool="api"}"#;
    at_least(
        &m,
        evicted,
        1.0,
        "the cap made room by closing the longest waiting",
    );
    at_least(
        &m,
        acks,
        acks_before + 1.0,
        "the followers' acks kept arriving",
    );
    let (status, ready) = get_json(&format!("{url}/readyz")).await;
    assert_eq!(status, 200, "the leader still reaches a quorum: {ready}");
    same_leader_and_term(&c, &leader, term).await;
}

/// Subscribers attempted in all, and at once.
const ATTEMPTS: usize = 10_000;
const BATCH: usize = 500;
const WATCHERS: usize = 3;

/// How each attempt went, by outcome: `200`, `503 <code>` (with `Retry-After`), ...
fn outcome(a: &Attempt) -> String {
    match a {
        Attempt::Streaming(_) => "200".into(),
        Attempt::Answered {
            status,
            retry_after,
            body,
            ..
        } => {
            let code = serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|v| v["error"].as_str().map(String::from))
                .unwrap_or_else(|| format!("non-JSON body {body:?}"));
            let retry = if retry_after.is_some() {
                ""
            } else {
                " without Retry-After"
            };
            format!("{status} {code}{retry}")
        }
        Attempt::Unanswered => "unanswered".into(),
    }
}

#[tokio::test]
async fn event_subscribers_beyond_the_cap_get_503_and_the_others_keep_receiving() {
    let _serial = serial().await;
    let (c, leader, term) = cluster(&[]).await;
    let li = c.index(&leader);
    let url = c.nodes[li].url();
    let cap = 128; // --max-event-subscribers, by default
    let subscribers = "pilot_election_event_subscribers";

    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let mut w = Events::open(&url).await;
        let first = tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .expect("the current state at once")
            .expect("an event");
        assert_eq!(first["term"], json!(term));
        watchers.push(w);
    }
    let successor = c.nodes[(li + 1) % 3].id.clone();
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for batch in 0..ATTEMPTS / BATCH {
        let attempts = join_all((0..BATCH).map(|_| subscribe(addr(&c, li)))).await;
        let streaming = attempts
            .iter()
            .filter(|a| matches!(a, Attempt::Streaming(_)))
            .count();
        assert!(
            streaming <= cap - WATCHERS,
            "batch {batch}: {streaming} streams beside {WATCHERS} watchers, cap {cap}"
        );
        assert!(
            streaming >= 1,
            "batch {batch}: no stream at all (the slots of earlier batches were not given back)"
        );
        for a in &attempts {
            *tally.entry(outcome(a)).or_default() += 1;
        }
        if batch == ATTEMPTS / BATCH / 2 {
            // A change while the cap is full: the watchers must still hear of it.
            hand_over(&c, &leader, &successor).await;
        }
        drop(attempts);
        let released = wait_for(Duration::from_secs(15), || {
            let url = url.clone();
            async move {
                let n = sample(&metrics_text(&url).await, subscribers);
                (n <= WATCHERS as f64).then_some(())
            }
        })
        .await;
        assert!(
            released.is_some(),
            "batch {batch}: closed streams did not give their slots back"
        );
    }
    eprintln!("{ATTEMPTS} subscriptions attempted: {tally:?}");
    let refused = tally.get("503 too_many_subscribers").copied().unwrap_or(0);
    let unanswered = tally.get("unanswered").copied().unwrap_or(0);
    assert!(
        refused >= ATTEMPTS / 2,
        "the cap answers 503 too_many_subscribers with Retry-After: {tally:?}"
    );
    assert!(
        tally
            .keys()
            .all(|k| ["200", "503 too_many_subscribers", "unanswered"].contains(&k.as_str())),
        "only streams and 503 too_many_subscribers with Retry-After: {tally:?}"
    );
    assert!(
        unanswered <= ATTEMPTS / 100,
        "at most a few attempts closed without an answer: {tally:?}"
    );
    let m = metrics_text(&url).await;
    let counted = r#"pilot_election_refused_total{reason="event_subscribers"}"#;
    at_least(
        &m,
        counted,
        refused as f64,
        "the node counts what it refused",
    );

    for w in &mut watchers {
        let seen = w.until_leader(&successor).await;
        assert!(seen["term"].as_u64().unwrap() > term, "{seen}");
    }
}

#[tokio::test]
async fn floods_of_unauthenticated_mutations_and_forged_peer_messages_change_nothing() {
    let _serial = serial().await;
    let (_keys_dir, kf) = key_file();
    let (c, leader, term) = cluster(&["--cluster-key-file", &kf]).await;
    let url = c.nodes[c.index(&leader)].url();
    let mut posts = Vec::new();
    for bearer in [None, Some("not-the-token".to_string())] {
        posts.push(Post {
            path: "/step-down".into(),
            body: json!({"successor": "mallory"}).to_string(),
            bearer: bearer.clone(),
        });
        posts.push(Post {
            path: "/candidacy".into(),
            body: json!({"eligible": false}).to_string(),
            bearer,
        });
    }
    for body in forgeries(term + 100) {
        posts.push(Post {
            path: "/peer/messages".into(),
            body,
            bearer: None,
        });
    }
    let until = pilot_election::clock::now() + Duration::from_secs(10);
    let (statuses, probes) = tokio::join!(
        post_flood(&url, posts, 8, until),
        probe_leader(&url, Duration::from_millis(200), until)
    );
    eprintln!("POST flood answers by status: {statuses:?}");
    assert!(
        statuses.keys().all(|s| (200..500).contains(s)),
        "no 5xx and no dropped request: {statuses:?}"
    );
    for s in [202, 401, 403] {
        assert!(
            statuses.get(&s).copied().unwrap_or(0) > 100,
            "{s}: {statuses:?}"
        );
    }
    all_200(&probes);
    same_leader_and_term(&c, &leader, term).await;
    let m = metrics_text(&url).await;
    for outcome in ["unsigned", "bad_signature", "unknown_key"] {
        let n = crate::peers::counted(&m, outcome);
        assert!(n > 100.0, "{outcome}: {n}\n{m}");
    }
    // Every refusal was logged with its source, and still the node stands.
    assert!(c.nodes[c.index(&leader)].log().contains("refused mutation"));
}

/// Every API connection of the leader busy with a request whose body never comes; then a
/// follower restarts and must reach the leader again on new connections, through the peers'
/// reserved slots on the shared port or through `--peer-listen`. Its acknowledgements alone
/// keep the leader's quorum once the other follower is killed.
async fn peers_get_through_while_every_api_connection_is_busy(peer_listen: bool) {
    let limits = [
        "--max-connections",
        "16",
        "--max-event-subscribers",
        "8",
        "--body-timeout",
        "120s",
    ];
    // A route that reads its body: peer messages on a shared port; with --peer-listen the
    // API port refuses those at once, so the operator's candidacy (open to all here).
    let (mut c, peer_ports, leader, term) = if peer_listen {
        let mut open = limits.to_vec();
        open.push("--allow-unauthenticated");
        cluster_with_peer_listeners(&open).await
    } else {
        let (c, leader, term) = cluster(&limits).await;
        (c, Vec::new(), leader, term)
    };
    let li = c.index(&leader);
    let url = c.nodes[li].url();
    if peer_listen {
        let (status, body) = post_raw(&format!("{url}/peer/messages"), "{}").await;
        assert_eq!(status, 404, "the API port takes no peer messages: {body}");
        let peer_url = format!("http://127.0.0.1:{}", peer_ports[li]);
        let (status, body) = get_json(&format!("{peer_url}/leader")).await;
        assert_eq!(status, 404, "the peer port serves nothing else: {body}");
    }

    // Requests in progress until every API connection is taken: a new client is told so.
    let slow_path = if peer_listen {
        "/candidacy"
    } else {
        "/peer/messages"
    };
    let mut drips = Vec::new();
    let refusal = loop {
        assert!(drips.len() < 100, "the node never said it was full");
        drips.push(
            dripping_body(addr(&c, li), slow_path)
                .await
                .expect("a dripping request"),
        );
        if drips.len() < 16 {
            continue;
        }
        let resp = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
            .get(format!("{url}/leader"))
            .send()
            .await;
        if let Some(r) = resp.ok().filter(|r| r.status().as_u16() == 503) {
            break r;
        }
    };
    assert!(refusal.headers().contains_key("retry-after"));
    assert_eq!(refusal.headers()["connection"], "close");
    let body: Value = refusal.json().await.expect("a JSON error");
    assert_eq!(body["error"], "too_many_connections", "{body}");

    // A follower restarts: all its connections to the leader are new.
    let fi = (li + 1) % 3;
    let other = (li + 2) % 3;
    c.nodes[fi].kill9();
    c.nodes[fi].start();
    let rejoined = wait_for(Duration::from_secs(20), || {
        let u = c.nodes[fi].url();
        async move { leader_of(&u).await.filter(|l| l.1 == term) }
    })
    .await;
    assert_eq!(
        rejoined,
        Some((leader.clone(), term)),
        "the restarted follower follows the leader again\n{}",
        c.logs()
    );
    // Without the other follower, only the restarted one's acknowledgements renew the lease.
    c.nodes[other].kill9();
    let watch_until = pilot_election::clock::now() + 3 * crate::app::T;
    while pilot_election::clock::now() < watch_until {
        assert_eq!(
            leader_of(&c.nodes[fi].url()).await,
            Some((leader.clone(), term)),
            "the leader lost its quorum behind its full API\n{}",
            c.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(drips);
    let (l, t) = c
        .agreed(&[li, fi], Duration::from_secs(10), |_, _| true)
        .await;
    assert_eq!((l, t), (leader, term), "no new term\n{}", c.logs());
}

#[tokio::test]
async fn peers_get_through_the_reserved_slots_while_every_api_connection_is_busy() {
    let _serial = serial().await;
    peers_get_through_while_every_api_connection_is_busy(false).await;
}

#[tokio::test]
async fn peers_get_through_their_own_listener_while_every_api_connection_is_busy() {
    let _serial = serial().await;
    peers_get_through_while_every_api_connection_is_busy(true).await;
}

#[tokio::test]
async fn a_slow_body_gets_408_and_an_idle_connection_is_closed_after_the_idle_timeout() {
    let _serial = serial().await;
    let idle = Duration::from_secs(2);
    let mut n = app(
        "solo",
        free_port(),
        &[],
        &["--body-timeout", "1s", "--idle-timeout", "2s"],
    );
    n.start();
    wait_up(&n).await;
    let a = SocketAddr::from(([127, 0, 0, 1], n.port));

    let mut slow = dripping_body(a, "/peer/messages").await.expect("connected");
    let answer = tokio::time::timeout(Duration::from_secs(1) + MARGIN, read_answer(&mut slow))
        .await
        .expect("an answer once the body timeout has passed")
        .expect("an HTTP answer");
    assert_eq!(answer.status, 408, "{}{}", answer.head, answer.body);
    let body: Value = serde_json::from_str(&answer.body).expect("a JSON error");
    assert_eq!(body["error"], "request_timeout", "{body}");
    let closed = closing_times(vec![(slow, pilot_election::clock::now())], MARGIN).await;
    assert!(closed[0].is_some(), "the connection is closed after a 408");

    let mut kept = TcpStream::connect(a).await.expect("connected");
    for _ in 0..2 {
        kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let answer = read_answer(&mut kept).await.expect("an answer");
        assert_eq!(answer.status, 200, "kept alive between requests");
    }
    let answered = pilot_election::clock::now();
    let closed = closing_times(vec![(kept, answered)], idle + MARGIN).await;
    let after = closed[0].expect("closed after the idle timeout");
    assert!(
        after + Duration::from_millis(500) >= idle,
        "closed after {after:?}, before the idle timeout {idle:?}"
    );

    let m = metrics_text(&n.url()).await;
    at_least(
        &m,
        r#"pilot_election_connections_timed_out_total{phase="body"}"#,
        1.0,
        "body",
    );
    at_least(
        &m,
        r#"pilot_election_connections_timed_out_total{phase="idle"}"#,
        1.0,
        "idle",
    );
}

/// A request refused before its body was read (401 before the token check reads nothing, an
/// unknown group) is answered with `connection: close`, and the connection does close: hyper
/// cannot tell where the next request would start. A client that took the connection for
/// kept alive failed on its next request (over TLS: "EOF occurred in violation of protocol",
/// seen by schemathesis). A refusal after the body was read keeps the connection.
#[tokio::test]
async fn an_answer_given_before_the_body_was_read_says_the_connection_closes() {
    let _serial = serial().await;
    let c = Cluster::start(1, &[]);
    wait_up(&c.nodes[0]).await;
    let a = addr(&c, 0);
    let head = |path: &str, bearer: Option<&str>| {
        let auth = bearer
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: 2\r\n\r\n"
        )
    };
    for (path, bearer, status) in [
        ("/pause", None, 401),
        ("/groups/no-such-group/pause", Some(TOKEN), 404),
    ] {
        let mut s = TcpStream::connect(a).await.expect("connected");
        // The head alone: the body is not there when the node answers.
        s.write_all(head(path, bearer).as_bytes()).await.unwrap();
        let answer = tokio::time::timeout(MARGIN, read_answer(&mut s))
            .await
            .expect("an answer before the body")
            .expect("an HTTP answer");
        assert_eq!(
            answer.status, status,
            "{path}: {}{}",
            answer.head, answer.body
        );
        assert_eq!(
            answer.header("connection").as_deref(),
            Some("close"),
            "{path}: {}",
            answer.head
        );
        let closed = closing_times(vec![(s, pilot_election::clock::now())], MARGIN).await;
        assert!(closed[0].is_some(), "{path}: the connection closes");
    }
    // The body read, then refused: the connection stays for the next request.
    let mut s = TcpStream::connect(a).await.expect("connected");
    let bad = format!("{}{{}}", head("/candidacy", Some(TOKEN)));
    s.write_all(bad.as_bytes()).await.unwrap();
    let answer = read_answer(&mut s).await.expect("an answer");
    assert!(answer.status >= 400, "{}{}", answer.head, answer.body);
    assert_eq!(answer.header("connection"), None, "{}", answer.head);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_answer(&mut s).await.expect("kept alive");
    assert_eq!(answer.status, 200);
}
