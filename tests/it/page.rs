//! The status page at `GET /` in a real browser (headless Chromium over the DevTools protocol)
//! against a live 3-node cluster: it shows the leader, follows a `kill -9` of the leader live,
//! and moves leadership with the admin token (and refuses, readably, without it). Every node
//! runs an `--on-change` hook that fails, which the page shows with the last run's outcome. A
//! node of many groups shows a summary of them, a bounded list and a filter.

use std::time::Duration;

use serde_json::{json, Value};

use crate::app::{get_json, leader_of, serial, Cluster, TOKEN};
use crate::browser::Browser;

/// Start-up takes `T` plus staggers; generous for a loaded machine.
const FIRST_LEADER: Duration = Duration::from_secs(20);
/// The failover bound docs/guide/deploy.md states ("Run with Docker"): the survivors elect within
/// `T` + 2 s.
const FAILOVER: Duration = Duration::from_secs(5);

/// The leader the page shows, as `"<id> <term>"` once it shows one.
const SHOWN: &str = r#"(() => {
  const l = document.getElementById('leader').textContent;
  const t = document.getElementById('term').textContent;
  return /^(no leader|…)$/.test(l) ? null : l.split(' ')[0] + ' ' + t;
})()"#;

fn shown(v: &Value) -> (String, u64) {
    let s = v.as_str().expect("text");
    let (id, term) = s.split_once(' ').expect("id and term");
    (id.to_string(), term.parse().expect("term"))
}

/// Controls whose accessible name is empty, from the browser's own accessibility tree.
async fn unnamed_controls(b: &mut Browser) -> (usize, Vec<Value>) {
    let tree = b.call("Accessibility.getFullAXTree", json!({})).await;
    let controls: Vec<&Value> = tree["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| {
            let role = n["role"]["value"].as_str().unwrap_or("");
            [
                "button",
                "textbox",
                "combobox",
                "radio",
                "spinbutton",
                "checkbox",
            ]
            .contains(&role)
                && n["ignored"] != json!(true)
        })
        .collect();
    let unnamed = controls
        .iter()
        .filter(|n| n["name"]["value"].as_str().unwrap_or("").trim().is_empty())
        .map(|n| (*n).clone())
        .collect();
    (controls.len(), unnamed)
}

