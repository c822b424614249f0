//! `run`'s flags into a checked `NodeConfig`: every check that can be made before start-up, each
//! failing with one line and its exit code (64 for a bad setting, 69 for a missing service), and
//! the lookups it needs (the token file, `pilotctl` in PATH, the node id from the daemon).

use std::path::PathBuf;
use std::time::Duration;

use super::{PilotIoChoice, RunArgs, TransportKind, EXIT_UNAVAILABLE, EXIT_USAGE};
use crate::directory;
use crate::election::{default_priority, MemberSet, NodeInfo, Timings};
use crate::exec::ExecConfig;
use crate::group::GroupSelection;
use crate::health_check::{HealthCheckConfig, HealthFlags};
use crate::hooks::HookConfig;
use crate::observer::ObserverConfig;
use crate::pilotctl::Pilotctl;
use crate::schedule::{Cron, ScheduleConfig};
use crate::signing::KeyRing;
use crate::transport::events::EventsConfig;
use crate::transport::http::Peer;
use crate::transport::pilot::{daemon, PilotConfig, PilotIo};
use crate::transport::TransportConfig;
use crate::{NodeConfig, ObserverNodeConfig};

/// `500ms`, `2s`, `1m`, `2h`: a number and a unit, nothing else (a bare number would be
/// ambiguous). Hours are for the operator's spans (`pause --for`, `step-down --in`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(|| format!("`{s}` needs a unit: ms, s, m or h (e.g. 500ms, 2s)"))?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 500ms, 2s)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"))
}

