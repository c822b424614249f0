//! Many elections in one process, as an operator runs them: three real nodes, each in the
//! default group and in twenty more (`--group`, repeated). A kill -9 of the node that leads the
//! most groups: every group it led elects again among the survivors, the others keep their
//! leaders, the node rejoins every group when it comes back, a group an operator adds while
//! they run elects and survives restarts until it is removed, and no group ever has two
//! leaders in one term.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use crate::app::{get_json, serial, wait_for, Cluster, T, TOKEN};

const GROUPS: usize = 20;

/// Read once: the watcher checks every answer against it.
static SPEC: LazyLock<crate::contract::Spec> = LazyLock::new(crate::contract::Spec::load);

/// `group -> (leader, term)` as `url` can vouch for now, from `GET /groups`.
async fn leaders_at(url: &str) -> Option<BTreeMap<String, (Option<String>, u64, bool)>> {
    let (status, body) = get_json(&format!("{url}/groups")).await;
    if status != 200 {
        return None;
    }
    SPEC.check("get", "/groups", status, &body);
    let list = body["groups"].as_array()?;
    Some(
        list.iter()
            .map(|g| {
                let leader = g["leader"].as_str().map(str::to_string);
                let term = g["term"].as_u64().unwrap_or_default();
                let is_self = g["is_self"].as_bool().unwrap_or_default();
                (
                    g["group"].as_str().unwrap_or_default().to_string(),
                    (leader, term, is_self),
                )
            })
            .collect(),
    )
}

/// Once every node in `urls` names the same leader in the same term for every one of
/// `groups` (accepted by `accept`): `group -> (leader, term)`.
async fn agreed(
    urls: &[String],
    groups: &[String],
    within: Duration,
    accept: impl Fn(&str, &str, u64) -> bool,
) -> Option<BTreeMap<String, (String, u64)>> {
    wait_for(within, || async {
        let mut views = Vec::new();
        for url in urls {
            views.push(leaders_at(url).await?);
        }
        let mut agreed = BTreeMap::new();
        for g in groups {
            let (leader, term, _) = views[0].get(g)?.clone();
            let leader = leader?;
            if !accept(g, &leader, term) {
                return None;
            }
            for v in &views[1..] {
                let (l, t, _) = v.get(g)?;
                if l.as_deref() != Some(leader.as_str()) || *t != term {
                    return None;
                }
            }
            agreed.insert(g.clone(), (leader, term));
        }
        Some(agreed)
    })
    .await
}

/// kill -9 of the node that leads the most of `groups` (`led`: each one's leader and term); once
/// both survivors agree that every group it led has a new leader in a higher term and every
/// other group kept its own: the victim, its index and each group's leader and term.
async fn kill_the_busiest(
    c: &mut Cluster,
    groups: &[String],
    led: &BTreeMap<String, (String, u64)>,
) -> (String, usize, BTreeMap<String, (String, u64)>) {
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for (l, _) in led.values() {
        *per_node.entry(l.as_str()).or_default() += 1;
    }
    let victim = per_node
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(v, _)| v.to_string())
        .expect("a leader");
    let vi = c.index(&victim);
    c.nodes[vi].kill9();
    let survivors: Vec<String> = (0..c.nodes.len())
        .filter(|i| *i != vi)
        .map(|i| c.nodes[i].url())
        .collect();
    let after = agreed(
        &survivors,
        groups,
        3 * T + Duration::from_secs(5),
        |g, l, t| {
            let (was, term) = &led[g];
            if *was == victim {
                l != victim && t > *term
            } else {
                l == was && t == *term
            }
        },
    )
    .await
    .unwrap_or_else(|| {
        panic!(
            "the groups {victim} led elected again, the others kept theirs\n{}",
            c.logs()
        )
    });
    (victim, vi, after)
}

