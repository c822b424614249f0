//! The client against mock members (axum on 127.0.0.1, port 0): failover, the answers it does
//! not fail over on, watch resumption across connections and members, and lead()'s
//! cancellations.

// Tests read tokio's clock for their own deadlines (the workspace's clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::StreamExt;
use pilot_election_client::{
    ChangeSource, Client, Error, Observation, Observe, TenureEnd, WatchStatus,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Generous bound for anything that should happen within a second, on a loaded machine.
const WITHIN: Duration = Duration::from_secs(20);

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

/// A URL nobody listens on.
fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    url
}

/// A member that answers `GET /leader` with `status` and `body`, counting the requests.
async fn member(status: u16, body: Value) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let router = Router::new().route(
        "/leader",
        get(move || {
            let (h, body) = (h.clone(), body.clone());
            async move {
                h.fetch_add(1, Ordering::SeqCst);
                (StatusCode::from_u16(status).unwrap(), Json(body))
            }
        }),
    );
    (serve(router).await, hits)
}

/// A member whose `GET /leader` never answers.
async fn silent_member() -> String {
    let router = Router::new().route("/leader", get(std::future::pending::<String>));
    serve(router).await
}

fn leader_body() -> Value {
    json!({
        "leader": "b", "term": 7, "is_self": false, "node": "c",
        "elected_at": "2026-12-01T17:20:00Z", "last_heartbeat_ms": 120, "lease_remaining_ms": null,
        "leader_url": "http://10.0.0.2:7070", "leader_meta": {"zone": "eu-1"},
        "node_url": "http://10.0.0.3:7070"
    })
}

/// A consistent read: the follower's `307` to the leader is followed, the query kept; a member
/// that cannot confirm (`503 read_not_confirmed`) is passed over for the next one.
#[tokio::test]
async fn a_consistent_read_follows_the_redirect_to_the_leader_and_passes_over_the_unconfirmed() {
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let a = asked.clone();
    let leader = serve(Router::new().route(
        "/leader",
        get(move |uri: axum::http::Uri| {
            let a = a.clone();
            async move {
                a.lock().unwrap().push(uri.to_string());
                let mut body = leader_body();
                body["is_self"] = json!(true);
                body["consistent"] = json!(true);
                Json(body)
            }
        }),
    ))
    .await;
    let to = format!("{leader}/leader?consistent=true");
    let follower = serve(Router::new().route(
        "/leader",
        get(move || {
            let to = to.clone();
            async move {
                let body = json!({"error": "ask_the_leader", "message": "ask the leader",
                    "leader": "b", "term": 7, "location": to});
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(axum::http::header::LOCATION, to)],
                    Json(body),
                )
            }
        }),
    ))
    .await;
    let (unconfirmed, hits) = member(
        503,
        json!({"error": "read_not_confirmed", "message": "no quorum", "term": 7, "after_ms": 3000}),
    )
    .await;
    let client = Client::new([unconfirmed.as_str(), follower.as_str()]).unwrap();
    let l = client.leader_consistent().await.unwrap().expect("a leader");
    assert_eq!((l.id.as_str(), l.term, l.is_self), ("b", 7, true));
    assert_eq!(hits.load(Ordering::SeqCst), 1, "asked, then passed over");
    assert_eq!(*asked.lock().unwrap(), ["/leader?consistent=true"]);
    assert_eq!(client.last_answered_by(), follower);
    // Only a consistent read asks for one.
    let plain = Client::new([leader.as_str()]).unwrap();
    plain.leader().await.unwrap().expect("a leader");
    assert_eq!(asked.lock().unwrap().last().unwrap(), "/leader");
}

