//! Whole clusters: election, crash failover, rejoin, step-down, SSE, graceful shutdown.

use std::time::Duration;

use serde_json::{json, Value};

use crate::app::{get_json, metrics_text, post_json, serial, wait_for, App, Cluster, T, TOKEN};

/// Start-up takes `T` (no node campaigns during its first `T`) plus staggers; generous for a
/// loaded machine.
const FIRST_LEADER: Duration = Duration::from_secs(20);

/// Asks the leader to hand over to `successor`, retrying while the successor is not yet known
/// to be eligible (it may have just started).
pub(crate) async fn hand_over(c: &Cluster, leader: &str, successor: &str) {
    hand_over_at(&c.nodes[c.index(leader)], successor, Some(TOKEN)).await;
}

/// Asks `leader` to hand over to `successor` with `token`, retrying while the successor is not
/// yet known to be eligible; the accepted answer must match the contract.
pub(crate) async fn hand_over_at(leader: &App, successor: &str, token: Option<&str>) {
    let url = leader.url();
    let done = wait_for(Duration::from_secs(10), || {
        let url = url.clone();
        async move {
            let (status, body) =
                post_json(&url, "/step-down", token, &json!({"successor": successor})).await;
            match status {
                202 => {
                    crate::contract::Spec::load().check("post", "/step-down", 202, &body);
                    Some(body)
                }
                422 => None,
                other => panic!("step-down answered {other}: {body}"),
            }
        }
    })
    .await;
    assert!(
        done.is_some(),
        "step-down to {successor} kept being refused"
    );
}

/// The whole story on `n` nodes; returns the measured failover time.
async fn crash_rejoin_handover(n: usize) -> Duration {
    let mut c = Cluster::start(n, &[]);
    let all: Vec<usize> = (0..n).collect();
    let (leader, term) = c.agreed(&all, FIRST_LEADER, |_, _| true).await;

    // kill -9 of the leader: the survivors agree on a new leader with a higher term.
    let li = c.index(&leader);
    c.nodes[li].kill9();
    let killed = pilot_election::clock::now();
    let survivors: Vec<usize> = all.iter().copied().filter(|i| *i != li).collect();
    let (leader2, term2) = c
        .agreed(&survivors, T + Duration::from_secs(2), |l, t| {
            l != leader && t > term
        })
        .await;
    let failover = pilot_election::clock::since(killed);
    eprintln!(
        "{n} nodes: failover from {leader} to {leader2} (term {term} -> {term2}) in {failover:?}"
    );

    if n == 3 {
        // Metrics scraped after the failover show it.
        let text = metrics_text(&c.nodes[survivors[0]].url()).await;
        let value = |prefix: &str| -> f64 {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
        };
        assert_eq!(value("pilot_election_term "), term2 as f64);
        assert!(value("pilot_election_leader_transitions_total{reason=\"elected\"}") >= 2.0);
        assert!(value("pilot_election_leader_transitions_total{reason=\"leader_timeout\"}") >= 1.0);
        assert!(
            value(
                "pilot_election_messages_received_total{type=\"heartbeat\",outcome=\"accepted\"}"
            ) > 0.0
        );
    }

    // The killed node restarts and follows, without raising the term.
    c.nodes[li].start();
    c.agreed(&all, Duration::from_secs(10), |l, t| {
        l == leader2 && t == term2
    })
    .await;
    // Its history survived the crash.
    let (_, h) = get_json(&format!("{}/history", c.nodes[li].url())).await;
    crate::contract::Spec::load().check("get", "/history", 200, &h);
    assert!(
        h["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["term"] == json!(term) && t["leader"] == json!(leader)),
        "history lost across the restart: {h}"
    );
    if n == 3 {
        // Past the restarted node's start-up window: it still has not disrupted anything.
        tokio::time::sleep(T + Duration::from_secs(1)).await;
        c.agreed(&all, Duration::from_secs(5), |l, t| {
            l == leader2 && t == term2
        })
        .await;
    }

    // A step-down to a named successor makes that successor lead.
    let successor = survivors
        .iter()
        .map(|i| c.nodes[*i].id.clone())
        .find(|id| *id != leader2)
        .expect("another survivor");
    hand_over(&c, &leader2, &successor).await;
    let asked = pilot_election::clock::now();
    let (leader3, term3) = c
        .agreed(&all, Duration::from_secs(10), |l, t| {
            l == successor && t > term2
        })
        .await;
    eprintln!(
        "{n} nodes: handover to {leader3} (term {term3}) in {:?}",
        pilot_election::clock::since(asked)
    );
    failover
}

#[tokio::test]
async fn three_nodes_elect_fail_over_rejoin_and_hand_over() {
    let _serial = serial().await;
    crash_rejoin_handover(3).await;
}

#[tokio::test]
async fn five_nodes_elect_fail_over_rejoin_and_hand_over() {
    let _serial = serial().await;
    crash_rejoin_handover(5).await;
}

/// Reads SSE events (`data:` payloads) from a streaming response.
pub(crate) struct Events {
    resp: reqwest::Response,
    buf: String,
}

impl Events {
    /// Subscribes to `url`'s `/events`, which must answer 200.
    pub(crate) async fn open(url: &str) -> Events {
        let resp = reqwest::Client::new()
            .get(format!("{url}/events"))
            .send()
            .await
            .expect("events");
        assert_eq!(resp.status().as_u16(), 200);
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        Events {
            resp,
            buf: String::new(),
        }
    }

    /// The first event naming `leader`, within 10 s.
    pub(crate) async fn until_leader(&mut self, leader: &str) -> Value {
        let seen = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(ev) = self.next().await {
                if ev["leader"] == json!(leader) {
                    return Some(ev);
                }
            }
            None
        })
        .await;
        match seen {
            Ok(Some(ev)) => ev,
            Ok(None) => panic!("the stream ended before naming {leader}"),
            Err(_) => panic!("no event named {leader} within 10 s"),
        }
    }

    pub(crate) async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let data: String = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if !data.is_empty() {
                    return serde_json::from_str(&data).ok();
                }
                continue;
            }
            let chunk = self.resp.chunk().await.ok()??;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

