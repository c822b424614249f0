//! The process around a running node: logging set up once the configuration is good, the
//! signals that stop it, and the exit code it ends with.

use super::server::ServerArgs;
use super::{LogFormat, EXIT_OK, EXIT_REFUSED, EXIT_USAGE};
use crate::{NodeConfig, ObserverNodeConfig, RunError};

pub(super) fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PILOT_ELECTION_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    // Colour codes only for a person at a terminal, never into log files or collectors.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}

pub(super) async fn run_node(config: NodeConfig, listen: &str, server: &ServerArgs) -> i32 {
    match &config.cluster_keys {
        Some(k) => tracing::info!(key_id = k.signing_key_id(), "peer messages are signed and verified"),
        None => tracing::warn!("no cluster key (--cluster-key-file): peers are unauthenticated, anyone who can reach this node can publish election messages"),
    }
    if config.admin_token.is_none() {
        if config.allow_unauthenticated {
            tracing::warn!("no admin token and --allow-unauthenticated: anyone who can reach the API can move leadership");
        } else {
            tracing::info!("no admin token configured: candidacy and step-down are refused (403)");
        }
    }
    let listeners = match server.bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("pilot-election: {e}");
            return EXIT_USAGE;
        }
    };
    match crate::run(config, listeners, shutdown_signal()).await {
        Ok(()) => EXIT_OK,
        Err(e) => {
            tracing::error!(error = %e, "stopped");
            eprintln!("pilot-election: {e}");
            match e {
                // The configuration, not the machine, is what to change.
                RunError::MemberChange { .. } => EXIT_USAGE,
                _ => EXIT_REFUSED,
            }
        }
    }
}

/// `run --observe`: serves until SIGTERM or SIGINT.
pub(super) async fn run_observer_node(
    config: ObserverNodeConfig,
    listen: &str,
    server: &ServerArgs,
) -> i32 {
    if config.observer.cluster_keys.is_none() {
        tracing::info!("no cluster key (--cluster-key-file): what the observer reads is not verified, and members of a signed cluster drop its announcements");
    }
    let listeners = match server.bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("pilot-election: {e}");
            return EXIT_USAGE;
        }
    };
    match crate::run_observer(config, listeners, shutdown_signal()).await {
        Ok(()) => EXIT_OK,
        Err(e) => {
            tracing::error!(error = %e, "stopped");
            eprintln!("pilot-election: {e}");
            EXIT_REFUSED
        }
    }
}
