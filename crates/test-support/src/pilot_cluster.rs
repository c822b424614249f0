//! Nodes that elect over `--transport pilot`: the real pilotctl against pilot-devnet's emulated
//! daemons, with one more daemon (`n4` for three nodes) as the event-stream broker. Shared by the integration tests and
//! the bench example, next to `app.rs` and `devnet.rs`.

use crate::app::{free_port, App, Cluster, TempDir};
use crate::devnet::{pilotctl_path, Devnet};

/// A node of the pilot cluster: its daemon is devnet node `daemon`.
pub fn pilot_node(net: &Devnet, daemon: &str, extra: &[&str]) -> App {
    pilot_node_in(net, daemon, "n4", 3, extra)
}

/// A node of an `size`-node pilot cluster whose broker is daemon `broker`; its members are the
/// nodes on daemons n1..n`size`.
pub fn pilot_node_in(net: &Devnet, daemon: &str, broker: &str, size: usize, extra: &[&str]) -> App {
    let daemons: Vec<String> = (1..=size).map(|i| format!("n{i}")).collect();
    let daemons: Vec<&str> = daemons.iter().map(String::as_str).collect();
    pilot_node_with(net, daemon, broker, &daemons, extra)
}

/// A node on daemon `daemon` whose members are the nodes on the daemons `members`.
pub fn pilot_node_with(
    net: &Devnet,
    daemon: &str,
    broker: &str,
    members: &[&str],
    extra: &[&str],
) -> App {
    let dir = TempDir::new(daemon);
    let port = free_port();
    let args = pilot_args(
        net,
        daemon,
        broker,
        members,
        port,
        &dir.0.join("data"),
        extra,
    );
    // No --node-id: the node learns it from `pilotctl info` (`.data.node_id`, a number).
    App::new(&node_id(net, daemon), port, dir, args)
}

/// `run` arguments of the node on daemon `daemon`: members the nodes on the daemons `members`,
/// API on `port`, state in `data`.
pub fn pilot_args(
    net: &Devnet,
    daemon: &str,
    broker: &str,
    members: &[&str],
    port: u16,
    data: &std::path::Path,
    extra: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--group",
        "it",
        "--transport",
        "pilot",
        "--allow-unauthenticated",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(["--broker".into(), broker.to_string()]);
    for m in members {
        args.extend(["--member".into(), node_id(net, m)]);
    }
    args.extend([
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--data-dir".into(),
        data.display().to_string(),
        "--pilotctl".into(),
        pilotctl_path().display().to_string(),
        "--pilot-socket".into(),
        net.socket(daemon).display().to_string(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Three started nodes on daemons n1..n3 (`extra` appended to each), broker n4.
pub fn pilot_cluster(net: &Devnet, extra: &[&str]) -> Cluster {
    pilot_cluster_of(net, 3, extra)
}

/// `size` started nodes on daemons n1..n`size`, broker n`size+1` (the devnet needs `size + 1`
/// daemons).
pub fn pilot_cluster_of(net: &Devnet, size: usize, extra: &[&str]) -> Cluster {
    pilot_cluster_via(net, size, &format!("n{}", size + 1), extra)
}

/// `size` started nodes on daemons n1..n`size` whose `--broker` is `brokers` (one daemon name,
/// or several comma-separated).
pub fn pilot_cluster_via(net: &Devnet, size: usize, brokers: &str, extra: &[&str]) -> Cluster {
    let mut nodes: Vec<App> = (1..=size)
        .map(|i| pilot_node_in(net, &format!("n{i}"), brokers, size, extra))
        .collect();
    for n in &mut nodes {
        n.start();
    }
    Cluster {
        nodes,
        _token_file: TempDir::new("no-token"),
    }
}

/// The Pilot node id of a devnet node, as `pilotctl info` reports it.
pub fn node_id(net: &Devnet, name: &str) -> String {
    let node = net
        .nodes
        .iter()
        .find(|n| n["hostname"] == name)
        .expect("devnet node");
    node["node_id"]
        .as_u64()
        .map(|n| n.to_string())
        .unwrap_or_else(|| panic!("devnet node without id: {node}"))
}
