//! `pilot-election once [--wait D] -- CMD ARGS...`: runs a command only while the node at
//! `--url` leads its group, and stops it if leadership ends first. The command runs here, in
//! its own process group; the node holds any handover and any resign until it is gone
//! (src/jobs.rs, docs/guide/jobs.md).

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use reqwest::Method;
use serde_json::Value;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use super::config::read_token;
use super::{error_line, OnceArgs, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE};
use crate::clock;
use crate::exec::without_own_settings;
use crate::jobs::{run_held, End, HoldBody, Renewal};
use crate::process_group::ProcessGroup;

/// The command ran and exited with a failure (its own code is printed).
pub const EXIT_FAILED: i32 = 1;
/// The node does not lead (after `--wait`, if given): the command did not run.
pub const EXIT_NOT_LEADER: i32 = 3;
/// Leadership ended while the command ran: it was stopped (SIGTERM, then SIGKILL).
pub const EXIT_LOST: i32 = 4;
/// The command could not be started (not found, not executable), as a shell says it.
pub const EXIT_CANNOT_RUN: i32 = 127;

/// How often a node that does not lead yet is asked again under `--wait`.
const WAIT_POLL: Duration = Duration::from_millis(200);

struct Api {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
}

enum Answer {
    Ok(u16, Value),
    Unreachable(String),
}

impl Api {
    async fn call(&self, method: Method, path: &str) -> Answer {
        let url = format!("{}{path}", self.base);
        let mut req = self.client.request(method, &url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                Answer::Ok(status, resp.json::<Value>().await.unwrap_or(Value::Null))
            }
            Err(e) => Answer::Unreachable(format!("{url}: {e}")),
        }
    }
}

/// How the command's run ended.
pub async fn once(args: &OnceArgs) -> i32 {
    let c = &args.client;
    if let Some(Err(e)) = c.group.as_deref().map(crate::group::GroupName::new) {
        eprintln!("pilot-election: --group: {e}");
        return EXIT_USAGE;
    }
    let token = match read_token(&c.admin_token_file, &c.admin_token) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("pilot-election: {e}");
            return EXIT_USAGE;
        }
    };
    let builder = match c
        .tls
        .apply(reqwest::Client::builder().timeout(Duration::from_secs(2)))
    {
        Ok(b) => b,
        Err(e) => {
            eprintln!("pilot-election: {e}");
            return EXIT_USAGE;
        }
    };
    let client = match builder.build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pilot-election: {e}");
            return EXIT_UNREACHABLE;
        }
    };
    let base = c.url.trim_end_matches('/');
    let base = match &c.group {
        Some(g) => format!("{base}/groups/{g}/jobs/holds"),
        None => format!("{base}/jobs/holds"),
    };
    let api = Api {
        client,
        base,
        token,
    };
    let (held, sent) = match take(&api, args.wait.unwrap_or_default()).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let end = run(&api, &held, sent, &args.command).await;
    let code = match end {
        Err(code) => code,
        Ok(End::Exited(status)) if status.success() => EXIT_OK,
        Ok(End::Exited(status)) => {
            eprintln!(
                "pilot-election: the command failed ({status}) in term {}",
                held.term
            );
            EXIT_FAILED
        }
        Ok(End::Lost(why)) => {
            eprintln!(
                "pilot-election: leadership of term {} ended before the command did ({why}): it was stopped",
                held.term
            );
            EXIT_LOST
        }
        Ok(End::Signalled(sig)) => 128 + sig,
    };
    // Given back only now: the command's whole process group is gone.
    if let Answer::Ok(status, body) = api.call(Method::DELETE, &format!("/{}", held.id)).await {
        if status != 204 && status != 404 {
            eprintln!(
                "pilot-election: giving the hold back: {}",
                error_line(&body)
            );
        }
    }
    code
}

/// Takes a hold, asking again until `wait` has passed while the node does not lead.
async fn take(api: &Api, wait: Duration) -> Result<(HoldBody, Instant), i32> {
    let until = clock::now() + wait;
    loop {
        let sent = clock::now();
        let last = match api.call(Method::POST, "").await {
            Answer::Ok(201, body) => match serde_json::from_value::<HoldBody>(body) {
                Ok(h) => return Ok((h, sent)),
                Err(e) => {
                    eprintln!("pilot-election: an answer this client does not understand: {e}");
                    return Err(EXIT_UNREACHABLE);
                }
            },
            Answer::Ok(409, body)
                if matches!(
                    body["error"].as_str(),
                    Some("not_leader") | Some("handing_over")
                ) =>
            {
                let leader = body["leader"].as_str().map(|l| format!(" ({l} leads)"));
                format!("this node does not lead{}", leader.unwrap_or_default())
            }
            Answer::Ok(_, body) => {
                eprintln!("pilot-election: {}", error_line(&body));
                return Err(EXIT_UNREACHABLE);
            }
            Answer::Unreachable(e) if clock::now() >= until => {
                eprintln!("pilot-election: {e}");
                return Err(EXIT_UNREACHABLE);
            }
            Answer::Unreachable(e) => e,
        };
        if clock::now() >= until {
            eprintln!("pilot-election: {last}: the command did not run");
            return Err(EXIT_NOT_LEADER);
        }
        clock::sleep_until(clock::now() + WAIT_POLL).await;
    }
}

/// Runs the command under the hold until it exits or the hold ends.
async fn run(api: &Api, held: &HoldBody, sent: Instant, command: &[OsString]) -> Result<End, i32> {
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..]).stdin(Stdio::null());
    // The client's settings (its admin token among them) are not the command's.
    without_own_settings(&mut cmd);
    cmd.env("PILOT_ELECTION_TERM", held.term.to_string())
        .env("PILOT_ELECTION_LEADER", &held.leader)
        .env("PILOT_ELECTION_NODE_ID", &held.leader)
        .env("PILOT_ELECTION_GROUP", &held.group);
    let group = match ProcessGroup::spawn(&mut cmd) {
        Ok(g) => g,
        Err(e) => {
            eprintln!(
                "pilot-election: could not start {}: {e}",
                command[0].to_string_lossy()
            );
            return Err(EXIT_CANNOT_RUN);
        }
    };
    let (mut int, mut term) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        _ => return Err(EXIT_UNREACHABLE),
    };
    let interrupted = async move {
        tokio::select! {
            _ = int.recv() => Signal::SIGINT as i32,
            _ = term.recv() => Signal::SIGTERM as i32,
        }
    };
    let this_hold = format!("/{}", held.id);
    let renew = || async {
        let sent = clock::now();
        match api.call(Method::PUT, &this_hold).await {
            Answer::Ok(200, body) => match serde_json::from_value::<HoldBody>(body) {
                Ok(h) => Renewal::Until(h.kill_by(sent)),
                Err(_) => Renewal::NoAnswer,
            },
            Answer::Ok(_, body) => Renewal::Refused(error_line(&body)),
            // The deadline already in hand decides.
            Answer::Unreachable(_) => Renewal::NoAnswer,
        }
    };
    Ok(run_held(group, held, held.kill_by(sent), renew, interrupted).await)
}
