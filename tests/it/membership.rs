//! Changing the members (docs/guide/operations.md "Changing the members", docs/protocol.md rule
//! 1): nodes whose
//! member sets are two ids apart under a network split, and a cluster grown from three members
//! to five, shrunk back and then one original member replaced by a new id, one member at a time,
//! each watched every 20 ms for two leaders.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::agree::agree;
use crate::app::{
    free_port, get_json, node_args, serial, wait_for, wait_up, App, TempDir, T, TOKEN,
};
use crate::devnet::Devnet;
use crate::pilot_cluster::{node_id, pilot_args, pilot_node_with};
use crate::proxy::Proxy;
use crate::watch::{Report, Watcher};

/// Start-up takes `T` plus staggers; generous for a loaded machine.
const FIRST_LEADER: Duration = Duration::from_secs(20);
/// After any step a leader exists again within two election timeouts, plus a margin for a
/// loaded 2-core machine.
pub(crate) const FAILOVER_BOUND: Duration = Duration::from_secs(2 * 3 + 1);
/// A restarted node is ready within its start-up guard `T` (sooner when it follows the
/// leader), plus a heartbeat or two; twice that is the deadline.
const READY_WITHIN: Duration = Duration::from_secs(2 * 3);

/// A token file for the nodes' mutating endpoints (step-down), kept while they run.
pub(crate) fn token_file() -> (TempDir, String) {
    let dir = TempDir::new("token");
    let path = dir.0.join("token");
    std::fs::write(&path, format!("{TOKEN}\n")).expect("token file");
    let path = path.display().to_string();
    (dir, path)
}

/// `run` arguments for an http node whose members are `members` (itself included), as the
/// procedure of docs/guide/operations.md writes them: `--member` with the whole list and a
/// `--peer ID=URL` for every other member, the URL's port given by `port_of(member)`.
pub(crate) fn member_args(
    id: &str,
    port: u16,
    data: &std::path::Path,
    members: &[&str],
    port_of: impl Fn(&str) -> u16,
    token_file: &str,
) -> Vec<String> {
    let peers: Vec<(String, u16)> = members
        .iter()
        .filter(|m| **m != id)
        .map(|m| (m.to_string(), port_of(m)))
        .collect();
    let list = members.join(",");
    node_args(
        id,
        port,
        data,
        &peers,
        &["--member", &list, "--admin-token-file", token_file],
    )
}

/// A new, not yet started node with the given arguments.
pub(crate) fn new_node(
    id: &str,
    port: u16,
    args: impl FnOnce(&std::path::Path) -> Vec<String>,
) -> App {
    let dir = TempDir::new(id);
    let args = args(&dir.0.join("data"));
    App::new(id, port, dir, args)
}

pub(crate) async fn role_leader(url: &str) -> u16 {
    get_json(&format!("{url}/role/leader")).await.0
}

/// The node among `nodes` that answers `/role/leader` 200 now, if one does.
pub(crate) async fn leading<'a>(nodes: impl IntoIterator<Item = &'a App>) -> Option<String> {
    for n in nodes {
        if n.child.is_some() && role_leader(&n.url()).await == 200 {
            return Some(n.id.clone());
        }
    }
    None
}

/// Whether `node`'s `/status` shows `can_vote` within `within` (docs/guide/operations.md,
/// "Changing the members").
async fn can_vote_within(node: &App, within: Duration) -> bool {
    let url = format!("{}/status", node.url());
    wait_for(within, || {
        let url = url.clone();
        async move {
            let (_, s) = get_json(&url).await;
            (s["can_vote"] == json!(true)).then_some(())
        }
    })
    .await
    .is_some()
}

pub(crate) fn logs<'a>(nodes: impl IntoIterator<Item = &'a App>) -> String {
    nodes
        .into_iter()
        .map(|n| format!("==== {}\n{}", n.id, n.log()))
        .collect()
}

