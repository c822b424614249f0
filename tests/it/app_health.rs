//! `run --health-cmd` / `--health-url` with real processes (docs/protocol.md, rule 17): a leader
//! whose application fails hands over within `k` intervals and a handover, is not healthy again
//! before `m` passes in a row, does not take leadership back at once; with every application
//! failing, one node still leads and a failover still happens.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use serde_json::Value;

use crate::app::{
    app, free_port, get_json, leader_of, metric, metrics_text, serial, wait_for, App, TempDir,
};
use crate::contract::Spec;

/// Start-up and each failover, with room for a loaded 2-core machine.
const AGREE: Duration = Duration::from_secs(20);
/// The checks' interval, and how many failures (passes) in a row change the verdict.
const INTERVAL: Duration = Duration::from_millis(200);
const K: u32 = 3;
const M: u32 = 4;

/// Three nodes, each with its own `extra` flags.
fn three(extra: impl Fn(&str) -> Vec<String>) -> Vec<App> {
    let peers: Vec<(String, u16)> = (1..=3).map(|i| (format!("n{i}"), free_port())).collect();
    peers
        .iter()
        .map(|(id, port)| {
            let own = extra(id);
            let own: Vec<&str> = own.iter().map(String::as_str).collect();
            let mut a = app(id, *port, &peers, &own);
            a.start();
            a
        })
        .collect()
}

fn logs(nodes: &[App]) -> String {
    crate::app::logs_of(nodes)
}

/// The leader every node in `which` names, once they agree.
async fn agreed(nodes: &[App], which: &[usize], accept: impl Fn(&str) -> bool) -> (String, u64) {
    let apps: Vec<&App> = which.iter().map(|i| &nodes[*i]).collect();
    crate::agree::agree(&apps, AGREE, |l, _| accept(l), || logs(nodes)).await
}

async fn status(node: &App) -> Value {
    get_json(&format!("{}/status", node.url())).await.1
}

/// The application the nodes check: `GET /<node>` answers 200 or 503 as the test says.
#[derive(Clone, Default)]
struct Application {
    down: Arc<Mutex<BTreeMap<String, bool>>>,
}

