//! Client commands: one request to a running node, a sentence (or `--json`), a trustworthy exit
//! code.

use std::time::Duration;

use serde_json::{json, Value};

use super::config::read_token;
use super::{
    error_line, CandidacyArgs, ClientArgs, GroupsArgs, LeaderArgs, PauseArgs, StepDownArgs,
    EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE,
};
use crate::clock::wall::{rfc3339, unix_ms_now};

enum Reply {
    Answer(u16, Value),
    Unreachable(String),
    /// A bad client flag (a CA or certificate file): exit 64.
    Usage(String),
}

/// How long the client waits for a write that the node answers once a quorum holds it.
const CONFIRMED_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

async fn call(
    args: &ClientArgs,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    // A pause or a resume is answered once a quorum holds it, which the node waits for up to
    // its election timeout.
    let timeout = if path == "/pause" && method != reqwest::Method::GET {
        CONFIRMED_WRITE_TIMEOUT
    } else {
        Duration::from_secs(5)
    };
    let builder = match args.tls.apply(reqwest::Client::builder().timeout(timeout)) {
        Ok(b) => b,
        Err(e) => return Reply::Usage(e),
    };
    let client = match builder.build() {
        Ok(c) => c,
        Err(e) => return Reply::Unreachable(e.to_string()),
    };
    if let Some(Err(e)) = args.group.as_deref().map(crate::group::GroupName::new) {
        return Reply::Usage(format!("--group: {e}"));
    }
    let base = args.url.trim_end_matches('/');
    let url = match &args.group {
        Some(group) if path != "/healthz" => format!("{base}/groups/{group}{path}"),
        _ => format!("{base}{path}"),
    };
    // Everything but a read is an operator's command.
    let mutates = method != reqwest::Method::GET;
    let mut req = client.request(method, &url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    if mutates {
        if let Ok(Some(token)) = read_token(&args.admin_token_file, &args.admin_token) {
            req = req.bearer_auth(token);
        }
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let value = resp.json::<Value>().await.unwrap_or(Value::Null);
            Reply::Answer(status, value)
        }
        Err(e) => Reply::Unreachable(format!("{url}: {e}")),
    }
}

/// Prints and maps to an exit code; `ok` renders a success body for people.
fn finish(args: &ClientArgs, reply: Reply, ok: impl Fn(&Value) -> String) -> i32 {
    match reply {
        Reply::Usage(e) => {
            eprintln!("pilot-election: {e}");
            EXIT_USAGE
        }
        Reply::Unreachable(e) => {
            eprintln!("pilot-election: cannot reach the node: {e}");
            EXIT_UNREACHABLE
        }
        Reply::Answer(status, body) => {
            let success = (200..300).contains(&status);
            if args.json {
                println!("{body}");
            } else if success {
                println!("{}", ok(&body));
            } else {
                eprintln!("{}", error_line(&body));
            }
            if success {
                EXIT_OK
            } else {
                EXIT_REFUSED
            }
        }
    }
}

fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(other) => other.to_string(),
    }
}

pub async fn leader(a: &LeaderArgs) -> i32 {
    let args = &a.client;
    let path = if a.consistent {
        "/leader?consistent=true"
    } else {
        "/leader"
    };
    let reply = call(args, reqwest::Method::GET, path, None).await;
    if a.print_url && !args.json {
        return match reply {
            Reply::Answer(200, b) if b["leader_url"].is_string() => {
                println!("{}", s(&b, "leader_url"));
                EXIT_OK
            }
            Reply::Answer(200, b) => {
                eprintln!(
                    "pilot-election: leader {} announced no URL (a build without --advertise-url)",
                    s(&b, "leader")
                );
                EXIT_REFUSED
            }
            other => finish(args, other, |_| String::new()),
        };
    }
    finish(args, reply, |b| {
        format!(
            "leader {} (term {}){}{}{}",
            s(b, "leader"),
            s(b, "term"),
            match b["leader_url"].as_str() {
                Some(url) => format!(" at {url}"),
                None => String::new(),
            },
            if b["is_self"] == json!(true) {
                ", this node"
            } else {
                ""
            },
            if b["consistent"] == json!(true) {
                ", confirmed by a quorum"
            } else {
                ""
            }
        )
    })
}