#[tokio::test]
async fn groups_fail_over_on_their_own_and_never_have_two_leaders_in_a_term() {
    let _one = serial().await;
    let extra_groups: Vec<String> = (1..=GROUPS).map(|i| format!("shard-{i:02}")).collect();
    let mut args: Vec<&str> = Vec::new();
    for g in &extra_groups {
        args.extend(["--group", g.as_str()]);
    }
    let mut c = Cluster::start(3, &args);
    // The harness names the default group `it`; the extra ones follow it.
    let groups: Vec<String> = std::iter::once("it".to_string())
        .chain(extra_groups.iter().cloned())
        .collect();
    let urls: Vec<String> = c.nodes.iter().map(|n| n.url()).collect();
    let led = agreed(&urls, &groups, Duration::from_secs(30), |_, _, _| true)
        .await
        .unwrap_or_else(|| panic!("every group elected a leader\n{}", c.logs()));
    let per_node: BTreeMap<&str, usize> = led.values().fold(BTreeMap::new(), |mut m, (l, _)| {
        *m.entry(l.as_str()).or_default() += 1;
        m
    });
    eprintln!("groups per leader: {per_node:?}");
    assert!(per_node.len() >= 2, "the leaders spread: {per_node:?}");

    // A watcher claims every (group, term) for the node that says it leads it there: a second
    // node claiming the same group in the same term would be two leaders at once.
    let claims: Arc<Mutex<BTreeMap<(String, u64), String>>> = Default::default();
    let violations: Arc<Mutex<Vec<String>>> = Default::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let watcher = {
        let (claims, violations, stop) = (claims.clone(), violations.clone(), stop.clone());
        let nodes: Vec<(String, String)> =
            c.nodes.iter().map(|n| (n.id.clone(), n.url())).collect();
        tokio::spawn(async move {
            let mut rounds = 0u64;
            while !stop.is_cancelled() {
                for (id, url) in &nodes {
                    let Some(view) = leaders_at(url).await else {
                        continue;
                    };
                    let mut claims = claims.lock().unwrap();
                    for (g, (_, term, _)) in view.into_iter().filter(|(_, v)| v.2) {
                        let first = claims
                            .entry((g.clone(), term))
                            .or_insert_with(|| id.clone());
                        if first != id {
                            violations
                                .lock()
                                .unwrap()
                                .push(format!("{g} term {term}: {first} and {id}"));
                        }
                    }
                }
                rounds += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            rounds
        })
    };

    // A client follows every group on one stream (`GET /events?groups=all`) across the kill.
    let client = pilot_election_client::Client::builder(urls.clone())
        .watch_idle_timeout(Duration::from_secs(3))
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .build()
        .unwrap();
    let seen: Arc<Mutex<Vec<(String, u64, String)>>> = Default::default();
    let follower = {
        let (mut stream, seen) = (client.watch_all_groups(), seen.clone());
        tokio::spawn(async move {
            use futures_util::StreamExt as _;
            while let Some(event) = stream.next().await {
                if let pilot_election_client::GroupEvent::Leader(c) = event {
                    seen.lock().unwrap().push((c.group, c.term, c.leader));
                }
            }
        })
    };
    // Once the stream has named the leader and term of every group in `want`.
    let named = |want: BTreeMap<String, (String, u64)>, within: Duration| {
        let (seen, groups) = (seen.clone(), groups.clone());
        wait_for(within, move || {
            let (seen, groups, want) = (seen.clone(), groups.clone(), want.clone());
            async move {
                let seen = seen.lock().unwrap();
                groups
                    .iter()
                    .all(|g| {
                        let (l, t) = &want[g];
                        seen.contains(&(g.clone(), *t, l.clone()))
                    })
                    .then_some(())
            }
        })
    };
    let watched = named(led.clone(), Duration::from_secs(10)).await;
    assert!(
        watched.is_some(),
        "the client's stream named every group's leader: {:?}",
        seen.lock().unwrap()
    );

    let killed = pilot_election::clock::now();
    let (victim, vi, after) = kill_the_busiest(&mut c, &groups, &led).await;
    // The stream (on the killed node's or another member's connection) names every new leader,
    // each group's terms only rising.
    let followed = named(after.clone(), Duration::from_secs(15)).await;
    assert!(
        followed.is_some(),
        "the client followed every group across the kill: {:?}",
        seen.lock().unwrap()
    );
    follower.abort();
    {
        let seen = seen.lock().unwrap();
        for g in &groups {
            let terms: Vec<u64> = seen
                .iter()
                .filter(|(s, _, _)| s == g)
                .map(|(_, t, _)| *t)
                .collect();
            assert!(
                terms.windows(2).all(|w| w[0] < w[1]),
                "{g}: terms {terms:?}"
            );
        }
    }
    let its = led.values().filter(|(l, _)| *l == victim).count();
    eprintln!(
        "{its} groups led by {victim} failed over in {:?} (the {} others kept their leaders)",
        pilot_election::clock::since(killed),
        groups.len() - its
    );
    let survivors: Vec<String> = (0..3)
        .filter(|i| *i != vi)
        .map(|i| urls[i].clone())
        .collect();
    // Exactly one survivor answers 200 on each group's /role/leader.
    for g in &groups {
        let mut leading = Vec::new();
        for url in &survivors {
            let (status, _) = get_json(&format!("{url}/groups/{g}/role/leader")).await;
            if status == 200 {
                leading.push(url.clone());
            }
        }
        assert_eq!(leading.len(), 1, "{g}: {leading:?}");
    }

    // Back again, it takes part in every group once more, under the leaders that took over.
    c.nodes[vi].start();
    agreed(&urls, &groups, Duration::from_secs(30), |g, l, t| {
        after[g] == (l.to_string(), t)
    })
    .await
    .unwrap_or_else(|| panic!("{victim} rejoined every group\n{}", c.logs()));
    let data = c.nodes[vi].data_dir();
    let dirs: BTreeSet<String> = std::fs::read_dir(data.join("groups"))
        .expect("the extra groups' directories")
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        dirs,
        extra_groups.iter().cloned().collect(),
        "one directory per extra group"
    );
    // Their terms and votes in one file, the book (rule 18), each group with the term it has.
    let book: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("groups/state.json")).unwrap()).unwrap();
    for g in &extra_groups {
        assert!(
            book["groups"][g]["term"].as_u64() >= Some(1),
            "{g} in the book: {book}"
        );
    }

    // An operator adds a group on every node while they run, with the CLI: it elects, and a
    // node restarted with the same flags takes part in it again.
    let operator = |args: &[&str]| {
        let o = std::process::Command::new(crate::app::bin())
            .args(args)
            .env("PILOT_ELECTION_ADMIN_TOKEN", TOKEN)
            .output()
            .expect("run pilot-election");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        (
            o.status.code(),
            out,
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    for url in &urls {
        let (code, out, err) = operator(&["groups", "--url", url, "--add", "added-1"]);
        assert_eq!(code, Some(0), "{out}{err}");
        assert!(out.starts_with("added added-1: term"), "{out}");
    }
    let added = vec!["added-1".to_string()];
    let first = agreed(&urls, &added, Duration::from_secs(30), |_, _, _| true)
        .await
        .unwrap_or_else(|| panic!("added-1 elected\n{}", c.logs()));
    let (code, out, err) = operator(&["groups", "--url", &urls[0], "--add", "added-1"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("already"), "{err}");
    let other = (vi + 1) % 3;
    c.nodes[other].kill9();
    c.nodes[other].start();
    agreed(&urls, &added, Duration::from_secs(30), |_, l, t| {
        (l.to_string(), t) == first["added-1"] || t > first["added-1"].1
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the restarted node took part in added-1 again\n{}",
            c.logs()
        )
    });
    let (code, out, _) = operator(&["groups", "--url", &urls[other]]);
    assert_eq!(code, Some(0));
    assert!(
        out.starts_with(&format!("{} groups", groups.len() + 1)),
        "{out}"
    );

    // Removed on every node, it is gone, and stays gone across a restart.
    for url in &urls {
        let (code, out, err) = operator(&["groups", "--url", url, "--remove", "added-1"]);
        assert_eq!(code, Some(0), "{out}{err}");
        assert!(out.starts_with("removed added-1"), "{out}");
    }
    let (code, _, err) = operator(&["groups", "--url", &urls[0], "--remove", "shard-01"]);
    assert_eq!(code, Some(1), "a configured group stays: {err}");
    c.nodes[other].kill9();
    c.nodes[other].start();
    agreed(&urls, &groups, Duration::from_secs(30), |_, _, _| true)
        .await
        .unwrap_or_else(|| panic!("every configured group after the restart\n{}", c.logs()));
    for url in &urls {
        let (status, body) = get_json(&format!("{url}/groups/added-1/leader")).await;
        assert_eq!(
            (status, &body["error"]),
            (404, &serde_json::json!("unknown_group")),
            "{url}"
        );
    }

    stop.cancel();
    let rounds = watcher.await.expect("the watcher ran");
    assert!(rounds > 10, "the watcher polled {rounds} times");
    let violations = violations.lock().unwrap();
    assert!(
        violations.is_empty(),
        "two leaders in one term: {violations:?}\n{}",
        c.logs()
    );
}

/// At every sample, at most one child per group (the groups are told apart by
/// `PILOT_ELECTION_GROUP`); returns how many samples were taken.
fn one_child_per_group(w: &crate::exec::Watch) -> usize {
    let samples = w.samples.lock().unwrap();
    for s in samples.iter() {
        let mut per_group: BTreeMap<&str, Vec<&crate::exec::Seen>> = BTreeMap::new();
        for c in &s.children {
            per_group.entry(c.group.as_str()).or_default().push(c);
        }
        for (g, cs) in per_group {
            assert!(cs.len() <= 1, "two children of {g} at once: {cs:?}");
        }
    }
    samples.len()
}

/// `group -> (node, term)` of the children running now.
fn children_now(w: &crate::exec::Watch) -> BTreeMap<String, (String, u64)> {
    w.now()
        .into_iter()
        .map(|s| (s.group, (s.node, s.term)))
        .collect()
}

/// Waits until the running children are exactly one per group of `want`, each on the node
/// that leads it, in its term.
async fn children_are(w: &crate::exec::Watch, want: &BTreeMap<String, (String, u64)>, what: &str) {
    let ok = wait_for(Duration::from_secs(10), || async {
        (children_now(w) == *want).then_some(())
    })
    .await;
    assert!(
        ok.is_some(),
        "{what}: children {:?}, leaders {want:?}",
        children_now(w)
    );
}

/// `--exec-groups all` and `--on-change-groups all`, as an operator with one job per shard runs
/// them: each group's child runs on the node that leads that group and nowhere else, moves with
/// it on a kill -9 (the others stay where they are), starts for a group added at run time and
/// stops when it is removed; the hook runs per group with the group in its environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_on_change_follow_each_groups_own_leader() {
    let _one = serial().await;
    let w = crate::exec::Watch::start();
    let dir = w.dir.0.display().to_string();
    let exec = format!(
        r#"MARK={mark}; echo "start $PILOT_ELECTION_GROUP $PILOT_ELECTION_NODE_ID $PILOT_ELECTION_TERM" >>'{dir}/events'; while :; do sleep 0.05; done"#,
        mark = w.mark
    );
    let hook = format!(
        r#"echo "$PILOT_ELECTION_GROUP|$PILOT_ELECTION_NODE_ID|$PILOT_ELECTION_ROLE|$PILOT_ELECTION_TERM" >>'{dir}/hooks'"#
    );
    let extra: Vec<String> = (1..=5).map(|i| format!("job-{i}")).collect();
    // Preemption off: the leaders stay where the kill -9 put them, so what moves is the test's.
    let mut args: Vec<&str> = vec![
        "--preempt-after",
        "0s",
        "--exec-groups",
        "all",
        "--on-change",
        &hook,
        "--on-change-groups",
        "all",
    ];
    for g in &extra {
        args.extend(["--group", g.as_str()]);
    }
    let mut c = Cluster::start_with_env(3, &args, &[("PILOT_ELECTION_EXEC", exec.as_str())]);
    let groups: Vec<String> = std::iter::once("it".to_string())
        .chain(extra.iter().cloned())
        .collect();
    let urls: Vec<String> = c.nodes.iter().map(|n| n.url()).collect();

    // 1. One child per group, on its leader.
    let led = agreed(&urls, &groups, Duration::from_secs(30), |_, _, _| true)
        .await
        .unwrap_or_else(|| panic!("every group elected a leader\n{}", c.logs()));
    children_are(&w, &led, "after the first elections").await;
    eprintln!("exec per group: leaders {led:?}");

    // 2. kill -9 of the node that leads the most groups: its children go, the new leaders'
    // start, every other group's child runs on undisturbed (same process group).
    let before: BTreeMap<String, i32> = w.now().into_iter().map(|s| (s.group, s.pgid)).collect();
    let (victim, vi, after) = kill_the_busiest(&mut c, &groups, &led).await;
    children_are(&w, &after, "after the kill -9").await;
    for s in w.now() {
        if led[&s.group].0 != victim {
            assert_eq!(
                before.get(&s.group),
                Some(&s.pgid),
                "{} kept its child",
                s.group
            );
        }
    }

    // 3. Back, the node follows in every group and runs no child.
    c.nodes[vi].start();
    agreed(&urls, &groups, Duration::from_secs(30), |g, l, t| {
        after[g] == (l.to_string(), t)
    })
    .await
    .unwrap_or_else(|| panic!("{victim} rejoined as a follower\n{}", c.logs()));
    children_are(&w, &after, "after the restart").await;

    // 4. A group added at run time gets its child on its leader; removed, the child goes.
    for url in &urls {
        let (status, body) = crate::app::post_json(
            url,
            "/groups",
            Some(TOKEN),
            &serde_json::json!({"group": "job-added"}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let added = vec!["job-added".to_string()];
    let new = agreed(&urls, &added, Duration::from_secs(30), |_, _, _| true)
        .await
        .unwrap_or_else(|| panic!("job-added elected\n{}", c.logs()));
    let mut with_added = after.clone();
    with_added.extend(new.clone());
    children_are(&w, &with_added, "after adding job-added").await;
    for url in &urls {
        let resp = crate::app::client()
            .delete(format!("{url}/groups/job-added"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("DELETE /groups/job-added");
        assert_eq!(resp.status().as_u16(), 200, "{url}");
    }
    children_are(&w, &after, "after removing job-added").await;

    // 5. The hook ran per group: each leader was told, with its group, that it leads.
    let hooks = std::fs::read_to_string(w.dir.0.join("hooks")).unwrap_or_default();
    for (g, (l, t)) in after.iter().chain(new.iter()) {
        let line = format!("{g}|{l}|leader|{t}");
        assert!(
            hooks.lines().any(|x| x == line),
            "no `{line}` in the hooks' runs:\n{hooks}"
        );
    }
    let events = std::fs::read_to_string(w.dir.0.join("events")).unwrap_or_default();
    for (g, (l, t)) in after.iter().chain(new.iter()) {
        let line = format!("start {g} {l} {t}");
        assert!(events.lines().any(|x| x == line), "no `{line}`:\n{events}");
    }
    let samples = one_child_per_group(&w);
    assert!(samples > 100, "the sampler looked {samples} times");
    eprintln!("exec per group: {samples} samples, never two children of one group");
}
