//! Observer processes (`run --observe`): over http, following the members' `/events`; over
//! pilot, subscribed to the election topic through a broker. For the observer tests and the
//! bench's member-cost figures.

use crate::app::{free_port, App, TempDir};
use crate::devnet::{pilotctl_path, Devnet};

/// The `i`-th observer's name (never a member's id).
pub fn observer_id(i: usize) -> String {
    format!("obs-{i:03}")
}

fn base(id: &str, port: u16) -> Vec<String> {
    [
        "run",
        "--observe",
        "--node-id",
        id,
        "--group",
        "it",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A not yet started observer over http that may follow any of `members` (id, API port).
pub fn http_observer(id: &str, members: &[(String, u16)]) -> App {
    let port = free_port();
    let mut args = base(id, port);
    for (m, p) in members {
        args.push("--peer".into());
        args.push(format!("{m}=http://127.0.0.1:{p}"));
    }
    App::new(id, port, TempDir::new(id), args)
}

/// A not yet started observer over pilot on devnet daemon `daemon`, subscribed through
/// `broker`; `members` are the members' Pilot node ids.
pub fn pilot_observer(
    net: &Devnet,
    id: &str,
    daemon: &str,
    broker: &str,
    members: &[String],
) -> App {
    let port = free_port();
    let mut args = base(id, port);
    args.extend([
        "--transport".into(),
        "pilot".into(),
        "--broker".into(),
        broker.into(),
    ]);
    for m in members {
        args.extend(["--member".into(), m.clone()]);
    }
    args.extend([
        "--pilotctl".into(),
        pilotctl_path().display().to_string(),
        "--pilot-socket".into(),
        net.socket(daemon).display().to_string(),
    ]);
    App::new(id, port, TempDir::new(id), args)
}
