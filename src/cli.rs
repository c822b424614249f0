//! The command line: `run` (a node), the client commands against a running node, and `demo`.
//!
//! Exit codes, for scripts: 0 ok; 1 refused, not leader or no leader (and a node that stopped on
//! an error); 2 the node could not be reached; 64 usage or invalid configuration.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::Value;

use crate::election::{default_priority, MemberSet, Timings};
use crate::exec::ExecConfig;
use crate::pilotctl::Pilotctl;
use crate::signing::KeyRing;
use crate::transport::http::Peer;
use crate::transport::pilot::PilotConfig;
use crate::NodeConfig;

pub mod client;
pub mod demo;
pub mod server;

pub const EXIT_OK: i32 = 0;
pub const EXIT_REFUSED: i32 = 1;
pub const EXIT_UNREACHABLE: i32 = 2;
pub const EXIT_USAGE: i32 = 64;
/// `EX_UNAVAILABLE`: a service the node needs (pilotctl, its daemon) is not there.
pub const EXIT_UNAVAILABLE: i32 = 69;

#[derive(Debug, Parser)]
#[command(
    name = "pilot-election",
    version,
    about = "Leader election for a cluster: one coordinator, automatic failover, no split brain"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one node.
    Run(Box<RunArgs>),
    /// Print who leads (exit 1 when no leader is known).
    Leader(ClientArgs),
    /// Print a node's view of the cluster.
    Status(ClientArgs),
    /// Ask the leader to step down, optionally naming its successor.
    StepDown(StepDownArgs),
    /// Announce or withdraw this node's candidacy.
    Candidacy(CandidacyArgs),
    /// Exit 0 when the node's election loop is alive (for Docker's HEALTHCHECK).
    Healthcheck(ClientArgs),
    /// Run a local 3-node cluster that elects, fails over and hands over, printing a timeline.
    Demo(DemoArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportKind {
    Http,
    Pilot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// This node's id (required for the http transport).
    #[arg(long, env = "PILOT_ELECTION_NODE_ID")]
    pub node_id: Option<String>,
    /// The election group; messages go to topic `election:<group>`.
    #[arg(long, env = "PILOT_ELECTION_GROUP", default_value = "default")]
    pub group: String,
    /// Address of the HTTP API (and of the http transport's ingress).
    #[arg(long, env = "PILOT_ELECTION_LISTEN", default_value = "127.0.0.1:7070")]
    pub listen: String,
    #[command(flatten)]
    pub server: server::ServerArgs,
    #[arg(
        long,
        env = "PILOT_ELECTION_TRANSPORT",
        value_enum,
        default_value = "http"
    )]
    pub transport: TransportKind,
    /// Another member, as ID=URL (repeatable; http transport).
    #[arg(long = "peer", env = "PILOT_ELECTION_PEERS", value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Pilot broker node(s), hostname or address, comma-separated (pilot transport).
    #[arg(long, env = "PILOT_ELECTION_BROKER")]
    pub broker: Option<String>,
    /// The pilotctl binary (pilot transport); a bare name is looked up in PATH. pilotctl finds
    /// its daemon through PILOT_SOCKET, which the node passes on.
    #[arg(long, env = "PILOT_ELECTION_PILOTCTL", default_value = "pilotctl")]
    pub pilotctl: PathBuf,
    /// The Pilot daemon's socket, passed to pilotctl as PILOT_SOCKET (default: pilotctl's own,
    /// or PILOT_SOCKET from the environment).
    #[arg(long, env = "PILOT_ELECTION_PILOT_SOCKET")]
    pub pilot_socket: Option<PathBuf>,
    /// A voting member's node id (repeatable; comma-separated in the env var). Required with
    /// the pilot transport; with http the members are this node and its peers. This node is
    /// added when missing. The quorum is N/2 + 1 of these.
    #[arg(long = "member", env = "PILOT_ELECTION_MEMBERS", value_delimiter = ',')]
    pub members: Vec<String>,
    /// Deprecated: the number of members; accepted only when it equals the member count.
    #[arg(long, env = "PILOT_ELECTION_CLUSTER_SIZE")]
    pub cluster_size: Option<usize>,
    /// Priority (default: POSIX cksum of the node id); higher wins.
    #[arg(long, env = "PILOT_ELECTION_PRIORITY")]
    pub priority: Option<u32>,
    /// Start without candidacy: vote, never lead.
    #[arg(long, env = "PILOT_ELECTION_NO_CANDIDATE")]
    pub no_candidate: bool,
    /// Where term, vote, boot counter and history are kept.
    #[arg(long, env = "PILOT_ELECTION_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[arg(long, env = "PILOT_ELECTION_HEARTBEAT_INTERVAL", default_value = "500ms", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,
    #[arg(long, env = "PILOT_ELECTION_LEASE", default_value = "2s", value_parser = parse_duration)]
    pub lease: Duration,
    #[arg(long, env = "PILOT_ELECTION_ELECTION_TIMEOUT", default_value = "3s", value_parser = parse_duration)]
    pub election_timeout: Duration,
    /// How long a better-ranked node must be live before the leader hands over to it (0s: never).
    #[arg(long, env = "PILOT_ELECTION_PREEMPT_AFTER", default_value = "5s", value_parser = parse_duration)]
    pub preempt_after: Duration,
    /// File holding the operator token for mutating endpoints.
    #[arg(long, env = "PILOT_ELECTION_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// The operator token itself (prefer the file: environments leak).
    #[arg(long = "admin-token", env = "PILOT_ELECTION_ADMIN_TOKEN", hide = true)]
    pub admin_token: Option<String>,
    /// File of cluster keys (`ID=SECRET` per line, the first signs): peers must sign every
    /// message with one of them.
    #[arg(long, env = "PILOT_ELECTION_CLUSTER_KEY_FILE")]
    pub cluster_key_file: Option<PathBuf>,
    /// The cluster keys themselves, comma-separated (prefer the file).
    #[arg(long = "cluster-key", env = "PILOT_ELECTION_CLUSTER_KEY", hide = true)]
    pub cluster_key: Option<String>,
    /// Let anyone who can reach the API move leadership when no token is configured.
    #[arg(long, env = "PILOT_ELECTION_ALLOW_UNAUTHENTICATED")]
    pub allow_unauthenticated: bool,
    /// Ignore the stored term and vote and start at term 0. Only for a state file that cannot
    /// be repaired: a node that forgets its vote could vote twice in one term.
    #[arg(long, env = "PILOT_ELECTION_RESET_STATE")]
    pub reset_state: bool,
    #[arg(
        long,
        env = "PILOT_ELECTION_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Run this command line (through `sh -c`) only while this node leads.
    #[arg(long, env = "PILOT_ELECTION_EXEC")]
    pub exec: Option<String>,
    /// With --exec: step down when the command exits non-zero, instead of restarting it.
    #[arg(long, env = "PILOT_ELECTION_EXEC_STEP_DOWN_ON_FAILURE")]
    pub exec_step_down_on_failure: bool,
}