#[tokio::test]
async fn failover_skips_refused_5xx_and_silent_members_and_remembers_who_answered() {
    let dead = dead_url();
    let (broken, broken_hits) = member(500, json!({"error": "internal"})).await;
    let silent = silent_member().await;
    let (busy, _) = member(503, json!({"error": "too_many_connections"})).await;
    let (good, good_hits) = member(200, leader_body()).await;
    let client = Client::builder([&dead, &broken, &silent, &busy, &good])
        .request_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let before = Instant::now();
    let l = client.leader().await.unwrap().expect("a leader");
    assert_eq!((l.id.as_str(), l.term, l.is_self), ("b", 7, false));
    assert_eq!(l.url.as_deref(), Some("http://10.0.0.2:7070"));
    assert_eq!(l.meta.get("zone").map(String::as_str), Some("eu-1"));
    assert_eq!(l.node, "c");
    assert_eq!(l.node_url.as_deref(), Some("http://10.0.0.3:7070"));
    assert_eq!(l.answered_by, good);
    assert_eq!(l.last_heartbeat, Some(Duration::from_millis(120)));
    assert_eq!(l.lease_remaining, None);
    assert_eq!(l.lease_deadline(), None, "a follower knows no lease");
    assert!(before <= l.requested_at && l.requested_at <= l.received_at);
    assert!(l.age() < WITHIN);
    assert_eq!(client.last_answered_by(), good);
    // The next request goes to the member that answered, first.
    client.leader().await.unwrap().expect("a leader");
    assert_eq!(broken_hits.load(Ordering::SeqCst), 1);
    assert_eq!(good_hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn no_leader_is_an_answer_and_not_a_reason_to_fail_over() {
    let (none, _) = member(
        503,
        json!({"error": "no_leader", "message": "no leader is known in term 4", "term": 4}),
    )
    .await;
    let (good, good_hits) = member(200, leader_body()).await;
    let client = Client::new([&none, &good]).unwrap();
    assert_eq!(client.leader().await.unwrap(), None);
    assert_eq!(good_hits.load(Ordering::SeqCst), 0);
    assert_eq!(client.last_answered_by(), none);
}

#[tokio::test]
async fn every_member_failing_names_each_and_why() {
    let dead = dead_url();
    let (broken, _) = member(502, json!({})).await;
    let client = Client::new([&dead, &broken]).unwrap();
    match client.leader().await {
        Err(Error::Unavailable { attempts }) => {
            assert_eq!(attempts.len(), 2, "{attempts:?}");
            assert_eq!(attempts[0].url, dead);
            assert!(attempts[0].reason.contains("connect"), "{attempts:?}");
            assert_eq!(attempts[1].url, broken);
            assert!(attempts[1].reason.contains("502"), "{attempts:?}");
        }
        other => panic!("unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_client_error_is_returned_and_not_failed_over() {
    let (missing, _) = member(404, json!({"error": "not_found", "message": "no route"})).await;
    let (good, good_hits) = member(200, leader_body()).await;
    let client = Client::new([&missing, &good]).unwrap();
    match client.leader().await {
        Err(Error::Status {
            status: 404, code, ..
        }) => assert_eq!(code.as_deref(), Some("not_found")),
        other => panic!("a 404, got {other:?}"),
    }
    assert_eq!(good_hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_older_build_answers_without_url_or_meta() {
    let (old, _) = member(
        200,
        json!({"leader": "a", "term": 3, "is_self": true, "node": "a", "elected_at": null,
               "last_heartbeat_ms": null, "lease_remaining_ms": 1500}),
    )
    .await;
    let l = Client::new([&old])
        .unwrap()
        .leader()
        .await
        .unwrap()
        .unwrap();
    assert_eq!((&l.url, &l.node_url), (&None, &None));
    assert!(l.meta.is_empty());
    assert_eq!(l.lease_remaining, Some(Duration::from_millis(1500)));
    assert_eq!(
        l.lease_deadline(),
        Some(l.requested_at + Duration::from_millis(1500))
    );
}

/// A mock `/events`: each connection's `Last-Event-ID` is recorded and `reply` says what to
/// send (chunks, and whether to hold the stream open after them).
type Reply = Box<dyn Fn(usize, Option<String>) -> Option<(Vec<String>, bool)> + Send + Sync>;

#[derive(Clone)]
struct Events {
    seen: Arc<Mutex<Vec<Option<String>>>>,
    reply: Arc<Reply>,
}

async fn events(State(e): State<Events>, headers: HeaderMap) -> Response {
    let id = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap().to_string());
    let n = {
        let mut seen = e.seen.lock().unwrap();
        seen.push(id.clone());
        seen.len()
    };
    let Some((chunks, hold)) = (e.reply)(n, id) else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "too_many_subscribers"})),
        )
            .into_response();
    };
    let body = futures_util::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    let body = if hold {
        Body::from_stream(body.chain(futures_util::stream::pending()))
    } else {
        Body::from_stream(body)
    };
    ([("content-type", "text/event-stream")], body).into_response()
}

async fn events_member(reply: Reply) -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let e = Events {
        seen: Arc::new(Mutex::new(Vec::new())),
        reply: Arc::new(reply),
    };
    let seen = e.seen.clone();
    let router = Router::new().route("/events", get(events)).with_state(e);
    (serve(router).await, seen)
}

fn leader_event(id: &str, term: u64, leader: Option<&str>) -> String {
    state_event("a", id, term, leader)
}

/// A `leader` event of member `node`.
fn state_event(node: &str, id: &str, term: u64, leader: Option<&str>) -> String {
    format!(
        "event: leader\nid: {id}\ndata: {}\n\n",
        json!({"node": node, "leader": leader, "term": term, "role": "follower"})
    )
}

