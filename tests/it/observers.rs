//! Observers (`run --observe`) as real processes: three members and fifty observers, over the
//! http transport and over pilot. A kill -9 of the leader reaches every observer within the
//! failover plus one second (p99), no observer ever answers 200 on `/role/leader`, the members
//! count their observers and never log them as strays, and an observer's answers follow the
//! contract.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt as _;
use pilot_election_client::Client;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::app::{get_json, wait_for, wait_up, App, Cluster, T};
use crate::contract::Spec;
use crate::devnet::Devnet;
use crate::pilot_cluster::{node_id, pilot_cluster};
use crate::watch::Watcher;
use support::observers::{http_observer, observer_id, pilot_observer};

const OBSERVERS: usize = 50;
/// Fifty processes starting, then following, on a loaded 2-core machine.
const SETTLE: Duration = Duration::from_secs(60);
/// Over pilot, a member hears an observer's announcement every 10 s.
const ANNOUNCED: Duration = Duration::from_secs(35);

/// When each watched node first reported a leader in a term above `above`.
#[derive(Default)]
struct Arrivals {
    /// Per node: the current leader's term as first streamed, and when a later term arrived.
    current: Vec<Option<u64>>,
    next: Vec<Option<(Instant, String, u64)>>,
}

/// Streams every node's `/events` (the client library's watch) and records arrivals.
struct Streams {
    arrivals: Arc<Mutex<Arrivals>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Streams {
    fn open(urls: &[String], above: u64) -> Streams {
        let arrivals = Arc::new(Mutex::new(Arrivals {
            current: vec![None; urls.len()],
            next: vec![None; urls.len()],
        }));
        let tasks = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let arrivals = arrivals.clone();
                let client = Client::builder([url.as_str()])
                    .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
                    .build()
                    .expect("client");
                tokio::spawn(async move {
                    let mut watch = client.watch();
                    while let Some(change) = watch.next().await {
                        let at = pilot_election::clock::now();
                        let mut a = arrivals.lock().unwrap();
                        if change.term <= above {
                            a.current[i] = Some(change.term);
                        } else if a.next[i].is_none() {
                            a.next[i] = Some((at, change.leader, change.term));
                        }
                    }
                })
            })
            .collect();
        Streams { arrivals, tasks }
    }

    fn connected(&self) -> usize {
        let a = self.arrivals.lock().unwrap();
        a.current.iter().filter(|c| c.is_some()).count()
    }

    fn arrived(&self) -> Vec<Option<(Instant, String, u64)>> {
        self.arrivals.lock().unwrap().next.clone()
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

async fn status(url: &str) -> Value {
    get_json(&format!("{url}/status")).await.1
}

/// Waits until every observer names `leader` in `term`, then checks one observer's answers
/// against the contract.
async fn all_follow(
    observers: &[App],
    leader: &str,
    term: u64,
    spec: &Spec,
    logs: &dyn Fn() -> String,
) {
    for o in observers {
        let got = wait_for(SETTLE, || async {
            let (code, body) = get_json(&format!("{}/leader", o.url())).await;
            (code == 200 && body["leader"] == leader && body["term"] == term).then_some(body)
        })
        .await;
        let Some(body) = got else {
            panic!(
                "observer {} never named {leader} in term {term}: {}\n{}\n{}",
                o.id,
                get_json(&format!("{}/leader", o.url())).await.1,
                o.log(),
                logs()
            );
        };
        assert_eq!(body["is_self"], false, "{body}");
        assert_eq!(body["node"], o.id.as_str(), "{body}");
        assert!(
            body["last_heartbeat_ms"].as_u64().is_some(),
            "an observer says how old its knowledge is: {body}"
        );
        assert!(
            body["lease_remaining_ms"].is_null(),
            "it vouches for no lease: {body}"
        );
        spec.check("get", "/leader", 200, &body);
    }
    let s = status(&observers[0].url()).await;
    spec.check("get", "/status", 200, &s);
    assert_eq!(s["role"], "follower", "{s}");
    assert!(s["observer"]["leader_heard_ms"].as_u64().is_some(), "{s}");
}

/// An observer refuses every command with 409 `observer`, whatever the token.
async fn refuses_commands(o: &App, spec: &Spec) {
    let c = crate::app::client();
    for path in ["/step-down", "/candidacy", "/pause"] {
        let r = c
            .post(format!("{}{path}", o.url()))
            .bearer_auth("anything")
            .json(&serde_json::json!({}))
            .send()
            .await
            .expect("observer answers");
        let code = r.status().as_u16();
        let body: Value = r.json().await.expect("json error body");
        assert_eq!(
            (code, body["error"].as_str()),
            (409, Some("observer")),
            "{path}: {body}"
        );
        spec.check("post", path, 409, &body);
    }
}

/// Kills the leader with kill -9 and measures, from the kill: the survivors' new leader (the
/// failover) and each observer's learning it. Returns (failover, per-observer latencies).
async fn kill_leader_and_time(
    c: &mut Cluster,
    observers: &[App],
    leader: &str,
    term: u64,
) -> (Duration, Vec<Duration>) {
    let li = c.index(leader);
    let survivors: Vec<String> = (0..c.nodes.len())
        .filter(|&i| i != li)
        .map(|i| c.nodes[i].url())
        .collect();
    let observer_urls: Vec<String> = observers.iter().map(App::url).collect();
    let members = Streams::open(&survivors, term);
    let watched = Streams::open(&observer_urls, term);
    let all_open = wait_for(SETTLE, || async {
        (members.connected() == survivors.len() && watched.connected() == observers.len())
            .then_some(())
    })
    .await;
    assert!(
        all_open.is_some(),
        "streams open: {} of {} members, {} of {} observers",
        members.connected(),
        survivors.len(),
        watched.connected(),
        observers.len()
    );

    c.nodes[li].kill9();
    let killed = pilot_election::clock::now();
    let done = wait_for(T * 4 + SETTLE, || async {
        let m = members.arrived();
        let o = watched.arrived();
        (m.iter().all(Option::is_some) && o.iter().all(Option::is_some)).then_some((m, o))
    })
    .await;
    let Some((m, o)) = done else {
        let missing: Vec<&str> = watched
            .arrived()
            .iter()
            .zip(observers)
            .filter(|(a, _)| a.is_none())
            .map(|(_, o)| o.id.as_str())
            .collect();
        panic!("after the kill, not every node learned a new leader; observers without: {missing:?}\n{}", c.logs());
    };
    let (elected_at, next, next_term) = m
        .iter()
        .flatten()
        .min_by_key(|(at, _, _)| *at)
        .cloned()
        .expect("a survivor");
    assert!(next != leader && next_term > term, "{next} in {next_term}");
    for (i, a) in o.iter().enumerate() {
        let (_, l, t) = a.as_ref().unwrap();
        assert!(
            (l.as_str(), *t) == (next.as_str(), next_term) || *t > next_term,
            "observer {} learned {l} in {t}, the members {next} in {next_term}",
            observers[i].id
        );
    }
    let failover = elected_at - killed;
    let mut lat: Vec<Duration> = o.iter().flatten().map(|(at, _, _)| *at - killed).collect();
    lat.sort();
    (failover, lat)
}

/// The members name no observer as a stray, and one observer's view of itself.
fn no_strays(c: &Cluster) {
    for n in &c.nodes {
        let log = n.log();
        for line in log.lines() {
            assert!(
                !(line.contains("obs-")
                    && (line.contains("not a member") || line.contains("stray"))),
                "member {} logged an observer as a stray: {line}",
                n.id
            );
        }
    }
}

fn report(label: &str, failover: Duration, lat: &[Duration]) {
    println!(
        "observers ({label}): failover {failover:?}; {} observers learned it after p50 {:?}, p99 {:?}, max {:?} (kill -9 to the observer's /events)",
        lat.len(),
        percentile(lat, 0.5),
        percentile(lat, 0.99),
        lat[lat.len() - 1]
    );
    let p99 = percentile(lat, 0.99);
    assert!(
        p99 <= failover + Duration::from_secs(1),
        "{label}: p99 {p99:?} over failover {failover:?} plus 1 s: {lat:?}"
    );
}

/// Polls every observer's `/role/leader` until stopped.
fn role_watcher(observers: &[App]) -> Watcher {
    Watcher::start_every(
        observers.iter().map(|o| (o.id.clone(), o.url())).collect(),
        Duration::from_millis(250),
    )
}

async fn never_led(w: Watcher, n: usize) {
    let rounds = w.rounds();
    let r = w.stop().await;
    let answered = rounds.iter().filter(|round| round.answered == n).count();
    assert!(
        answered > 0,
        "the watcher got answers from every observer in some round"
    );
    assert_eq!(
        r.max_leaders, 0,
        "an observer answered 200 on /role/leader: {:?}",
        r.overlaps
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_observers_over_http_follow_a_kill9_failover_without_a_vote() {
    let _serial = crate::app::serial().await;
    let spec = Spec::load();
    let mut c = Cluster::start(3, &[]);
    for n in &c.nodes {
        wait_up(n).await;
    }
    let members: Vec<(String, u16)> = c.nodes.iter().map(|n| (n.id.clone(), n.port)).collect();
    let mut observers: Vec<App> = (0..OBSERVERS)
        .map(|i| http_observer(&observer_id(i), &members))
        .collect();
    for o in &mut observers {
        o.start();
    }
    let (leader, term) = c.agreed(&[0, 1, 2], T * 4, |_, _| true).await;
    let logs = || c.logs();
    all_follow(&observers, &leader, term, &spec, &logs).await;
    let s = status(&observers[0].url()).await;
    assert_eq!(s["observer"]["transport"], "http", "{s}");
    let following = s["observer"]["following"].as_str().unwrap_or_default();
    assert!(
        c.nodes.iter().any(|m| m.url() == following),
        "an observer over http follows a member: {s}"
    );
    refuses_commands(&observers[0], &spec).await;
    // Every observer follows one member's stream: the members together serve fifty.
    let counted = wait_for(SETTLE, || async {
        let mut n = 0;
        for m in &c.nodes {
            let s = status(&m.url()).await;
            spec.check("get", "/status", 200, &s);
            n += s["observers"]["events"].as_u64()?;
        }
        (n == OBSERVERS as u64).then_some(n)
    })
    .await;
    assert!(
        counted.is_some(),
        "the members' /status counts fifty observers over events"
    );

    let roles = role_watcher(&observers);
    let (failover, lat) = kill_leader_and_time(&mut c, &observers, &leader, term).await;
    report("http", failover, &lat);
    never_led(roles, OBSERVERS).await;
    // The observers that followed the dead member moved to the survivors.
    let li = c.index(&leader);
    let moved = wait_for(SETTLE, || async {
        let mut n = 0;
        for (i, m) in c.nodes.iter().enumerate() {
            if i != li {
                n += status(&m.url()).await["observers"]["events"].as_u64()?;
            }
        }
        (n == OBSERVERS as u64).then_some(())
    })
    .await;
    assert!(moved.is_some(), "the survivors serve all fifty observers");
    no_strays(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_observers_over_pilot_follow_a_kill9_failover_without_a_vote() {
    let _serial = crate::app::serial().await;
    let spec = Spec::load();
    // n1..n3 members, n4 the broker, n5..n9 the observers' daemons (ten each).
    let net = Devnet::start(9);
    let mut c = pilot_cluster(&net, &[]);
    for n in &c.nodes {
        wait_up(n).await;
    }
    let member_ids: Vec<String> = ["n1", "n2", "n3"]
        .iter()
        .map(|d| node_id(&net, d))
        .collect();
    let mut observers: Vec<App> = (0..OBSERVERS)
        .map(|i| {
            let daemon = format!("n{}", 5 + i % 5);
            pilot_observer(&net, &observer_id(i), &daemon, "n4", &member_ids)
        })
        .collect();
    for o in &mut observers {
        o.start();
    }
    let (leader, term) = c.agreed(&[0, 1, 2], T * 4, |_, _| true).await;
    let logs = || c.logs();
    all_follow(&observers, &leader, term, &spec, &logs).await;
    let s = status(&observers[0].url()).await;
    assert_eq!(s["observer"]["transport"], "pilot", "{s}");
    assert!(
        s["observer"]["following"].is_null(),
        "the topic, no member: {s}"
    );
    refuses_commands(&observers[0], &spec).await;
    // Each member hears every observer's announcement on the topic.
    for m in &c.nodes {
        let heard = wait_for(ANNOUNCED, || async {
            let s = status(&m.url()).await;
            (s["observers"]["topic"].as_u64()? == OBSERVERS as u64).then_some(s)
        })
        .await;
        let Some(s) = heard else {
            panic!(
                "member {} did not hear fifty observers: {}",
                m.id,
                status(&m.url()).await["observers"]
            );
        };
        spec.check("get", "/status", 200, &s);
    }

    let roles = role_watcher(&observers);
    let (failover, lat) = kill_leader_and_time(&mut c, &observers, &leader, term).await;
    report("pilot", failover, &lat);
    never_led(roles, OBSERVERS).await;
    no_strays(&c);
}

/// The leader and term every member names for `group`, once they agree (accepted by `accept`).
async fn group_agreed(
    c: &Cluster,
    which: &[usize],
    group: &str,
    accept: impl Fn(&str, u64) -> bool,
) -> (String, u64) {
    let got = wait_for(SETTLE, || async {
        let mut seen = Vec::new();
        for &i in which {
            let (code, b) = get_json(&format!("{}/groups/{group}/leader", c.nodes[i].url())).await;
            if code != 200 {
                return None;
            }
            seen.push((b["leader"].as_str()?.to_string(), b["term"].as_u64()?));
        }
        let first = seen[0].clone();
        (seen.iter().all(|s| *s == first) && accept(&first.0, first.1)).then_some(first)
    })
    .await;
    got.unwrap_or_else(|| panic!("the members agreed on no leader of {group}\n{}", c.logs()))
}

/// Waits until the observer names `leader` in `term`, and says it follows `group`.
async fn observer_names(o: &App, group: &str, leader: &str, term: u64) {
    let got = wait_for(SETTLE, || async {
        let (code, body) = get_json(&format!("{}/leader", o.url())).await;
        (code == 200 && body["leader"] == leader && body["term"] == term).then_some(())
    })
    .await;
    assert!(
        got.is_some(),
        "observer {} never named {leader} in term {term} of {group}: {}\n{}",
        o.id,
        get_json(&format!("{}/leader", o.url())).await.1,
        o.log()
    );
    let s = status(&o.url()).await;
    assert_eq!(s["observer"]["group"], group, "{s}");
}

/// `--observe-group`: an observer follows a group other than the members' default one, names
/// that group's leader (not the default group's), follows its failover, and the members count
/// it under that group.
async fn observe_a_group(mut c: Cluster, mut o: App, via: &str) {
    let all = [0, 1, 2];
    for n in &c.nodes {
        wait_up(n).await;
    }
    o.args
        .extend(["--observe-group".to_string(), "shard-01".to_string()]);
    o.start();
    let (leader, term) = group_agreed(&c, &all, "shard-01", |_, _| true).await;
    observer_names(&o, "shard-01", &leader, term).await;
    // The members count it in shard-01, not in the default group: over pilot every member hears
    // its announcements on the topic, over http the one member whose stream it follows counts it.
    let expected = if via == "topic" { c.nodes.len() } else { 1 } as u64;
    let counted = wait_for(ANNOUNCED, || async {
        let mut n = 0;
        for m in &c.nodes {
            let s = status(&format!("{}/groups/shard-01", m.url())).await;
            n += s["observers"][via].as_u64()?;
        }
        (n == expected).then_some(())
    })
    .await;
    assert!(
        counted.is_some(),
        "{expected} count(s) of the observer in shard-01 ({via})"
    );
    for m in &c.nodes {
        let s = status(&m.url()).await;
        assert_eq!(s["observers"][via], 0, "the default group has none: {s}");
    }

    // kill -9 of shard-01's leader: the observer names its successor.
    let li = c.index(&leader);
    c.nodes[li].kill9();
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != li).collect();
    let (next, next_term) = group_agreed(&c, &rest, "shard-01", |l, _| l != leader).await;
    observer_names(&o, "shard-01", &next, next_term).await;
    let (code, _) = get_json(&format!("{}/role/leader", o.url())).await;
    assert_ne!(code, 200, "an observer never answers as leader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_follows_a_group_other_than_the_default_one_over_http() {
    let _serial = crate::app::serial().await;
    let c = Cluster::start(3, &["--group", "shard-01"]);
    let members: Vec<(String, u16)> = c.nodes.iter().map(|n| (n.id.clone(), n.port)).collect();
    let o = http_observer(&observer_id(0), &members);
    observe_a_group(c, o, "events").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_follows_a_group_other_than_the_default_one_over_pilot() {
    let _serial = crate::app::serial().await;
    let net = Devnet::start(5);
    let c = pilot_cluster(&net, &["--group", "shard-01"]);
    let member_ids: Vec<String> = ["n1", "n2", "n3"]
        .iter()
        .map(|d| node_id(&net, d))
        .collect();
    let o = pilot_observer(&net, &observer_id(0), "n5", "n4", &member_ids);
    observe_a_group(c, o, "topic").await;
}