/// SIGTERM (a leader hands over first), wait for a clean exit, start again with `args` and the
/// same data dir.
pub(crate) async fn restart_with(node: &mut App, args: Vec<String>) {
    let binary = node.binary.clone();
    restart_as(node, args, binary).await;
}

/// As [`restart_with`], with another binary (`None`: this build's): a rolling upgrade.
pub(crate) async fn restart_as(
    node: &mut App,
    args: Vec<String>,
    binary: Option<std::path::PathBuf>,
) {
    node.sigterm();
    let status = node.wait_exit(Duration::from_secs(10)).await;
    assert!(
        status.success(),
        "{} exited with {status:?}\n{}",
        node.id,
        node.log()
    );
    node.args = args;
    node.binary = binary;
    node.start();
}

/// Waits until every node in `nodes` shows the same `/status` fingerprint, lists every other
/// one with `matches: true`, and its `/readyz` names no mismatched member (the "done" condition
/// of docs/guide/operations.md for one change). The fingerprint, or what was seen last.
pub(crate) async fn fingerprints_agree(nodes: &[&App], within: Duration) -> Result<String, String> {
    let urls: Vec<(String, String)> = nodes.iter().map(|n| (n.id.clone(), n.url())).collect();
    let last = std::sync::Mutex::new(String::new());
    let agreed = wait_for(within, || {
        let urls = urls.clone();
        let last = &last;
        async move {
            let mut prints = Vec::new();
            let mut seen = String::new();
            for (id, url) in &urls {
                let (_, s) = get_json(&format!("{url}/status")).await;
                let (_, r) = get_json(&format!("{url}/readyz")).await;
                let fp = s["fingerprint"].as_str().unwrap_or("?").to_string();
                let members = s["members"].as_array().cloned().unwrap_or_default();
                let all_match = members.len() + 1 == urls.len()
                    && members.iter().all(|m| m["matches"] == json!(true));
                let mismatched = r["mismatched_members"].as_array().map(Vec::len);
                seen.push_str(&format!(
                    "{id}: fingerprint {fp}, members {}, mismatched {:?}; ",
                    members
                        .iter()
                        .map(|m| format!("{}={}", m["id"], m["matches"]))
                        .collect::<Vec<_>>()
                        .join(" "),
                    r["mismatched_members"]
                ));
                prints.push((fp, all_match && mismatched == Some(0)));
            }
            *last.lock().unwrap() = seen;
            let first = prints.first()?.0.clone();
            prints
                .iter()
                .all(|(fp, ok)| *fp == first && *ok)
                .then_some(first)
        }
    })
    .await;
    agreed.ok_or_else(|| last.into_inner().unwrap())
}