/// The first member streams two changes and breaks the stream half-way through a third; it
/// then refuses every connection. The watcher resumes on the second member with the id of the
/// last complete event, and that member's snapshot history fills in what came after.
#[tokio::test]
async fn watch_resumes_on_another_member_and_recovers_the_missed_changes() {
    let (first, first_seen) = events_member(Box::new(|n, _| {
        (n == 1).then(|| {
            let mut e1 = leader_event("a-1", 1, Some("a"));
            // Split in the middle of a line, and a keep-alive comment between events.
            let e2 = leader_event("a-2", 2, Some("b"));
            let (h, t) = e2.split_at(10);
            e1.push_str(h);
            (
                vec![
                    e1,
                    t.to_string(),
                    ": keep-alive\n\n".into(),
                    leader_event("a-3", 2, None),
                    // Cut off: no blank line, so neither the event nor its id count.
                    "event: leader\nid: a-4\ndata: {\"node\":\"a\",\"leader\":\"z\",\"term\":9}\n"
                        .into(),
                ],
                false,
            )
        })
    }))
    .await;
    let (second, second_seen) = events_member(Box::new(|_, _| {
        let missed = json!([
            {"term": 2, "leader": "b", "previous": null, "reason": "elected", "at": "t2", "leaderless_ms": 5},
            {"term": 3, "leader": null, "previous": "b", "reason": "leader_timeout", "at": "t3"},
            {"term": 3, "leader": "c", "previous": null, "reason": "elected", "at": "t3b", "leaderless_ms": 3000},
            {"term": 4, "leader": "d", "previous": "c", "reason": "step_down", "at": "t4", "leaderless_ms": 10},
        ]);
        let snap = json!({"node": "n2", "leader": "d", "leader_url": "http://d:1", "term": 4,
                          "role": "follower", "resumed": false, "missed": missed});
        Some((
            vec![
                format!("event: snapshot\r\nid: b-9\r\ndata: {snap}\r\n\r\n"),
                leader_event("b-10", 4, Some("d")),
                leader_event("b-11", 5, Some("e")),
            ],
            true,
        ))
    }))
    .await;
    let client = Client::builder([&first, &second])
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(100))
        .build()
        .unwrap();
    let before = Instant::now();
    let mut watch = client.watch();
    assert_eq!(watch.status().last_heard, None);
    let mut got = Vec::new();
    while got.len() < 5 {
        let c = tokio::time::timeout(WITHIN, watch.next())
            .await
            .expect("a change in time")
            .expect("the stream never ends");
        got.push(c);
    }
    let pairs: Vec<(u64, &str)> = got.iter().map(|c| (c.term, c.leader.as_str())).collect();
    assert_eq!(pairs, [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]);
    assert_eq!(got[0].answered_by, first);
    assert_eq!(got[0].source, ChangeSource::Event);
    assert!(
        matches!(&got[2].source, ChangeSource::History(t) if t.reason == "elected" && t.leaderless_ms == Some(3000))
    );
    assert_eq!(got[3].leader_url.as_deref(), Some("http://d:1"));
    assert_eq!(got[4].answered_by, second);
    assert_eq!(first_seen.lock().unwrap()[0], None);
    // The first member was tried again (refused), then the second with the last whole event's id.
    assert!(first_seen.lock().unwrap().len() >= 2);
    assert!(first_seen.lock().unwrap()[1..]
        .iter()
        .all(|id| id.as_deref() == Some("a-3")));
    assert_eq!(second_seen.lock().unwrap()[0].as_deref(), Some("a-3"));
    let status = watch.status();
    assert_eq!(status.connected_to.as_deref(), Some(second.as_str()));
    assert_eq!(status.last_event_id.as_deref(), Some("b-11"));
    assert_eq!(status.last_term, Some(5));
    assert_eq!(status.connections, 2);
    let heard = status.last_heard.expect("bytes were heard");
    assert!(before <= heard && heard <= Instant::now());
    assert_eq!(client.last_answered_by(), second);
}

/// A stream that goes silent (a half-open connection) is given up after the idle timeout and
/// reopened on the same member, resuming from the last id.
#[tokio::test]
async fn a_silent_stream_is_reopened_after_the_idle_timeout() {
    let (only, seen) = events_member(Box::new(|n, _| {
        Some((
            vec![leader_event(&format!("x-{n}"), n as u64, Some("a"))],
            true,
        ))
    }))
    .await;
    let client = Client::builder([&only])
        .watch_idle_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut watch = client.watch();
    for term in 1..=3 {
        let c = tokio::time::timeout(WITHIN, watch.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c.term, term);
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[..3], [None, Some("x-1".into()), Some("x-2".into())]);
    assert!(watch.status().last_error.unwrap().contains("silent"));
}

