//! For the services that ask who coordinates (docs/clients.md): every member says where the
//! leader is and how it is labelled, and a watcher that reconnects to `/events` learns what it
//! missed, from the same node's log or from another member's history.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::app::{get_json, serial, wait_for, Cluster};
use crate::cli::run;
use crate::cluster::hand_over;

const FIRST_LEADER: Duration = Duration::from_secs(20);

#[tokio::test]
async fn every_member_says_where_the_leader_is_and_how_it_is_labelled() {
    let _serial = serial().await;
    let c = Cluster::start(3, &["--meta", "zone=it", "--meta", "tier=test"]);
    let (leader, term) = c.agreed(&[0, 1, 2], FIRST_LEADER, |_, _| true).await;
    let leader_url = c.nodes[c.index(&leader)].url();
    let spec = crate::contract::Spec::load();
    for n in &c.nodes {
        // Every member has heard the leader's announcement once it follows it.
        let (_, body) = get_json(&format!("{}/leader", n.url())).await;
        spec.check("get", "/leader", 200, &body);
        assert_eq!(body["leader"], json!(leader), "{}: {body}", n.id);
        assert_eq!(body["term"], json!(term));
        assert_eq!(body["leader_url"], json!(leader_url), "{}: {body}", n.id);
        assert_eq!(body["leader_meta"], json!({"zone": "it", "tier": "test"}));
        assert_eq!(body["node_url"], json!(n.url()));
    }
    // /status lists every member's URL once it was heard.
    let status_url = format!("{}/status", c.nodes[0].url());
    let urls = wait_for(Duration::from_secs(10), || {
        let status_url = status_url.clone();
        async move {
            let (_, s) = get_json(&status_url).await;
            let urls: BTreeMap<String, Value> = s["members"]
                .as_array()?
                .iter()
                .map(|m| {
                    (
                        m["id"].as_str().unwrap_or("?").to_string(),
                        m["url"].clone(),
                    )
                })
                .collect();
            urls.values().all(Value::is_string).then_some((s, urls))
        }
    })
    .await;
    let (status, urls) = urls.expect("every member's URL within 10 s");
    spec.check("get", "/status", 200, &status);
    assert_eq!(status["url"], json!(c.nodes[0].url()));
    for n in &c.nodes[1..] {
        assert_eq!(urls[&n.id], json!(n.url()));
    }
    // The CLI says it too.
    let follower = c.nodes.iter().find(|n| n.id != leader).expect("a follower");
    let o = run(&["leader", "--print-url", "--url", &follower.url()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), leader_url);
    let o = run(&["leader", "--url", &follower.url()]);
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(
        line.contains(&format!("leader {leader} (term {term}) at {leader_url}")),
        "{line}"
    );
}

/// The URL is information: nodes that announce one nobody can reach (TEST-NET-1, RFC 5737)
/// elect as usual, and clients are told that URL.
#[tokio::test]
async fn a_leader_whose_url_nobody_can_reach_still_leads() {
    let _serial = serial().await;
    let c = Cluster::start(3, &["--advertise-url", "http://192.0.2.1:9"]);
    let (leader, _) = c.agreed(&[0, 1, 2], FIRST_LEADER, |_, _| true).await;
    for n in &c.nodes {
        let (code, body) = get_json(&format!("{}/leader", n.url())).await;
        assert_eq!(code, 200, "{}: {body}", n.id);
        assert_eq!(body["leader"], json!(leader));
        assert_eq!(body["leader_url"], json!("http://192.0.2.1:9"));
    }
}

#[test]
fn an_advertise_url_that_cannot_be_derived_or_used_is_refused_at_start() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--node-id", "a", "--listen", "0.0.0.0:7070"],
            "--advertise-url is needed",
        ),
        (
            &["run", "--node-id", "a", "--advertise-url", "ftp://a:21"],
            "the scheme must be http or https",
        ),
        (
            &["run", "--node-id", "a", "--meta", "zone"],
            "expected KEY=VALUE",
        ),
        (
            &["run", "--node-id", "a", "--meta", "a b=c"],
            "letters, digits",
        ),
    ];
    for (args, why) in cases {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
}

/// One SSE event: its type, id and data.
#[derive(Debug, Clone)]
struct Sse {
    event: String,
    id: String,
    data: Value,
}

struct Stream {
    resp: reqwest::Response,
    buf: String,
}

impl Stream {
    async fn open(url: &str, last_id: Option<&str>) -> Stream {
        let mut req = reqwest::Client::new().get(format!("{url}/events"));
        if let Some(id) = last_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = req.send().await.expect("events");
        assert_eq!(resp.status().as_u16(), 200);
        Stream {
            resp,
            buf: String::new(),
        }
    }