#[derive(Debug, Args)]
pub struct ClientArgs {
    /// Base URL of the node to ask.
    #[arg(
        long,
        env = "PILOT_ELECTION_URL",
        default_value = "http://127.0.0.1:7070"
    )]
    pub url: String,
    /// Print the node's JSON answer instead of a sentence.
    #[arg(long)]
    pub json: bool,
    /// File holding the operator token (mutating commands).
    #[arg(long, env = "PILOT_ELECTION_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    #[arg(long = "admin-token", env = "PILOT_ELECTION_ADMIN_TOKEN", hide = true)]
    pub admin_token: Option<String>,
}

#[derive(Debug, Args)]
pub struct StepDownArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Who should lead next.
    #[arg(long)]
    pub successor: Option<String>,
    /// Refuse unless the leader is still in this term.
    #[arg(long)]
    pub expected_term: Option<u64>,
}

#[derive(Debug, Args)]
pub struct CandidacyArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[arg(long, action = clap::ArgAction::Set)]
    pub eligible: bool,
    #[arg(long)]
    pub priority: Option<u32>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// First of the three consecutive ports on 127.0.0.1.
    #[arg(long, default_value_t = 7070)]
    pub base_port: u16,
    /// Exit by itself after this long once the timeline is done (default: serve until Ctrl-C).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// `pilot`: elect through the real pilotctl over an emulated Pilot network (pilot-devnet,
    /// built next to this program) instead of the built-in http transport.
    #[arg(long, value_enum, default_value = "http")]
    pub transport: TransportKind,
    /// The pilotctl binary for `--transport pilot` (default: `.tools/pilot/pilotctl` as
    /// `scripts/fetch-pilotctl.sh` leaves it, else `pilotctl` in PATH).
    #[arg(long)]
    pub pilotctl: Option<PathBuf>,
}