/// The requests a [`recording_member`] received: path and headers.
type Requests = Arc<Mutex<Vec<(String, HeaderMap)>>>;

/// A member that records every request and answers `/leader` with [`leader_body`] and
/// `/events` with one `leader` event, then holds the stream open.
async fn recording_member() -> (String, Requests) {
    let requests: Requests = Arc::new(Mutex::new(Vec::new()));
    let (on_leader, on_events) = (requests.clone(), requests.clone());
    let router = Router::new()
        .route(
            "/leader",
            get(move |h: HeaderMap| {
                on_leader.lock().unwrap().push(("/leader".into(), h));
                async { Json(leader_body()) }
            }),
        )
        .route(
            "/events",
            get(move |h: HeaderMap| {
                on_events.lock().unwrap().push(("/events".into(), h));
                let first = futures_util::stream::once(async {
                    Ok::<_, std::io::Error>(leader_event("r-1", 7, Some("b")))
                });
                let body = Body::from_stream(first.chain(futures_util::stream::pending()));
                async { ([("content-type", "text/event-stream")], body) }
            }),
        );
    (serve(router).await, requests)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

/// `http_client` is the client that sends the requests (its user agent arrives), `start_at`
/// picks the member asked first, and `observer` puts its header on `GET /events` only.
#[tokio::test]
async fn a_given_http_client_the_first_member_and_the_observer_header_are_used() {
    let mut members = Vec::new();
    for _ in 0..3 {
        members.push(recording_member().await);
    }
    let urls: Vec<&String> = members.iter().map(|(u, _)| u).collect();
    let http = reqwest::Client::builder()
        .user_agent("observer-test/1")
        .build()
        .unwrap();
    let client = Client::builder(&urls)
        .http_client(http)
        .observer("obs-7")
        .start_at(4)
        .build()
        .unwrap();
    assert_eq!(client.last_answered_by(), urls[1], "4 modulo 3 members");
    let l = client.leader().await.unwrap().expect("a leader");
    assert_eq!(l.answered_by, *urls[1]);
    let mut watch = client.watch();
    let c = tokio::time::timeout(WITHIN, watch.next())
        .await
        .expect("a change in time")
        .expect("the stream never ends");
    assert_eq!((c.term, c.answered_by.as_str()), (7, urls[1].as_str()));
    assert!(members[0].1.lock().unwrap().is_empty());
    assert!(members[2].1.lock().unwrap().is_empty());
    let got = members[1].1.lock().unwrap().clone();
    let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["/leader", "/events"]);
    for (path, h) in &got {
        assert_eq!(header(h, "user-agent"), Some("observer-test/1"), "{path}");
    }
    assert_eq!(header(&got[0].1, "x-pilot-election-observer"), None);
    assert_eq!(
        header(&got[1].1, "x-pilot-election-observer"),
        Some("obs-7")
    );

    // A client of its own: its user agent, no observer header, the first member first.
    let plain = Client::new(&urls).unwrap();
    let mut watch = plain.watch();
    tokio::time::timeout(WITHIN, watch.next())
        .await
        .expect("a change in time")
        .expect("the stream never ends");
    let got = members[0].1.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert!(header(&got[0].1, "user-agent")
        .unwrap()
        .starts_with("pilot-election-client/"));
    assert_eq!(header(&got[0].1, "x-pilot-election-observer"), None);
}

/// What a mock node says about itself on `GET /leader`.
#[derive(Clone, Debug)]
enum Node {
    Leads {
        term: u64,
        lease_ms: u64,
    },
    Follows {
        leader: &'static str,
        term: u64,
    },
    NoLeader {
        term: u64,
    },
    /// Takes the request and never answers.
    Hangs,
}

#[derive(Clone)]
struct NodeState {
    node: Arc<Mutex<Node>>,
    /// When each request that was answered as the leader arrived.
    answered_as_leader: Arc<Mutex<Vec<Instant>>>,
    requests: Arc<AtomicUsize>,
    /// The data of the `leader` events its `/events` sends (the current one first).
    events: tokio::sync::watch::Sender<String>,
}

