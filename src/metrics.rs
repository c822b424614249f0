//! Prometheus metrics, shared by the runtime, the transport and the API.
//!
//! Ages (last heartbeat, member last seen) are set at scrape time from the published view, so a
//! stuck election loop shows as a growing age rather than a frozen one.
//!
//! Every labelled family has its own label set, and every label with a known set of values is
//! an enum here ([`MessageType`], [`Received`], [`TransitionReason`], ...), each value written
//! once: a caller cannot misspell a label or invent a value, and the layers above map their own
//! types onto these exhaustively, so a new reason or outcome does not compile until it has its
//! label. Names that are data (a member, a broker, a transport kind, a certificate) stay text,
//! and so do the broker states, which the pilot transport names.

use std::fmt::Write;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// A label's values: the enum, its `label()` (the exported text) and its encoding.
macro_rules! label_values {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The text the metric carries.
            pub fn label(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
                encoder.write_str(self.label())
            }
        }
    };
}

/// A label set of one label.
macro_rules! label_set {
    ($name:ident { $label:ident: $ty:ty }) => {
        #[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
        struct $name {
            $label: $ty,
        }
    };
}

label_set!(ReasonLabel {
    reason: TransitionReason
});
label_set!(ResultLabel {
    result: ElectionResult
});
label_set!(MemberLabel { member: String });
label_set!(GroupLabel { group: String });
label_set!(PoolLabel { pool: Pool });
label_set!(RefusedLabel { reason: Refused });
label_set!(PhaseLabel { phase: Phase });
label_set!(TransportLabel { transport: &'static str });
label_set!(ExecExitLabel { outcome: ExecExit });
label_set!(FiringLabel {
    outcome: FiringOutcome
});
label_set!(OnChangeLabel {
    outcome: OnChangeOutcome
});
label_set!(CertLabel { cert: &'static str });
label_set!(HealthCheckLabel {
    outcome: HealthCheckOutcome
});
label_set!(ViaLabel { via: ObserverVia });

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReceivedLabels {
    r#type: MessageType,
    outcome: Received,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PilotIoLabel {
    io: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ThrottledLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BrokerStateLabels {
    broker: String,
    state: &'static str,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    pub term: Gauge,
    pub is_leader: Gauge,
    transitions: Family<ReasonLabel, Counter>,
    elections: Family<ResultLabel, Counter>,
    pub leaderless_seconds: Counter<f64, AtomicU64>,
    pub last_heartbeat_age: Gauge<f64, AtomicU64>,
    member_last_seen_age: Family<MemberLabel, Gauge<f64, AtomicU64>>,
    /// Over every group of the node, always (a total's cardinality does not grow with the
    /// groups); set at scrape time.
    pub groups: Gauge,
    pub groups_leading: Gauge,
    pub groups_leaderless: Gauge,
    /// One series per group, only for the groups `--metrics-groups` names: a thousand groups
    /// would otherwise be three thousand series on every scrape. Set at scrape time.
    group_term: Family<GroupLabel, Gauge>,
    group_is_leader: Family<GroupLabel, Gauge>,
    group_leaderless: Family<GroupLabel, Gauge>,
    received: Family<ReceivedLabels, Counter>,
    pub publish_failures: Counter,
    /// Batches sent (rule 18) and the messages they carried.
    pub batches_sent: Counter,
    pub batched_messages: Counter,
    pub publish_latency: Histogram,
    pub subscription_restarts: Counter,
    broker_state: Family<BrokerStateLabels, Gauge>,
    pilot_io: Family<PilotIoLabel, Gauge>,
    publish_throttled: Family<ThrottledLabel, Counter>,
    connections_open: Family<PoolLabel, Gauge>,
    refusals: Family<RefusedLabel, Counter>,
    timeouts: Family<PhaseLabel, Counter>,
    evictions: Family<PoolLabel, Counter>,
    pub accept_errors: Counter,
    pub event_subscribers: Gauge,
    /// 1 while `/readyz` would answer 200, labelled with the transport; set at scrape time.
    ready: Family<TransportLabel, Gauge>,
    pub exec_running: Gauge,
    exec_exits: Family<ExecExitLabel, Counter>,
    /// Scheduled firings this node accounted for as leader (`run --schedule`), by outcome.
    scheduled_firings: Family<FiringLabel, Counter>,
    /// 1 while a scheduled firing's command runs on this node.
    pub scheduled_running: Gauge,
    /// `--on-change` runs by outcome, and how long each took.
    on_change_runs: Family<OnChangeLabel, Counter>,
    pub on_change_duration: Histogram,
    /// Changes never run because a newer one arrived during a run (the newest wins).
    pub on_change_coalesced: Counter,
    /// 1 while the operator's maintenance pause holds here (rule 16); set at scrape time.
    pub maintenance: Gauge,
    /// 1 while a step-down waits for its hour on this node; set at scrape time.
    pub step_down_scheduled: Gauge,
    /// Seconds until each certificate in use expires (negative once it has), by `cert`; set at
    /// scrape time.
    tls_cert_expiry: Family<CertLabel, Gauge>,
    /// With `--health-cmd`/`--health-url` only (registered by [`Metrics::enable_health_checks`]):
    /// 1 while the application is healthy, the checks by outcome, and how long each took.
    pub app_healthy: Gauge,
    health_checks: Family<HealthCheckLabel, Counter>,
    pub health_check_duration: Histogram,
    /// Observers this member knows of, by how (`topic`, `events`); set at scrape time.
    observers: Family<ViaLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let m = Metrics {
            registry: Mutex::new(Registry::with_prefix("pilot_election")),
            term: Gauge::default(),
            is_leader: Gauge::default(),
            transitions: Family::default(),
            elections: Family::default(),
            leaderless_seconds: Counter::default(),
            last_heartbeat_age: Gauge::default(),
            member_last_seen_age: Family::default(),
            groups: Gauge::default(),
            groups_leading: Gauge::default(),
            groups_leaderless: Gauge::default(),
            group_term: Family::default(),
            group_is_leader: Family::default(),
            group_leaderless: Family::default(),
            received: Family::default(),
            publish_failures: Counter::default(),
            batches_sent: Counter::default(),
            batched_messages: Counter::default(),
            publish_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 12)),
            subscription_restarts: Counter::default(),
            broker_state: Family::default(),
            pilot_io: Family::default(),
            publish_throttled: Family::default(),
            connections_open: Family::default(),
            refusals: Family::default(),
            timeouts: Family::default(),
            evictions: Family::default(),
            accept_errors: Counter::default(),
            event_subscribers: Gauge::default(),
            ready: Family::default(),
            exec_running: Gauge::default(),
            exec_exits: Family::default(),
            scheduled_firings: Family::default(),
            scheduled_running: Gauge::default(),
            on_change_runs: Family::default(),
            on_change_duration: Histogram::new(exponential_buckets(0.005, 2.0, 13)),
            on_change_coalesced: Counter::default(),
            maintenance: Gauge::default(),
            step_down_scheduled: Gauge::default(),
            tls_cert_expiry: Family::default(),
            app_healthy: Gauge::default(),
            health_checks: Family::default(),
            health_check_duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            observers: Family::default(),
        };
        {
            let mut r = m.registry.lock().unwrap_or_else(|e| e.into_inner());
            m.register_election(&mut r);
            m.register_transport(&mut r);
            m.register_connections(&mut r);
            m.register_operations(&mut r);
            m.register_commands(&mut r);
            m.register_observers(&mut r);
        }
        m
    }

    /// What the election did: the term, the role, changes of leader, elections and silences.
    fn register_election(&self, r: &mut Registry) {
        r.register(
            "term",
            "Current election term (the fencing token)",
            self.term.clone(),
        );
        r.register(
            "is_leader",
            "1 while this node leads with an unexpired lease",
            self.is_leader.clone(),
        );
        r.register(
            "leader_transitions",
            "Changes of the known leader, by reason",
            self.transitions.clone(),
        );
        r.register(
            "elections",
            "Elections this node started, won and lost",
            self.elections.clone(),
        );
        r.register(
            "leaderless_seconds",
            "Time this node knew no leader",
            self.leaderless_seconds.clone(),
        );
        r.register(
            "last_heartbeat_age_seconds",
            "Time since the leader was last heard (-1 when no leader is known)",
            self.last_heartbeat_age.clone(),
        );
        r.register(
            "member_last_seen_age_seconds",
            "Time since each member was last heard",
            self.member_last_seen_age.clone(),
        );
        self.register_groups(r);
    }

    /// Many elections in one process: totals over the groups, and the groups an operator asked
    /// to see one by one.
    fn register_groups(&self, r: &mut Registry) {
        r.register(
            "groups",
            "Elections (groups) this node takes part in",
            self.groups.clone(),
        );
        r.register(
            "groups_leading",
            "Groups this node leads with an unexpired lease",
            self.groups_leading.clone(),
        );
        r.register(
            "groups_leaderless",
            "Groups in which this node can vouch for no leader now",
            self.groups_leaderless.clone(),
        );
        r.register(
            "group_term",
            "Each group's term (--metrics-groups only)",
            self.group_term.clone(),
        );
        r.register(
            "group_is_leader",
            "1 while this node leads the group with an unexpired lease (--metrics-groups only)",
            self.group_is_leader.clone(),
        );
        r.register(
            "group_leaderless",
            "1 while this node can vouch for no leader of the group (--metrics-groups only)",
            self.group_leaderless.clone(),
        );
    }

    /// The wire: messages in, publishes out, and the pilot transport's subscriptions.
    fn register_transport(&self, r: &mut Registry) {
        r.register(
            "messages_received",
            "Wire messages received, by type and outcome",
            self.received.clone(),
        );
        r.register(
            "publish_failures",
            "Messages that did not reach a peer",
            self.publish_failures.clone(),
        );
        r.register(
            "batches_sent",
            "Wire messages sent that carried several election messages (of any groups) as one",
            self.batches_sent.clone(),
        );
        r.register(
            "batched_messages",
            "Election messages sent inside batches",
            self.batched_messages.clone(),
        );
        r.register(
            "subscription_restarts",
            "Times a pilotctl subscription ended and had to be started again (pilot transport)",
            self.subscription_restarts.clone(),
        );
        r.register(
            "broker_state",
            "Pilot transport: 1 for the state each broker's subscription is in (subscribed, rejected, silent, unreachable, ...), 0 for the others",
            self.broker_state.clone(),
        );
        r.register(
            "pilot_io",
            "Pilot transport: 1 for the way the node reaches its brokers, socket (one connection per broker through the daemon's socket) or pilotctl (a process per publish), chosen at start",
            self.pilot_io.clone(),
        );
        r.register(
            "publish_throttled",
            "Pilot transport over the daemon's socket: publishes held back (delayed) or dropped to stay within the broker's 100 events/s per connection",
            self.publish_throttled.clone(),
        );
        r.register(
            "publish_latency_seconds",
            "Time to deliver one message to one peer",
            self.publish_latency.clone(),
        );
    }

    /// The HTTP server's connection hardening: pools, caps, timeouts and evictions.
    fn register_connections(&self, r: &mut Registry) {
        r.register(
            "connections_open",
            "Inbound connections open, by pool (api; peer: the peers' reserved slots or listener)",
            self.connections_open.clone(),
        );
        r.register(
            "refused",
            "Connections and requests refused by a cap, by reason (max_connections, event_subscribers)",
            self.refusals.clone(),
        );
        r.register(
            "connections_timed_out",
            "Connections closed because a head, a body or the next request did not arrive in time, by phase (header, body, idle)",
            self.timeouts.clone(),
        );
        r.register(
            "connections_evicted",
            "Waiting connections closed to make room for a new one at the cap, by pool",
            self.evictions.clone(),
        );
        r.register(
            "accept_errors",
            "Failed accepts (such as EMFILE: out of file descriptors)",
            self.accept_errors.clone(),
        );
        r.register(
            "event_subscribers",
            "Open GET /events streams",
            self.event_subscribers.clone(),
        );
    }

    /// What an operator set or must act on: maintenance, a scheduled step-down, certificates, readiness.
    fn register_operations(&self, r: &mut Registry) {
        r.register(
            "maintenance",
            "1 while the operator's maintenance pause holds on this node: no automatic failover, no preemption",
            self.maintenance.clone(),
        );
        r.register(
            "step_down_scheduled",
            "1 while a scheduled step-down waits for its hour on this node",
            self.step_down_scheduled.clone(),
        );
        r.register(
            "tls_cert_expiry_seconds",
            "Seconds until the certificate in use expires, by cert (server: --tls-cert; peer_client: what this node presents to its peers)",
            self.tls_cert_expiry.clone(),
        );
        r.register(
            "ready",
            "1 while /readyz answers 200 (this node can vote and hears a quorum of members with its member set), by transport",
            self.ready.clone(),
        );
    }

    /// The commands a node runs: `--exec` and the `--on-change` hook.
    fn register_commands(&self, r: &mut Registry) {
        r.register(
            "exec_running",
            "How many --exec children run on this node (one per group it leads that runs one; 1 or 0 with one group)",
            self.exec_running.clone(),
        );
        r.register(
            "exec_exits",
            "--exec children that ended: ok or failed on their own, stopped or killed by the node",
            self.exec_exits.clone(),
        );
        r.register(
            "scheduled_firings",
            "Firings of the --schedule this node accounted for as leader: ok or failed (it ran them), missed (nobody could run them in their grace), interrupted (a leader claimed them and was gone before their end); a firing is counted by one node, or twice when a leader dies before its record spreads",
            self.scheduled_firings.clone(),
        );
        r.register(
            "scheduled_running",
            "How many scheduled firings' commands run on this node now",
            self.scheduled_running.clone(),
        );
        r.register(
            "on_change_runs",
            "--on-change hook runs by outcome: ok, failed (non-zero, a signal, could not start), timed_out (killed at --on-change-timeout), killed_at_exit",
            self.on_change_runs.clone(),
        );
        r.register(
            "on_change_run_duration_seconds",
            "How long each --on-change hook run took",
            self.on_change_duration.clone(),
        );
        r.register(
            "on_change_coalesced",
            "Changes the --on-change hook never ran because a newer one arrived while it ran (the newest wins)",
            self.on_change_coalesced.clone(),
        );
    }

    /// The observers this member knows of.
    fn register_observers(&self, r: &mut Registry) {
        r.register(
            "observers",
            "Observers (run --observe) this member knows of: heard on the election topic within 30 s (via=topic), or following its /events now (via=events)",
            self.observers.clone(),
        );
    }

    pub fn received(&self, kind: MessageType, outcome: Received) {
        self.received
            .get_or_create(&ReceivedLabels {
                r#type: kind,
                outcome,
            })
            .inc();
    }

    pub fn transition(&self, reason: TransitionReason) {
        self.transitions
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    pub fn election(&self, result: ElectionResult) {
        self.elections.get_or_create(&ResultLabel { result }).inc();
    }

    /// Sets the one state a broker is in to 1 and its other `states` to 0, so that a query can
    /// both select by state and alert on a broker that is not `subscribed`. The states are the
    /// transport's to name (its `LinkState`); this module only labels them.
    pub fn set_broker_state(&self, broker: &str, state: &str, states: &[&'static str]) {
        for &s in states {
            let labels = BrokerStateLabels {
                broker: broker.to_string(),
                state: s,
            };
            self.broker_state
                .get_or_create(&labels)
                .set(i64::from(s == state));
        }
    }

    /// The pilot transport's path: `socket` or `pilotctl`, 1 for the one in use.
    pub fn set_pilot_io(&self, io: &'static str) {
        for s in ["socket", "pilotctl"] {
            self.pilot_io
                .get_or_create(&PilotIoLabel { io: s })
                .set(i64::from(s == io));
        }
    }

    /// A publish held back (`delayed`) or `dropped` by the per-connection rate limit.
    pub fn publish_throttled(&self, outcome: &'static str) {
        self.publish_throttled
            .get_or_create(&ThrottledLabel { outcome })
            .inc();
    }

    pub fn exec_exit(&self, outcome: ExecExit) {
        self.exec_exits
            .get_or_create(&ExecExitLabel { outcome })
            .inc();
    }

    pub fn scheduled_firings(&self, outcome: FiringOutcome, n: u64) {
        self.scheduled_firings
            .get_or_create(&FiringLabel { outcome })
            .inc_by(n);
    }

    pub fn on_change_run(&self, outcome: OnChangeOutcome, took: Duration) {
        self.on_change_runs
            .get_or_create(&OnChangeLabel { outcome })
            .inc();
        self.on_change_duration.observe(took.as_secs_f64());
    }

    /// Registers the health-check metrics: a node without a check exports none of them, so
    /// that an alert on `app_healthy == 0` never fires for it.
    pub fn enable_health_checks(&self) {
        let mut r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        r.register(
            "app_healthy",
            "1 while the application's health check (--health-cmd or --health-url) holds this node healthy, 0 while it ranks below every healthy member",
            self.app_healthy.clone(),
        );
        r.register(
            "health_checks",
            "Application health checks by outcome: pass, fail (another exit code or status, no answer, could not start), timed_out (killed at --health-timeout)",
            self.health_checks.clone(),
        );
        r.register(
            "health_check_duration_seconds",
            "How long each application health check took",
            self.health_check_duration.clone(),
        );
        drop(r);
        // Every outcome exported from the start, so that a rate over a first failure works.
        for &outcome in HealthCheckOutcome::ALL {
            let _ = self
                .health_checks
                .get_or_create(&HealthCheckLabel { outcome });
        }
    }

    pub fn health_check(&self, outcome: HealthCheckOutcome, took: Duration) {
        self.health_checks
            .get_or_create(&HealthCheckLabel { outcome })
            .inc();
        self.health_check_duration.observe(took.as_secs_f64());
    }

    /// A turn's `messages` went as `batches` wire messages.
    pub fn batched(&self, messages: u64, batches: u64) {
        self.batched_messages.inc_by(messages);
        self.batches_sent.inc_by(batches);
    }

    pub fn publish_failed(&self) {
        self.publish_failures.inc();
    }

    pub fn observe_publish(&self, d: Duration) {
        self.publish_latency.observe(d.as_secs_f64());
    }

    pub fn connections_open(&self, pool: Pool, open: usize) {
        self.connections_open
            .get_or_create(&PoolLabel { pool })
            .set(open as i64);
    }

    pub fn refused(&self, reason: Refused) {
        self.refusals.get_or_create(&RefusedLabel { reason }).inc();
    }

    pub fn timed_out(&self, phase: Phase) {
        self.timeouts.get_or_create(&PhaseLabel { phase }).inc();
    }

    pub fn evicted(&self, pool: Pool) {
        self.evictions.get_or_create(&PoolLabel { pool }).inc();
    }

    /// Whether `/readyz` would answer 200 now; the transport is its kind (`http`, `pilot`).
    pub fn set_ready(&self, transport: &'static str, ready: bool) {
        self.ready
            .get_or_create(&TransportLabel { transport })
            .set(i64::from(ready));
    }

    /// Seconds until the certificate in use as `cert` (`server`, `peer_client`) expires.
    pub fn set_cert_expiry(&self, cert: &'static str, seconds: i64) {
        self.tls_cert_expiry
            .get_or_create(&CertLabel { cert })
            .set(seconds);
    }

    /// The observers known by way of `via`.
    pub fn set_observers(&self, via: ObserverVia, count: usize) {
        self.observers
            .get_or_create(&ViaLabel { via })
            .set(count as i64);
    }

    /// Seconds since `member` was last heard (-1 if never).
    pub fn set_member_last_seen_age(&self, member: &str, age: f64) {
        self.member_last_seen_age
            .get_or_create(&MemberLabel {
                member: member.to_string(),
            })
            .set(age);
    }

    /// The per-group series of the groups asked for, and only those: a group removed since the
    /// last scrape loses its series. Each entry is (group, term, leads, knows a leader).
    pub fn set_groups_shown<'a>(
        &self,
        shown: impl IntoIterator<Item = (&'a str, u64, bool, bool)>,
    ) {
        self.group_term.clear();
        self.group_is_leader.clear();
        self.group_leaderless.clear();
        for (group, term, leads, has_leader) in shown {
            let label = GroupLabel {
                group: group.to_string(),
            };
            self.group_term.get_or_create(&label).set(term as i64);
            self.group_is_leader
                .get_or_create(&label)
                .set(i64::from(leads));
            self.group_leaderless
                .get_or_create(&label)
                .set(i64::from(!has_leader));
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &r);
        out
    }
}

label_values! {
    /// The server's connection pools (`pool` label): the API's, and the peers' reserved slots
    /// or listener.
    pub enum Pool {
        Api => "api",
        Peer => "peer",
    }
}

label_values! {
    /// Why a connection or request was refused (`refused_total{reason}`).
    pub enum Refused {
        /// Every connection busy at the cap.
        MaxConnections => "max_connections",
        /// `--max-event-subscribers` streams open.
        EventSubscribers => "event_subscribers",
        /// The TLS handshake failed.
        TlsHandshake => "tls_handshake",
        /// A write without a client certificate (`--tls-anonymous-reads`).
        ClientCertificateRequired => "client_certificate_required",
    }
}

label_values! {
    /// What a connection was waiting for when it timed out (`connections_timed_out_total{phase}`).
    pub enum Phase {
        /// A request head (or, with TLS, the handshake and the first head).
        Header => "header",
        /// A request body.
        Body => "body",
        /// The next request on a kept-alive connection.
        Idle => "idle",
    }
}

label_values! {
    /// The type of a received message (`messages_received_total{type}`): its wire name, or
    /// `unknown` when it could not be read, or `any` when the transport dropped it unread.
    pub enum MessageType {
        Heartbeat => "heartbeat",
        Ack => "ack",
        Presence => "presence",
        Election => "election",
        Vote => "vote",
        Leader => "leader",
        Resign => "resign",
        /// Not parsed, or refused before it was (malformed, unsigned, a bad signature...).
        Unknown => "unknown",
        /// Counted by the transport before parsing (echoes, duplicates, a full channel).
        Any => "any",
    }
}

label_values! {
    /// What became of a received message (`messages_received_total{outcome}`).
    pub enum Received {
        /// The core took it (a command done, a message that counted).
        Accepted => "accepted",
        /// For an older term or a finished round.
        Stale => "stale",
        /// Not for this node, or refused by a rule.
        Ignored => "ignored",
        /// From a node that is not a member (rule 1).
        NotMember => "not_member",
        /// From a member whose member set differs (rule 1).
        OtherMembers => "other_members",
        /// An observer's announcement, heard by a member.
        Observer => "observer",
        /// A message an observer followed.
        Observed => "observed",
        /// Not a message of the wire format.
        Malformed => "malformed",
        /// Without a signature where a cluster key is set.
        Unsigned => "unsigned",
        /// Signed with a key id this node does not know.
        UnknownKey => "unknown_key",
        /// Its signature does not match.
        BadSignature => "bad_signature",
        /// Seen already, or older than the sender's replay window.
        Replayed => "replayed",
        /// Its sender is not the member the client certificate names.
        WrongCertificate => "wrong_certificate",
        /// This node's own message, back from the broker.
        Own => "own",
        /// A copy already received through another broker.
        Duplicate => "duplicate",
        /// The runtime's inbound channel was full.
        Dropped => "dropped",
    }
}

label_values! {
    /// Why the known leader changed (`leader_transitions_total{reason}`): the core's reasons.
    pub enum TransitionReason {
        Elected => "elected",
        StepDown => "step_down",
        Transfer => "transfer",
        Preempted => "preempted",
        LeaseExpired => "lease_expired",
        LeaderTimeout => "leader_timeout",
        HigherTerm => "higher_term",
        Shutdown => "shutdown",
        Unhealthy => "unhealthy",
    }
}

label_values! {
    /// Elections this node started and how they ended (`elections_total{result}`).
    pub enum ElectionResult {
        Started => "started",
        Won => "won",
        Lost => "lost",
    }
}

label_values! {
    /// How a scheduled firing ended (`scheduled_firings_total{outcome}`).
    pub enum FiringOutcome {
        Ok => "ok",
        Failed => "failed",
        Missed => "missed",
        Interrupted => "interrupted",
    }
}

label_values! {
    /// How an `--exec` child ended (`exec_exits_total{outcome}`).
    pub enum ExecExit {
        /// On its own, with code 0.
        Ok => "ok",
        /// On its own, non-zero or by a signal not ours; or it could not be started.
        Failed => "failed",
        /// Stopped by the node (SIGTERM) when leadership ended.
        Stopped => "stopped",
        /// Killed by the node (SIGKILL) when it did not stop in time.
        Killed => "killed",
    }
}

label_values! {
    /// How an `--on-change` run ended (`on_change_runs_total{outcome}`).
    pub enum OnChangeOutcome {
        Ok => "ok",
        Failed => "failed",
        TimedOut => "timed_out",
        KilledAtExit => "killed_at_exit",
    }
}

label_values! {
    /// How an application health check ended (`health_checks_total{outcome}`).
    pub enum HealthCheckOutcome {
        Pass => "pass",
        Fail => "fail",
        TimedOut => "timed_out",
    }
}

label_values! {
    /// How a member knows of an observer (`observers{via}`).
    pub enum ObserverVia {
        /// Its announcements on the election topic (pilot).
        Topic => "topic",
        /// An `/events` stream of this member that it follows (http).
        Events => "events",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels<T: Copy>(all: &[T], label: fn(T) -> &'static str) -> Vec<&'static str> {
        all.iter().map(|&v| label(v)).collect()
    }

    /// The exported label values, byte for byte: dashboards, alert rules and the tests outside
    /// select on them.
    #[test]
    fn every_label_value_is_the_text_exported_before_they_were_typed() {
        assert_eq!(labels(Pool::ALL, Pool::label), ["api", "peer"]);
        assert_eq!(
            labels(Refused::ALL, Refused::label),
            [
                "max_connections",
                "event_subscribers",
                "tls_handshake",
                "client_certificate_required"
            ]
        );
        assert_eq!(labels(Phase::ALL, Phase::label), ["header", "body", "idle"]);
        assert_eq!(
            labels(MessageType::ALL, MessageType::label),
            [
                "heartbeat",
                "ack",
                "presence",
                "election",
                "vote",
                "leader",
                "resign",
                "unknown",
                "any"
            ]
        );
        assert_eq!(
            labels(Received::ALL, Received::label),
            [
                "accepted",
                "stale",
                "ignored",
                "not_member",
                "other_members",
                "observer",
                "observed",
                "malformed",
                "unsigned",
                "unknown_key",
                "bad_signature",
                "replayed",
                "wrong_certificate",
                "own",
                "duplicate",
                "dropped"
            ]
        );
        assert_eq!(
            labels(TransitionReason::ALL, TransitionReason::label),
            [
                "elected",
                "step_down",
                "transfer",
                "preempted",
                "lease_expired",
                "leader_timeout",
                "higher_term",
                "shutdown",
                "unhealthy"
            ]
        );
        assert_eq!(
            labels(ElectionResult::ALL, ElectionResult::label),
            ["started", "won", "lost"]
        );
        assert_eq!(
            labels(ExecExit::ALL, ExecExit::label),
            ["ok", "failed", "stopped", "killed"]
        );
        assert_eq!(
            labels(OnChangeOutcome::ALL, OnChangeOutcome::label),
            ["ok", "failed", "timed_out", "killed_at_exit"]
        );
        assert_eq!(
            labels(HealthCheckOutcome::ALL, HealthCheckOutcome::label),
            ["pass", "fail", "timed_out"]
        );
        assert_eq!(
            labels(ObserverVia::ALL, ObserverVia::label),
            ["topic", "events"]
        );
    }

    /// Label names and their order in a series are what the untyped families wrote.
    #[test]
    fn series_carry_their_labels_in_the_order_they_always_had() {
        let m = Metrics::new();
        m.received(MessageType::Heartbeat, Received::NotMember);
        m.transition(TransitionReason::StepDown);
        m.election(ElectionResult::Won);
        m.exec_exit(ExecExit::Killed);
        m.on_change_run(OnChangeOutcome::KilledAtExit, Duration::ZERO);
        m.set_broker_state("b1", "subscribed", &["subscribed", "silent"]);
        m.connections_open(Pool::Peer, 3);
        m.refused(Refused::TlsHandshake);
        m.timed_out(Phase::Idle);
        m.evicted(Pool::Api);
        m.set_ready("pilot", true);
        m.set_cert_expiry("peer_client", 7);
        m.set_observers(ObserverVia::Events, 2);
        m.set_member_last_seen_age("node-b", 1.5);
        m.enable_health_checks();
        m.health_check(HealthCheckOutcome::TimedOut, Duration::ZERO);
        let text = m.encode();
        for line in [
            r#"pilot_election_messages_received_total{type="heartbeat",outcome="not_member"} 1"#,
            r#"pilot_election_leader_transitions_total{reason="step_down"} 1"#,
            r#"pilot_election_elections_total{result="won"} 1"#,
            r#"pilot_election_exec_exits_total{outcome="killed"} 1"#,
            r#"pilot_election_on_change_runs_total{outcome="killed_at_exit"} 1"#,
            r#"pilot_election_broker_state{broker="b1",state="subscribed"} 1"#,
            r#"pilot_election_broker_state{broker="b1",state="silent"} 0"#,
            r#"pilot_election_connections_open{pool="peer"} 3"#,
            r#"pilot_election_refused_total{reason="tls_handshake"} 1"#,
            r#"pilot_election_connections_timed_out_total{phase="idle"} 1"#,
            r#"pilot_election_connections_evicted_total{pool="api"} 1"#,
            r#"pilot_election_ready{transport="pilot"} 1"#,
            r#"pilot_election_tls_cert_expiry_seconds{cert="peer_client"} 7"#,
            r#"pilot_election_observers{via="events"} 2"#,
            r#"pilot_election_member_last_seen_age_seconds{member="node-b"} 1.5"#,
            r#"pilot_election_health_checks_total{outcome="timed_out"} 1"#,
            r#"pilot_election_health_checks_total{outcome="pass"} 0"#,
            r#"pilot_election_health_checks_total{outcome="fail"} 0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