impl Application {
    async fn serve(&self) -> SocketAddr {
        let app = Router::new()
            .route("/{node}", get(health))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    fn set_down(&self, node: &str, down: bool) {
        self.down.lock().unwrap().insert(node.to_string(), down);
    }
}

async fn health(State(a): State<Application>, Path(node): Path<String>) -> StatusCode {
    match a.down.lock().unwrap().get(&node) {
        Some(true) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::OK,
    }
}

#[tokio::test]
async fn a_leader_whose_application_fails_hands_over_and_comes_back_only_after_m_passes() {
    let _serial = serial().await;
    let spec = Spec::load();
    let application = Application::default();
    let addr = application.serve().await;
    let interval = format!("{}ms", INTERVAL.as_millis());
    let nodes = three(|id| {
        vec![
            "--health-url".into(),
            format!("http://{addr}/{id}"),
            "--health-interval".into(),
            interval.clone(),
            "--health-failures".into(),
            K.to_string(),
            "--health-successes".into(),
            M.to_string(),
            "--preempt-after".into(),
            "1s".into(),
        ]
    });
    let (leader, term) = agreed(&nodes, &[0, 1, 2], |_| true).await;
    let l = nodes.iter().position(|n| n.id == leader).unwrap();
    let others: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    // Every node healthy, as it says and as the others hear it.
    for n in &nodes {
        let s = wait_for(AGREE, || async {
            let s = status(n).await;
            let all = s["members"]
                .as_array()?
                .iter()
                .all(|m| m["healthy"] == true);
            (s["healthy"] == true && all).then_some(s)
        })
        .await
        .unwrap_or_else(|| panic!("{} never reported everyone healthy\n{}", n.id, logs(&nodes)));
        spec.check("get", "/status", 200, &s);
        assert_eq!(s["health_check"]["check"], "url");
        assert_eq!(s["health_check"]["failures_to_unhealthy"], K);
        assert_eq!(s["health_check"]["last_check"]["http_status"], 200);
    }

    // Rule 17 hands over only once the leader has led for T: make the failure come later, and
    // check meanwhile that the cluster keeps its leader.
    let t = pilot_election::election::Timings::default().election_timeout;
    let since = pilot_election::clock::now();
    while pilot_election::clock::since(since) < t {
        let now_leads = leader_of(&nodes[others[0]].url()).await.unwrap_or_default();
        assert_eq!(now_leads, (leader.clone(), term), "{}", logs(&nodes));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The leader's application fails.
    let failed_at = pilot_election::clock::now();
    application.set_down(&leader, true);
    let (successor, new_term) = agreed(&nodes, &others, |l| l != leader).await;
    let took = pilot_election::clock::since(failed_at);
    println!("the leader {leader} handed over to {successor} (term {term} -> {new_term}) {took:?} after its application failed");
    // k failed checks (the first may come up to one interval late) and a handover, with room
    // for a loaded machine.
    let bound = INTERVAL * (K + 1) + Duration::from_secs(3);
    assert!(
        took < bound,
        "took {took:?}, bound {bound:?}\n{}",
        logs(&nodes)
    );
    let history = get_json(&format!("{}/history", nodes[l].url())).await.1;
    let reasons: Vec<&str> = history["transitions"]
        .as_array()
        .or_else(|| history.as_array())
        .expect("a history list")
        .iter()
        .filter_map(|e| e["reason"].as_str())
        .collect();
    assert!(reasons.contains(&"unhealthy"), "{history}");
    let s = status(&nodes[l]).await;
    spec.check("get", "/status", 200, &s);
    assert_eq!(s["healthy"], false);
    assert_eq!(s["health_check"]["healthy"], false);
    assert_eq!(s["health_check"]["last_check"]["outcome"], "fail");
    assert_eq!(s["health_check"]["last_check"]["http_status"], 503);
    let m = metrics_text(&nodes[l].url()).await;
    assert_eq!(metric(&m, "pilot_election_app_healthy"), 0.0, "{m}");
    assert!(metric(&m, "pilot_election_health_checks_total{outcome=\"fail\"}") >= f64::from(K));
    let seen = status(&nodes[others[0]]).await;
    let member = seen["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == leader.as_str())
        .unwrap()
        .clone();
    assert_eq!(member["healthy"], false, "{seen}");

    // Back: healthy only after M passes in a row, sampled all along; no leadership back at once
    // although it outranks the new leader and preemption is 1 s (its recovery is a flap).
    application.set_down(&leader, false);
    let most = std::cell::Cell::new(0);
    let healthy_again = wait_for(AGREE, || async {
        let s = status(&nodes[l]).await;
        let hc = &s["health_check"];
        let passes = hc["passes_in_row"].as_u64().unwrap_or(0);
        if hc["healthy"] == false {
            most.set(most.get().max(passes));
            return None;
        }
        Some(passes)
    })
    .await
    .expect("healthy again");
    assert!(
        most.get() < u64::from(M),
        "still unhealthy after {} passes",
        most.get()
    );
    assert!(
        healthy_again >= u64::from(M),
        "healthy after {healthy_again} passes"
    );
    let recovered = pilot_election::clock::now();
    // Preemption alone would hand it back within max(P, T) = 3 s; the flap window is 30 s.
    while pilot_election::clock::since(recovered) < Duration::from_secs(8) {
        let (l_now, _) = leader_of(&nodes[others[0]].url()).await.unwrap_or_default();
        assert_ne!(
            l_now,
            leader,
            "took leadership back at once\n{}",
            logs(&nodes)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn with_every_application_failing_one_node_still_leads_and_fails_over() {
    let _serial = serial().await;
    let dir = TempDir::new("apps-down");
    let interval = format!("{}ms", INTERVAL.as_millis());
    // Every application is down from the start: the checks never pass.
    let mut nodes = three(|id| {
        let down = dir.0.join(format!("{id}.down"));
        std::fs::write(&down, b"").unwrap();
        vec![
            "--health-cmd".into(),
            format!("test ! -e {}", down.display()),
            "--health-interval".into(),
            interval.clone(),
        ]
    });
    let (leader, _) = agreed(&nodes, &[0, 1, 2], |_| true).await;
    for n in &nodes {
        let s = status(n).await;
        assert_eq!(s["healthy"], false, "{s}");
        assert_eq!(s["health_check"]["last_check"]["outcome"], "fail", "{s}");
        assert_eq!(s["health_check"]["last_check"]["exit_code"], 1, "{s}");
    }
    let l = nodes.iter().position(|n| n.id == leader).unwrap();
    nodes[l].kill9();
    let others: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    let (successor, _) = agreed(&nodes, &others, |x| x != leader).await;
    println!("with every application down, {leader} led, then {successor} after a kill -9");
}