async fn node_leader(State(s): State<NodeState>) -> Response {
    let node = s.node.lock().unwrap().clone();
    s.requests.fetch_add(1, Ordering::SeqCst);
    match node {
        Node::Leads { term, lease_ms } => {
            s.answered_as_leader.lock().unwrap().push(Instant::now());
            Json(
                json!({"leader": "me", "term": term, "is_self": true, "node": "me",
                        "last_heartbeat_ms": null, "lease_remaining_ms": lease_ms}),
            )
            .into_response()
        }
        Node::Follows { leader, term } => Json(json!({"leader": leader, "term": term,
            "is_self": false, "node": "me", "last_heartbeat_ms": 10, "lease_remaining_ms": null}))
        .into_response(),
        Node::NoLeader { term } => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "no_leader", "term": term})),
        )
            .into_response(),
        Node::Hangs => std::future::pending().await,
    }
}

async fn node_events(State(s): State<NodeState>) -> Response {
    let rx = s.events.subscribe();
    let stream = futures_util::stream::unfold((rx, true), |(mut rx, first)| async move {
        if !first {
            rx.changed().await.ok()?;
        }
        let data = rx.borrow_and_update().clone();
        let chunk = format!("event: leader\ndata: {data}\n\n");
        Some((Ok::<_, std::io::Error>(chunk), (rx, false)))
    });
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

async fn mock_node(initial: Node) -> (Client, NodeState) {
    mock_node_with(initial, false, Duration::from_millis(50)).await
}

/// A mock node, with an `/events` stream if `events`, and a client of it polling every `poll`.
async fn mock_node_with(initial: Node, events: bool, poll: Duration) -> (Client, NodeState) {
    let s = NodeState {
        node: Arc::new(Mutex::new(initial)),
        answered_as_leader: Arc::new(Mutex::new(Vec::new())),
        requests: Arc::new(AtomicUsize::new(0)),
        events: tokio::sync::watch::Sender::new(String::new()),
    };
    let mut router = Router::new().route("/leader", get(node_leader));
    if events {
        router = router.route("/events", get(node_events));
    }
    let url = serve(router.with_state(s.clone())).await;
    let client = Client::builder([url])
        .lead_poll_interval(poll)
        .lead_margin(Duration::from_millis(300))
        .request_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    (client, s)
}

fn set(s: &NodeState, node: Node) {
    *s.node.lock().unwrap() = node;
}

/// Waits until the node has answered `n` more polls (so the client has seen what it says now).
async fn polled(s: &NodeState, n: usize) {
    let target = s.requests.load(Ordering::SeqCst) + n;
    tokio::time::timeout(WITHIN, async {
        while s.requests.load(Ordering::SeqCst) < target {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the client keeps polling");
}

/// Work that reports its start and waits for its token.
fn until_cancelled(
    started: tokio::sync::mpsc::UnboundedSender<u64>,
) -> impl FnOnce(
    u64,
    tokio_util::sync::CancellationToken,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Instant> + Send>> {
    move |term, cancel| {
        Box::pin(async move {
            started.send(term).unwrap();
            cancel.cancelled().await;
            Instant::now()
        })
    }
}

#[tokio::test]
async fn lead_waits_for_a_lease_and_cancels_when_the_node_stops_leading() {
    let (client, s) = mock_node(Node::NoLeader { term: 1 }).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn({
        let client = client.clone();
        async move { client.lead_once(until_cancelled(tx)).await }
    });
    // Neither a follower nor a leader whose lease is shorter than the margin starts the work.
    polled(&s, 2).await;
    set(
        &s,
        Node::Follows {
            leader: "x",
            term: 2,
        },
    );
    polled(&s, 3).await;
    set(
        &s,
        Node::Leads {
            term: 3,
            lease_ms: 200,
        },
    );
    polled(&s, 3).await;
    assert!(rx.try_recv().is_err(), "started without a usable lease");
    set(
        &s,
        Node::Leads {
            term: 3,
            lease_ms: 2000,
        },
    );
    let term = tokio::time::timeout(WITHIN, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(term, 3);
    set(
        &s,
        Node::Follows {
            leader: "x",
            term: 4,
        },
    );
    let tenure = tokio::time::timeout(WITHIN, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(tenure.term, 3);
    assert_eq!(
        tenure.ended,
        TenureEnd::Lost {
            leader: Some("x".into()),
            term: 4
        }
    );
}

/// The node stops answering while it leads: the work is cancelled before the lease of the
/// last answer could run out (counted from when that request arrived, which is after it left).
#[tokio::test]
async fn lead_cancels_before_the_lease_ends_when_the_node_stops_answering() {
    let (client, s) = mock_node(Node::Leads {
        term: 5,
        lease_ms: 1000,
    })
    .await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn({
        let client = client.clone();
        async move { client.lead_once(until_cancelled(tx)).await }
    });
    assert_eq!(
        tokio::time::timeout(WITHIN, rx.recv()).await.unwrap(),
        Some(5)
    );
    set(&s, Node::Hangs);
    let tenure = tokio::time::timeout(WITHIN, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(tenure.ended, TenureEnd::LeaseExpired);
    let last = *s.answered_as_leader.lock().unwrap().last().unwrap();
    let cancelled_after = tenure.output.saturating_duration_since(last);
    eprintln!("cancelled {cancelled_after:?} after the last answer of a 1 s lease (margin 300 ms)");
    assert!(
        cancelled_after < Duration::from_millis(1000),
        "cancelled {cancelled_after:?} after the last lease of 1 s was granted"
    );
    // Nor long before the deadline (the lease less the 300 ms margin).
    assert!(
        cancelled_after >= Duration::from_millis(300),
        "{cancelled_after:?}"
    );
}

#[tokio::test]
async fn lead_ends_at_no_leader_and_when_the_work_returns() {
    let (client, s) = mock_node(Node::Leads {
        term: 8,
        lease_ms: 2000,
    })
    .await;
    let t = client
        .lead_once(|term, _| async move { term * 2 })
        .await
        .unwrap();
    assert_eq!((t.term, t.output, t.ended), (8, 16, TenureEnd::Finished));

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn({
        let client = client.clone();
        async move { client.lead_once(until_cancelled(tx)).await }
    });
    assert_eq!(
        tokio::time::timeout(WITHIN, rx.recv()).await.unwrap(),
        Some(8)
    );
    set(&s, Node::NoLeader { term: 9 });
    let t = tokio::time::timeout(WITHIN, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        t.ended,
        TenureEnd::Lost {
            leader: None,
            term: 9
        }
    );
}

#[tokio::test]
async fn lead_needs_exactly_one_member() {
    let client = Client::new(["http://127.0.0.1:1", "http://127.0.0.1:2"]).unwrap();
    match client.lead_once(|_, _| async {}).await {
        Err(Error::NotOneMember { members: 2 }) => {}
        other => panic!("{other:?}"),
    }
}

/// A step-down shows on the node's event stream at once: the work is cancelled then, not at
/// the next poll (here 30 s away) nor at the lease's end (60 s).
#[tokio::test]
async fn lead_cancels_at_the_event_that_the_node_stepped_down() {
    let (client, s) = mock_node_with(
        Node::Leads {
            term: 3,
            lease_ms: 60_000,
        },
        true,
        Duration::from_secs(30),
    )
    .await;
    s.events.send_replace(
        json!({"node": "me", "leader": "me", "term": 3, "role": "leader"}).to_string(),
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn({
        let client = client.clone();
        async move { client.lead_once(until_cancelled(tx)).await }
    });
    assert_eq!(
        tokio::time::timeout(WITHIN, rx.recv()).await.unwrap(),
        Some(3)
    );
    // A role change that is not a loss (the same term, still leader) changes nothing.
    s.events.send_replace(
        json!({"node": "me", "leader": "me", "term": 3, "role": "leader", "x": 1}).to_string(),
    );
    let stepped_down = Instant::now();
    set(
        &s,
        Node::Follows {
            leader: "x",
            term: 4,
        },
    );
    s.events.send_replace(
        json!({"node": "me", "leader": null, "term": 3, "role": "follower"}).to_string(),
    );
    let t = tokio::time::timeout(WITHIN, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let after = t.output.saturating_duration_since(stepped_down);
    eprintln!("cancelled {after:?} after the step-down event");
    assert_eq!(
        t.ended,
        TenureEnd::Lost {
            leader: None,
            term: 3
        }
    );
    assert!(after < Duration::from_secs(10), "{after:?}");
}

/// A member whose `GET /events` streams what the test sends: each connection takes the next
/// stream handed out by [`Scripted::connection`] (`503 too_many_subscribers` when none is
/// left) and records the request's headers.
#[derive(Clone, Default)]
struct Scripted {
    streams: Arc<Mutex<VecDeque<mpsc::UnboundedReceiver<String>>>>,
    requests: Arc<Mutex<Vec<HeaderMap>>>,
}

impl Scripted {
    async fn start() -> (String, Scripted) {
        let s = Scripted::default();
        let router = Router::new()
            .route("/events", get(scripted_events))
            .with_state(s.clone());
        (serve(router).await, s)
    }

    /// The next connection's stream: each string sent is one chunk; dropping it ends the
    /// stream.
    fn connection(&self) -> mpsc::UnboundedSender<String> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.streams.lock().unwrap().push_back(rx);
        tx
    }

    fn requests(&self) -> Vec<HeaderMap> {
        self.requests.lock().unwrap().clone()
    }
}

async fn scripted_events(State(s): State<Scripted>, headers: HeaderMap) -> Response {
    s.requests.lock().unwrap().push(headers);
    let Some(rx) = s.streams.lock().unwrap().pop_front() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "too_many_subscribers"})),
        )
            .into_response();
    };
    let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, std::io::Error>(chunk), rx))
    });
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(chunks),
    )
        .into_response()
}