    async fn next(&mut self) -> Sse {
        let got = tokio::time::timeout(Duration::from_secs(15), async {
            loop {
                if let Some(end) = self.buf.find("\n\n") {
                    let block: String = self.buf.drain(..end + 2).collect();
                    let field = |name: &str| -> String {
                        block
                            .lines()
                            .filter_map(|l| l.strip_prefix(name))
                            .map(str::trim)
                            .collect()
                    };
                    let data = field("data:");
                    if data.is_empty() {
                        continue;
                    }
                    return Sse {
                        event: field("event:"),
                        id: field("id:"),
                        data: serde_json::from_str(&data).expect("JSON data"),
                    };
                }
                let chunk = self.resp.chunk().await.expect("stream").expect("not ended");
                self.buf.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await;
        got.expect("an event within 15 s")
    }

    /// Events until one names `leader`; all of them.
    async fn until_leader(&mut self, leader: &str) -> Vec<Sse> {
        let mut seen = Vec::new();
        loop {
            let ev = self.next().await;
            let done = ev.data["leader"] == json!(leader);
            seen.push(ev);
            if done {
                return seen;
            }
        }
    }
}

fn seq_of(id: &str) -> u64 {
    id.split('-')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("run-seq-term")
}

/// A watcher that reconnects to the same node with `Last-Event-ID` gets exactly the events it
/// missed; one that moves to another member, or comes back after that node restarted, gets a
/// snapshot whose `missed` history holds every leader since.
#[tokio::test]
async fn a_watcher_that_reconnects_learns_every_leader_it_missed() {
    let _serial = serial().await;
    let mut c = Cluster::start(3, &[]);
    let (leader, term) = c.agreed(&[0, 1, 2], FIRST_LEADER, |_, _| true).await;
    let spec = crate::contract::Spec::load();
    let followers: Vec<String> = c
        .nodes
        .iter()
        .map(|n| n.id.clone())
        .filter(|id| *id != leader)
        .collect();
    let (watcher, other) = (followers[0].clone(), followers[1].clone());
    let w_url = c.nodes[c.index(&watcher)].url();
    let mut s = Stream::open(&w_url, None).await;
    let first = s.next().await;
    assert_eq!(first.event, "leader");
    assert_eq!(first.data["leader"], json!(leader));
    assert_eq!(
        first.data["leader_url"],
        json!(c.nodes[c.index(&leader)].url())
    );
    spec.check_schema("LeaderEvent", &first.data);
    drop(s);

    // Two handovers while nobody watches.
    hand_over(&c, &leader, &other).await;
    c.agreed(&[0, 1, 2], FIRST_LEADER, |l, t| l == other && t > term)
        .await;
    hand_over(&c, &other, &watcher).await;
    let (_, last_term) = c
        .agreed(&[0, 1, 2], FIRST_LEADER, |l, _| l == watcher)
        .await;

    // Back on the same node: the events after the last one seen, in order, none twice.
    let mut s = Stream::open(&w_url, Some(&first.id)).await;
    let missed = s.until_leader(&watcher).await;
    assert!(missed.iter().all(|e| e.event == "leader"), "{missed:?}");
    let seqs: Vec<u64> = missed.iter().map(|e| seq_of(&e.id)).collect();
    let want: Vec<u64> = (seq_of(&first.id) + 1..).take(seqs.len()).collect();
    assert_eq!(seqs, want, "consecutive from the id sent: {missed:?}");
    assert!(
        missed.iter().any(|e| e.data["leader"] == json!(other)),
        "the leader between is not left out: {missed:?}"
    );
    drop(s);

    // On another member with the watcher's id: a snapshot, with both handovers in it.
    let o_url = c.nodes[c.index(&other)].url();
    let mut s = Stream::open(&o_url, Some(&first.id)).await;
    let snap = s.next().await;
    assert_eq!(snap.event, "snapshot", "{snap:?}");
    spec.check_schema("SnapshotEvent", &snap.data);
    assert_eq!(snap.data["resumed"], json!(false));
    assert_eq!(snap.data["leader"], json!(watcher));
    let leaders: Vec<(u64, String)> = snap.data["missed"]
        .as_array()
        .expect("missed")
        .iter()
        .filter_map(|h| Some((h["term"].as_u64()?, h["leader"].as_str()?.to_string())))
        .collect();
    assert!(
        leaders.iter().all(|(t, _)| *t >= term),
        "from the id's term on: {leaders:?}"
    );
    for who in [&leader, &other, &watcher] {
        assert!(
            leaders.iter().any(|(_, l)| l == who),
            "{who} is missing: {leaders:?}"
        );
    }
    drop(s);

    // After the watched node restarted, its old id is of another run: a snapshot again.
    let wi = c.index(&watcher);
    c.nodes[wi].kill9();
    c.nodes[wi].start();
    let mut s = Stream::open_when_up(&w_url, &missed.last().expect("events").id).await;
    let snap = s.next().await;
    assert_eq!(snap.event, "snapshot", "{snap:?}");
    assert!(
        snap.data["term"].as_u64().expect("term") >= last_term,
        "{snap:?}"
    );
}

impl Stream {
    /// [`Stream::open`] once the node answers again (it was just restarted).
    async fn open_when_up(url: &str, last_id: &str) -> Stream {
        let up = wait_for(Duration::from_secs(15), || async {
            let r = reqwest::Client::new()
                .get(format!("{url}/healthz"))
                .send()
                .await
                .ok()?;
            r.status().is_success().then_some(())
        })
        .await;
        assert!(up.is_some(), "{url} did not come back");
        Stream::open(url, Some(last_id)).await
    }
}
