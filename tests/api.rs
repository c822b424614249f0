//! The HTTP API in-process: requests go straight into `router(state)` with tower's `oneshot`,
//! against nodes the binary's own `NodeBuilder` builds on an in-process memory bus. No process,
//! no socket, no server: the contract and every error answer of the router, in about a second.
//! What needs the real server (connection caps, timeouts, logs of a real process) is in
//! `tests/it/`.
#![allow(clippy::disallowed_methods)] // test deadlines on tokio's clock

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use pilot_election::api::{Auth, ROUTES};
use pilot_election::runtime::Snapshot;
use pilot_election::transport::memory::Bus;
use support::app::{memory_node, metric, node_config, wait_for, TempDir, TOKEN};
use support::contract::Spec;

/// One in-process node: its router and what its loop publishes.
struct Node {
    router: Router,
    /// The default group's.
    snapshot: watch::Receiver<Arc<Snapshot>>,
    /// Every group's, the default one's included.
    groups: BTreeMap<String, watch::Receiver<Arc<Snapshot>>>,
    _dir: TempDir,
}

/// A cluster of `ids` on one memory bus, its loops stopped when `stop` is cancelled (one node's
/// alone by cancelling its token in `stops`).
struct Cluster {
    nodes: Vec<Node>,
    stop: CancellationToken,
    stops: Vec<CancellationToken>,
}

impl Cluster {
    fn start(ids: &[&str], auth: Auth) -> Cluster {
        Cluster::start_groups(ids, auth, &[])
    }

    /// As [`Cluster::start`], every node also in the elections of `groups`, ranked per group.
    fn start_groups(ids: &[&str], auth: Auth, groups: &[&str]) -> Cluster {
        Cluster::start_configured(ids, auth, groups, |_| {})
    }

