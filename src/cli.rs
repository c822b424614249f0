//! The command line: `run` (a node), the client commands against a running node, and `demo`.
//! This file is the clap schema and the dispatch; `config` checks `run`'s flags into a
//! `NodeConfig`, `process` sets up logging and signals around a running node, `client` holds the
//! client commands, `demo` the local demo and `server` the server's flags.
//!
//! Exit codes, for scripts: 0 ok; 1 refused, not leader or no leader (and a node that stopped on
//! an error); 2 the node could not be reached; 64 usage or invalid configuration.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::Value;

pub mod client;
pub mod config;
pub mod demo;
pub mod once;
mod process;
pub mod server;
pub mod tls;

pub use config::{parse_duration, ConfigError, PilotctlVerdict};
pub use process::shutdown_signal;
use process::{init_tracing, run_node, run_observer_node};

/// What `run` starts: a member, or an observer (`--observe`). Both boxed: built once per
/// process, and of very different sizes.
enum NodeKind {
    Member(Box<crate::NodeConfig>),
    Observer(Box<crate::ObserverNodeConfig>),
}

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
    /// Print who leads and where (exit 1 when no leader is known).
    Leader(LeaderArgs),
    /// Print a node's view of the cluster.
    Status(ClientArgs),
    /// Ask the leader to step down, optionally naming its successor.
    StepDown(StepDownArgs),
    /// Announce or withdraw this node's candidacy.
    Candidacy(CandidacyArgs),
    /// Pause automatic failover on every member (maintenance; docs/guide/operations.md).
    Pause(PauseArgs),
    /// End the maintenance pause on every member.
    Resume(ClientArgs),
    /// List the election groups the node takes part in, or add or remove one while it runs.
    Groups(GroupsArgs),
    /// Run a command once, only if the node at --url leads (or once it does, with --wait), and
    /// stop it if leadership ends first (exit 0 ran and succeeded, 1 ran and failed, 3 not
    /// leader, 4 lost leadership: stopped).
    Once(OnceArgs),
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

