//! The TLS flags: the node's (`run`) and the client commands'.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::config::ConfigError;
use crate::tls::{Tls, TlsFiles};
use crate::transport::http::Peer;

#[derive(Debug, Args)]
pub struct TlsArgs {
    /// The server certificate (PEM, leaf first, then intermediates): the API and the peer
    /// listener speak TLS only. Needs --tls-key. Reloaded on SIGHUP or when the file changes.
    #[arg(long, env = "PILOT_ELECTION_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "PILOT_ELECTION_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Require a client certificate signed by this CA (PEM) on every connection.
    #[arg(long, env = "PILOT_ELECTION_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: let connections without a client certificate read (GET, HEAD,
    /// OPTIONS: /leader, /role/*, /metrics, ...); mutations and peer messages still need one.
    #[arg(long, env = "PILOT_ELECTION_TLS_ANONYMOUS_READS")]
    pub tls_anonymous_reads: bool,
    /// The CA (PEM) that signed the peers' server certificates: needed for https:// peers.
    #[arg(long, env = "PILOT_ELECTION_PEER_CA")]
    pub peer_ca: Option<PathBuf>,
    /// The client certificate presented to https:// peers (default: --tls-cert).
    #[arg(long, env = "PILOT_ELECTION_PEER_CERT")]
    pub peer_cert: Option<PathBuf>,
    /// The key of --peer-cert (default: --tls-key).
    #[arg(long, env = "PILOT_ELECTION_PEER_KEY")]
    pub peer_key: Option<PathBuf>,
}

impl TlsArgs {
    /// Checks the flags together, then reads every file; `None` when no TLS flag is given.
    pub fn load(&self, peers: &[Peer]) -> Result<Option<Arc<Tls>>, ConfigError> {
        let files = TlsFiles {
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            client_ca: self.tls_client_ca.clone(),
            peer_ca: self.peer_ca.clone(),
            peer_cert: self.peer_cert.clone(),
            peer_key: self.peer_key.clone(),
            anonymous_reads: self.tls_anonymous_reads,
        };
        match (&files.cert, &files.key) {
            (Some(_), None) => return Err("--tls-cert needs --tls-key (its private key)".into()),
            (None, Some(_)) => {
                return Err("--tls-key needs --tls-cert (the certificate of that key)".into())
            }
            _ => {}
        }
        if files.anonymous_reads && files.client_ca.is_none() {
            return Err("--tls-anonymous-reads needs --tls-client-ca (without it every connection is anonymous already)".into());
        }
        if files.client_ca.is_some() && files.cert.is_none() {
            return Err("--tls-client-ca needs --tls-cert and --tls-key (client certificates are asked for in the TLS handshake)".into());
        }
        match (&files.peer_cert, &files.peer_key) {
            (Some(_), None) => return Err("--peer-cert needs --peer-key (its private key)".into()),
            (None, Some(_)) => {
                return Err("--peer-key needs --peer-cert (the certificate of that key)".into())
            }
            _ => {}
        }
        if files.peer_ca.is_none() {
            if let Some(p) = peers.iter().find(|p| p.url.starts_with("https://")) {
                return Err(format!(
                    "--peer {}={} is https://: give --peer-ca FILE, the CA that signed the peers' certificates",
                    p.id, p.url
                )
                .into());
            }
        }
        if files == TlsFiles::default() {
            return Ok(None);
        }
        Ok(Some(Tls::load(files)?))
    }
}

/// How a client command reaches a node over https.
#[derive(Debug, Args)]
pub struct ClientTlsArgs {
    /// Trust only this CA (PEM) for an https:// --url (default: the built-in public roots).
    #[arg(long, env = "PILOT_ELECTION_CA")]
    pub ca: Option<PathBuf>,
    /// A client certificate (PEM), for a node started with --tls-client-ca.
    #[arg(long, env = "PILOT_ELECTION_CLIENT_CERT")]
    pub cert: Option<PathBuf>,
    /// The key of --cert (PEM).
    #[arg(long, env = "PILOT_ELECTION_CLIENT_KEY")]
    pub key: Option<PathBuf>,
}

impl ClientTlsArgs {
    /// Adds the CA and the client certificate to `builder`; the error is one line (exit 64).
    pub fn apply(&self, builder: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder, String> {
        let pair = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
            (Some(_), None) => return Err("--cert needs --key (its private key)".into()),
            (None, Some(_)) => {
                return Err("--key needs --cert (the certificate of that key)".into())
            }
            (None, None) => None,
        };
        crate::tls::client_tls(builder, self.ca.as_deref(), pair)
    }
}