/// `500ms`, `2s`, `1m`: a number and a unit, nothing else (a bare number would be ambiguous).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(|| format!("`{s}` needs a unit: ms, s or m (e.g. 500ms, 2s)"))?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 500ms, 2s)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use ms, s or m)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"))
}

fn read_token(file: &Option<PathBuf>, inline: &Option<String>) -> Result<Option<String>, String> {
    let token = match (file, inline) {
        (Some(path), _) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read admin token file {}: {e}", path.display()))?
                .trim()
                .to_string(),
        ),
        (None, Some(t)) => Some(t.trim().to_string()),
        (None, None) => None,
    };
    if token.as_deref() == Some("") {
        return Err("the admin token is empty".into());
    }
    Ok(token)
}

impl RunArgs {
    /// Checks everything that can be checked before start-up; the error is one line.
    pub fn to_config(&self) -> Result<NodeConfig, ConfigError> {
        let node_id = self
            .node_id
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or("--node-id is required with the http transport")?;
        let pilot = self.pilot_settings()?;
        self.check_listeners(pilot.is_some())?;
        if node_id.len() > crate::election::MAX_ID_BYTES {
            return Err("--node-id must be at most 256 bytes".into());
        }
        let mut peers: Vec<Peer> = Vec::new();
        for p in &self.peers {
            let (id, url) = p.split_once('=').ok_or_else(|| {
                format!("--peer `{p}` must be ID=URL (e.g. b=http://10.0.0.2:7070)")
            })?;
            if id.is_empty() || !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(
                    format!("--peer `{p}` must be ID=URL with an http:// or https:// URL").into(),
                );
            }
            if id == node_id {
                return Err(format!("--peer `{p}` names this node itself").into());
            }
            if peers.iter().any(|q| q.id == id) {
                return Err(format!("--peer `{id}` is given twice").into());
            }
            peers.push(Peer {
                id: id.to_string(),
                url: url.to_string(),
            });
        }
        let members = self.member_set(&node_id, &peers, pilot.is_some())?;
        let timings = Timings {
            heartbeat: self.heartbeat_interval,
            lease: self.lease,
            election_timeout: self.election_timeout,
            preempt_after: self.preempt_after,
            ..Timings::default()
        };
        timings.validate().map_err(|e| e.to_string())?;
        let admin_token = read_token(&self.admin_token_file, &self.admin_token)?;
        let cluster_keys = match (&self.cluster_key_file, &self.cluster_key) {
            (Some(path), _) => Some(KeyRing::from_file(path).map_err(|e| e.to_string())?),
            (None, Some(text)) => Some(
                KeyRing::parse(text, "PILOT_ELECTION_CLUSTER_KEY").map_err(|e| e.to_string())?,
            ),
            (None, None) => None,
        };
        let exec = ExecConfig::from_flags(self.exec.as_deref(), self.exec_step_down_on_failure)?;
        Ok(NodeConfig {
            exec,
            priority: self.priority.unwrap_or_else(|| default_priority(&node_id)),
            data_dir: self
                .data_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("pilot-election-data").join(&node_id)),
            node_id,
            group: self.group.clone(),
            peers,
            members,
            eligible: !self.no_candidate,
            timings,
            admin_token,
            allow_unauthenticated: self.allow_unauthenticated,
            reset_state: self.reset_state,
            pilot,
            cluster_keys,
            limits: self.server.to_limits()?,
        })
    }

    /// The voting members (docs/protocol.md, rule 1): explicit with `--member`, or this node and
    /// its peers over http. `--cluster-size` alone no longer decides anything.
    fn member_set(
        &self,
        node_id: &str,
        peers: &[Peer],
        pilot: bool,
    ) -> Result<MemberSet, ConfigError> {
        let listed: Vec<String> = self
            .members
            .iter()
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
            .collect();
        if pilot && listed.is_empty() {
            return Err(Self::members_needed(self.cluster_size).into());
        }
        let set = if listed.is_empty() {
            MemberSet::new(node_id, peers.iter().map(|p| p.id.clone()))
        } else {
            MemberSet::new(node_id, listed.iter().cloned())
        }
        .map_err(|e| format!("--member: {e}"))?;
        if !pilot && !listed.is_empty() {
            let from_peers = MemberSet::new(node_id, peers.iter().map(|p| p.id.clone()))
                .map_err(|e| format!("--peer: {e}"))?;
            if from_peers != set {
                return Err(format!(
                    "--member lists {set} but this node and its --peers are {from_peers}: over http every member needs a --peer ID=URL (or leave --member out)"
                )
                .into());
            }
        }
        if let Some(n) = self.cluster_size {
            if n != set.len() {
                return Err(format!(
                    "--cluster-size {n} does not match the {} members {set}; drop --cluster-size (the members decide the quorum)",
                    set.len()
                )
                .into());
            }
        }
        Ok(set)
    }

    /// What to pass instead of a bare `--cluster-size` (exit 64).
    fn members_needed(cluster_size: Option<usize>) -> String {
        let hint = match cluster_size {
            Some(n) => {
                format!("--cluster-size {n} no longer decides the quorum: list the {n} members instead; ")
            }
            None => String::new(),
        };
        format!(
            "{hint}the pilot transport needs its members: --member ID for each node (this one \
             included or added), or PILOT_ELECTION_MEMBERS=ID,ID,ID"
        )
    }

    /// The pilot transport's settings, checked (`None` for the http transport): the usage
    /// errors come before anything runs pilotctl.
    fn pilot_settings(&self) -> Result<Option<PilotConfig>, ConfigError> {
        if self.transport != TransportKind::Pilot {
            return Ok(None);
        }
        let pilot = self.pilot_config()?;
        if !self.peers.is_empty() {
            return Err(
                "--peer is for the http transport; the pilot transport uses --broker".into(),
            );
        }
        if self.members.iter().all(|m| m.trim().is_empty()) {
            return Err(Self::members_needed(self.cluster_size).into());
        }
        Ok(Some(pilot))
    }

    /// The brokers and the pilotctl binary; the binary is checked later, with exit 69.
    fn pilot_config(&self) -> Result<PilotConfig, ConfigError> {
        let brokers: Vec<String> = self
            .broker
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|b| !b.is_empty())
            .map(String::from)
            .collect();
        if brokers.is_empty() {
            return Err("--broker HOST[,HOST...] is required with the pilot transport".into());
        }
        if let Some(b) = brokers
            .iter()
            .find(|b| b.starts_with('-') || b.contains(char::is_whitespace))
        {
            return Err(format!("--broker `{b}` is not a hostname or address").into());
        }
        let topic = format!("election:{}", self.group);
        if topic.len() > 1024 {
            return Err("--group is too long: the topic may be at most 1024 bytes".into());
        }
        let pilotctl = self.pilotctl()?;
        Ok(PilotConfig {
            pilotctl,
            brokers,
            topic,
        })
    }

    /// The pilotctl to run; missing or not executable is exit 69, naming the path.
    fn pilotctl(&self) -> Result<Pilotctl, ConfigError> {
        let ctl = Pilotctl::new(resolve_in_path(&self.pilotctl))
            .map_err(|e| ConfigError::Unavailable(e.to_string()))?
            .with_timeout(PILOTCTL_TIMEOUT);
        Ok(match &self.pilot_socket {
            Some(socket) => ctl.with_socket(socket),
            None => ctl,
        })
    }

    fn check_listeners(&self, pilot: bool) -> Result<(), ConfigError> {
        if pilot && self.server.peer_listen.is_some() {
            return Err("--peer-listen is for the http transport (peers POST to it)".into());
        }
        if self.server.peer_listen.as_deref() == Some(self.listen.as_str()) {
            return Err("--peer-listen must differ from --listen".into());
        }
        Ok(())
    }

    /// With the pilot transport, refuses a pilotctl outside the tested range (exit 69) before
    /// anything else runs it (a usage error is still reported first, exit 64); the verdict is
    /// logged once logging is set up.
    pub async fn check_pilotctl(&self) -> Result<Option<PilotctlVerdict>, ConfigError> {
        let Some(pilot) = self.pilot_settings()? else {
            return Ok(None);
        };
        self.check_listeners(true)?;
        let verdict = crate::pilotctl::compat::check(&pilot.pilotctl)
            .await
            .map_err(ConfigError::Unavailable)?;
        Ok(Some((pilot.pilotctl, verdict)))
    }

    /// With the pilot transport the node id defaults to the Pilot node id of the local daemon.
    pub async fn resolve_node_id(&mut self) -> Result<(), ConfigError> {
        if self.transport != TransportKind::Pilot
            || self.node_id.as_deref().is_some_and(|s| !s.is_empty())
        {
            return Ok(());
        }
        let ctl = self.pilotctl()?;
        let info = ctl.info().await.map_err(|e| {
            ConfigError::Unavailable(format!(
                "cannot learn the node id from `pilotctl info` (give --node-id or start the Pilot daemon): {e}"
            ))
        })?;
        self.node_id = Some(info.node_id.to_string());
        Ok(())
    }
}