/// `--pilot-io`: how the pilot transport reaches its brokers (docs/pilot.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PilotIoChoice {
    /// The daemon's socket if, at start, it answers as a 1.18 daemon does; else pilotctl.
    Auto,
    /// The daemon's socket: one connection per broker and purpose, no process per message.
    Socket,
    /// A pilotctl process per message (and one pilotctl subscribe per broker).
    Pilotctl,
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
    /// The election group. Repeat it (or separate names with commas in the env) to take part
    /// in several elections at once: each group elects its own leader. The first is the
    /// default group, the one the routes that name no group (`/leader`, `/step-down`, ...)
    /// answer for; over pilot every group's messages travel on the default group's topic,
    /// `election:<default group>`.
    #[arg(
        long = "group",
        env = "PILOT_ELECTION_GROUP",
        value_delimiter = ',',
        default_value = "default"
    )]
    pub groups: Vec<String>,
    /// A file of more groups to take part in, one name a line (`#` starts a comment line),
    /// after the `--group`s.
    #[arg(long, env = "PILOT_ELECTION_GROUPS_FILE")]
    pub groups_file: Option<PathBuf>,
    /// The most groups this node takes part in (more `--group`s exit 64).
    #[arg(long, env = "PILOT_ELECTION_MAX_GROUPS", default_value_t = crate::group::DEFAULT_MAX_GROUPS)]
    pub max_groups: usize,
    /// Address of the HTTP API (and of the http transport's ingress).
    #[arg(long, env = "PILOT_ELECTION_LISTEN", default_value = "127.0.0.1:7070")]
    pub listen: String,
    /// Where clients reach this node's API, announced to every member and shown in `/leader`
    /// (docs/clients.md). Default: `http://<--listen>`, which an unspecified address such as
    /// 0.0.0.0 cannot give.
    #[arg(long, env = "PILOT_ELECTION_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// A label announced with the URL, KEY=VALUE (repeatable; comma-separated in the env):
    /// at most 16, keys of letters, digits, '_', '.', '-'.
    #[arg(long = "meta", env = "PILOT_ELECTION_META", value_delimiter = ',')]
    pub meta: Vec<String>,
    #[command(flatten)]
    pub server: server::ServerArgs,
    #[command(flatten)]
    pub tls: tls::TlsArgs,
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
    /// How the pilot transport reaches its brokers: through the daemon's socket (one
    /// connection per broker, no process per message), through a pilotctl process per message,
    /// or auto: the socket if the daemon answers as a 1.18 daemon does at start.
    #[arg(
        long,
        env = "PILOT_ELECTION_PILOT_IO",
        value_enum,
        default_value = "auto"
    )]
    pub pilot_io: PilotIoChoice,
    /// What `--pilot-io auto` chose at start (set by `check_pilotctl`).
    #[arg(skip)]
    pub pilot_io_chosen: Option<crate::transport::pilot::PilotIo>,
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
    /// Start even though the member set differs by more than one id from the one this data
    /// directory last ran with. Only to re-form a cluster with every node stopped: otherwise
    /// change one member at a time (docs/guide/operations.md, "Changing the members").
    #[arg(long, env = "PILOT_ELECTION_ACCEPT_MEMBER_CHANGE")]
    pub accept_member_change: bool,
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
    /// With --exec: the groups whose leadership runs it, one child per group this node leads
    /// (PILOT_ELECTION_GROUP says which): `default`, `all`, or group names separated by commas.
    #[arg(long, env = "PILOT_ELECTION_EXEC_GROUPS", default_value = "default")]
    pub exec_groups: String,
    /// Run the command given after `--` (or --schedule-cmd) on the leader at every firing of
    /// this cron schedule, in UTC: five fields (minute hour day-of-month month day-of-week),
    /// six with seconds first, or @hourly, @daily, @weekly, @monthly, @yearly. Each firing runs
    /// once across the cluster or is reported missed (docs/guide/jobs.md).
    #[arg(long, env = "PILOT_ELECTION_SCHEDULE")]
    pub schedule: Option<String>,
    /// With --schedule: the command line to run (through `sh -c`), instead of `-- CMD ARGS`.
    #[arg(long, env = "PILOT_ELECTION_SCHEDULE_CMD")]
    pub schedule_cmd: Option<String>,
    /// With --schedule: how late a firing may still start (after a failover, say); older ones
    /// that nobody ran are reported missed, not run late.
    #[arg(long, env = "PILOT_ELECTION_SCHEDULE_GRACE", default_value = "30s", value_parser = parse_duration)]
    pub schedule_grace: Duration,
    /// With --schedule: the groups whose leader runs it, each on its own firings
    /// (PILOT_ELECTION_GROUP says which): `default`, `all`, or group names separated by commas.
    #[arg(
        long,
        env = "PILOT_ELECTION_SCHEDULE_GROUPS",
        default_value = "default"
    )]
    pub schedule_groups: String,
    /// The command --schedule runs, after `--`: run as given, without a shell.
    #[arg(last = true, value_name = "CMD")]
    pub schedule_command: Vec<std::ffi::OsString>,
    /// Run this command line (through `sh -c`) on every change of the leader or of this node's
    /// role, with the change in PILOT_ELECTION_* variables; a leader's run that reports the end
    /// of its leadership is done before its resign leaves.
    #[arg(long, env = "PILOT_ELECTION_ON_CHANGE")]
    pub on_change: Option<String>,
    /// With --on-change: a run is killed (SIGKILL to its process group) this long after it
    /// started.
    #[arg(long, env = "PILOT_ELECTION_ON_CHANGE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub on_change_timeout: Duration,
    /// With --on-change: the groups whose changes run it (PILOT_ELECTION_GROUP says which;
    /// one run at a time per group): `default`, `all`, or group names separated by commas.
    #[arg(
        long,
        env = "PILOT_ELECTION_ON_CHANGE_GROUPS",
        default_value = "default"
    )]
    pub on_change_groups: String,
    /// The groups whose own series /metrics exports (pilot_election_group_term{group=...} and
    /// friends): `none`, `all`, `default`, or group names separated by commas. The totals over
    /// every group (pilot_election_groups, _leading, _leaderless) are always there.
    #[arg(long, env = "PILOT_ELECTION_METRICS_GROUPS", default_value = "none")]
    pub metrics_groups: String,
    /// Check the application with this command line (through `sh -c`; exit 0 = healthy). An
    /// unhealthy node ranks below every healthy member and a leader hands over to a healthy
    /// one; with nobody healthy, one still leads.
    #[arg(long = "health-cmd", env = "PILOT_ELECTION_HEALTH_CMD")]
    pub health_cmd: Option<String>,
    /// Check the application with a GET of this URL (2xx = healthy), instead of --health-cmd.
    #[arg(long = "health-url", env = "PILOT_ELECTION_HEALTH_URL")]
    pub health_url: Option<String>,
    /// How often the check runs [default: 5s].
    #[arg(long, env = "PILOT_ELECTION_HEALTH_INTERVAL", value_parser = parse_duration)]
    pub health_interval: Option<Duration>,
    /// A check still running this long after it started fails [default: 2s, at most the
    /// interval].
    #[arg(long, env = "PILOT_ELECTION_HEALTH_TIMEOUT", value_parser = parse_duration)]
    pub health_timeout: Option<Duration>,
    /// Failures in a row that make the node unhealthy [default: 3].
    #[arg(long, env = "PILOT_ELECTION_HEALTH_FAILURES")]
    pub health_failures: Option<u32>,
    /// Passes in a row that make an unhealthy node healthy again [default: 2].
    #[arg(long, env = "PILOT_ELECTION_HEALTH_SUCCESSES")]
    pub health_successes: Option<u32>,
    /// Follow the election without a vote (an observer): never campaigns, never counts towards
    /// a quorum; serves the read API. Over http it follows the --peer members' /events, over
    /// pilot it subscribes to the topic.
    #[arg(long, env = "PILOT_ELECTION_OBSERVE")]
    pub observe: bool,
    /// With --observe: the group to follow when it is not the members' default group (the
    /// --group, whose topic carries every group's messages over pilot).
    #[arg(long, env = "PILOT_ELECTION_OBSERVE_GROUP")]
    pub observe_group: Option<String>,
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
    /// The election group to ask about or command (`/groups/<group>/...`); default: the node's
    /// default group. `healthcheck` is about the node, whatever the group.
    #[arg(long)]
    pub group: Option<String>,
    #[command(flatten)]
    pub tls: tls::ClientTlsArgs,
}