pub(super) fn read_token(
    file: &Option<PathBuf>,
    inline: &Option<String>,
) -> Result<Option<String>, String> {
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
    /// `--schedule` and its command, checked.
    fn schedule_config(&self, groups: &[String]) -> Result<Option<ScheduleConfig>, String> {
        let selection = GroupSelection::parse("--schedule-groups", &self.schedule_groups, groups)?;
        let Some(expr) = self.schedule.as_deref() else {
            if self.schedule_cmd.is_some() || !self.schedule_command.is_empty() {
                return Err(
                    "a command to schedule (--schedule-cmd or after --) needs --schedule".into(),
                );
            }
            if selection != GroupSelection::Default {
                return Err("--schedule-groups needs --schedule".into());
            }
            return Ok(None);
        };
        let cron = Cron::parse(expr).map_err(|e| format!("--schedule {e}"))?;
        let command = match (&self.schedule_cmd, self.schedule_command.is_empty()) {
            (Some(_), false) => {
                return Err(
                    "--schedule takes its command either after -- or as --schedule-cmd, not both"
                        .into(),
                )
            }
            (None, true) => return Err(
                "--schedule needs a command: `-- CMD ARGS...` at the end, or --schedule-cmd 'LINE'"
                    .into(),
            ),
            (Some(line), true) => {
                let line = crate::exec::shell_command("--schedule-cmd", line)?;
                vec!["/bin/sh".into(), "-c".into(), line.into()]
            }
            (None, false) => self.schedule_command.clone(),
        };
        if self.schedule_grace < Duration::from_secs(1) {
            return Err(
                "--schedule-grace must be at least 1s (firings are named by the second)".into(),
            );
        }
        Ok(Some(ScheduleConfig {
            cron,
            command,
            grace: self.schedule_grace,
            groups: selection,
        }))
    }

    /// Checks everything that can be checked before start-up; the error is one line.
    pub fn to_config(&self) -> Result<NodeConfig, ConfigError> {
        let node_id = self
            .node_id
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or("--node-id is required with the http transport")?;
        let mut groups = self.groups()?;
        let exec_groups = GroupSelection::parse("--exec-groups", &self.exec_groups, &groups)?;
        let schedule = self.schedule_config(&groups)?;
        let on_change_groups =
            GroupSelection::parse("--on-change-groups", &self.on_change_groups, &groups)?;
        let metrics_groups = match self.metrics_groups.trim() {
            "none" => None,
            value => Some(GroupSelection::parse("--metrics-groups", value, &groups)?),
        };
        let group = groups.remove(0);
        let pilot = self.pilot_settings()?;
        self.check_listeners(pilot.is_some())?;
        if node_id.len() > crate::election::MAX_ID_BYTES {
            return Err("--node-id must be at most 256 bytes".into());
        }
        let peers = self.parse_peers(&node_id)?;
        let members = self.member_set(&node_id, &peers, pilot.is_some())?;
        let tls = self.tls.load(&peers)?;
        let timings = self.timings()?;
        let admin_token = read_token(&self.admin_token_file, &self.admin_token)?;
        let cluster_keys = self.cluster_keys()?;
        let exec = ExecConfig::from_flags(self.exec.as_deref(), self.exec_step_down_on_failure)?;
        let on_change = HookConfig::from_flags(self.on_change.as_deref(), self.on_change_timeout)?;
        if exec.is_none() && exec_groups != GroupSelection::Default {
            return Err("--exec-groups needs --exec".into());
        }
        if on_change.is_none() && on_change_groups != GroupSelection::Default {
            return Err("--on-change-groups needs --on-change".into());
        }
        if self.observe_group.is_some() {
            return Err("--observe-group needs --observe".into());
        }
        let health_check = HealthCheckConfig::from_flags(HealthFlags {
            command: self.health_cmd.as_deref(),
            url: self.health_url.as_deref(),
            interval: self.health_interval,
            timeout: self.health_timeout,
            failures: self.health_failures,
            successes: self.health_successes,
        })?;
        let info = NodeInfo {
            url: directory::advertise_url(self.advertise_url.as_deref(), &self.listen)?,
            meta: directory::parse_meta(&self.meta)?,
        };
        Ok(NodeConfig {
            info: Some(info),
            exec,
            exec_groups,
            schedule,
            on_change,
            on_change_groups,
            metrics_groups,
            health_check,
            priority: self.priority.unwrap_or_else(|| default_priority(&node_id)),
            data_dir: self
                .data_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("pilot-election-data").join(&node_id)),
            spread_priorities: self.priority.is_none(),
            max_groups: self.max_groups,
            node_id,
            group,
            extra_groups: groups,
            members,
            eligible: !self.no_candidate,
            timings,
            admin_token,
            allow_unauthenticated: self.allow_unauthenticated,
            reset_state: self.reset_state,
            accept_member_change: self.accept_member_change,
            transport: match pilot {
                Some(pilot) => TransportConfig::Pilot(pilot),
                None => TransportConfig::Http { peers },
            },
            cluster_keys,
            limits: self.server.to_limits()?,
            tls,
        })
    }

    /// `--peer ID=URL` each, checked: a URL of http or https, no id twice, not this node.
    fn parse_peers(&self, node_id: &str) -> Result<Vec<Peer>, ConfigError> {
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
        Ok(peers)
    }

    /// `--heartbeat-interval`, `--lease`, `--election-timeout`, `--preempt-after`, checked
    /// (rule 7).
    fn timings(&self) -> Result<Timings, ConfigError> {
        let timings = Timings {
            heartbeat: self.heartbeat_interval,
            lease: self.lease,
            election_timeout: self.election_timeout,
            preempt_after: self.preempt_after,
            ..Timings::default()
        };
        timings.validate().map_err(|e| e.to_string())?;
        Ok(timings)
    }

    fn cluster_keys(&self) -> Result<Option<KeyRing>, ConfigError> {
        Ok(match (&self.cluster_key_file, &self.cluster_key) {
            (Some(path), _) => Some(KeyRing::from_file(path).map_err(|e| e.to_string())?),
            (None, Some(text)) => Some(
                KeyRing::parse(text, "PILOT_ELECTION_CLUSTER_KEY").map_err(|e| e.to_string())?,
            ),
            (None, None) => None,
        })
    }

    /// The ids given with `--member`, blanks left out.
    fn listed_members(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
            .collect()
    }

    /// `run --observe`: what the observer follows and how it serves. The flags that only make
    /// sense for a member are refused (exit 64), so that a node is never half a member.
    pub fn to_observer_config(&self) -> Result<ObserverNodeConfig, ConfigError> {
        let member_only = [
            (self.exec.is_some(), "--exec"),
            (self.schedule.is_some(), "--schedule"),
            (
                self.exec_step_down_on_failure,
                "--exec-step-down-on-failure",
            ),
            (self.exec_groups.trim() != "default", "--exec-groups"),
            (
                self.on_change_groups.trim() != "default",
                "--on-change-groups",
            ),
            (self.metrics_groups.trim() != "none", "--metrics-groups"),
            (self.groups_file.is_some(), "--groups-file"),
            (self.health_cmd.is_some(), "--health-cmd"),
            (self.health_url.is_some(), "--health-url"),
            (self.no_candidate, "--no-candidate"),
            (self.priority.is_some(), "--priority"),
            (self.admin_token_file.is_some(), "--admin-token-file"),
            (self.admin_token.is_some(), "PILOT_ELECTION_ADMIN_TOKEN"),
            (self.allow_unauthenticated, "--allow-unauthenticated"),
            (self.reset_state, "--reset-state"),
            (self.accept_member_change, "--accept-member-change"),
            (self.server.peer_listen.is_some(), "--peer-listen"),
            (self.data_dir.is_some(), "--data-dir"),
            (self.cluster_size.is_some(), "--cluster-size"),
        ];
        if let Some((_, flag)) = member_only.iter().find(|(given, _)| *given) {
            return Err(format!(
                "{flag} cannot be used with --observe: an observer neither votes nor leads, takes \
                 no command and keeps no state"
            )
            .into());
        }
        let node_id = self
            .node_id
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or("--node-id is required with --observe over http: the observer's own name")?;
        if node_id.len() > crate::election::MAX_ID_BYTES {
            return Err("--node-id must be at most 256 bytes".into());
        }
        if !crate::observer_table::valid_name(&node_id) {
            return Err(format!(
                "--node-id `{node_id}`: an observer's name is printable ASCII without spaces (it goes in a header)"
            )
            .into());
        }
        let pilot = self.pilot_settings()?;
        let peers = self.parse_peers(&node_id)?;
        let listed = self.listed_members();
        let members: Vec<String> = match (&pilot, listed.is_empty()) {
            (None, true) => peers.iter().map(|p| p.id.clone()).collect(),
            _ => listed,
        };
        if pilot.is_none() && peers.is_empty() {
            return Err("--observe over http needs --peer ID=URL for each member whose /events it may follow".into());
        }
        if pilot.is_none() {
            if let Some(p) = peers.iter().find(|p| !members.contains(&p.id)) {
                return Err(format!(
                    "--peer {} is not in --member: an observer follows members only",
                    p.id
                )
                .into());
            }
        }
        if members.contains(&node_id) {
            return Err(format!(
                "--node-id {node_id} is a member's: an observer needs a name of its own (and is left out of --member)"
            )
            .into());
        }
        let members = match members.first() {
            Some(first) => MemberSet::new(first, members.iter().cloned())
                .map_err(|e| format!("--member: {e}"))?,
            None => return Err(Self::members_needed(None).into()),
        };
        let tls = self.tls.load(&peers)?;
        let http = match peers.iter().any(|p| p.url.starts_with("https://")) {
            false => None,
            true => {
                let cert = self.tls.peer_cert.as_ref().or(self.tls.tls_cert.as_ref());
                let key = self.tls.peer_key.as_ref().or(self.tls.tls_key.as_ref());
                let pair = cert.zip(key).map(|(c, k)| (c.as_path(), k.as_path()));
                let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(1));
                let builder = crate::tls::client_tls(builder, self.tls.peer_ca.as_deref(), pair)?;
                Some(
                    builder.build().map_err(|e| {
                        format!("cannot set up the HTTPS client for the members: {e}")
                    })?,
                )
            }
        };
        let group = self.group()?;
        let follows = match &self.observe_group {
            Some(g) => crate::group::GroupName::new(g)
                .map_err(|e| format!("--observe-group: {e}"))?
                .to_string(),
            None => group.clone(),
        };
        let transport = match pilot {
            Some(pilot) => TransportConfig::Pilot(pilot),
            None => TransportConfig::Events(EventsConfig {
                members: peers,
                node_id: node_id.clone(),
                // The default group's routes name none, as members of every release serve them.
                group: (follows != group).then(|| follows.clone()),
                http,
            }),
        };
        let observer = ObserverConfig {
            node_id,
            follows,
            members,
            transport,
            cluster_keys: self.cluster_keys()?,
            timings: self.timings()?,
        };
        Ok(ObserverNodeConfig {
            observer,
            limits: self.server.to_limits()?,
            tls,
            on_change: HookConfig::from_flags(self.on_change.as_deref(), self.on_change_timeout)?,
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
        let listed = self.listed_members();
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

    /// The `--group`s, checked: a name goes into every message, the Pilot topic, URLs and
    /// directories (src/group.rs). The first is the default group.
    fn groups(&self) -> Result<Vec<String>, ConfigError> {
        let mut groups: Vec<String> = Vec::with_capacity(self.groups.len());
        for name in &self.groups {
            let name = crate::group::GroupName::new(name).map_err(|e| format!("--group: {e}"))?;
            if groups.iter().any(|g| g == name.as_str()) {
                return Err(format!("--group {name} is given twice").into());
            }
            groups.push(name.to_string());
        }
        if let Some(file) = &self.groups_file {
            for name in crate::group::read_groups_file(file)? {
                if groups.contains(&name) {
                    return Err(
                        format!("--groups-file {}: {name} is given twice", file.display()).into(),
                    );
                }
                groups.push(name);
            }
        }
        if groups.is_empty() {
            return Err("--group: give at least one group".into());
        }
        if groups.len() > self.max_groups {
            return Err(format!(
                "{} groups given, more than --max-groups {}",
                groups.len(),
                self.max_groups
            )
            .into());
        }
        Ok(groups)
    }

    /// The one group of a node that can follow only one (an observer).
    fn group(&self) -> Result<String, ConfigError> {
        let mut groups = self.groups()?;
        if groups.len() > 1 {
            return Err("an observer follows one --group".into());
        }
        Ok(groups.remove(0))
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
        // A checked group name is far shorter than the broker's 1024-byte topic limit.
        let topic = format!("election:{}", self.groups()?[0]);
        let pilotctl = self.pilotctl()?;
        let io = match (&self.pilot_io_chosen, self.pilot_io) {
            (Some(chosen), _) => chosen.clone(),
            (None, PilotIoChoice::Pilotctl) => PilotIo::Pilotctl,
            (None, _) => PilotIo::Socket(self.daemon_socket()),
        };
        Ok(PilotConfig {
            pilotctl,
            brokers,
            topic,
            io,
        })
    }

    /// The daemon's socket, as pilotctl would find it.
    fn daemon_socket(&self) -> PathBuf {
        daemon::socket_path(self.pilot_socket.as_deref())
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
    ///
    /// Then it chooses the way to the brokers (`--pilot-io`): with `auto`, the daemon's socket
    /// when the daemon answers `info` there as a 1.18 daemon does, or when nothing answers yet
    /// (a daemon that is down or starting; the socket path reports `daemon_down` until it is
    /// up, as pilotctl would); pilotctl when it answers otherwise. With `socket`, a daemon that
    /// answers otherwise is exit 69.
    pub async fn check_pilotctl(&mut self) -> Result<Option<PilotctlVerdict>, ConfigError> {
        let Some(pilot) = self.pilot_settings()? else {
            return Ok(None);
        };
        self.check_listeners(true)?;
        let verdict = crate::pilotctl::compat::check(&pilot.pilotctl)
            .await
            .map_err(ConfigError::Unavailable)?;
        let socket = self.daemon_socket();
        let (io, why) = match self.pilot_io {
            PilotIoChoice::Pilotctl => (PilotIo::Pilotctl, "--pilot-io pilotctl".to_string()),
            choice => match daemon::probe(&socket).await {
                daemon::Probe::Speaks(info) => (
                    PilotIo::Socket(socket.clone()),
                    format!(
                        "the daemon at {} answers as Pilot {}",
                        socket.display(),
                        info.version.unwrap_or_default()
                    ),
                ),
                daemon::Probe::Unreachable(e) => (
                    PilotIo::Socket(socket.clone()),
                    format!("the daemon does not answer yet ({e}); taken to be a 1.18 daemon"),
                ),
                daemon::Probe::Differs(reason) if choice == PilotIoChoice::Socket => {
                    return Err(ConfigError::Unavailable(format!(
                        "--pilot-io socket: the daemon at {} does not answer as a 1.18 daemon does: {reason}",
                        socket.display()
                    )));
                }
                daemon::Probe::Differs(reason) => (
                    PilotIo::Pilotctl,
                    format!(
                        "the daemon at {} does not answer as a 1.18 daemon does ({reason}); publishing through a pilotctl process per message",
                        socket.display()
                    ),
                ),
            },
        };
        self.pilot_io_chosen = Some(io.clone());
        let fell_back = io == PilotIo::Pilotctl && self.pilot_io == PilotIoChoice::Auto;
        Ok(Some((
            pilot.pilotctl,
            verdict,
            PilotIoVerdict { io, why, fell_back },
        )))
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
pub type PilotctlVerdict = (Pilotctl, crate::pilotctl::compat::Verdict, PilotIoVerdict);

/// The pilot transport's way to the brokers and why, logged once logging is set up.
pub struct PilotIoVerdict {
    pub io: PilotIo,
    pub why: String,
    /// `auto` found a daemon that does not speak as expected.
    pub fell_back: bool,
}

impl PilotIoVerdict {
    pub fn log(&self) {
        let io = self.io.as_str();
        if self.fell_back {
            tracing::warn!(pilot_io = io, "{}", self.why);
        } else {
            tracing::info!(pilot_io = io, "{}", self.why);
        }
    }
}

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
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("ms").is_err());
    }

    /// clap checks its own definitions (an unknown id in `conflicts_with`, say) only in debug
    /// builds and only when that command is parsed: this runs every check for every command,
    /// in the test profile, so a release build never ships a definition clap rejects.
    #[test]
    fn every_command_definition_passes_claps_own_checks() {
        use clap::CommandFactory as _;
        crate::cli::Cli::command().debug_assert();
    }

    /// The flags' defaults are strings for `--help`; the core's `Timings::default` is the source.
    #[test]
    fn the_timing_flags_default_to_the_cores_defaults() {
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from(["pilot-election", "run", "--node-id", "a"])
            .expect("parses");
        let crate::cli::Command::Run(args) = cli.command else {
            unreachable!()
        };
        let config = args.to_config().expect("a valid configuration");
        assert_eq!(config.timings, Timings::default());
    }

    fn run_config(extra: &[&str]) -> Result<NodeConfig, ConfigError> {
        use clap::Parser as _;
        let argv = ["pilot-election", "run", "--node-id", "a"]
            .iter()
            .chain(extra)
            .copied();
        let cli = crate::cli::Cli::try_parse_from(argv).expect("parses");
        let crate::cli::Command::Run(args) = cli.command else {
            unreachable!()
        };
        args.to_config()
    }

    #[test]
    fn a_schedule_needs_a_valid_expression_and_exactly_one_command() {
        let ok =
            run_config(&["--schedule", "*/5 * * * * *", "--", "/bin/echo", "hi"]).expect("valid");
        let s = ok.schedule.expect("a schedule");
        assert_eq!(s.command, ["/bin/echo", "hi"]);
        assert_eq!(s.grace, Duration::from_secs(30));
        let line = run_config(&["--schedule", "@daily", "--schedule-cmd", "echo hi"])
            .unwrap()
            .schedule
            .unwrap();
        assert_eq!(line.command, ["/bin/sh", "-c", "echo hi"]);
        assert!(run_config(&[]).unwrap().schedule.is_none());
        for (extra, says) in [
            (&["--schedule", "* * *", "--", "x"][..], "has 3 fields"),
            (&["--schedule", "@daily"][..], "needs a command"),
            (
                &["--schedule", "@daily", "--schedule-cmd", "x", "--", "y"][..],
                "not both",
            ),
            (&["--", "x"][..], "needs --schedule"),
            (&["--schedule-cmd", "x"][..], "needs --schedule"),
            (
                &["--schedule-groups", "all"][..],
                "--schedule-groups needs --schedule",
            ),
            (
                &[
                    "--schedule",
                    "@daily",
                    "--schedule-grace",
                    "500ms",
                    "--",
                    "x",
                ][..],
                "at least 1s",
            ),
            (
                &[
                    "--schedule",
                    "@daily",
                    "--schedule-groups",
                    "nope",
                    "--",
                    "x",
                ][..],
                "nope",
            ),
        ] {
            let err = run_config(extra).map(|_| ()).unwrap_err().to_string();
            assert!(err.contains(says), "{extra:?}: {err}");
        }
    }
}