/// The pilotctl a node will run and what its version check found.
pub type PilotctlVerdict = (Pilotctl, crate::pilotctl::compat::Verdict);

/// A pilotctl run that takes longer than this is killed (with its process group).
const PILOTCTL_TIMEOUT: Duration = Duration::from_secs(2);

/// A bare command name is looked up in PATH, as a shell would; a path is taken as it is.
pub(crate) fn resolve_in_path(p: &std::path::Path) -> PathBuf {
    if p.components().count() != 1 || p.is_absolute() {
        return p.to_path_buf();
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(p))
        .find(|c| c.is_file())
        .unwrap_or_else(|| p.to_path_buf())
}

/// Why `run` cannot start: a bad setting (exit 64) or a missing service (exit 69).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unavailable(String),
}

impl ConfigError {
    pub fn exit_code(&self) -> i32 {
        match self {
            ConfigError::Invalid(_) => EXIT_USAGE,
            ConfigError::Unavailable(_) => EXIT_UNAVAILABLE,
        }
    }
}

impl From<String> for ConfigError {
    fn from(s: String) -> Self {
        ConfigError::Invalid(s)
    }
}

impl From<&str> for ConfigError {
    fn from(s: &str) -> Self {
        ConfigError::Invalid(s.to_string())
    }
}

