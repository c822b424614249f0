//! One run of the hook: `sh -c` as the leader of its own process group, with the change in its
//! environment, until `sh` exits or the deadline passes (then SIGKILL to the whole group;
//! [`ProcessGroup`]).

use std::os::unix::process::ExitStatusExt as _;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{HookConfig, Outcome};
use crate::clock;
use crate::process_group::ProcessGroup;
use crate::runtime::Change;

/// How one run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Ran {
    pub(super) outcome: Outcome,
    pub(super) code: Option<i32>,
    pub(super) signal: Option<i32>,
    pub(super) took: Duration,
    /// Why it could not start, if it did not.
    pub(super) error: Option<String>,
}

/// What the command finds in its environment for `change`, besides the node's own variables.
pub(super) fn env_of(change: &Change, node_id: &str, group: &str) -> Vec<(&'static str, String)> {
    vec![
        ("PILOT_ELECTION_ROLE", change.role.as_str().to_string()),
        (
            "PILOT_ELECTION_LEADER",
            change.leader.clone().unwrap_or_default(),
        ),
        ("PILOT_ELECTION_TERM", change.term.to_string()),
        (
            "PILOT_ELECTION_PREVIOUS",
            change.previous.clone().unwrap_or_default(),
        ),
        ("PILOT_ELECTION_REASON", change.reason.to_string()),
        ("PILOT_ELECTION_NODE_ID", node_id.to_string()),
        ("PILOT_ELECTION_GROUP", group.to_string()),
    ]
}

/// Runs `config.command` once; ends at `config.timeout` after the start or at the exit cap
/// (`exit_by`, which may be set while it runs), whichever comes first.
pub(super) async fn run(
    config: &HookConfig,
    env: Vec<(&'static str, String)>,
    exit_by: &mut watch::Receiver<Option<Instant>>,
) -> Ran {
    let started = clock::now();
    let own = started + config.timeout;
    let mut cmd = crate::exec::shell(&config.command);
    cmd.envs(env);
    let mut group = match ProcessGroup::spawn(&mut cmd) {
        Ok(g) => g,
        Err(e) => {
            return Ran {
                outcome: Outcome::Failed,
                code: None,
                signal: None,
                took: clock::since(started),
                error: Some(e.to_string()),
            }
        }
    };
    let ended = |outcome, status: std::process::ExitStatus| Ran {
        outcome,
        code: status.code(),
        signal: status.signal(),
        took: clock::since(started),
        error: None,
    };
    let mut exit_open = true;
    loop {
        let cap = exit_by.borrow().map_or(own, |e| e.min(own));
        tokio::select! {
            status = group.wait() => {
                // What the hook left running in the background is its own business.
                group.release();
                let outcome = if status.success() { Outcome::Ok } else { Outcome::Failed };
                return ended(outcome, status);
            }
            _ = clock::sleep_until(cap) => {
                let status = group.kill_and_wait().await;
                let outcome = if cap >= own { Outcome::TimedOut } else { Outcome::KilledAtExit };
                return ended(outcome, status);
            }
            changed = exit_by.changed(), if exit_open => exit_open = changed.is_ok(),
        }
    }
}