#[tokio::test]
async fn events_on_a_follower_show_the_new_leader_after_a_step_down() {
    let _serial = serial().await;
    let c = Cluster::start(3, &[]);
    let (leader, term) = c.agreed(&[0, 1, 2], FIRST_LEADER, |_, _| true).await;
    let followers: Vec<String> = c
        .nodes
        .iter()
        .map(|n| n.id.clone())
        .filter(|id| *id != leader)
        .collect();
    let (watcher, successor) = (&followers[0], &followers[1]);
    let mut events = Events::open(&c.nodes[c.index(watcher)].url()).await;
    let first = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("a first event at once")
        .expect("an event");
    assert_eq!(
        first["leader"],
        json!(leader),
        "current state first: {first}"
    );
    assert_eq!(first["term"], json!(term));
    crate::contract::Spec::load().check_schema("LeaderEvent", &first);

    hand_over(&c, &leader, successor).await;
    let seen = events.until_leader(successor).await;
    assert!(seen["term"].as_u64().unwrap() > term, "{seen}");
}

#[tokio::test]
async fn sigterm_on_the_leader_hands_over_within_a_second_and_exits_zero() {
    let _serial = serial().await;
    let mut c = Cluster::start(3, &[]);
    let (leader, term) = c.agreed(&[0, 1, 2], FIRST_LEADER, |_, _| true).await;
    let li = c.index(&leader);
    // Every member known live and eligible to the leader, so that it has a successor to name.
    let status_url = format!("{}/status", c.nodes[li].url());
    let known = wait_for(Duration::from_secs(10), || {
        let status_url = status_url.clone();
        async move {
            let (_, s) = get_json(&status_url).await;
            let members = s["members"].as_array()?;
            (members.len() >= 2
                && members
                    .iter()
                    .all(|m| m["live"] == json!(true) && m["eligible"] == json!(true)))
            .then_some(())
        }
    })
    .await;
    assert!(
        known.is_some(),
        "the leader never saw both followers\n{}",
        c.logs()
    );
    let survivors: Vec<usize> = (0..3).filter(|i| *i != li).collect();
    c.nodes[li].sigterm();
    let sent = pilot_election::clock::now();
    let (new, term2) = c
        .agreed(&survivors, Duration::from_secs(5), |l, t| {
            l != leader && t > term
        })
        .await;
    let handover = pilot_election::clock::since(sent);
    eprintln!("SIGTERM handover from {leader} to {new} (term {term2}) in {handover:?}");
    assert!(
        handover < Duration::from_secs(1),
        "handover took {handover:?}\n{}",
        c.logs()
    );
    let status = c.nodes[li].wait_exit(Duration::from_secs(9)).await;
    assert!(status.success(), "exit status {status:?}\n{}", c.logs());
    assert!(c.nodes[li].log().contains("handed leadership over"));
    // The history written before the exit records why it stopped leading.
    let saved = std::fs::read_to_string(c.nodes[li].data_dir().join("history.json")).unwrap();
    assert!(saved.contains("\"shutdown\""), "{saved}");
    let (_, body) = get_json(&format!("{}/history", c.nodes[survivors[0]].url())).await;
    assert!(body["transitions"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
}