/// Runs `js` (which clicks or submits something) and waits for the page's answer line.
async fn act(b: &mut Browser, js: &str, answer_id: &str) -> String {
    b.eval(&format!(
        "document.getElementById('result').textContent = ''; \
         document.getElementById('error').textContent = ''; {js}; true"
    ))
    .await;
    let expr = format!("document.getElementById('{answer_id}').textContent");
    let v = b.wait_for(answer_id, &expr, Duration::from_secs(10)).await;
    v.as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_follows_a_failover_live_and_steps_down_only_with_the_token() {
    let _serial = serial().await;
    // No preemption: leadership moves only when the test moves it. The hook fails at once, so
    // that the page has a failed last run to show.
    let mut c = Cluster::start(3, &["--preempt-after", "0s", "--on-change", "exit 3"]);
    let all = [0, 1, 2];
    let (leader, term) = c.agreed(&all, FIRST_LEADER, |_, _| true).await;
    let li = c.index(&leader);
    let fi = (li + 1) % 3;
    let mut b = Browser::launch(1200, 900).await;

    // The page of a follower shows the leader, every member and the timeline.
    b.navigate(&format!("{}/", c.nodes[fi].url())).await;
    let on_page = b
        .wait_for("the leader", SHOWN, Duration::from_secs(10))
        .await;
    assert_eq!(shown(&on_page), (leader.clone(), term));
    b.wait_for(
        "the live connection",
        "document.getElementById('conn').textContent === 'live'",
        Duration::from_secs(10),
    )
    .await;
    let rows = b
        .eval("document.querySelectorAll('#members-body tr').length")
        .await;
    assert_eq!(rows, json!(3));
    let leader_row = b
        .eval(&format!(
            "[...document.querySelectorAll('#members-body tr')].find(r => \
             r.cells[0].textContent.startsWith('{leader}')).cells[1].textContent"
        ))
        .await;
    assert_eq!(leader_row, json!("leader"));
    b.wait_for(
        "the election in the timeline",
        &format!("document.getElementById('timeline').textContent.includes('{leader} leads')"),
        Duration::from_secs(5),
    )
    .await;

    // The hook's last run: of the change to this leader, failed with its exit code, shown as
    // bad. The page reads /status again until the run of the current leader and term has ended
    // (no event says so).
    let hook = b
        .wait_for(
            "the hook's last run",
            &format!(
                "(() => {{ const t = document.getElementById('hook').textContent; \
                 return !document.getElementById('hook-item').hidden && \
                 t.includes('term {term}, this node follower, {leader} leads') ? t : null; }})()"
            ),
            Duration::from_secs(10),
        )
        .await;
    let hook = hook.as_str().unwrap_or_default();
    assert!(
        hook.starts_with("idle last run failed (exit 3) after ") && hook.contains(" at "),
        "{hook}"
    );
    assert_eq!(
        b.eval("document.querySelector('#hook strong').className")
            .await,
        json!("bad")
    );
    // A run in progress and a timeout, as /status would report them; no hook, no line.
    let running = b
        .eval(
            "st.on_change = { running: { role: 'leader', leader: st.node, term: 9, previous: null, \
             reason: 'elected' }, last_run: { role: 'follower', leader: null, term: 8, previous: null, \
             reason: 'leader_timeout', outcome: 'timed_out', exit_code: null, duration_ms: 10000, \
             at: '2026-12-02T10:00:00Z' } }; renderHook(); clearTimeout(hookTimer); hookTimer = null; \
             document.getElementById('hook').textContent",
        )
        .await;
    let running = running.as_str().unwrap_or_default();
    assert!(
        running.starts_with("running (term 9, this node leader, ")
            && running.contains("last run timed out (killed at --on-change-timeout) after 10 s")
            && running.contains(
                "term 8, this node follower, no leader, leader silent for the election timeout"
            ),
        "{running}"
    );
    assert_eq!(
        b.eval("st.on_change = null; renderHook(); document.getElementById('hook-item').hidden")
            .await,
        json!(true)
    );
    // A schedule, as /status would report one: the next firing, the one running, the record and
    // the latest firing that did not go well; no schedule, no line.
    let schedule = b
        .eval(
            "st.schedule = { cron: '*/10 * * * * *', command: 'flush-queue', grace_ms: 30000, \
             next: '2026-12-02T10:00:20Z', running: { firing: '2026-12-02T10:00:10Z', term: 9, \
             pid: 4242, since: '2026-12-02T10:00:10Z' }, record: { firing: '2026-12-02T10:00:10Z', \
             state: 'claimed', term: 9, by: st.node, code: null, missed: 0 }, held_by: ['a', 'b'], \
             finished: [{ firing: '2026-12-02T09:59:50Z', outcome: 'missed', term: 8, code: null, \
             count: 3, at: '2026-12-02T10:00:00Z', detail: '' }] }; renderSchedule(); \
             [document.getElementById('schedule-item').hidden, \
              document.getElementById('schedule').textContent]",
        )
        .await;
    assert_eq!(schedule[0], json!(false), "{schedule}");
    let text = schedule[1].as_str().unwrap_or_default();
    assert!(
        text.starts_with("*/10 * * * * * · flush-queue · next ")
            && text.contains("(pid 4242)")
            && text.contains(" claimed by ")
            && text.contains("held by 2 of 3")
            && text.contains("1 not ok of the last 1, latest missed ×3 at "),
        "{text}"
    );
    assert_eq!(
        b.eval(
            "st.schedule = null; renderSchedule(); document.getElementById('schedule-item').hidden"
        )
        .await,
        json!(true)
    );
    b.eval("hookChecks = 0; refresh()").await;

    // Membership fingerprints, once /status reports them, get their own column.
    let fingerprints = b
        .eval(
            "st.members[0].fingerprint = '5f3a9c0e77d1b2a4c8'; st.members[0].matches = false; \
             renderMembers(); [...document.querySelectorAll('#members-head th')].pop().textContent \
             + ' | ' + document.getElementById('members-body').textContent",
        )
        .await;
    let fingerprints = fingerprints.as_str().unwrap_or_default();
    assert!(
        fingerprints.starts_with("Membership | ")
            && fingerprints.contains("5f3a9c0e77d1b2a4…")
            && fingerprints.contains("differs from this node"),
        "{fingerprints}"
    );
    b.eval("refresh()").await;

    // Accessible names on every control, as the browser computes them.
    let (controls, unnamed) = unnamed_controls(&mut b).await;
    assert!(
        controls >= 8,
        "only {controls} controls in the accessibility tree"
    );
    assert!(
        unnamed.is_empty(),
        "controls without an accessible name: {unnamed:?}"
    );

    // Nothing polls: a quiet cluster makes the page send no request (observation window).
    let requests = "performance.getEntriesByType('resource').length";
    let before = b.eval(requests).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        b.eval(requests).await,
        before,
        "the page made requests while nothing changed"
    );

    // kill -9 of the leader shows on the open page within the failover bound, with no reload.
    b.eval("window.__notReloaded = true").await;
    c.nodes[li].kill9();
    let killed = pilot_election::clock::now();
    let expr = format!(
        "(() => {{ const v = {SHOWN}; return v && !v.startsWith('{leader} ') ? v : null; }})()"
    );
    let next = b.wait_for("a new leader", &expr, FAILOVER).await;
    let took = pilot_election::clock::since(killed);
    let (new_leader, new_term) = shown(&next);
    eprintln!("page: kill -9 of {leader} shown as {new_leader} in term {new_term} after {took:?}");
    assert!(new_term > term, "{next}");
    assert_eq!(b.eval("window.__notReloaded === true").await, json!(true));
    let survivors: Vec<usize> = all.iter().copied().filter(|&i| i != li).collect();
    let (agreed, agreed_term) = c
        .agreed(&survivors, Duration::from_secs(5), |_, _| true)
        .await;
    assert_eq!(
        (agreed.clone(), agreed_term),
        (new_leader.clone(), new_term)
    );
    // The refresh the event triggered shows the dead member and the transitions.
    b.wait_for(
        "the killed leader as not live",
        &format!(
            "[...document.querySelectorAll('#members-body tr')].some(r => \
             r.cells[0].textContent === '{leader}' && r.cells[6].textContent === 'no')"
        ),
        Duration::from_secs(5),
    )
    .await;
    b.wait_for(
        "the failover in the timeline",
        &format!(
            "document.getElementById('timeline').textContent.includes('{new_leader} leads') && \
             document.getElementById('timeline').textContent.includes('term {new_term}')"
        ),
        Duration::from_secs(5),
    )
    .await;
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let shot = out.join("status-page.png");
    b.screenshot(&shot).await;
    println!("status page screenshot: {}", shot.display());

    // Readable on a phone: nothing wider than the screen.
    b.resize(390, 844).await;
    let overflow = b
        .eval("document.documentElement.scrollWidth - window.innerWidth")
        .await;
    assert!(
        overflow.as_i64().unwrap() <= 0,
        "{overflow} px wider than a phone"
    );
    let phone = out.join("status-page-phone.png");
    b.screenshot(&phone).await;
    println!("status page on a phone: {}", phone.display());
    b.resize(1200, 900).await;

    // On the new leader's page: step-down without the token is refused, readably.
    let ni = c.index(&new_leader);
    b.navigate(&format!("{}/", c.nodes[ni].url())).await;
    b.wait_for(
        "this node as leader",
        &format!("document.getElementById('leader').textContent === '{new_leader} (this node)'"),
        Duration::from_secs(10),
    )
    .await;
    let refused = act(
        &mut b,
        "document.getElementById('stepdown').click()",
        "error",
    )
    .await;
    assert!(
        refused.contains("Step-down refused")
            && refused.contains("missing `Authorization: Bearer <admin token>` header")
            && refused.contains("unauthorized"),
        "{refused}"
    );
    // A wrong token is refused too.
    b.eval("document.getElementById('token').focus()").await;
    b.type_text("not-the-token").await;
    act(
        &mut b,
        "document.getElementById('token-form').requestSubmit()",
        "result",
    )
    .await;
    let wrong = act(
        &mut b,
        "document.getElementById('stepdown').click()",
        "error",
    )
    .await;
    assert!(
        wrong.contains("the admin token is wrong") && wrong.contains("forbidden"),
        "{wrong}"
    );
    assert_eq!(
        leader_of(&c.nodes[ni].url()).await,
        Some((new_leader.clone(), new_term))
    );

    // With the token (typed, then kept only in a variable) the leader steps down.
    b.eval("document.getElementById('token').focus()").await;
    b.type_text(TOKEN).await;
    act(
        &mut b,
        "document.getElementById('token-form').requestSubmit()",
        "result",
    )
    .await;
    let stored = b
        .eval(
            "localStorage.length + sessionStorage.length + document.cookie.length + \
             document.getElementById('token').value.length",
        )
        .await;
    assert_eq!(stored, json!(0), "the token left the tab's memory");
    let done = act(
        &mut b,
        "document.getElementById('stepdown').click()",
        "result",
    )
    .await;
    assert!(
        done.starts_with(&format!("Stepped down in term {new_term}")),
        "{done}"
    );
    let moved = format!(
        "(() => {{ const v = {SHOWN}; return v && !v.startsWith('{new_leader} ') ? v : null; }})()"
    );
    let after = shown(
        &b.wait_for("the next leader", &moved, Duration::from_secs(10))
            .await,
    );
    assert!(after.1 > new_term, "{after:?}");
    let (third, third_term) = c
        .agreed(&survivors, Duration::from_secs(10), |l, _| l != new_leader)
        .await;
    assert_eq!((third, third_term), after);
    let (_, status) = get_json(&format!("{}/status", c.nodes[ni].url())).await;
    assert_eq!(status["role"], json!("follower"), "{status}");

    // Candidacy, with the token still in the tab: withdraw, then stand again with a priority.
    let withdrawn = act(
        &mut b,
        "document.getElementById('cand-no').click(); \
         document.getElementById('candidacy').click()",
        "result",
    )
    .await;
    assert!(withdrawn.starts_with("Candidacy: withdrawn"), "{withdrawn}");
    let (_, status) = get_json(&format!("{}/status", c.nodes[ni].url())).await;
    assert_eq!(status["eligible"], json!(false), "{status}");
    b.eval("document.getElementById('priority').focus()").await;
    b.type_text("7").await;
    let back = act(
        &mut b,
        "document.getElementById('cand-yes').click(); \
         document.getElementById('candidacy').click()",
        "result",
    )
    .await;
    assert_eq!(back, "Candidacy: candidate, priority 7.");
    let (_, status) = get_json(&format!("{}/status", c.nodes[ni].url())).await;
    assert_eq!(
        (&status["eligible"], &status["priority"]),
        (&json!(true), &json!(7))
    );

    assert!(
        b.exceptions.is_empty(),
        "the page threw: {:?}",
        b.exceptions
    );
    b.close().await;
}