fn init_tracing(format: LogFormat) {
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

/// The whole program; returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    EXIT_USAGE
                } else {
                    EXIT_OK
                };
            }
            let text = e.render().to_string();
            let line = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("pilot-election: {}", line.trim_start_matches("error: "));
            return EXIT_USAGE;
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pilot-election: cannot start the async runtime: {e}");
            return EXIT_REFUSED;
        }
    };
    let code = match cli.command {
        Command::Run(mut args) => {
            let checked = rt.block_on(args.check_pilotctl()).and_then(|v| {
                rt.block_on(args.resolve_node_id())?;
                Ok((v, args.to_config()?))
            });
            let (pilotctl, config) = match checked {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("pilot-election: {e}");
                    return e.exit_code();
                }
            };
            init_tracing(args.log_format);
            if let Some((ctl, verdict)) = pilotctl {
                verdict.log(&ctl);
            }
            rt.block_on(run_node(config, &args.listen, &args.server))
        }
        Command::Leader(a) => rt.block_on(client::leader(&a)),
        Command::Status(a) => rt.block_on(client::status(&a)),
        Command::StepDown(a) => rt.block_on(client::step_down(&a)),
        Command::Candidacy(a) => rt.block_on(client::candidacy(&a)),
        Command::Healthcheck(a) => rt.block_on(client::healthcheck(&a)),
        Command::Demo(a) => rt.block_on(demo::demo(&a)),
    };
    // Dropping the runtime would wait for any blocking write still in flight (a stuck disk),
    // which would break the bounded exit Docker's stop timeout relies on.
    rt.shutdown_timeout(crate::runtime::exit_budget::LEFTOVER_BLOCKING);
    code
}

async fn run_node(config: NodeConfig, listen: &str, server: &server::ServerArgs) -> i32 {
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
            EXIT_REFUSED
        }
    }
}

/// The `error` and `message` of an API error body, for people.
pub(crate) fn error_line(body: &Value) -> String {
    match (body.get("error"), body.get("message")) {
        (Some(e), Some(m)) => format!("{}: {}", e.as_str().unwrap_or(""), m.as_str().unwrap_or("")),
        _ => body.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("ms").is_err());
    }
}