#[derive(Debug, Args)]
pub struct LeaderArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print only the leader's URL (its --advertise-url), for scripts; exit 1 when there is no
    /// leader or it announced no URL.
    #[arg(long)]
    pub print_url: bool,
    /// Ask for a consistent read: the leader answers once a quorum confirmed it after the
    /// request arrived (a follower redirects to it; 503 when it cannot be confirmed within `T`).
    #[arg(long)]
    pub consistent: bool,
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
    /// Step down at this time (RFC 3339, e.g. 2026-12-02T02:00:00Z) instead of now; dropped if
    /// leadership changes first.
    #[arg(long, conflicts_with_all = ["in", "cancel"])]
    pub at: Option<String>,
    /// Step down after this long (e.g. 30m) instead of now.
    #[arg(long = "in", value_parser = parse_duration, conflicts_with = "cancel")]
    pub r#in: Option<Duration>,
    /// Cancel the step-down scheduled on the node.
    #[arg(long, conflicts_with_all = ["successor", "expected_term"])]
    pub cancel: bool,
}

#[derive(Debug, Args)]
pub struct GroupsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Take part in this group's election from now on, and after restarts (run it on every
    /// member).
    #[arg(long, conflicts_with = "remove")]
    pub add: Option<String>,
    /// Leave this group's election (one added with --add; a leader resigns first).
    #[arg(long)]
    pub remove: Option<String>,
}

#[derive(Debug, Args)]
pub struct OnceArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Wait up to this long for the node to lead (e.g. 30s); default: exit 3 at once when it
    /// does not.
    #[arg(long, value_parser = parse_duration)]
    pub wait: Option<Duration>,
    /// The command and its arguments, run directly (no shell), with PILOT_ELECTION_TERM,
    /// PILOT_ELECTION_LEADER, PILOT_ELECTION_NODE_ID and PILOT_ELECTION_GROUP in its
    /// environment.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// End the pause by itself at this time (RFC 3339); default: until `resume`.
    #[arg(long, conflicts_with = "for")]
    pub until: Option<String>,
    /// End the pause by itself after this long (e.g. 2h).
    #[arg(long = "for", value_parser = parse_duration)]
    pub r#for: Option<Duration>,
    /// Why, for /status and the page (at most 256 bytes).
    #[arg(long)]
    pub reason: Option<String>,
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

/// The whole program; returns the exit code.
pub fn main() -> i32 {
    // Before any thread starts: it removes systemd's variables from the environment.
    crate::notify::take_from_env();
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
                let node = if args.observe {
                    NodeKind::Observer(Box::new(args.to_observer_config()?))
                } else {
                    NodeKind::Member(Box::new(args.to_config()?))
                };
                Ok((v, node))
            });
            let (pilotctl, node) = match checked {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("pilot-election: {e}");
                    return e.exit_code();
                }
            };
            init_tracing(args.log_format);
            if let Some((ctl, verdict, io)) = pilotctl {
                verdict.log(&ctl);
                io.log();
            }
            match node {
                NodeKind::Member(c) => rt.block_on(run_node(*c, &args.listen, &args.server)),
                NodeKind::Observer(c) => {
                    rt.block_on(run_observer_node(*c, &args.listen, &args.server))
                }
            }
        }
        Command::Leader(a) => rt.block_on(client::leader(&a)),
        Command::Status(a) => rt.block_on(client::status(&a)),
        Command::StepDown(a) => rt.block_on(client::step_down(&a)),
        Command::Candidacy(a) => rt.block_on(client::candidacy(&a)),
        Command::Pause(a) => rt.block_on(client::pause(&a)),
        Command::Resume(a) => rt.block_on(client::resume(&a)),
        Command::Groups(a) => rt.block_on(client::groups(&a)),
        Command::Once(a) => rt.block_on(once::once(&a)),
        Command::Healthcheck(a) => rt.block_on(client::healthcheck(&a)),
        Command::Demo(a) => rt.block_on(demo::demo(&a)),
    };
    // Dropping the runtime would wait for any blocking write still in flight (a stuck disk),
    // which would break the bounded exit Docker's stop timeout relies on.
    rt.shutdown_timeout(crate::exit_budget::LEFTOVER_BLOCKING);
    code
}

/// The `error` and `message` of an API error body, for people.
pub(crate) fn error_line(body: &Value) -> String {
    match (body.get("error"), body.get("message")) {
        (Some(e), Some(m)) => format!("{}: {}", e.as_str().unwrap_or(""), m.as_str().unwrap_or("")),
        _ => body.to_string(),
    }
}
