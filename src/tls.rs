//! TLS with rustls (ring provider, no OpenSSL): the server's configuration for the API and peer
//! listeners (`--tls-cert`, `--tls-key`, `--tls-client-ca`), the client the http transport
//! sends peer messages with (`--peer-ca`, `--peer-cert`, `--peer-key`), and their reload
//! without a restart (SIGHUP, or a file's modification time changing).
//!
//! Every file is read and checked at start-up, so a bad one stops the node with one line (exit
//! 64); a bad file met by a reload is refused with a log line and the configuration in use
//! stays. The election never notices a reload: connections already open keep the keys they
//! were made with, new ones get the new files.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use tokio_util::sync::CancellationToken;

pub mod cert;

/// How often the files' modification times are compared with those last loaded.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(2);

/// The TLS files given on the command line, checked for consistency (not read yet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server certificate chain and its key (PEM): the API and peer listeners speak TLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Client certificates signed by this CA are required on every connection.
    pub client_ca: Option<PathBuf>,
    /// The CA that signed the peers' server certificates (`https://` peers).
    pub peer_ca: Option<PathBuf>,
    /// The certificate this node presents to its peers (default: `cert` and `key`).
    pub peer_cert: Option<PathBuf>,
    pub peer_key: Option<PathBuf>,
    /// With `client_ca`: a connection without a client certificate is let in, but may only
    /// read (`--tls-anonymous-reads`); what a certificate is presented is still verified.
    pub anonymous_reads: bool,
}

impl TlsFiles {
    fn all(&self) -> impl Iterator<Item = &PathBuf> {
        [
            &self.cert,
            &self.key,
            &self.client_ca,
            &self.peer_ca,
            &self.peer_cert,
            &self.peer_key,
        ]
        .into_iter()
        .flatten()
    }

    /// The client identity for peer messages, with the flags that named it.
    fn peer_identity(&self) -> Option<(&Path, &Path, &'static str, &'static str)> {
        match (&self.peer_cert, &self.peer_key, &self.cert, &self.key) {
            (Some(c), Some(k), _, _) => Some((c, k, "--peer-cert", "--peer-key")),
            (_, _, Some(c), Some(k)) => Some((c, k, "--tls-cert", "--tls-key")),
            _ => None,
        }
    }
}

/// What the files gave, all of it checked.
struct Loaded {
    server: Option<Arc<ServerConfig>>,
    peer_client: Option<reqwest::Client>,
    expiry: Vec<Expiry>,
}

/// When a certificate in use stops being valid, for `pilot_election_tls_cert_expiry_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    /// `server` (`--tls-cert`) or `peer_client` (what this node presents to its peers).
    pub role: &'static str,
    /// Unix seconds.
    pub not_after: i64,
}

/// The node's TLS configuration in use, swapped whole by a successful reload.
pub struct Tls {
    files: TlsFiles,
    server: RwLock<Option<Arc<ServerConfig>>>,
    peer_client: RwLock<Option<reqwest::Client>>,
    expiry: RwLock<Vec<Expiry>>,
    /// The files' modification times and sizes as last loaded (or refused).
    stamps: Mutex<Vec<Option<(SystemTime, u64)>>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Reads and checks every file; the error is one line naming the flag and the file.
    pub fn load(files: TlsFiles) -> Result<Arc<Tls>, String> {
        let stamps = stamps(&files);
        let loaded = load(&files)?;
        Ok(Arc::new(Tls {
            files,
            server: RwLock::new(loaded.server),
            peer_client: RwLock::new(loaded.peer_client),
            expiry: RwLock::new(loaded.expiry),
            stamps: Mutex::new(stamps),
        }))
    }