const KEEP_ALIVE: &str = ":\n\n";

async fn next_observation(obs: &mut Observe) -> Observation {
    tokio::time::timeout(WITHIN, obs.next())
        .await
        .expect("an observation in time")
        .expect("the stream never ends")
}

/// Polls `obs` until its status satisfies `done`, failing if it yields anything meanwhile.
/// (Dropping `next()` between the polls loses nothing: the stream keeps its place.)
async fn quiet_until(obs: &mut Observe, done: impl Fn(&WatchStatus) -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !done(&obs.status()) {
        assert!(Instant::now() < deadline, "{:?}", obs.status());
        if let Ok(got) = tokio::time::timeout(Duration::from_millis(20), obs.next()).await {
            panic!("nothing should be yielded yet, got {got:?}");
        }
    }
}

fn pairs(o: &Observation) -> (Option<&str>, u64, &str) {
    (o.leader.as_deref(), o.term, o.answered_by.as_str())
}

/// Every state is yielded, without a leader too and the same one again; each keep-alive after
/// a state repeats it with a later `heard_at`; one before any state repeats nothing.
#[tokio::test]
async fn observe_yields_every_state_and_repeats_it_at_each_keep_alive() {
    let (url, m) = Scripted::start().await;
    let conn = m.connection();
    let client = Client::builder([&url]).observer("obs-1").build().unwrap();
    let before = Instant::now();
    let mut obs = client.observe();
    conn.send(KEEP_ALIVE.into()).unwrap();
    quiet_until(&mut obs, |s| s.last_heard.is_some()).await;
    assert_eq!(obs.status().connected_to.as_deref(), Some(url.as_str()));
    conn.send(state_event("n1", "o-1", 3, Some("b"))).unwrap();
    let first = next_observation(&mut obs).await;
    assert_eq!(pairs(&first), (Some("b"), 3, url.as_str()));
    assert_eq!(first.node, "n1");
    assert!(before <= first.heard_at && first.age() < WITHIN);
    let mut last = first.heard_at;
    for keep_alive in [KEEP_ALIVE, ": keep-alive\n\n", ":\n\n"] {
        conn.send(keep_alive.into()).unwrap();
        let again = next_observation(&mut obs).await;
        assert!(again.heard_at > last, "{again:?} after {last:?}");
        assert_eq!(obs.status().last_heard, Some(again.heard_at));
        last = again.heard_at;
        let mut same = again.clone();
        same.heard_at = first.heard_at;
        assert_eq!(same, first, "the same state, heard again");
    }
    conn.send(state_event("n1", "o-2", 4, None)).unwrap();
    let none = next_observation(&mut obs).await;
    assert_eq!(pairs(&none), (None, 4, url.as_str()));
    assert_eq!(none.leader_url, None);
    conn.send(KEEP_ALIVE.into()).unwrap();
    assert_eq!(
        pairs(&next_observation(&mut obs).await),
        (None, 4, url.as_str())
    );
    // The same state again is a confirmation, yielded as it comes.
    conn.send(state_event("n1", "o-3", 4, None)).unwrap();
    let same = next_observation(&mut obs).await;
    assert_eq!(pairs(&same), (None, 4, url.as_str()));
    let status = obs.status();
    assert_eq!(status.last_event_id.as_deref(), Some("o-3"));
    assert_eq!((status.last_term, status.connections), (Some(4), 1));
    let requests = m.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        header(&requests[0], "x-pilot-election-observer"),
        Some("obs-1")
    );
    assert_eq!(header(&requests[0], "last-event-id"), None);
}