/// Many groups on one page: a node of 61 groups shows their summary, at most 50 rows, and a
/// filter that narrows them; a node of one group shows no groups section at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_keeps_many_groups_usable() {
    let _serial = serial().await;
    let names: Vec<String> = (1..=60).map(|i| format!("g-{i:02}")).collect();
    let mut extra: Vec<&str> = Vec::new();
    for n in &names {
        extra.extend(["--group", n.as_str()]);
    }
    let mut node = crate::app::app("solo", crate::app::free_port(), &[], &extra);
    node.start();
    // One member: it elects itself in every group.
    let url = node.url();
    let all = crate::app::wait_for(FIRST_LEADER, || async {
        let (_, body) = get_json(&format!("{url}/groups")).await;
        (body["leading"] == json!(61)).then_some(())
    })
    .await;
    assert!(all.is_some(), "solo leads all 61 groups\n{}", node.log());
    let mut b = Browser::launch(1200, 900).await;
    b.navigate(&format!("{url}/")).await;
    let summary = b
        .wait_for(
            "the groups summary",
            "(() => { const s = document.getElementById('groups-section'); \
             return s.hidden ? null : document.getElementById('groups-summary').textContent; })()",
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(
        summary,
        json!("61 groups, 61 led by this node (routes without a group: it)")
    );
    let rows = b
        .eval("document.querySelectorAll('#groups-body tr').length")
        .await;
    assert_eq!(rows, json!(50), "at most 50 rows");
    let note = b
        .eval("document.getElementById('groups-note').textContent")
        .await;
    assert!(
        note.as_str()
            .unwrap_or_default()
            .starts_with("Showing 50 of 61"),
        "{note}"
    );
    let shown = b
        .eval(
            "(() => { const f = document.getElementById('group-filter'); f.value = 'g-1'; \
             f.dispatchEvent(new Event('input')); \
             return [...document.querySelectorAll('#groups-body tr')].map(r => r.cells[0].textContent); })()",
        )
        .await;
    let expected: Vec<String> = (10..=19).map(|i| format!("g-{i}")).collect();
    assert_eq!(shown, json!(expected), "the filter narrows the rows");
    b.close().await;
    node.kill9();

    // One group: nothing about groups on the page.
    let mut single = crate::app::app("one", crate::app::free_port(), &[], &[]);
    single.start();
    let url = single.url();
    let led = crate::app::wait_for(FIRST_LEADER, || async {
        leader_of(&url).await.filter(|(l, _)| l == "one")
    })
    .await;
    assert!(led.is_some(), "one leads\n{}", single.log());
    let mut b = Browser::launch(1200, 900).await;
    b.navigate(&format!("{url}/")).await;
    b.wait_for("the leader", SHOWN, Duration::from_secs(10))
        .await;
    assert_eq!(
        b.eval("document.getElementById('groups-section').hidden")
            .await,
        json!(true)
    );
    b.close().await;
    single.kill9();
}
