//! pilot-devnet: an emulated Pilot Protocol network for tests and local demos.
//!
//! A real multi-node Pilot network needs a registry and a beacon that cannot be installed here, so
//! this process plays several daemons at once: one unix socket per node, speaking the daemon's
//! local IPC well enough that the real `pilotctl` 1.18.0 runs `info`, `publish`, `subscribe` and
//! the trust commands against it. Faults and trust are changed through a small HTTP/JSON API on
//! 127.0.0.1 so tests can cut links or revoke trust while the real CLI is running. It is its own
//! package so that nothing in the service can depend on it.
#![forbid(unsafe_code)]

mod control;
mod ipc;
mod net;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use tokio::io::AsyncReadExt as _;
use tokio::net::UnixListener;
use tokio::signal::unix::{signal, SignalKind};

use net::{Net, NodeInfo};

#[derive(Debug, Parser)]
#[command(
    name = "pilot-devnet",
    about = "Emulated Pilot Protocol daemons for the real pilotctl"
)]
struct Args {
    /// Folder for the nodes' unix sockets (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// A node name (also its hostname); repeat for more nodes.
    #[arg(long = "node", value_name = "NAME")]
    node: Vec<String>,
    /// Shorthand for --node n1 ... --node nN.
    #[arg(long, value_name = "N", conflicts_with = "node")]
    nodes: Option<u32>,
    /// Address of the fault-control HTTP API; only 127.0.0.1 is accepted.
    #[arg(long, default_value = "127.0.0.1:0")]
    control: SocketAddr,
    /// Seed for the delivery-drop fault, so a lossy run can be replayed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The version every daemon's `info` reports.
    #[arg(long, default_value = "1.18.0")]
    daemon_version: String,
    /// Exit when stdin reaches end of file, so a crashed parent never leaves us behind.
    #[arg(long)]
    exit_on_stdin_eof: bool,
}

fn node_names(args: &Args) -> Result<Vec<String>, String> {
    let names: Vec<String> = match args.nodes {
        Some(n) => (1..=n).map(|i| format!("n{i}")).collect(),
        None => args.node.clone(),
    };
    if names.is_empty() {
        return Err("give at least one --node NAME or --nodes N".into());
    }
    if names.len() > 0xFFFF {
        return Err("too many nodes".into());
    }
    for (i, name) in names.iter().enumerate() {
        let valid = !name.is_empty()
            && name.len() <= 63
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(format!(
                "invalid node name {name:?}: use 1-63 of [A-Za-z0-9_-]"
            ));
        }
        if names[..i].contains(name) {
            return Err(format!("duplicate node name {name:?}"));
        }
    }
    Ok(names)
}

/// Binds every node's socket before anything is announced, so the startup line is a promise
/// that all sockets accept connections.
fn bind_nodes(
    dir: &std::path::Path,
    names: &[String],
) -> Result<Vec<(NodeInfo, UnixListener)>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let mut out = Vec::with_capacity(names.len());
    for (index, name) in names.iter().enumerate() {
        let node_id = u32::try_from(index + 1).map_err(|_| "too many nodes".to_string())?;
        let socket = dir.join(format!("{name}.sock"));
        if socket.as_os_str().len() >= 108 {
            return Err(format!(
                "socket path {} is too long for a unix socket",
                socket.display()
            ));
        }
        // A stale socket from a killed run would make bind fail; only sockets are removed.
        if let Ok(meta) = std::fs::symlink_metadata(&socket) {
            use std::os::unix::fs::FileTypeExt as _;
            if meta.file_type().is_socket() {
                let _ = std::fs::remove_file(&socket);
            }
        }
        let listener =
            UnixListener::bind(&socket).map_err(|e| format!("bind {}: {e}", socket.display()))?;
        let info = NodeInfo {
            name: name.clone(),
            hostname: name.clone(),
            node_id,
            address: net::format_address(0, node_id),
            socket,
        };
        out.push((info, listener));
    }
    Ok(out)
}

struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

/// Installed before the startup line is printed: a parent that signals us as soon as it has
/// read that line must get a clean stop, not the default action.
fn stop_signals() -> std::io::Result<StopSignals> {
    Ok(StopSignals {
        term: signal(SignalKind::terminate())?,
        int: signal(SignalKind::interrupt())?,
    })
}

async fn wait_for_stop(mut signals: StopSignals, exit_on_stdin_eof: bool) -> &'static str {
    let stdin_eof = async {
        if !exit_on_stdin_eof {
            return std::future::pending().await;
        }
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 256];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::select! {
        _ = signals.term.recv() => "SIGTERM",
        _ = signals.int.recv() => "SIGINT",
        () = stdin_eof => "stdin closed",
    }
}

async fn run(args: Args) -> Result<(), String> {
    if args.control.ip() != std::net::Ipv4Addr::LOCALHOST {
        return Err(format!(
            "--control {} is not on 127.0.0.1; the control API must not be reachable from elsewhere",
            args.control
        ));
    }
    let signals = stop_signals().map_err(|e| format!("signal setup: {e}"))?;
    let names = node_names(&args)?;
    let bound = bind_nodes(&args.dir, &names)?;
    let (infos, listeners): (Vec<NodeInfo>, Vec<UnixListener>) = bound.into_iter().unzip();
    let mut net = Net::new(infos, args.seed);
    net.daemon_version = args.daemon_version.clone();
    let net = Arc::new(net);

    let control = tokio::net::TcpListener::bind(args.control)
        .await
        .map_err(|e| format!("bind control {}: {e}", args.control))?;
    let control_addr = control.local_addr().map_err(|e| e.to_string())?;

    for (index, listener) in listeners.into_iter().enumerate() {
        tokio::spawn(ipc::serve_node(net.clone(), index, listener));
    }
    tokio::spawn(control::serve(net.clone(), control));
    tokio::spawn(net.clone().run_retries());

    let announce = serde_json::json!({
        "control": format!("http://{control_addr}"),
        "nodes": net.nodes_json(),
    });
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{announce}").map_err(|e| e.to_string())?;
    stdout.flush().map_err(|e| e.to_string())?;
    drop(stdout);

    let why = wait_for_stop(signals, args.exit_on_stdin_eof).await;
    eprintln!("pilot-devnet: stopping ({why})");
    for node in &net.nodes {
        let _ = std::fs::remove_file(&node.socket);
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pilot-devnet: runtime: {e}");
            return std::process::ExitCode::from(70);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => {
            // Connection tasks may still be parked on reads; they hold nothing worth waiting for.
            runtime.shutdown_timeout(std::time::Duration::from_millis(200));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pilot-devnet: {e}");
            std::process::ExitCode::from(64)
        }
    }
}