/// A stream that ends is reopened on the same member first (with the last id), and on the
/// next member when that one refuses; a new stream yields nothing, keep-alives included, until
/// its first state, and a snapshot yields its current state, not its history.
#[tokio::test]
async fn observe_fails_over_to_the_same_member_first_then_to_the_next() {
    let (a_url, a) = Scripted::start().await;
    let (b_url, b) = Scripted::start().await;
    let (a1, a2, b1) = (a.connection(), a.connection(), b.connection());
    let client = Client::builder([&a_url, &b_url])
        .observer("obs-9")
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(100))
        .build()
        .unwrap();
    let mut obs = client.observe();
    a1.send(state_event("na", "a-1", 5, Some("na"))).unwrap();
    let first = next_observation(&mut obs).await;
    assert_eq!(pairs(&first), (Some("na"), 5, a_url.as_str()));
    drop(a1);
    // Only bytes move last_heard (an ended stream brings none): this is a2's keep-alive.
    a2.send(KEEP_ALIVE.into()).unwrap();
    quiet_until(&mut obs, |s| s.last_heard != Some(first.heard_at)).await;
    assert_eq!(obs.status().connections, 2);
    a2.send(state_event("na", "a-2", 5, Some("na"))).unwrap();
    let again = next_observation(&mut obs).await;
    assert_eq!(pairs(&again), (Some("na"), 5, a_url.as_str()));
    // The member goes away: its next connection is refused, the next member answers.
    drop(a2);
    let missed =
        json!([{"term": 6, "leader": "nb", "previous": "na", "reason": "step_down", "at": "t6"}]);
    let snap = json!({"node": "nb", "leader": "nb", "leader_url": "http://nb:1", "term": 6,
                      "role": "leader", "resumed": false, "missed": missed});
    b1.send(KEEP_ALIVE.into()).unwrap();
    quiet_until(&mut obs, |s| s.last_heard != Some(again.heard_at)).await;
    assert_eq!(obs.status().connections, 3);
    b1.send(format!("event: snapshot\nid: b-9\ndata: {snap}\n\n"))
        .unwrap();
    let from_b = next_observation(&mut obs).await;
    assert_eq!(pairs(&from_b), (Some("nb"), 6, b_url.as_str()));
    assert_eq!(from_b.leader_url.as_deref(), Some("http://nb:1"));
    assert_eq!(from_b.node, "nb");
    b1.send(KEEP_ALIVE.into()).unwrap();
    let repeat = next_observation(&mut obs).await;
    assert_eq!(pairs(&repeat), (Some("nb"), 6, b_url.as_str()));
    assert!(repeat.heard_at > from_b.heard_at);

    let ids = |m: &Scripted| -> Vec<Option<String>> {
        m.requests()
            .iter()
            .map(|h| header(h, "last-event-id").map(String::from))
            .collect()
    };
    assert_eq!(ids(&a), [None, Some("a-1".into()), Some("a-2".into())]);
    assert_eq!(ids(&b), [Some("a-2".into())]);
    for h in a.requests().iter().chain(&b.requests()) {
        assert_eq!(header(h, "x-pilot-election-observer"), Some("obs-9"));
    }
    let status = obs.status();
    assert_eq!(status.connected_to.as_deref(), Some(b_url.as_str()));
    assert_eq!(status.last_event_id.as_deref(), Some("b-9"));
    assert!(status.last_error.unwrap().contains("503"));
    assert_eq!(client.last_answered_by(), b_url);
}