    /// The server configuration for a new connection; `None` serves plain HTTP.
    pub fn server_config(&self) -> Option<Arc<ServerConfig>> {
        self.server
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The client for peer messages, when `--peer-ca` is given.
    pub fn peer_client(&self) -> Option<reqwest::Client> {
        self.peer_client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The certificates in use and when each expires.
    pub fn expiry(&self) -> Vec<Expiry> {
        self.expiry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether client certificates are required (on every connection, or, with
    /// `--tls-anonymous-reads`, for everything but reads).
    pub fn requires_client_certs(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// Reads every file again; on success the new configuration is used by new connections,
    /// on failure the old one stays and the error is returned.
    pub fn reload(&self) -> Result<(), String> {
        *self.stamps.lock().unwrap_or_else(|e| e.into_inner()) = stamps(&self.files);
        let loaded = load(&self.files)?;
        *self.server.write().unwrap_or_else(|e| e.into_inner()) = loaded.server;
        *self.peer_client.write().unwrap_or_else(|e| e.into_inner()) = loaded.peer_client;
        *self.expiry.write().unwrap_or_else(|e| e.into_inner()) = loaded.expiry;
        Ok(())
    }

    fn changed(&self) -> bool {
        *self.stamps.lock().unwrap_or_else(|e| e.into_inner()) != stamps(&self.files)
    }

    fn reload_and_log(&self, why: &str) {
        match self.reload() {
            Ok(()) => tracing::info!(why, "TLS certificates and keys reloaded"),
            Err(e) => tracing::warn!(
                why,
                error = %e,
                "TLS reload refused: the previous certificates and keys stay in use"
            ),
        }
    }

    /// Reloads on SIGHUP and when a file's modification time changes, until `stop`. The
    /// SIGHUP handler is installed before this returns (a SIGHUP sent once the node serves is
    /// never the default action, which would end the process).
    pub fn watch(self: &Arc<Self>, stop: CancellationToken) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "no SIGHUP handler: TLS files are reloaded only when they change");
                None
            }
        };
        let tls = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(WATCH_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let hangup = async {
                    match hup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = hangup => tls.reload_and_log("SIGHUP"),
                    _ = tick.tick() => {
                        if tls.changed() {
                            tls.reload_and_log("a file changed");
                        }
                    }
                }
            }
        });
    }
}

fn stamps(files: &TlsFiles) -> Vec<Option<(SystemTime, u64)>> {
    files
        .all()
        .map(|p| {
            let m = std::fs::metadata(p).ok()?;
            Some((m.modified().ok()?, m.len()))
        })
        .collect()
}

fn load(files: &TlsFiles) -> Result<Loaded, String> {
    let mut expiry = Vec::new();
    let mut expires = |role, path: &Path, flag| -> Result<(), String> {
        let leaf = read_certs(path, flag)?.into_iter().next();
        if let Some(not_after) = leaf.and_then(|c| cert::not_after(&c)) {
            expiry.push(Expiry { role, not_after });
        }
        Ok(())
    };
    if let Some(c) = &files.cert {
        expires("server", c, "--tls-cert")?;
    }
    if files.peer_ca.is_some() {
        if let Some((c, _, flag, _)) = files.peer_identity() {
            expires("peer_client", c, flag)?;
        }
    }
    Ok(Loaded {
        server: server_config(files)?,
        peer_client: peer_client(files)?,
        expiry,
    })
}

/// The provider every configuration is built with (the only one this build has).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls error in `e` or anywhere among its causes: a handshake that failed on a server's
/// stream (tokio-rustls hands it over as an `io::Error` wrapping it) or in a client's connect
/// (reqwest's error, wrapping hyper's, wrapping `io::Error`s). An `io::Error` reports its inner
/// error's source rather than the inner error itself, so the walk steps into it instead.
pub fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(tls) = c.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        cause = match c.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => c.source(),
        };
    }
    None
}

fn read(path: &Path, flag: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{flag} {}: cannot read it: {e}", path.display()))
}

/// The certificates of a PEM file, at least one.
pub fn read_certs(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(path, flag)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{flag} {}: not a PEM file: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{flag} {}: no certificate in it (a PEM \"BEGIN CERTIFICATE\" block)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_key(path: &Path, flag: &str) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read(path, flag)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => format!(
            "{flag} {}: no private key in it (a PEM \"BEGIN PRIVATE KEY\" block)",
            path.display()
        ),
        e => format!("{flag} {}: not a PEM file: {e}", path.display()),
    })
}