/// n1..n3 list {n1,n2,n3}; n4, a replacement started before the node it replaces left, lists
/// {n2,n3,n4}: two ids away from the others. Every peer URL goes through a [`Proxy`], so a split
/// {n1,n2} | {n3,n4} can be made while n3 leads. The old quorum on n1,n2 elects; n3, n4 never
/// lead during the split, and no round of the watch sees two leaders. (n4 never leads at all:
/// nobody shares its member set.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_sets_two_apart_never_show_two_leaders_across_a_split() {
    let _serial = serial().await;
    let (_token, tf) = token_file();
    let ids = ["n1", "n2", "n3", "n4"];
    let sets: BTreeMap<&str, Vec<&str>> = [
        ("n1", vec!["n1", "n2", "n3"]),
        ("n2", vec!["n1", "n2", "n3"]),
        ("n3", vec!["n1", "n2", "n3"]),
        ("n4", vec!["n2", "n3", "n4"]),
    ]
    .into_iter()
    .collect();
    let ports: BTreeMap<&str, u16> = ids.iter().map(|id| (*id, free_port())).collect();
    // One link per sender and receiver: (from, to).
    let mut links: BTreeMap<(&str, &str), Proxy> = BTreeMap::new();
    for (from, set) in &sets {
        for to in set.iter().filter(|m| *m != from) {
            links.insert((*from, *to), Proxy::start(ports[to]).await);
        }
    }
    let mut nodes: Vec<App> = ids
        .iter()
        .map(|id| {
            new_node(id, ports[id], |data| {
                member_args(
                    id,
                    ports[id],
                    data,
                    &sets[id],
                    |m| links[&(*id, m)].port,
                    &tf,
                )
            })
        })
        .collect();
    for n in &mut nodes {
        n.start();
    }
    for n in &nodes {
        wait_up(n).await;
    }
    let w = Watcher::start(nodes.iter().map(|n| (n.id.clone(), n.url())).collect());
    let old = [&nodes[0], &nodes[1], &nodes[2]];
    agree(&old, FIRST_LEADER, |_, _| true, || logs(&nodes)).await;

    // Over http a node sends only to its own members, so n4 hears nobody: n2 and n3 get its
    // messages and drop them as a non-member's (and say so); n4 is not ready, since nobody with
    // its member set answers it. Rule 1's "two ids apart" check never fires here: it needs n4
    // to hear the others, and they never send to it.
    let n4 = nodes[3].url();
    let alone = wait_for(T * 2, || {
        let n4 = n4.clone();
        async move {
            let (code, r) = get_json(&format!("{n4}/readyz")).await;
            (code == 503 && r["voters_heard"] == json!(1)).then_some(r)
        }
    })
    .await;
    let alone = alone.unwrap_or_else(|| panic!("n4 is ready\n{}", logs(&nodes)));
    println!("n4 /readyz: {alone}");
    for n in &nodes[1..3] {
        assert!(
            n.log()
                .contains("a node that is not a member sent election messages"),
            "{} did not flag n4\n{}",
            n.id,
            n.log()
        );
    }
    let (_, s4) = get_json(&format!("{n4}/status")).await;
    let (_, s1) = get_json(&format!("{}/status", nodes[0].url())).await;
    println!("n4 /status: {s4}");
    assert_ne!(s1["fingerprint"], s4["fingerprint"]);
    for m in s4["members"].as_array().unwrap() {
        assert_ne!(m["matches"], json!(true), "{s4}");
    }
    // n1..n3 do not count n4 among their members.
    assert!(
        s1["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["id"] != "n4"),
        "{s1}"
    );

    let split = Split::Links(&links);
    split_story(&nodes, &w, &split, Some(TOKEN)).await;
    let report = w.stop().await;
    assert_split_report(&report, "sets two apart, split", &nodes);
}

/// How a test splits {n1,n2} | {n3,n4}.
enum Split<'a> {
    /// http: every link between the two sides.
    Links(&'a BTreeMap<(&'a str, &'a str), Proxy>),
    /// pilot: the devnet's links between daemons n1, n2 and broker n6, and between n3, n4 and
    /// broker n5, so that each side keeps one broker.
    Brokers(&'a Devnet),
}

impl Split<'_> {
    async fn cut(&self) {
        match self {
            Split::Links(links) => {
                let side = |n: &str| n == "n1" || n == "n2";
                for ((from, to), link) in links.iter() {
                    if side(from) != side(to) {
                        link.cut();
                    }
                }
            }
            Split::Brokers(net) => {
                for (a, b) in [("n1", "n6"), ("n2", "n6"), ("n3", "n5"), ("n4", "n5")] {
                    net.post("/cut", json!({"a": a, "b": b})).await;
                }
            }
        }
    }

    async fn heal(&self) {
        match self {
            Split::Links(links) => links.values().for_each(Proxy::heal),
            Split::Brokers(net) => {
                net.post("/heal", json!({})).await;
            }
        }
    }
}