/// After a failover to a member that is behind, its lower terms are skipped (and its
/// keep-alives repeat nothing) until it reports the term already yielded.
#[tokio::test]
async fn observe_skips_a_lagging_members_lower_terms() {
    let (a_url, a) = Scripted::start().await;
    let (b_url, b) = Scripted::start().await;
    let (a1, b1) = (a.connection(), b.connection());
    let client = Client::builder([&a_url, &b_url])
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(100))
        .build()
        .unwrap();
    let mut obs = client.observe();
    a1.send(state_event("na", "a-1", 7, Some("na"))).unwrap();
    assert_eq!(
        pairs(&next_observation(&mut obs).await),
        (Some("na"), 7, a_url.as_str())
    );
    drop(a1);
    let snap = json!({"node": "nb", "leader": "old", "term": 6, "role": "follower",
                      "resumed": false, "missed": []});
    b1.send(format!("event: snapshot\nid: b-1\ndata: {snap}\n\n"))
        .unwrap();
    quiet_until(&mut obs, |s| s.last_event_id.as_deref() == Some("b-1")).await;
    b1.send(state_event("nb", "b-2", 6, None)).unwrap();
    quiet_until(&mut obs, |s| s.last_event_id.as_deref() == Some("b-2")).await;
    let heard = obs.status().last_heard;
    b1.send(KEEP_ALIVE.into()).unwrap();
    quiet_until(&mut obs, |s| s.last_heard != heard).await;
    b1.send(state_event("nb", "b-3", 7, Some("na"))).unwrap();
    let caught_up = next_observation(&mut obs).await;
    assert_eq!(pairs(&caught_up), (Some("na"), 7, b_url.as_str()));
    assert_eq!(obs.status().last_term, Some(7));
    // No observer header without ClientBuilder::observer.
    let requests = b.requests();
    assert_eq!(header(&requests[0], "x-pilot-election-observer"), None);
}
