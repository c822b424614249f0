//! Bad requests to every endpoint: the JSON error body, the right 4xx, and a cluster that keeps
//! its leader throughout. Also the good answers, checked against the OpenAPI document.

use std::time::Duration;

use serde_json::{json, Value};

use pilot_election::api::ROUTES;

use crate::app::{
    app, client, free_port, get_json, metrics_text, post_json, serial, wait_for, Cluster, TOKEN,
};
use crate::contract::Spec;

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

async fn send(url: &str, c: &Case) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(c.method.to_uppercase().as_bytes()).unwrap();
    let mut req = client().request(method, format!("{url}{}", c.path));
    if let Some(t) = c.token {
        req = req.bearer_auth(t);
    }
    if let Some(ct) = c.content_type {
        req = req.header("content-type", ct);
    }
    let resp = req.body(c.body.clone()).send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// One table, so every endpoint gets every kind of bad input.
#[rustfmt::skip]
fn error_cases() -> Vec<Case> {
    const J: Option<&str> = Some("application/json");
    const OK: Option<&str> = Some(TOKEN);
    let big = vec![b' '; 70 * 1024];
    let mut cases = Vec::new();
    for path in ["/step-down", "/candidacy"] {
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
        case("get", "/step-down", None, None, "", 405, "method_not_allowed"),
        case("put", "/peer/messages", None, None, "", 405, "method_not_allowed"),
    ]);
    cases
}

#[tokio::test]
async fn bad_requests_get_json_errors_and_the_cluster_keeps_its_leader() {
    let _serial = serial().await;
    let spec = Spec::load();
    let c = Cluster::start(3, &[]);
    let (leader, term) = c
        .agreed(&[0, 1, 2], Duration::from_secs(20), |_, _| true)
        .await;
    let li = c.index(&leader);
    let fi = (li + 1) % 3;
    let (lu, fu) = (c.nodes[li].url(), c.nodes[fi].url());

    // Every routed method answers something other than 404/405.
    for (method, path) in ROUTES {
        if *path == "/events" {
            continue;
        }
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let status = client()
            .request(m, format!("{fu}{path}"))
            .send()
            .await
            .expect("request")
            .status()
            .as_u16();
        assert!(
            status != 404 && status != 405,
            "{method} {path} answered {status}"
        );
    }

    // Good answers from a leader and a follower follow the spec.
    for url in [&lu, &fu] {
        for path in [
            "/leader",
            "/term",
            "/status",
            "/history",
            "/role/leader",
            "/role/follower",
            "/healthz",
            "/readyz",
        ] {
            let (status, body) = get_json(&format!("{url}{path}")).await;
            spec.check("get", path, status, &body);
        }
    }
    let (s, b) = get_json(&format!("{lu}/role/leader")).await;
    assert_eq!((s, &b["role"]), (200, &json!("leader")));
    let (s, _) = get_json(&format!("{fu}/role/leader")).await;
    assert_eq!(s, 503);
    let head = client()
        .head(format!("{lu}/role/leader"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status().as_u16(), 200);
    let metrics = metrics_text(&lu).await;
    assert!(metrics.contains("pilot_election_is_leader 1"), "{metrics}");
    assert!(
        metrics.contains(&format!("pilot_election_term {term}")),
        "{metrics}"
    );

    // Malformed requests, on the leader and on a follower.
    for url in [&lu, &fu] {
        for case in error_cases() {
            let (status, body) = send(url, &case).await;
            assert_eq!(
                (status, body["error"].as_str()),
                (case.status, Some(case.code)),
                "{} {} {:?}: {body}",
                case.method,
                case.path,
                String::from_utf8_lossy(&case.body[..case.body.len().min(60)])
            );
            assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
            if spec_has(&spec, case.method, case.path) {
                spec.check(case.method, case.path, status, &body);
            }
        }
    }

    // Refusals by the protocol.
    let refusals = [
        (&fu, json!({}), 409, "not_leader"),
        (
            &lu,
            json!({"expected_term": term + 5}),
            409,
            "term_mismatch",
        ),
        (
            &lu,
            json!({"successor": "nobody"}),
            422,
            "successor_ineligible",
        ),
    ];
    for (url, body, status, code) in refusals {
        let (got, answer) = post_json(url, "/step-down", Some(TOKEN), &body).await;
        assert_eq!(
            (got, answer["error"].as_str()),
            (status, Some(code)),
            "{answer}"
        );
        spec.check("post", "/step-down", got, &answer);
    }

    // Nothing of the above moved leadership.
    c.agreed(&[0, 1, 2], Duration::from_secs(5), |l, t| {
        l == leader && t == term
    })
    .await;
    let log = c.logs();
    assert!(!log.contains(TOKEN), "the token leaked into the logs");
    assert!(log.contains("refused mutation"), "refusals are logged");
}

fn spec_has(spec: &Spec, method: &str, path: &str) -> bool {
    ROUTES.contains(&(method, path)) && spec.has(method, path)
}

#[tokio::test]
async fn without_a_token_mutations_are_refused_unless_explicitly_allowed() {
    let _serial = serial().await;
    let mut a = app("lonely", free_port(), &[], &[]);
    a.start();
    let url = a.url();
    let up = wait_for(Duration::from_secs(10), || {
        let url = url.clone();
        async move { (get_json(&format!("{url}/healthz")).await.0 == 200).then_some(()) }
    })
    .await;
    assert!(up.is_some(), "{}", a.log());
    for path in ["/step-down", "/candidacy"] {
        let resp = client()
            .post(format!("{url}{path}"))
            .bearer_auth("anything")
            .json(&json!({"eligible": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 403);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"], "admin_token_not_configured", "{body}");
    }
}