    /// As [`Cluster::start_groups`], each node's configuration changed by `adjust` last.
    fn start_configured(
        ids: &[&str],
        auth: Auth,
        groups: &[&str],
        adjust: impl Fn(&mut pilot_election::NodeConfig),
    ) -> Cluster {
        let bus = Bus::new();
        let stop = CancellationToken::new();
        let mut stops = Vec::new();
        let nodes = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let dir = TempDir::new(id);
                let mut config = node_config(id, ids, &dir.0, &auth);
                config.priority = 10 + i as u32;
                config.extra_groups = groups.iter().map(|g| g.to_string()).collect();
                config.spread_priorities = true;
                // No preemption: a group whose first leader is not its best-ranked node would
                // hand over by itself after P (5 s), which a loaded machine reaches mid-test,
                // and the test checks that each group moves only when it is told to.
                config.timings.preempt_after = Duration::ZERO;
                // Room for two groups added at run time.
                config.max_groups = groups.len() + 3;
                adjust(&mut config);
                let built = memory_node(config, i as u64, &bus);
                let elections = &built.state.elections;
                let node = Node {
                    router: built.router(),
                    snapshot: elections.default().snapshot.clone(),
                    groups: (elections.all().iter())
                        .map(|e| (e.group.clone(), e.snapshot.clone()))
                        .collect(),
                    _dir: dir,
                };
                let own = stop.child_token();
                stops.push(own.clone());
                tokio::spawn(built.runtime.run(own));
                node
            })
            .collect();
        Cluster { nodes, stop, stops }
    }

    /// `(leader index, term)` once every node names the same leader and it holds its lease.
    async fn agreed(&self) -> (usize, u64) {
        self.agreed_in("in-process").await
    }

    /// As [`Cluster::agreed`], in the election of `group`.
    async fn agreed_in(&self, group: &str) -> (usize, u64) {
        wait_for(Duration::from_secs(20), || async {
            let now = pilot_election::clock::now();
            let views: Vec<_> = self
                .nodes
                .iter()
                .map(|n| n.groups[group].borrow().view.clone())
                .collect();
            let leader = views.iter().position(|v| v.is_leader_at(now))?;
            let (name, term) = (&views[leader].node_id, views[leader].term);
            views
                .iter()
                .all(|v| v.leader.as_ref() == Some(name) && v.term == term)
                .then_some((leader, term))
        })
        .await
        .expect("the cluster agreed on a leader")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One request into a router; the status and the JSON body (`Null` when it is not JSON).
async fn call(
    router: &Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (u16, Value) {
    let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
    let mut req = Request::builder().method(method.clone()).uri(path);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let resp = send(router, req.body(Body::from(body)).expect("request")).await;
    let status = resp.status().as_u16();
    // An event stream never ends: its status is all this test reads of it.
    if path == "/events" || method == Method::HEAD || method == Method::OPTIONS {
        return (status, Value::Null);
    }
    let bytes = body_of(resp).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn send(router: &Router, req: Request<Body>) -> Response {
    router.clone().oneshot(req).await.expect("infallible")
}

async fn body_of(resp: Response) -> axum::body::Bytes {
    axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body")
}

async fn get(router: &Router, path: &str) -> (u16, Value) {
    call(router, "get", path, None, None, Vec::new()).await
}

async fn text(router: &Router, path: &str) -> String {
    let req = Request::builder().uri(path).body(Body::empty()).unwrap();
    let bytes = body_of(send(router, req).await).await;
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

struct Case {
    method: &'static str,
    path: &'static str,
    token: Option<&'static str>,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
}

fn case(
    method: &'static str,
    path: &'static str,
    token: Option<&'static str>,
    content_type: Option<&'static str>,
    body: impl Into<Vec<u8>>,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        method,
        path,
        token,
        content_type,
        body: body.into(),
        status,
        code,
    }
}

/// One table, so every endpoint gets every kind of bad input.
#[rustfmt::skip]
fn error_cases() -> Vec<Case> {
    const J: Option<&str> = Some("application/json");
    const OK: Option<&str> = Some(TOKEN);
    let big = vec![b' '; 70 * 1024];
    let mut cases = Vec::new();
    for path in ["/step-down", "/candidacy", "/pause"] {
        cases.extend([
            case("post", path, None, J, "{}", 401, "unauthorized"),
            case("post", path, Some("wrong"), J, "{}", 403, "forbidden"),
            case("post", path, OK, None, "{}", 415, "unsupported_media_type"),
            case("post", path, OK, Some("text/plain"), "{}", 415, "unsupported_media_type"),
            case("post", path, OK, J, "{", 400, "invalid_json"),
            case("post", path, OK, J, "{} trailing", 400, "invalid_json"),
            case("post", path, OK, J, "[1, 2]", 422, "invalid_body"),
            case("post", path, OK, J, r#"{"unknown": 1}"#, 422, "invalid_body"),
            case("post", path, OK, J, big.clone(), 413, "payload_too_large"),
        ]);
    }
    cases.extend([
        case("post", "/step-down", OK, J, r#"{"expected_term": "seven"}"#, 422, "invalid_body"),
        case("post", "/step-down", OK, J, r#"{"successor": 5}"#, 422, "invalid_body"),
        case("post", "/candidacy", OK, J, r#"{"eligible": "yes"}"#, 422, "invalid_body"),
        case("post", "/candidacy", OK, J, r#"{"priority": 5}"#, 422, "invalid_body"),
        case("post", "/candidacy", OK, J, r#"{"eligible": true, "priority": -1}"#, 422, "invalid_body"),
        case("post", "/peer/messages", None, J, "not json", 400, "malformed_message"),
        case("post", "/peer/messages", None, J, r#"{"v": 1}"#, 400, "malformed_message"),
        case("post", "/peer/messages", None, J, vec![b' '; 17 * 1024], 413, "payload_too_large"),
        case("get", "/no-such-route", None, None, "", 404, "not_found"),
        case("delete", "/leader", None, None, "", 405, "method_not_allowed"),
        case("post", "/status", None, J, "{}", 405, "method_not_allowed"),
        case("put", "/step-down", None, None, "", 405, "method_not_allowed"),
        case("put", "/pause", None, None, "", 405, "method_not_allowed"),
        // A scheduled step-down's hour, and the pause's end and reason.
        case("post", "/step-down", OK, J, r#"{"at": "tomorrow"}"#, 422, "invalid_body"),
        case("post", "/step-down", OK, J, r#"{"at": "2001-01-01T00:00:00Z"}"#, 422, "invalid_body"),
        case("post", "/step-down", OK, J, r#"{"at": "9999-01-01T00:00:00Z"}"#, 422, "invalid_body"),
        case("post", "/step-down", OK, J, r#"{"at": 5}"#, 422, "invalid_body"),
        case("post", "/pause", OK, J, r#"{"until": "2026-02-30T00:00:00Z"}"#, 422, "invalid_body"),
        case("post", "/pause", OK, J, r#"{"until": "2001-01-01T00:00:00Z"}"#, 422, "invalid_body"),
        case("post", "/pause", OK, J, format!(r#"{{"reason": "{}"}}"#, "x".repeat(257)), 422, "invalid_body"),
        case("delete", "/pause", None, None, "", 401, "unauthorized"),
        case("delete", "/pause", Some("wrong"), None, "", 403, "forbidden"),
        case("delete", "/step-down", None, None, "", 401, "unauthorized"),
        case("delete", "/step-down", OK, None, "", 404, "nothing_scheduled"),
        case("put", "/peer/messages", None, None, "", 405, "method_not_allowed"),
        case("post", "/jobs/holds", None, None, "", 401, "unauthorized"),
        case("post", "/jobs/holds", Some("wrong"), None, "", 403, "forbidden"),
        case("put", "/jobs/holds/999", OK, None, "", 404, "unknown_hold"),
        case("put", "/jobs/holds/not-a-number", OK, None, "", 404, "unknown_hold"),
        case("delete", "/jobs/holds/999", OK, None, "", 404, "unknown_hold"),
        case("delete", "/jobs/holds/1", None, None, "", 401, "unauthorized"),
        case("post", "/groups/no-such-group/jobs/holds", OK, None, "", 404, "unknown_group"),
    ]);
    cases
}

/// A leader-only job's hold (`pilot-election once`): granted by the leader only, renewed, given
/// back, every answer as the spec says; a step-down waits while one is out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_granted_by_the_leader_only_and_holds_a_step_down_until_given_back() {
    let spec = Spec::load();
    let auth = Auth {
        token: Some(TOKEN.into()),
        allow_unauthenticated: false,
    };
    let c = Cluster::start(&["j1", "j2", "j3"], auth);
    let (li, term) = c.agreed().await;
    let (leader, follower) = (&c.nodes[li].router, &c.nodes[(li + 1) % 3].router);
    let post = |r| call(r, "post", "/jobs/holds", Some(TOKEN), None, Vec::new());
    let (status, body) = post(follower).await;
    spec.check("post", "/jobs/holds", status, &body);
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("not_leader")),
        "{body}"
    );
    let (status, body) = post(leader).await;
    spec.check("post", "/jobs/holds", status, &body);
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["term"], json!(term));
    assert!(body["lease_remaining_ms"].as_u64().unwrap() > 0, "{body}");
    let id = body["id"].as_u64().unwrap();
    let one = format!("/jobs/holds/{id}");
    let (status, body) = call(leader, "put", &one, Some(TOKEN), None, Vec::new()).await;
    spec.check("put", "/jobs/holds/{id}", status, &body);
    assert_eq!((status, body["id"].as_u64()), (200, Some(id)), "{body}");

    // A step-down waits for the hold, which is asked to stop meanwhile.
    let router = leader.clone();
    let step_down = tokio::spawn(async move {
        call(
            &router,
            "post",
            "/step-down",
            Some(TOKEN),
            Some("application/json"),
            b"{}".to_vec(),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !step_down.is_finished(),
        "the step-down did not wait for the hold"
    );
    let (status, body) = call(leader, "put", &one, Some(TOKEN), None, Vec::new()).await;
    spec.check("put", "/jobs/holds/{id}", status, &body);
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("handing_over")),
        "{body}"
    );
    let (status, body) = post(leader).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("handing_over")),
        "{body}"
    );
    let (status, _) = call(leader, "delete", &one, Some(TOKEN), None, Vec::new()).await;
    assert_eq!(status, 204);
    let (status, body) = tokio::time::timeout(Duration::from_secs(10), step_down)
        .await
        .expect("the step-down went once the hold was given back")
        .unwrap();
    assert_eq!(status, 202, "{body}");
    let (status, body) = call(leader, "delete", &one, Some(TOKEN), None, Vec::new()).await;
    spec.check("delete", "/jobs/holds/{id}", status, &body);
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_hold"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_follows_the_spec_bad_requests_get_json_errors_and_leadership_stays() {
    let spec = Spec::load();
    let auth = Auth {
        token: Some(TOKEN.into()),
        allow_unauthenticated: false,
    };
    let c = Cluster::start(&["a1", "a2", "a3"], auth);
    let (li, term) = c.agreed().await;
    // Three runtimes on the memory bus agreed, and on the highest-priority node.
    assert_eq!(li, 2, "a3 has the highest priority");
    let fi = (li + 1) % 3;
    let (leader, follower) = (&c.nodes[li].router, &c.nodes[fi].router);

    // Every routed method answers something other than 404/405.
    for (method, path) in ROUTES {
        let (status, _) = call(follower, method, path, None, None, Vec::new()).await;
        assert!(
            status != 404 && status != 405,
            "{method} {path} answered {status}"
        );
    }

    // Good answers from a leader and a follower follow the spec.
    for router in [leader, follower] {
        for path in [
            "/leader",
            "/term",
            "/status",
            "/history",
            "/role/leader",
            "/role/follower",
            "/healthz",
            "/readyz",
            "/pause",
            "/step-down",
        ] {
            let (status, body) = get(router, path).await;
            spec.check("get", path, status, &body);
        }
    }
    let (s, b) = get(leader, "/role/leader").await;
    assert_eq!((s, &b["role"]), (200, &json!("leader")));
    assert_eq!(get(follower, "/role/leader").await.0, 503);
    let (s, _) = call(leader, "head", "/role/leader", None, None, Vec::new()).await;
    assert_eq!(s, 200);
    // OPTIONS answers as HEAD does, for health checkers that send it.
    for (router, path, want) in [
        (leader, "/role/leader", 200),
        (follower, "/role/leader", 503),
        (leader, "/role/follower", 503),
        (follower, "/role/follower", 200),
    ] {
        let (s, _) = call(router, "options", path, None, None, Vec::new()).await;
        assert_eq!(s, want, "OPTIONS {path}");
    }
    let metrics = text(leader, "/metrics").await;
    assert!(metrics.contains("pilot_election_is_leader 1"), "{metrics}");
    assert!(
        metrics.contains(&format!("pilot_election_term {term}")),
        "{metrics}"
    );

    // Malformed requests, on the leader and on a follower.
    for router in [leader, follower] {
        for case in error_cases() {
            let (status, body) = call(
                router,
                case.method,
                case.path,
                case.token,
                case.content_type,
                case.body.clone(),
            )
            .await;
            assert_eq!(
                (status, body["error"].as_str()),
                (case.status, Some(case.code)),
                "{} {} {:?}: {body}",
                case.method,
                case.path,
                String::from_utf8_lossy(&case.body[..case.body.len().min(60)])
            );
            assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
            if ROUTES.contains(&(case.method, case.path)) && spec.has(case.method, case.path) {
                spec.check(case.method, case.path, status, &body);
            }
        }
    }

    // Refusals by the protocol.
    let refusals = [
        (follower, json!({}), 409, "not_leader"),
        (
            leader,
            json!({"expected_term": term + 5}),
            409,
            "term_mismatch",
        ),
        (
            leader,
            json!({"successor": "nobody"}),
            422,
            "successor_ineligible",
        ),
    ];
    for (router, body, status, code) in refusals {
        let (got, answer) = call(
            router,
            "post",
            "/step-down",
            Some(TOKEN),
            Some("application/json"),
            body.to_string().into_bytes(),
        )
        .await;
        assert_eq!(
            (got, answer["error"].as_str()),
            (status, Some(code)),
            "{answer}"
        );
        spec.check("post", "/step-down", got, &answer);
    }

    // A step-down scheduled for later: accepted by the leader only, one at a time, shown, and
    // cancelled.
    let post = |router, path: &'static str, body: Value| {
        call(
            router,
            "post",
            path,
            Some(TOKEN),
            Some("application/json"),
            body.to_string().into_bytes(),
        )
    };
    let later = pilot_election::clock::wall::rfc3339(
        pilot_election::clock::wall::unix_ms_now() + 3_600_000,
    );
    let (got, answer) = post(follower, "/step-down", json!({"at": later})).await;
    assert_eq!(
        (got, answer["error"].as_str()),
        (409, Some("not_leader")),
        "{answer}"
    );
    let (got, answer) = post(
        leader,
        "/step-down",
        json!({"at": later, "successor": "a1"}),
    )
    .await;
    assert_eq!(got, 202, "{answer}");
    spec.check("post", "/step-down", got, &answer);
    let id = answer["operation"]["id"]
        .as_str()
        .expect("an operation id")
        .to_string();
    assert_eq!(answer["operation"]["term"], json!(term));
    let (got, again) = post(leader, "/step-down", json!({"at": later})).await;
    assert_eq!(
        (got, again["error"].as_str()),
        (409, Some("already_scheduled")),
        "{again}"
    );
    assert_eq!(again["operation"].as_str(), Some(id.as_str()));
    spec.check("post", "/step-down", got, &again);
    for path in ["/step-down", "/status"] {
        let (got, body) = get(leader, path).await;
        spec.check("get", path, got, &body);
        let pending = if path == "/status" {
            &body["scheduled_step_down"]
        } else {
            &body["pending"]
        };
        assert_eq!(pending["id"].as_str(), Some(id.as_str()), "{path}: {body}");
    }
    assert!(text(leader, "/metrics")
        .await
        .contains("pilot_election_step_down_scheduled 1"));
    let (got, cancelled) = call(
        leader,
        "delete",
        "/step-down",
        Some(TOKEN),
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(
        (got, cancelled["ending"].as_str()),
        (200, Some("cancelled")),
        "{cancelled}"
    );
    spec.check("delete", "/step-down", got, &cancelled);
    let (_, schedule) = get(leader, "/step-down").await;
    assert_eq!(schedule["pending"], Value::Null);
    assert_eq!(schedule["finished"][0]["id"].as_str(), Some(id.as_str()));

    // The maintenance pause: on, shown everywhere, off.
    let (got, paused) = post(follower, "/pause", json!({"reason": "restoring a backup"})).await;
    assert_eq!((got, &paused["paused"]), (200, &json!(true)), "{paused}");
    // Answered once a quorum holds it, this node first.
    assert_eq!(
        (&paused["confirmed"], &paused["quorum"]),
        (&json!(true), &json!(2)),
        "{paused}"
    );
    assert!(paused["held_by"].as_array().is_some_and(|h| h.len() >= 2));
    spec.check("post", "/pause", got, &paused);
    let follower_id = c.nodes[fi].snapshot.borrow().view.node_id.clone();
    assert_eq!(paused["setting"]["by"].as_str(), Some(follower_id.as_str()));
    let (got, status) = get(follower, "/status").await;
    spec.check("get", "/status", got, &status);
    assert_eq!(status["paused"], json!(true));
    assert_eq!(
        status["maintenance"]["reason"].as_str(),
        Some("restoring a backup")
    );
    assert!(text(follower, "/metrics")
        .await
        .contains("pilot_election_maintenance 1"));
    let (got, resumed) = call(follower, "delete", "/pause", Some(TOKEN), None, Vec::new()).await;
    assert_eq!((got, &resumed["paused"]), (200, &json!(false)), "{resumed}");
    spec.check("delete", "/pause", got, &resumed);
    assert_eq!(resumed["setting"]["version"], json!(2));

    // Nothing of the above moved leadership.
    assert_eq!(c.agreed().await, (li, term));
}

/// Several elections in one process: each group elects on its own and its leaders spread over
/// the nodes, the routes of a named group answer for it alone (a step-down or a pause in one
/// group moves nothing in another), and every bad or unknown group is a 4xx that changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_group_elects_on_its_own_and_answers_on_its_own_routes() {
    let spec = Spec::load();
    let auth = Auth {
        token: Some(TOKEN.into()),
        allow_unauthenticated: false,
    };
    let groups = ["g1", "g2", "g3", "g4", "g5", "g6"];
    let c = Cluster::start_groups(&["a1", "a2", "a3"], auth, &groups);
    let default = c.agreed().await;
    let mut leaders = BTreeMap::new();
    for g in groups {
        leaders.insert(g, c.agreed_in(g).await);
    }
    let spread: BTreeSet<usize> = leaders.values().map(|(li, _)| *li).collect();
    assert!(
        spread.len() >= 2,
        "every group led by one node: {leaders:?}"
    );
    let name = |i: usize| format!("a{}", i + 1);

    for n in &c.nodes {
        let (status, body) = get(&n.router, "/groups").await;
        spec.check("get", "/groups", status, &body);
        assert_eq!((status, &body["count"]), (200, &json!(7)), "{body}");
        assert_eq!(body["default"], "in-process", "{body}");
        let listed: BTreeMap<&str, &Value> = (body["groups"].as_array().unwrap().iter())
            .map(|g| (g["group"].as_str().unwrap(), g))
            .collect();
        for (g, (li, term)) in &leaders {
            assert_eq!(listed[g]["leader"], json!(name(*li)), "{g}: {body}");
            assert_eq!(listed[g]["term"], json!(term), "{g}: {body}");
        }
        assert_eq!(listed["in-process"]["leader"], json!(name(default.0)));
    }
    let leading: u64 =
        futures_util::future::join_all(c.nodes.iter().map(|n| get(&n.router, "/groups")))
            .await
            .iter()
            .map(|(_, b)| b["leading"].as_u64().unwrap())
            .sum();
    assert_eq!(leading, 7, "each group has one leader among the nodes");

    // /metrics: the totals over the groups always, and one series per group (the harness's
    // nodes ask for every group's, `--metrics-groups all`).
    for (i, n) in c.nodes.iter().enumerate() {
        let m = text(&n.router, "/metrics").await;
        let (_, list) = get(&n.router, "/groups").await;
        assert_eq!(metric(&m, "pilot_election_groups"), 7.0, "{m}");
        assert_eq!(
            metric(&m, "pilot_election_groups_leading"),
            list["leading"].as_f64().unwrap(),
            "{list}\n{m}"
        );
        assert!(m.contains("\npilot_election_groups_leaderless 0\n"), "{m}");
        for (g, (li, term)) in &leaders {
            let series = |name: &str| format!("pilot_election_{name}{{group=\"{g}\"}}");
            assert_eq!(metric(&m, &series("group_term")), *term as f64, "{g}: {m}");
            assert_eq!(
                metric(&m, &series("group_is_leader")),
                if *li == i { 1.0 } else { 0.0 },
                "{g}: {m}"
            );
            assert!(
                m.contains(&format!("{} 0\n", series("group_leaderless"))),
                "{g}: {m}"
            );
        }
    }

    for (g, (li, term)) in &leaders {
        let (leader, follower) = (&c.nodes[*li].router, &c.nodes[(li + 1) % 3].router);
        for router in [leader, follower] {
            for p in [
                "/leader",
                "/term",
                "/status",
                "/history",
                "/role/leader",
                "/role/follower",
                "/pause",
                "/step-down",
            ] {
                let (status, body) = get(router, &format!("/groups/{g}{p}")).await;
                spec.check("get", &format!("/groups/{{group}}{p}"), status, &body);
            }
        }
        let (status, body) = get(leader, &format!("/groups/{g}/leader")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            (&body["term"], &body["is_self"]),
            (&json!(term), &json!(true))
        );
        let (status, body) = get(follower, &format!("/groups/{g}/term")).await;
        assert_eq!((status, &body["term"]), (200, &json!(term)), "{body}");
        assert_eq!(
            get(leader, &format!("/groups/{g}/role/leader")).await.0,
            200
        );
        assert_eq!(
            get(follower, &format!("/groups/{g}/role/leader")).await.0,
            503
        );
        assert_eq!(
            get(follower, &format!("/groups/{g}/role/follower")).await.0,
            200
        );
    }

    // Bad and unknown groups, read or written: a 4xx, and nothing moves.
    const J: Option<&str> = Some("application/json");
    let router = &c.nodes[0].router;
    for (method, path, token, status, code) in [
        ("get", "/groups/nope/leader", None, 404, "unknown_group"),
        ("get", "/groups/nope/events", None, 404, "unknown_group"),
        ("get", "/groups/a%2Fb/leader", None, 400, "invalid_group"),
        ("get", "/groups/-x/term", None, 400, "invalid_group"),
        ("get", "/groups/%C3%BC/status", None, 400, "invalid_group"),
        (
            "post",
            "/groups/nope/step-down",
            Some(TOKEN),
            404,
            "unknown_group",
        ),
        (
            "post",
            "/groups/nope/pause",
            Some(TOKEN),
            404,
            "unknown_group",
        ),
        (
            "post",
            "/groups/x..y!/candidacy",
            Some(TOKEN),
            400,
            "invalid_group",
        ),
        (
            "delete",
            "/groups/nope/pause",
            Some(TOKEN),
            404,
            "unknown_group",
        ),
        ("post", "/groups/g1/step-down", None, 401, "unauthorized"),
        ("post", "/groups/nope/step-down", None, 401, "unauthorized"),
    ] {
        let (s, body) = call(router, method, path, token, J, b"{}".to_vec()).await;
        assert_eq!(
            (s, body["error"].as_str()),
            (status, Some(code)),
            "{method} {path}: {body}"
        );
        let template = if path.starts_with("/groups/") {
            let rest = path.splitn(4, '/').nth(3).unwrap_or_default();
            format!("/groups/{{group}}/{rest}")
        } else {
            path.to_string()
        };
        spec.check(method, &template, s, &body);
    }
    for (g, led) in &leaders {
        assert_eq!(c.agreed_in(g).await, *led, "{g} moved");
    }

    // A step-down in one group hands over that group only.
    let (g, (li, term)) = leaders.iter().next().map(|(g, l)| (*g, *l)).unwrap();
    let (status, body) = call(
        &c.nodes[li].router,
        "post",
        &format!("/groups/{g}/step-down"),
        Some(TOKEN),
        J,
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    spec.check("post", "/groups/{group}/step-down", status, &body);
    let (after, new_term) = wait_for(Duration::from_secs(20), || async {
        let (i, t) = c.agreed_in(g).await;
        (t > term).then_some((i, t))
    })
    .await
    .expect("a new leader in the group that stepped down");
    assert!(
        new_term > term && after != li,
        "{g}: {li} in {term} -> {after} in {new_term}"
    );
    for (other, led) in leaders.iter().filter(|(o, _)| **o != g) {
        assert_eq!(c.agreed_in(other).await, *led, "{other} moved with {g}");
    }
    assert_eq!(
        c.agreed().await,
        default,
        "the default group moved with {g}"
    );

    // A pause in one group holds there only.
    let (status, body) = call(
        router,
        "post",
        "/groups/g2/pause",
        Some(TOKEN),
        J,
        b"{}".to_vec(),
    )
    .await;
    assert_eq!((status, &body["paused"]), (200, &json!(true)), "{body}");
    spec.check("post", "/groups/{group}/pause", status, &body);
    let paused = wait_for(Duration::from_secs(20), || async {
        let all = futures_util::future::join_all(
            c.nodes.iter().map(|n| get(&n.router, "/groups/g2/pause")),
        )
        .await;
        all.iter()
            .all(|(_, b)| b["paused"] == json!(true))
            .then_some(())
    })
    .await;
    assert!(paused.is_some(), "the pause of g2 reached every member");
    for path in ["/pause", "/groups/g3/pause", "/groups/in-process/pause"] {
        for n in &c.nodes {
            let (status, body) = get(&n.router, path).await;
            assert_eq!(
                (status, &body["paused"]),
                (200, &json!(false)),
                "{path}: {body}"
            );
        }
    }

    // Groups added while the nodes run elect like the others, up to --max-groups.
    for n in &c.nodes {
        for g in ["added-1", "added-2"] {
            let body = json!({ "group": g }).to_string().into_bytes();
            let (status, answer) = call(&n.router, "post", "/groups", Some(TOKEN), J, body).await;
            assert_eq!((status, &answer["group"]), (201, &json!(g)), "{answer}");
            spec.check("post", "/groups", status, &answer);
        }
    }
    let elected = wait_for(Duration::from_secs(20), || async {
        let mut named = BTreeSet::new();
        for n in &c.nodes {
            let (_, body) = get(&n.router, "/groups/added-1/leader").await;
            named.insert(body["leader"].as_str()?.to_string());
        }
        (named.len() == 1).then_some(named)
    })
    .await;
    assert!(elected.is_some(), "added-1 elected one leader");
    let body = |g: &str| json!({ "group": g }).to_string().into_bytes();
    for (g, token, status, code) in [
        ("added-1", Some(TOKEN), 409, "group_exists"),
        ("g1", Some(TOKEN), 409, "group_exists"),
        ("added-3", Some(TOKEN), 409, "too_many_groups"),
        ("a/b", Some(TOKEN), 400, "invalid_group"),
        ("", Some(TOKEN), 400, "invalid_group"),
        ("added-3", None, 401, "unauthorized"),
        ("added-3", Some("wrong"), 403, "forbidden"),
    ] {
        let (s, answer) = call(router, "post", "/groups", token, J, body(g)).await;
        assert_eq!(
            (s, answer["error"].as_str()),
            (status, Some(code)),
            "{g}: {answer}"
        );
        spec.check("post", "/groups", s, &answer);
    }
    let (s, answer) = call(
        router,
        "post",
        "/groups",
        Some(TOKEN),
        J,
        br#"{"group": 5}"#.to_vec(),
    )
    .await;
    assert_eq!(
        (s, answer["error"].as_str()),
        (422, Some("invalid_body")),
        "{answer}"
    );
    assert_eq!(
        get(router, "/groups").await.1["count"],
        json!(9),
        "nothing refused was added"
    );
    let m = text(router, "/metrics").await;
    assert!(
        m.contains("pilot_election_group_term{group=\"added-1\"}"),
        "a group added at run time has its series: {m}"
    );

    // Removing: only what was added at run time, and then its routes are gone.
    for (path, status, code) in [
        ("/groups/g1", 409, "configured_group"),
        ("/groups/in-process", 409, "configured_group"),
        ("/groups/nope", 404, "unknown_group"),
        ("/groups/-x", 400, "invalid_group"),
    ] {
        let (s, answer) = call(router, "delete", path, Some(TOKEN), None, Vec::new()).await;
        assert_eq!(
            (s, answer["error"].as_str()),
            (status, Some(code)),
            "{path}: {answer}"
        );
        spec.check("delete", "/groups/{group}", s, &answer);
    }
    for n in &c.nodes {
        let (s, answer) = call(
            &n.router,
            "delete",
            "/groups/added-1",
            Some(TOKEN),
            None,
            Vec::new(),
        )
        .await;
        assert_eq!((s, &answer["group"]), (200, &json!("added-1")), "{answer}");
        spec.check("delete", "/groups/{group}", s, &answer);
        let (s, answer) = get(&n.router, "/groups/added-1/leader").await;
        assert_eq!(
            (s, answer["error"].as_str()),
            (404, Some("unknown_group")),
            "{answer}"
        );
    }
    let (_, list) = get(router, "/groups").await;
    assert_eq!(list["count"], json!(8), "{list}");
    let m = text(router, "/metrics").await;
    assert!(
        !m.contains("group=\"added-1\"") && m.contains("\npilot_election_groups 8\n"),
        "a removed group's series go with it: {m}"
    );
    for (g, led) in &leaders {
        if *g != "g1" {
            assert_eq!(
                c.agreed_in(g).await,
                *led,
                "{g} moved when groups came and went"
            );
        }
    }
}

/// A stream of server-sent events read from a router's answer: `(event, data)` pairs.
struct Events {
    body: axum::body::BodyDataStream,
    buf: String,
}

impl Events {
    async fn open(router: &Router, path: &str) -> Events {
        let req = Request::builder().uri(path).body(Body::empty()).unwrap();
        let resp = send(router, req).await;
        assert_eq!(resp.status(), 200, "{path}");
        Events {
            body: resp.into_body().into_data_stream(),
            buf: String::new(),
        }
    }

    /// The next event (keep-alive comments skipped), within 20 s.
    async fn next(&mut self) -> (String, Value) {
        use futures_util::StreamExt as _;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..end + 2).collect();
                let (mut event, mut data) = (String::new(), String::new());
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        event = v.to_string();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if event.is_empty() && data.is_empty() {
                    continue;
                }
                return (event, serde_json::from_str(&data).expect("JSON data"));
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .expect("an event within 20 s")
                .expect("the stream goes on")
                .expect("bytes");
            self.buf
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }

    /// The next event that `pick` takes, skipping the others.
    async fn until<T>(&mut self, mut pick: impl FnMut(&str, &Value) -> Option<T>) -> T {
        loop {
            let (event, data) = self.next().await;
            if let Some(t) = pick(&event, &data) {
                return t;
            }
        }
    }
}

#[tokio::test]
async fn one_stream_follows_many_groups() {
    let spec = Spec::load();
    let auth = Auth {
        token: Some(TOKEN.into()),
        allow_unauthenticated: false,
    };
    let c = Cluster::start_groups(&["a1", "a2", "a3"], auth, &["g1", "g2", "g3"]);
    let mut leaders = BTreeMap::new();
    for g in ["g1", "g2", "g3"] {
        leaders.insert(g, c.agreed_in(g).await);
    }
    let router = &c.nodes[0].router;
    let name = |i: usize| format!("a{}", i + 1);

    // Two groups by name: each one's current state first, nothing of the others.
    let mut two = Events::open(router, "/events?groups=g1,g2").await;
    let mut first = BTreeMap::new();
    for _ in 0..2 {
        let (event, data) = two.next().await;
        assert_eq!(event, "leader", "{data}");
        first.insert(data["group"].as_str().unwrap().to_string(), data);
    }
    for g in ["g1", "g2"] {
        let (li, term) = leaders[g];
        assert_eq!(first[g]["leader"], json!(name(li)), "{g}: {:?}", first[g]);
        assert_eq!(first[g]["term"], json!(term), "{g}: {:?}", first[g]);
        assert_eq!(first[g]["node"], json!("a1"));
    }
    // `all`: every group, the default one too.
    let mut all = Events::open(router, "/events?groups=all").await;
    let mut seen = BTreeSet::new();
    while seen.len() < 4 {
        let (event, data) = all.next().await;
        assert_eq!(event, "leader", "{data}");
        seen.insert(data["group"].as_str().unwrap().to_string());
    }
    assert_eq!(
        seen,
        BTreeSet::from(["g1", "g2", "g3", "in-process"].map(String::from))
    );

    // A step-down in g2 comes on both streams with g2's new leader; g3's reaches only `all`.
    let (li, term) = leaders["g2"];
    let (status, body) = call(
        &c.nodes[li].router,
        "post",
        "/groups/g2/step-down",
        Some(TOKEN),
        Some("application/json"),
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let (after, new_term) = wait_for(Duration::from_secs(20), || async {
        let (i, t) = c.agreed_in("g2").await;
        (t > term).then_some((i, t))
    })
    .await
    .expect("g2 has a new leader");
    for s in [&mut two, &mut all] {
        let data = s
            .until(|_, d| {
                (d["group"] == "g2" && d["term"] == json!(new_term) && !d["leader"].is_null())
                    .then(|| d.clone())
            })
            .await;
        assert_eq!(data["leader"], json!(name(after)), "{data}");
    }

    // A group added while the streams are open: `all` follows it, the named stream does not.
    let (status, body) = call(
        router,
        "post",
        "/groups",
        Some(TOKEN),
        Some("application/json"),
        json!({ "group": "late" }).to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    all.until(|e, d| (e == "leader" && d["group"] == "late").then_some(()))
        .await;

    // Removed: `removed` on both streams that follow it; the named one goes on with g1.
    let (status, body) = call(
        router,
        "delete",
        "/groups/late",
        Some(TOKEN),
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    all.until(|e, d| (e == "removed" && d["group"] == "late").then_some(()))
        .await;
    let (gi, gterm) = leaders["g1"];
    let (status, body) = call(
        &c.nodes[gi].router,
        "post",
        "/groups/g1/step-down",
        Some(TOKEN),
        Some("application/json"),
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let data = two
        .until(|e, d| {
            assert_ne!(d["group"], "late", "the named stream never follows late");
            assert_ne!(d["group"], "g3", "nor g3");
            (e == "leader" && d["group"] == "g1" && d["term"].as_u64() > Some(gterm))
                .then(|| d.clone())
        })
        .await;
    assert_eq!(data["group"], "g1", "{data}");

    // Bad requests: a 4xx in the error body, and no stream.
    for (path, status, code) in [
        ("/events?groups=nope", 404, "unknown_group"),
        ("/events?groups=g1,nope", 404, "unknown_group"),
        ("/events?groups=-x", 400, "invalid_group"),
        ("/events?groups=a%2Fb", 400, "invalid_group"),
        ("/events?groups=", 400, "invalid_query"),
        ("/events?groups=all,g1", 400, "invalid_query"),
    ] {
        let (s, body) = get(router, path).await;
        assert_eq!(
            (s, body["error"].as_str()),
            (status, Some(code)),
            "{path}: {body}"
        );
        spec.check("get", "/events", s, &body);
    }
    let (s, body) = get(router, "/groups/g1/events?groups=g1").await;
    assert_eq!(
        (s, body["error"].as_str()),
        (400, Some("invalid_query")),
        "{body}"
    );
    spec.check("get", "/groups/{group}/events", s, &body);
}

#[tokio::test]
async fn without_a_token_mutations_are_refused_unless_explicitly_allowed() {
    let refused = Cluster::start(&["lonely"], Auth::default());
    let allowed = Cluster::start(
        &["open"],
        Auth {
            token: None,
            allow_unauthenticated: true,
        },
    );
    allowed.agreed().await;
    let (router, open) = (&refused.nodes[0].router, &allowed.nodes[0].router);
    for (path, body) in [
        ("/step-down", json!({})),
        ("/candidacy", json!({"eligible": true})),
        ("/pause", json!({})),
    ] {
        let body = body.to_string().into_bytes();
        let ct = Some("application/json");
        let (status, answer) = call(router, "post", path, Some("anything"), ct, body.clone()).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (403, Some("admin_token_not_configured")),
            "{answer}"
        );
        // Allowed explicitly, the same request gets past authentication to the command itself.
        let (status, answer) = call(open, "post", path, None, ct, body).await;
        assert!(
            (200..300).contains(&status),
            "{path} with --allow-unauthenticated: {status} {answer}"
        );
    }
}

/// Issue 39, item 4: `?consistent=true` is answered by the leader once a quorum confirmed it
/// after the read arrived; a follower names the leader to ask (307 to its announced URL); a
/// leader that can no longer reach a quorum answers 503 while its plain read, inside its lease,
/// still names it. Every answer follows the spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistent_read_is_what_a_quorum_confirms_after_it_arrived() {
    let spec = Spec::load();
    let c = Cluster::start_configured(&["c1", "c2", "c3"], Auth::default(), &[], |config| {
        config.info = Some(pilot_election::election::NodeInfo {
            url: format!("http://{}.test:7000/", config.node_id),
            meta: BTreeMap::new(),
        });
    });
    let (li, term) = c.agreed().await;
    let fi = (li + 1) % 3;
    let (leader, follower) = (&c.nodes[li].router, &c.nodes[fi].router);
    let leader_id = format!("c{}", li + 1);
    for path in ["/leader", "/term", "/role/leader"] {
        let asked = format!("{path}?consistent=true");
        let (status, body) = get(leader, &asked).await;
        assert_eq!(status, 200, "{asked} on the leader: {body}");
        spec.check("get", path, status, &body);
        assert_eq!(body["term"], term, "{asked}");
        if path != "/role/leader" {
            assert_eq!(body["consistent"], true, "{asked}");
        }
    }
    let (_, plain) = get(leader, "/leader").await;
    assert_eq!(plain["consistent"], false);

    // A follower sends the reader to the leader's announced URL, path and query kept (wait
    // until the follower has heard the leader's URL: it travels on the leader's messages).
    let redirect = wait_for(Duration::from_secs(10), || async {
        let req = Request::get("/leader?consistent=true&x=1")
            .body(Body::empty())
            .expect("request");
        let resp = send(follower, req).await;
        let location = resp.headers().get("location")?.to_str().ok()?.to_string();
        let status = resp.status().as_u16();
        let body: Value = serde_json::from_slice(&body_of(resp).await).ok()?;
        Some((status, location, body))
    })
    .await
    .expect("the follower names the leader's URL");
    let (status, location, body) = redirect;
    assert_eq!(status, 307, "{body}");
    spec.check("get", "/leader", status, &body);
    assert_eq!(
        location,
        format!("http://{leader_id}.test:7000/leader?consistent=true&x=1")
    );
    assert_eq!(body["error"], "ask_the_leader");
    assert_eq!(body["leader"], leader_id.as_str());
    assert_eq!(body["location"], location.as_str());
    // A load balancer's check asks each backend about itself: no redirect.
    let (status, body) = get(follower, "/role/leader?consistent=true").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["role"], "follower");
    // A bad value is a 400 in the one error shape.
    let (status, body) = get(follower, "/term?consistent=maybe").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "invalid_query");
    spec.check("get", "/term", status, &body);

    // The followers stop: within its lease the leader's plain read still names it, but no
    // quorum confirms it any more.
    for (i, stop) in c.stops.iter().enumerate() {
        if i != li {
            stop.cancel();
        }
    }
    // Stopped, not only told to: a loop that ends drops its snapshot channel.
    for (i, n) in c.nodes.iter().enumerate().filter(|(i, _)| *i != li) {
        let mut rx = n.snapshot.clone();
        let ended = tokio::time::timeout(Duration::from_secs(20), async {
            while rx.changed().await.is_ok() {}
        })
        .await;
        assert!(ended.is_ok(), "node {i}'s loop did not stop");
    }
    let (status, body) = get(leader, "/leader?consistent=true").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "read_not_confirmed", "{body}");
    assert_eq!(body["term"], term);
    spec.check("get", "/leader", status, &body);
}

/// Readiness means "this node's vote counts again" (docs/guide/operations.md, "Rolling restarts"):
/// a node inside
/// its start-up guard answers 503 naming the guard, and once the guard is over it still answers
/// 503 while it hears no quorum, now for that reason. One of three members runs, at the default
/// timings, so the guard lasts `T` = 3 s and nothing can end it early.
#[tokio::test]
async fn readyz_is_503_while_the_node_cannot_vote_and_says_why() {
    let dir = TempDir::new("ready");
    let mut config = node_config("r1", &["r1", "r2", "r3"], &dir.0, &Auth::default());
    config.timings = pilot_election::election::Timings::default();
    let built = memory_node(config, 1, &Bus::new());
    let router = built.router();
    let mut snapshot = built.state.elections.default().snapshot.clone();
    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    tokio::spawn(built.runtime.run(stop));
    let spec = Spec::load();

    let (status, body) = get(&router, "/readyz").await;
    spec.check("get", "/readyz", status, &body);
    assert_eq!((status, &body["can_vote"]), (503, &json!(false)), "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("starting up"),
        "{body}"
    );

    let voting = tokio::time::timeout(Duration::from_secs(30), async {
        snapshot.wait_for(|s| s.view.can_vote).await.map(|_| ())
    })
    .await;
    assert!(
        matches!(voting, Ok(Ok(()))),
        "the start-up guard never ended"
    );
    let (status, body) = get(&router, "/readyz").await;
    spec.check("get", "/readyz", status, &body);
    assert_eq!((status, &body["can_vote"]), (503, &json!(true)), "{body}");
    let reasons = body["reasons"].to_string();
    assert!(!reasons.contains("starting up"), "{body}");
    assert!(reasons.contains("hears 1 of the 2"), "{body}");
}

#[test]
fn every_route_is_in_the_spec_and_every_spec_path_is_routed() {
    let spec = Spec::load();
    assert_eq!(spec.doc()["openapi"], "3.1.0");
    for (method, path) in ROUTES {
        assert!(
            spec.has(method, path),
            "{method} {path} is routed but not in openapi.yaml"
        );
    }
    let paths = spec.doc()["paths"].as_object().expect("paths");
    for (path, ops) in paths {
        for method in ops.as_object().expect("operations").keys() {
            assert!(
                ROUTES.contains(&(method.as_str(), path.as_str())),
                "{method} {path} is in openapi.yaml but not routed"
            );
        }
    }
}

#[test]
fn the_checker_rejects_what_breaks_a_schema() {
    let spec = Spec::load();
    let bad = json!({"error": "no_leader"});
    let r = std::panic::catch_unwind(|| spec.check("get", "/leader", 503, &bad));
    assert!(r.is_err(), "a missing `message` must fail");
    let extra = json!({"term": 1, "leader": null, "voted_for": null, "x": 1});
    let r = std::panic::catch_unwind(|| spec.check("get", "/term", 200, &extra));
    assert!(r.is_err(), "an unknown field must fail");
    // `oneOf`: a setting or null, nothing else.
    spec.check(
        "get",
        "/pause",
        200,
        &json!({"paused": false, "setting": null, "held_by": [], "quorum": 2, "confirmed": false}),
    );
    let neither =
        json!({"paused": false, "setting": 5, "held_by": [], "quorum": 2, "confirmed": false});
    let r = std::panic::catch_unwind(|| spec.check("get", "/pause", 200, &neither));
    assert!(r.is_err(), "a value matching no oneOf branch must fail");
}
