//! The open-file limit. Every connection is a descriptor; with the common soft limit of 1024 a
//! flood of connections would leave the node unable to open its state file or reach its peers.
//! So the node raises the soft limit to the hard one at start (as servers commonly do: the soft
//! limit exists for programs that still use `select`) and fits its connection caps inside it.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

use crate::server::{Limits, OWN_FILES};

/// Raises the soft limit to the hard limit; returns `(soft, hard)` as they are afterwards.
pub fn raise() -> nix::Result<(u64, u64)> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    getrlimit(Resource::RLIMIT_NOFILE)
}

/// Raises the limit, logs it, and lowers `limits` if they would not fit beside the files the
/// node needs for itself: its own, and the `transport` files its transport may hold (the http
/// transport's connections to its peers).
pub fn prepare(limits: &mut Limits, transport: u64) {
    let soft = match raise() {
        Ok((soft, hard)) => {
            tracing::info!(
                open_files = soft,
                hard_limit = hard,
                "open-file limit raised to the hard limit"
            );
            soft
        }
        Err(e) => {
            let soft = getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |l| l.0);
            tracing::warn!(error = %e, open_files = soft, "cannot raise the open-file limit");
            soft
        }
    };
    let reserved = OWN_FILES + transport;
    if let Some(change) = limits.fit(soft, reserved) {
        tracing::warn!("{change}");
    }
    tracing::info!(
        max_connections = limits.max_connections,
        peer_connections = limits.peer_connections,
        max_event_subscribers = limits.max_event_subscribers,
        header_timeout_ms = limits.header_timeout.as_millis() as u64,
        body_timeout_ms = limits.body_timeout.as_millis() as u64,
        idle_timeout_ms = limits.idle_timeout.as_millis() as u64,
        "connection limits"
    );
}