fn roots(path: &Path, flag: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for c in read_certs(path, flag)? {
        roots.add(c).map_err(|e| {
            format!(
                "{flag} {}: not a usable CA certificate: {e}",
                path.display()
            )
        })?;
    }
    Ok(roots)
}

/// A certificate chain and its key, checked to belong together.
fn pair(
    cert: &Path,
    key: &Path,
    cert_flag: &str,
    key_flag: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let chain = read_certs(cert, cert_flag)?;
    let der = read_key(key, key_flag)?;
    CertifiedKey::from_der(chain.clone(), der.clone_key(), &provider()).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "{key_flag} {} does not match the certificate in {cert_flag} {}",
            key.display(),
            cert.display()
        ),
        e => format!(
            "{cert_flag} {} / {key_flag} {}: {e}",
            cert.display(),
            key.display()
        ),
    })?;
    Ok((chain, der))
}

fn server_config(files: &TlsFiles) -> Result<Option<Arc<ServerConfig>>, String> {
    let (Some(cert), Some(key)) = (&files.cert, &files.key) else {
        return Ok(None);
    };
    let (chain, der) = pair(cert, key, "--tls-cert", "--tls-key")?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(ca, "--tls-client-ca")?),
                provider(),
            );
            let verifier = if files.anonymous_reads {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("--tls-client-ca {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, der)
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}

fn peer_client(files: &TlsFiles) -> Result<Option<reqwest::Client>, String> {
    let Some(ca) = &files.peer_ca else {
        return Ok(None);
    };
    roots(ca, "--peer-ca")?;
    let mut builder = crate::peer_client::builder().tls_built_in_root_certs(false);
    let bundle = reqwest::Certificate::from_pem_bundle(&read(ca, "--peer-ca")?)
        .map_err(|e| format!("--peer-ca {}: {e}", ca.display()))?;
    for c in bundle {
        builder = builder.add_root_certificate(c);
    }
    if let Some((cert, key, cert_flag, key_flag)) = files.peer_identity() {
        builder = builder.identity(identity(cert, key, cert_flag, key_flag)?);
    }
    builder
        .build()
        .map(Some)
        .map_err(|e| format!("cannot set up the TLS client for peers: {e}"))
}

/// A client certificate and key for reqwest, checked to belong together.
pub fn identity(
    cert: &Path,
    key: &Path,
    cert_flag: &str,
    key_flag: &str,
) -> Result<reqwest::Identity, String> {
    pair(cert, key, cert_flag, key_flag)?;
    let mut pem = read(cert, cert_flag)?;
    pem.push(b'\n');
    pem.extend(read(key, key_flag)?);
    reqwest::Identity::from_pem(&pem).map_err(|e| {
        format!(
            "{cert_flag} {} / {key_flag} {}: {e}",
            cert.display(),
            key.display()
        )
    })
}

/// A client that trusts only the CA in `ca` (when given) and presents `cert`/`key` (when
/// given): the CLI's client commands.
pub fn client_tls(
    mut builder: reqwest::ClientBuilder,
    ca: Option<&Path>,
    cert_key: Option<(&Path, &Path)>,
) -> Result<reqwest::ClientBuilder, String> {
    if let Some(ca) = ca {
        read_certs(ca, "--ca")?;
        builder = builder.tls_built_in_root_certs(false);
        for c in reqwest::Certificate::from_pem_bundle(&read(ca, "--ca")?)
            .map_err(|e| format!("--ca {}: {e}", ca.display()))?
        {
            builder = builder.add_root_certificate(c);
        }
    }
    if let Some((cert, key)) = cert_key {
        builder = builder.identity(identity(cert, key, "--cert", "--key")?);
    }
    Ok(builder)
}