/// The split itself, on nodes n1..n4 (`nodes[0..4]`) whose first three agree on a leader:
/// n3 is made leader, the split puts it with n4 (which shares no member set with anyone), so
/// it must stop leading within its lease and n1, n2 elect; n3 and n4 stay followers while the
/// split lasts; after healing n1..n3 agree again.
async fn split_story(nodes: &[App], w: &Watcher, split: &Split<'_>, token: Option<&str>) {
    let old = [&nodes[0], &nodes[1], &nodes[2]];
    let (n1, n2, n3) = (&nodes[0].id, &nodes[1].id, &nodes[2].id);
    let (leader, _) = agree(&old, FIRST_LEADER, |_, _| true, || logs(nodes)).await;
    // n3, on the side that cannot form the old quorum, leads before the split.
    if leader != *n3 {
        w.mark(format!("hand over {leader} -> {n3}"));
        let li = nodes.iter().position(|n| n.id == leader).unwrap();
        crate::cluster::hand_over_at(&nodes[li], n3, token).await;
    }
    let (_, term) = agree(&old, FAILOVER_BOUND, |l, _| l == n3, || logs(nodes)).await;

    w.mark("split {n1,n2} | {n3,n4}");
    split.cut().await;
    let cut = pilot_election::clock::now();
    let n3_url = nodes[2].url();
    let stopped = wait_for(FAILOVER_BOUND, || {
        let n3_url = n3_url.clone();
        async move { (role_leader(&n3_url).await == 503).then_some(()) }
    })
    .await;
    assert!(
        stopped.is_some(),
        "{n3} kept leading without a quorum\n{}",
        logs(nodes)
    );
    println!(
        "{n3} stopped leading {:?} after the split",
        pilot_election::clock::since(cut)
    );
    let elected = |l: &str, t| (l == n1 || l == n2) && t > term;
    let (new, new_term) = agree(&old[..2], FAILOVER_BOUND, elected, || logs(nodes)).await;
    println!(
        "{new} leads in term {new_term}, {:?} after the split",
        pilot_election::clock::since(cut)
    );
    // The split holds for two more election timeouts: n3 and n4 stay followers.
    let until = pilot_election::clock::now() + T * 2;
    while pilot_election::clock::now() < until {
        for n in &nodes[2..4] {
            assert_eq!(
                role_leader(&n.url()).await,
                503,
                "{} leads in the minority",
                n.id
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    w.mark("heal");
    split.heal().await;
    agree(&old, FAILOVER_BOUND, |_, _| true, || logs(nodes)).await;
    // A while longer healed: still one leader.
    tokio::time::sleep(T).await;
}

/// One leader at most, n4 never, and every gap within the failover bound.
fn assert_split_report(report: &Report, label: &str, nodes: &[App]) {
    report.assert_single_leader(label, || logs(nodes));
    let n4 = &nodes[3].id;
    assert!(
        report.leaders.iter().all(|(_, n, _)| n != n4),
        "{label}: n4 led: {:?}",
        report.leaders
    );
    report.assert_gaps_under(FAILOVER_BOUND, label, || logs(nodes));
}

/// The same split over pilot: daemons n1..n4 run the nodes, n5 and n6 are brokers, and every
/// node uses both. Pilot is a broadcast topic, so here n4 does hear n2 and n3 (members of its
/// set, listing a set two ids away) and stops voting and campaigning (rule 1), and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_sets_two_apart_never_show_two_leaders_across_a_split_over_pilot() {
    let _serial = serial().await;
    let net = Devnet::start(6);
    let old = ["n1", "n2", "n3"];
    let mut nodes: Vec<App> = ["n1", "n2", "n3"]
        .iter()
        .map(|d| pilot_node_with(&net, d, "n5,n6", &old, &[]))
        .collect();
    nodes.push(pilot_node_with(
        &net,
        "n4",
        "n5,n6",
        &["n2", "n3", "n4"],
        &[],
    ));
    for n in &mut nodes {
        n.start();
    }
    for n in &nodes {
        wait_up(n).await;
    }
    let w = Watcher::start(nodes.iter().map(|n| (n.id.clone(), n.url())).collect());
    let (id2, id3) = (nodes[1].id.clone(), nodes[2].id.clone());
    let n4 = nodes[3].url();
    let conflict = wait_for(T * 3, || {
        let n4 = n4.clone();
        let (id2, id3) = (json!(id2), json!(id3));
        async move {
            let (code, r) = get_json(&format!("{n4}/readyz")).await;
            let mismatched = r["mismatched_members"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            (code == 503
                && mismatched.contains(&id2)
                && mismatched.contains(&id3)
                && r["can_vote"] == json!(false))
            .then_some(r)
        }
    })
    .await;
    let conflict =
        conflict.unwrap_or_else(|| panic!("n4 did not report the conflict\n{}", logs(&nodes)));
    println!("n4 /readyz: {conflict}");
    let (_, s4) = get_json(&format!("{n4}/status")).await;
    assert_eq!(s4["can_campaign"], json!(false), "{s4}");

    let split = Split::Brokers(&net);
    split_story(&nodes, &w, &split, None).await;
    let report = w.stop().await;
    assert_split_report(&report, "sets two apart, split, pilot", &nodes);
}

/// The devnet daemon that is the broker in the grow-and-shrink test; n1..n6 run nodes.
const GROW_BROKER: &str = "n7";

/// One step of a membership change.
#[derive(Clone, Copy, Debug)]
enum Change {
    Add(&'static str),
    Remove(&'static str),
}

/// The nodes of one cluster whose member lists change: over http on direct ports, or over
/// pilot (then `id`s name devnet daemons, the broker is daemon n6, and the nodes' own ids are
/// the daemons' node ids).
struct Members<'a> {
    nodes: BTreeMap<String, App>,
    ports: BTreeMap<String, u16>,
    token_file: String,
    pilot: Option<&'a Devnet>,
}

impl Members<'_> {
    fn args(&self, id: &str, members: &[&str]) -> Vec<String> {
        let data = self.nodes[id].data_dir();
        match self.pilot {
            Some(net) => pilot_args(net, id, GROW_BROKER, members, self.ports[id], &data, &[]),
            None => member_args(
                id,
                self.ports[id],
                &data,
                members,
                |m| self.ports[m],
                &self.token_file,
            ),
        }
    }

    /// A new node `id` on a free port, not started and without arguments yet.
    fn add_node(&mut self, id: &str) {
        let port = free_port();
        self.ports.insert(id.to_string(), port);
        let mut node = new_node(id, port, |_| Vec::new());
        if let Some(net) = self.pilot {
            node.id = node_id(net, id);
        }
        self.nodes.insert(id.to_string(), node);
    }

    fn live(&self) -> Vec<&App> {
        self.nodes.values().filter(|n| n.child.is_some()).collect()
    }

    fn logs(&self) -> String {
        logs(self.nodes.values())
    }

    /// Restarts `id` with the list `members` and waits as step 2 of docs/guide/operations.md
    /// says: until its `/status` shows `can_vote` and some live node answers `GET /role/leader`
    /// 200 again.
    async fn restart(&mut self, id: &str, members: &[&str], w: &Watcher) {
        w.mark(format!("restart {id} with {{{}}}", members.join(",")));
        let args = self.args(id, members);
        let node = self.nodes.get_mut(id).unwrap();
        let stopped = pilot_election::clock::now();
        restart_with(node, args).await;
        assert!(
            can_vote_within(node, READY_WITHIN).await,
            "{id} restarted with {{{}}}: /status never showed can_vote within {READY_WITHIN:?}\n{}",
            members.join(","),
            self.logs()
        );
        let leader = wait_for(FAILOVER_BOUND, || leading(self.live())).await;
        assert!(
            leader.is_some(),
            "{id} restarted with {{{}}}: nobody answered as leader within {FAILOVER_BOUND:?}\n{}",
            members.join(","),
            self.logs()
        );
        println!(
            "restarted {id} with {{{}}}: can vote, {} leads, {:?} after its SIGTERM",
            members.join(","),
            leader.unwrap(),
            pilot_election::clock::since(stopped)
        );
    }

    /// Restarts every node of `which` with `members`, one at a time: followers first, the node
    /// that leads (asked before each pick) last.
    async fn restart_all(&mut self, which: &[&str], members: &[&str], w: &Watcher) {
        let mut todo: Vec<&str> = which.to_vec();
        while !todo.is_empty() {
            // Who leads decides the order, so wait for a leader (within the failover bound)
            // rather than pick while an election is under way.
            let leader = wait_for(FAILOVER_BOUND, || leading(self.live())).await;
            if leader.is_none() {
                println!("nobody led for {FAILOVER_BOUND:?} before the next restart");
            }
            // `leading` names the node's own id; the list names keys (they differ over pilot).
            let leader = leader.and_then(|l| {
                self.nodes
                    .iter()
                    .find(|(_, n)| n.id == l)
                    .map(|(k, _)| k.clone())
            });
            let pick = todo
                .iter()
                .position(|id| Some(id.to_string()) != leader)
                .unwrap_or(0);
            let id = todo.remove(pick);
            self.restart(id, members, w).await;
        }
    }

    /// The "done" check of docs/guide/operations.md (also as `pilot-election status` prints it),
    /// then a leader agreed by all within the failover bound.
    async fn settle(&mut self, members: &[&str], label: &str) -> (String, u64) {
        let nodes: Vec<&App> = members.iter().map(|m| &self.nodes[*m]).collect();
        match fingerprints_agree(&nodes, T * 2).await {
            Ok(fp) => {
                println!("{label}: every member shows fingerprint {fp}");
                for node in &nodes {
                    status_command_shows_agreement(node, &fp, members.len() - 1).await;
                }
            }
            Err(seen) => panic!(
                "{label}: fingerprints never agreed: {seen}\n{}",
                self.logs()
            ),
        }
        agree(&nodes, FAILOVER_BOUND, |_, _| true, || self.logs()).await
    }
}

/// `pilot-election status` of `node` names fingerprint `fp` in its first line and on each of its
/// `others` member lines, each with `matches true` (the check of docs/guide/operations.md
/// between two changes).
async fn status_command_shows_agreement(node: &App, fp: &str, others: usize) {
    let url = node.url();
    let out = tokio::task::spawn_blocking(move || crate::cli::run(&["status", "--url", &url]))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}: {text}", node.id);
    let mut lines = text.lines();
    let head = lines.next().unwrap_or_default();
    assert!(
        head.contains(&format!("members fingerprint {fp}")),
        "{text}"
    );
    let members: Vec<&str> = lines
        .filter(|l| l.trim_start().starts_with("member "))
        .collect();
    assert_eq!(members.len(), others, "{text}");
    let agreeing = format!("fingerprint {fp} matches true");
    assert!(members.iter().all(|l| l.ends_with(&agreeing)), "{text}");
}

/// Three members grown to five and shrunk back to three, then the original member n1 replaced
/// by a new id n6 (a removal, then an addition), one member at a time, following
/// docs/guide/operations.md:
/// start the new node with the new list, restart the others one at a time with it (followers
/// first, the leader last), each time waiting until the restarted node can vote and some node
/// leads again; check that every fingerprint agrees (in `/status`, `/readyz` and the `status`
/// command) before the next change. Removing is the reverse: restart the remaining nodes with
/// the smaller list, then stop the removed node. Watched on every live node: never two leaders,
/// and every leaderless gap within the failover bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_grow_to_five_and_shrink_back_one_at_a_time_with_one_leader_at_most() {
    let _serial = serial().await;
    grow_and_shrink(None).await;
}

/// The same over pilot: daemons n1..n6 run the nodes, n7 ([`GROW_BROKER`]) is the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_grow_to_five_and_shrink_back_over_pilot_with_one_leader_at_most() {
    let _serial = serial().await;
    let net = Devnet::start(7);
    grow_and_shrink(Some(&net)).await;
}