pub async fn status(args: &ClientArgs) -> i32 {
    let reply = call(args, reqwest::Method::GET, "/status", None).await;
    finish(args, reply, |b| {
        let mut out = format!(
            "node {} is {} in term {}; leader {}; priority {}, eligible {}, can vote {}; \
             members fingerprint {}; transport {} healthy={}",
            s(b, "node"),
            s(b, "role"),
            s(b, "term"),
            s(b, "leader"),
            s(b, "priority"),
            s(b, "eligible"),
            s(b, "can_vote"),
            s(b, "fingerprint"),
            s(&b["transport"], "kind"),
            s(&b["transport"], "healthy"),
        );
        if b["paused"] == json!(true) {
            let m = &b["maintenance"];
            out.push_str(&format!(
                "\n  MAINTENANCE: no automatic failover until {} (paused on {}: {})",
                m["until"].as_str().unwrap_or("resumed"),
                s(m, "by"),
                s(m, "reason")
            ));
        }
        if let Some(op) = b["scheduled_step_down"].as_object() {
            let op = Value::Object(op.clone());
            out.push_str(&format!(
                "\n  step-down {} scheduled for {}, successor {}",
                s(&op, "id"),
                s(&op, "at"),
                s(&op, "successor")
            ));
        }
        // A member change is complete when every member shows our fingerprint
        // (docs/guide/operations.md, "Changing the members"), so each line says whether it does.
        for m in b["members"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "\n  member {} rank {} priority {} eligible {} last seen {} ms ago; fingerprint {} matches {}",
                s(m, "id"),
                s(m, "rank"),
                s(m, "priority"),
                s(m, "eligible"),
                s(m, "last_seen_ms"),
                s(m, "fingerprint"),
                s(m, "matches"),
            ));
        }
        // A timing change or an upgrade in progress shows here (docs/guide/operations.md,
        // "Changing the timings" and "Upgrading").
        let t = &b["timings"];
        out.push_str(&format!(
            "\n  protocol: writes version {} (speaks {} to {}); timings h {} ms, L {} ms, T {} ms; mixed timings {}",
            s(&b["protocol"], "writes"),
            s(&b["protocol"]["speaks"], "oldest"),
            s(&b["protocol"]["speaks"], "newest"),
            s(t, "heartbeat_ms"),
            s(t, "lease_ms"),
            s(t, "election_timeout_ms"),
            s(b, "mixed_timings"),
        ));
        for m in b["members"].as_array().into_iter().flatten() {
            let a = &m["timings"];
            let p = &m["protocol"];
            if a.is_object() || p.is_object() {
                out.push_str(&format!(
                    "\n  timings of {}: h {} ms, L {} ms, T {} ms; speaks {} to {}",
                    s(m, "id"),
                    s(a, "heartbeat_ms"),
                    s(a, "lease_ms"),
                    s(a, "election_timeout_ms"),
                    s(p, "oldest"),
                    s(p, "newest"),
                ));
            }
        }
        for br in b["transport"]["brokers"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "\n  broker {} {} since {} (restarts {})",
                s(br, "broker"),
                s(br, "state"),
                s(br, "since"),
                s(br, "restarts")
            ));
            if let (Some(cause), Some(fix)) = (br["cause"].as_str(), br["fix"].as_str()) {
                out.push_str(&format!(": {cause}\n    to fix: {fix}"));
            }
        }
        out
    })
}

pub async fn step_down(a: &StepDownArgs) -> i32 {
    if let Err(e) = read_token(&a.client.admin_token_file, &a.client.admin_token) {
        eprintln!("pilot-election: {e}");
        return EXIT_USAGE;
    }
    if a.cancel {
        let reply = call(&a.client, reqwest::Method::DELETE, "/step-down", None).await;
        return finish(&a.client, reply, |b| {
            format!(
                "cancelled step-down {} (was due at {})",
                s(b, "id"),
                s(b, "at")
            )
        });
    }
    let mut body = serde_json::Map::new();
    if let Some(succ) = &a.successor {
        body.insert("successor".into(), json!(succ));
    }
    if let Some(t) = a.expected_term {
        body.insert("expected_term".into(), json!(t));
    }
    if let Some(at) = time_from(&a.at, a.r#in) {
        body.insert("at".into(), json!(at));
    }
    let reply = call(
        &a.client,
        reqwest::Method::POST,
        "/step-down",
        Some(Value::Object(body)),
    )
    .await;
    finish(&a.client, reply, |b| {
        match b.get("operation") {
        Some(op) => format!(
            "step-down {} scheduled for {} in term {}; successor {} (cancel: pilot-election step-down --cancel; dropped if {})",
            s(op, "id"),
            s(op, "at"),
            s(b, "term"),
            s(b, "successor"),
            s(op, "dropped_if")
        ),
        None => format!(
            "stepped down from term {}; successor {}",
            s(b, "term"),
            s(b, "successor")
        ),
    }
    })
}

/// An operator's time, given as RFC 3339 (`--at`, `--until`, sent as typed: the node checks
/// it) or as a span from now (`--in`, `--for`).
fn time_from(at: &Option<String>, after: Option<Duration>) -> Option<String> {
    at.clone()
        .or_else(|| after.map(|d| rfc3339(unix_ms_now() + d.as_millis() as u64)))
}

