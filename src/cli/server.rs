//! The flags of the HTTP server: the peers' own listener, connection caps and timeouts.

use std::time::Duration;

use clap::Args;
use tokio::net::TcpListener;

use super::config::{parse_duration, ConfigError};
use crate::server::{Limits, Listeners};

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// A separate address for peer ingress (`POST /peer/messages`, http transport): the other
    /// members' `--peer` URLs name it, and the API port then refuses peer messages. Only the
    /// members should be able to reach it.
    #[arg(long, env = "PILOT_ELECTION_PEER_LISTEN")]
    pub peer_listen: Option<String>,
    /// How long a client has to send a request head: from the accept, or from the head's first
    /// byte on a kept-alive connection.
    #[arg(long, env = "PILOT_ELECTION_HEADER_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// How long a client has to send a request body, from the end of its head.
    #[arg(long, env = "PILOT_ELECTION_BODY_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    #[arg(long, env = "PILOT_ELECTION_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Connections the API port keeps open at once (event streams included).
    #[arg(long, env = "PILOT_ELECTION_MAX_CONNECTIONS", default_value_t = Limits::default().max_connections)]
    pub max_connections: usize,
    /// Open `GET /events` streams at once; must be below `--max-connections`.
    #[arg(long, env = "PILOT_ELECTION_MAX_EVENT_SUBSCRIBERS", default_value_t = Limits::default().max_event_subscribers)]
    pub max_event_subscribers: usize,
    /// Connections kept for peers: beyond `--max-connections` on a shared port (peer messages
    /// only), or the cap of `--peer-listen`.
    #[arg(long, env = "PILOT_ELECTION_PEER_CONNECTIONS", default_value_t = Limits::default().peer_connections)]
    pub peer_connections: usize,
}

impl ServerArgs {
    /// Checks the caps and timeouts; the error is one line.
    pub fn to_limits(&self) -> Result<Limits, ConfigError> {
        for (flag, d) in [
            ("--header-timeout", self.header_timeout),
            ("--body-timeout", self.body_timeout),
            ("--idle-timeout", self.idle_timeout),
        ] {
            if d.is_zero() {
                return Err(format!("{flag} must be more than 0").into());
            }
        }
        for (flag, n) in [
            ("--max-connections", self.max_connections),
            ("--peer-connections", self.peer_connections),
        ] {
            if n == 0 {
                return Err(format!("{flag} must be at least 1").into());
            }
        }
        if self.max_event_subscribers >= self.max_connections {
            return Err(format!(
                "--max-event-subscribers {} must be below --max-connections {} (event streams \
                 would take every connection)",
                self.max_event_subscribers, self.max_connections
            )
            .into());
        }
        Ok(Limits {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
            max_event_subscribers: self.max_event_subscribers,
            peer_connections: self.peer_connections,
        })
    }

    /// Binds the API's address and, if given, the peers'.
    pub async fn bind(&self, listen: &str) -> Result<Listeners, String> {
        let api = bind(listen).await?;
        let peer = match &self.peer_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        Ok(Listeners { api, peer })
    }
}

async fn bind(addr: &str) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn limits(extra: &[&str]) -> Result<Limits, ConfigError> {
        let mut argv = vec!["pilot-election", "run", "--node-id", "a"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).expect("parses").command {
            Command::Run(args) => args.server.to_limits(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_flags_default_to_the_servers_defaults() {
        assert_eq!(limits(&[]), Ok(Limits::default()));
    }

    #[test]
    fn bad_limits_are_refused_with_the_flag_named() {
        let err = |extra: &[&str]| limits(extra).unwrap_err().to_string();
        assert!(err(&["--header-timeout", "0s"]).contains("--header-timeout"));
        assert!(err(&["--max-connections", "0"]).contains("--max-connections"));
        assert!(err(&["--peer-connections", "0"]).contains("--peer-connections"));
        assert!(
            err(&["--max-connections", "100", "--max-event-subscribers", "100"])
                .contains("must be below --max-connections 100")
        );
        assert!(limits(&["--max-connections", "100", "--max-event-subscribers", "99"]).is_ok());
    }
}