async fn grow_and_shrink(pilot: Option<&Devnet>) {
    let started = pilot_election::clock::now();
    let (_token, tf) = token_file();
    let mut m = Members {
        nodes: BTreeMap::new(),
        // Ports are picked when a node first starts: one picked long before could be taken.
        ports: BTreeMap::new(),
        token_file: tf,
        pilot,
    };
    let mut members: Vec<&str> = vec!["n1", "n2", "n3"];
    for id in members.clone() {
        m.add_node(id);
    }
    for id in members.clone() {
        let args = m.args(id, &members);
        let node = m.nodes.get_mut(id).unwrap();
        node.args = args;
        node.start();
    }
    let (first, first_term) = m.settle(&members, "start").await;
    println!("{first} leads {{n1,n2,n3}} in term {first_term}");
    let w = Watcher::start(
        members
            .iter()
            .map(|id| (id.to_string(), m.nodes[*id].url()))
            .collect(),
    );
    assert!(w.seen_leader(T).await, "the watch saw no leader");

    for change in [
        Change::Add("n4"),
        Change::Add("n5"),
        Change::Remove("n5"),
        Change::Remove("n4"),
        // A replacement: the original n1 (possibly the leader) out, a new id in.
        Change::Remove("n1"),
        Change::Add("n6"),
    ] {
        let step = pilot_election::clock::now();
        let old = members.clone();
        match change {
            Change::Add(x) => {
                members.push(x);
                w.mark(format!("start {x} with {{{}}}", members.join(",")));
                m.add_node(x);
                let args = m.args(x, &members);
                let node = m.nodes.get_mut(x).unwrap();
                node.args = args;
                node.start();
                wait_up(node).await;
                w.add(x, &node.url());
                // Step 1 of docs/guide/operations.md: the new node can vote before the first
                // restart.
                assert!(
                    can_vote_within(node, READY_WITHIN).await,
                    "{x} never could vote\n{}",
                    m.logs()
                );
                m.restart_all(&old, &members, &w).await;
            }
            Change::Remove(x) => {
                members.retain(|id| *id != x);
                let remaining = members.clone();
                m.restart_all(&remaining, &members, &w).await;
                w.mark(format!("stop {x}"));
                let node = m.nodes.get_mut(x).unwrap();
                node.sigterm();
                let status = node.wait_exit(Duration::from_secs(10)).await;
                assert!(status.success(), "{x} exited with {status:?}");
                w.remove(x);
            }
        }
        let label = format!("{change:?}");
        let (leader, term) = m.settle(&members, &label).await;
        println!(
            "{label}: {{{}}} done in {:?}; {leader} leads in term {term}",
            members.join(","),
            pilot_election::clock::since(step)
        );
    }

    let report = w.stop().await;
    report.assert_single_leader("grow 3->5, shrink 5->3, replace n1 by n6", || m.logs());
    println!("whole test: {:?}", pilot_election::clock::since(started));
    report.assert_gaps_under(FAILOVER_BOUND, "grow and shrink", || m.logs());
}

/// The watcher itself: two single-node clusters each lead, and the watch says so (a watch that
/// could not see two leaders would prove nothing above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_reports_two_leaders_when_two_separate_clusters_each_lead() {
    let _serial = serial().await;
    let mut nodes: Vec<App> = ["a", "b"]
        .iter()
        .map(|id| crate::app::app(id, free_port(), &[], &[]))
        .collect();
    for n in &mut nodes {
        n.start();
    }
    let w = Watcher::start(nodes.iter().map(|n| (n.id.clone(), n.url())).collect());
    let both = wait_for(FIRST_LEADER, || {
        let w = &w;
        async move { (w.report().max_leaders == 2).then_some(()) }
    })
    .await;
    let report = w.stop().await;
    report.print("two separate clusters");
    assert!(both.is_some(), "never saw both lead\n{}", logs(&nodes));
    assert!(!report.single_leader());
    assert!(!report.overlaps.is_empty());
}