/// One line for a `/pause` answer.
fn pause_line(b: &Value) -> String {
    let setting = &b["setting"];
    if b["paused"] == json!(true) {
        let until = match setting["until"].as_str() {
            Some(u) => format!("until {u}"),
            None => "until `pilot-election resume`".into(),
        };
        format!(
            "paused: no automatic failover on any member {until} (written on {}, version {}; {})",
            s(setting, "by"),
            s(setting, "version"),
            held_line(b)
        )
    } else if setting.is_object() {
        format!("not paused: automatic failover is on ({})", held_line(b))
    } else {
        "not paused: automatic failover is on".into()
    }
}

/// Who holds the setting of a `/pause` answer.
fn held_line(b: &Value) -> String {
    let held: Vec<&str> = b["held_by"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let confirmed = if b["confirmed"] == json!(true) {
        "a quorum"
    } else {
        "not yet a quorum"
    };
    format!(
        "held by {} ({}), {confirmed} of {}",
        held.len(),
        held.join(", "),
        s(b, "quorum")
    )
}

pub async fn pause(a: &PauseArgs) -> i32 {
    if let Err(e) = read_token(&a.client.admin_token_file, &a.client.admin_token) {
        eprintln!("pilot-election: {e}");
        return EXIT_USAGE;
    }
    let mut body = serde_json::Map::new();
    if let Some(u) = time_from(&a.until, a.r#for) {
        body.insert("until".into(), json!(u));
    }
    if let Some(r) = &a.reason {
        body.insert("reason".into(), json!(r));
    }
    let reply = call(
        &a.client,
        reqwest::Method::POST,
        "/pause",
        Some(Value::Object(body)),
    )
    .await;
    finish(&a.client, reply, pause_line)
}

pub async fn resume(args: &ClientArgs) -> i32 {
    if let Err(e) = read_token(&args.admin_token_file, &args.admin_token) {
        eprintln!("pilot-election: {e}");
        return EXIT_USAGE;
    }
    let reply = call(args, reqwest::Method::DELETE, "/pause", None).await;
    finish(args, reply, pause_line)
}

fn group_line(b: &Value) -> String {
    let leader = match b.get("leader").and_then(Value::as_str) {
        Some(l) if b["is_self"] == json!(true) => format!("led by {l} (this node)"),
        Some(l) => format!("led by {l}"),
        None => "no leader known".to_string(),
    };
    format!("{}: term {}, {leader}", s(b, "group"), b["term"])
}

pub async fn groups(a: &GroupsArgs) -> i32 {
    if a.client.group.is_some() {
        eprintln!("pilot-election: groups takes --add or --remove, not --group");
        return EXIT_USAGE;
    }
    let named = a.add.as_deref().or(a.remove.as_deref());
    if let Some(Err(e)) = named.map(crate::group::GroupName::new) {
        eprintln!("pilot-election: {e}");
        return EXIT_USAGE;
    }
    if named.is_some() {
        if let Err(e) = read_token(&a.client.admin_token_file, &a.client.admin_token) {
            eprintln!("pilot-election: {e}");
            return EXIT_USAGE;
        }
    }
    let reply = match (&a.add, &a.remove) {
        (Some(g), _) => {
            let body = json!({ "group": g });
            call(&a.client, reqwest::Method::POST, "/groups", Some(body)).await
        }
        (None, Some(g)) => {
            let path = format!("/groups/{g}");
            call(&a.client, reqwest::Method::DELETE, &path, None).await
        }
        (None, None) => call(&a.client, reqwest::Method::GET, "/groups", None).await,
    };
    let (added, removed) = (a.add.is_some(), a.remove.is_some());
    finish(&a.client, reply, |b| {
        if added {
            format!("added {}", group_line(b))
        } else if removed {
            format!("removed {} (was {})", s(b, "group"), group_line(b))
        } else {
            let list = b["groups"].as_array().cloned().unwrap_or_default();
            let lines: Vec<String> = list.iter().map(group_line).collect();
            format!(
                "{} groups, {} led by this node (default: {})\n{}",
                b["count"],
                b["leading"],
                s(b, "default"),
                lines.join("\n")
            )
        }
    })
}

pub async fn candidacy(a: &CandidacyArgs) -> i32 {
    if let Err(e) = read_token(&a.client.admin_token_file, &a.client.admin_token) {
        eprintln!("pilot-election: {e}");
        return EXIT_USAGE;
    }
    let mut body = json!({"eligible": a.eligible});
    if let Some(p) = a.priority {
        body["priority"] = json!(p);
    }
    let reply = call(&a.client, reqwest::Method::POST, "/candidacy", Some(body)).await;
    finish(&a.client, reply, |b| {
        format!(
            "candidacy: eligible {}, priority {}",
            s(b, "eligible"),
            s(b, "priority")
        )
    })
}

pub async fn healthcheck(args: &ClientArgs) -> i32 {
    let reply = call(args, reqwest::Method::GET, "/healthz", None).await;
    finish(args, reply, |b| {
        format!("healthy (election loop ran {} ms ago)", s(b, "loop_age_ms"))
    })
}
