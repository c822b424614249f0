//! Prometheus metrics, shared by the runtime, the transport and the API.
//!
//! Ages (last heartbeat, member last seen) are set at scrape time from the published view, so a
//! stuck election loop shows as a growing age rather than a frozen one.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

pub struct Metrics {
    registry: Mutex<Registry>,
    pub term: Gauge,
    pub is_leader: Gauge,
    pub transitions: Family<Labels, Counter>,
    pub elections: Family<Labels, Counter>,
    pub leaderless_seconds: Counter<f64, AtomicU64>,
    pub last_heartbeat_age: Gauge<f64, AtomicU64>,
    pub member_last_seen_age: Family<Labels, Gauge<f64, AtomicU64>>,
    pub received: Family<Labels, Counter>,
    pub publish_failures: Counter,
    pub publish_latency: Histogram,
    pub subscription_restarts: Counter,
    pub broker_state: Family<Labels, Gauge>,
    pub connections_open: Family<Labels, Gauge>,
    pub refusals: Family<Labels, Counter>,
    pub timeouts: Family<Labels, Counter>,
    pub evictions: Family<Labels, Counter>,
    pub accept_errors: Counter,
    pub event_subscribers: Gauge,
    /// 1 while `/readyz` would answer 200, labelled with the transport; set at scrape time.
    pub ready: Family<Labels, Gauge>,
    pub exec_running: Gauge,
    pub exec_exits: Family<Labels, Counter>,
    /// `--on-change` runs by outcome, and how long each took.
    pub on_change_runs: Family<Labels, Counter>,
    pub on_change_duration: Histogram,
    /// Changes never run because a newer one arrived during a run (the newest wins).
    pub on_change_coalesced: Counter,
    /// 1 while the operator's maintenance pause holds here (rule 16); set at scrape time.
    pub maintenance: Gauge,
    /// 1 while a step-down waits for its hour on this node; set at scrape time.
    pub step_down_scheduled: Gauge,
    /// Seconds until each certificate in use expires (negative once it has), by `cert`; set at
    /// scrape time.
    pub tls_cert_expiry: Family<Labels, Gauge>,
    /// With `--health-cmd`/`--health-url` only (registered by [`Metrics::enable_health_checks`]):
    /// 1 while the application is healthy, the checks by outcome, and how long each took.
    pub app_healthy: Gauge,
    pub health_checks: Family<Labels, Counter>,
    pub health_check_duration: Histogram,
    /// Observers this member knows of, by how (`topic`, `events`); set at scrape time.
    pub observers: Family<Labels, Gauge>,
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
            received: Family::default(),
            publish_failures: Counter::default(),
            publish_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 12)),
            subscription_restarts: Counter::default(),
            broker_state: Family::default(),
            connections_open: Family::default(),
            refusals: Family::default(),
            timeouts: Family::default(),
            evictions: Family::default(),
            accept_errors: Counter::default(),
            event_subscribers: Gauge::default(),
            ready: Family::default(),
            exec_running: Gauge::default(),
            exec_exits: Family::default(),
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
            r.register(
                "term",
                "Current election term (the fencing token)",
                m.term.clone(),
            );
            r.register(
                "is_leader",
                "1 while this node leads with an unexpired lease",
                m.is_leader.clone(),
            );
            r.register(
                "leader_transitions",
                "Changes of the known leader, by reason",
                m.transitions.clone(),
            );
            r.register(
                "elections",
                "Elections this node started, won and lost",
                m.elections.clone(),
            );
            r.register(
                "leaderless_seconds",
                "Time this node knew no leader",
                m.leaderless_seconds.clone(),
            );
            r.register(
                "last_heartbeat_age_seconds",
                "Time since the leader was last heard (-1 when no leader is known)",
                m.last_heartbeat_age.clone(),
            );
            r.register(
                "member_last_seen_age_seconds",
                "Time since each member was last heard",
                m.member_last_seen_age.clone(),
            );
            r.register(
                "messages_received",
                "Wire messages received, by type and outcome",
                m.received.clone(),
            );
            r.register(
                "publish_failures",
                "Messages that did not reach a peer",
                m.publish_failures.clone(),
            );
            r.register(
                "subscription_restarts",
                "Times a pilotctl subscription ended and had to be started again (pilot transport)",
                m.subscription_restarts.clone(),
            );
            r.register(
                "broker_state",
                "Pilot transport: 1 for the state each broker's subscription is in (subscribed, rejected, silent, unreachable, ...), 0 for the others",
                m.broker_state.clone(),
            );
            r.register(
                "publish_latency_seconds",
                "Time to deliver one message to one peer",
                m.publish_latency.clone(),
            );
            r.register(
                "connections_open",
                "Inbound connections open, by pool (api; peer: the peers' reserved slots or listener)",
                m.connections_open.clone(),
            );
            r.register(
                "refused",
                "Connections and requests refused by a cap, by reason (max_connections, event_subscribers)",
                m.refusals.clone(),
            );
            r.register(
                "connections_timed_out",
                "Connections closed because a head, a body or the next request did not arrive in time, by phase (header, body, idle)",
                m.timeouts.clone(),
            );
            r.register(
                "connections_evicted",
                "Waiting connections closed to make room for a new one at the cap, by pool",
                m.evictions.clone(),
            );
            r.register(
                "accept_errors",
                "Failed accepts (such as EMFILE: out of file descriptors)",
                m.accept_errors.clone(),
            );
            r.register(
                "event_subscribers",
                "Open GET /events streams",
                m.event_subscribers.clone(),
            );
            r.register(
                "maintenance",
                "1 while the operator's maintenance pause holds on this node: no automatic failover, no preemption",
                m.maintenance.clone(),
            );
            r.register(
                "step_down_scheduled",
                "1 while a scheduled step-down waits for its hour on this node",
                m.step_down_scheduled.clone(),
            );
            r.register(
                "tls_cert_expiry_seconds",
                "Seconds until the certificate in use expires, by cert (server: --tls-cert; peer_client: what this node presents to its peers)",
                m.tls_cert_expiry.clone(),
            );
            r.register(
                "ready",
                "1 while /readyz answers 200 (this node can vote and hears a quorum of members with its member set), by transport",
                m.ready.clone(),
            );
            r.register(
                "exec_running",
                "1 while the --exec child runs on this node",
                m.exec_running.clone(),
            );
            r.register(
                "exec_exits",
                "--exec children that ended: ok or failed on their own, stopped or killed by the node",
                m.exec_exits.clone(),
            );
            r.register(
                "on_change_runs",
                "--on-change hook runs by outcome: ok, failed (non-zero, a signal, could not start), timed_out (killed at --on-change-timeout), killed_at_exit",
                m.on_change_runs.clone(),
            );
            r.register(
                "on_change_run_duration_seconds",
                "How long each --on-change hook run took",
                m.on_change_duration.clone(),
            );
            r.register(
                "observers",
                "Observers (run --observe) this member knows of: heard on the election topic within 30 s (via=topic), or following its /events now (via=events)",
                m.observers.clone(),
            );
            r.register(
                "on_change_coalesced",
                "Changes the --on-change hook never ran because a newer one arrived while it ran (the newest wins)",
                m.on_change_coalesced.clone(),
            );
        }
        m
    }

    pub fn received(&self, kind: &str, outcome: &str) {
        self.received
            .get_or_create(&vec![
                ("type", kind.to_string()),
                ("outcome", outcome.to_string()),
            ])
            .inc();
    }

    pub fn transition(&self, reason: &str) {
        count(&self.transitions, "reason", reason);
    }

    pub fn election(&self, result: &str) {
        count(&self.elections, "result", result);
    }

    /// Sets the one state a broker is in to 1 and its other `states` to 0, so that a query can
    /// both select by state and alert on a broker that is not `subscribed`. The states are the
    /// transport's to name (its `LinkState`); this module only labels them.
    pub fn set_broker_state(&self, broker: &str, state: &str, states: &[&str]) {
        for s in states {
            let labels = vec![("broker", broker.to_string()), ("state", s.to_string())];
            self.broker_state
                .get_or_create(&labels)
                .set(i64::from(*s == state));
        }
    }

    pub fn exec_exit(&self, outcome: &str) {
        self.exec_exits
            .get_or_create(&vec![("outcome", outcome.to_string())])
            .inc();
    }

    pub fn on_change_run(&self, outcome: &str, took: Duration) {
        count(&self.on_change_runs, "outcome", outcome);
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
    }

    pub fn health_check(&self, outcome: &str, took: Duration) {
        count(&self.health_checks, "outcome", outcome);
        self.health_check_duration.observe(took.as_secs_f64());
    }

    pub fn publish_failed(&self) {
        self.publish_failures.inc();
    }

    pub fn observe_publish(&self, d: Duration) {
        self.publish_latency.observe(d.as_secs_f64());
    }

    pub fn connections_open(&self, pool: Pool, open: usize) {
        self.connections_open
            .get_or_create(&vec![("pool", pool.label().to_string())])
            .set(open as i64);
    }

    pub fn refused(&self, reason: Refused) {
        count(&self.refusals, "reason", reason.label());
    }

    pub fn timed_out(&self, phase: Phase) {
        count(&self.timeouts, "phase", phase.label());
    }

    pub fn evicted(&self, pool: Pool) {
        count(&self.evictions, "pool", pool.label());
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

/// The server's connection pools (`pool` label): the API's, and the peers' reserved slots or
/// listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    Api,
    Peer,
}

impl Pool {
    pub fn label(self) -> &'static str {
        match self {
            Pool::Api => "api",
            Pool::Peer => "peer",
        }
    }
}

/// Why a connection or request was refused (`refused_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every connection busy at the cap.
    MaxConnections,
    /// `--max-event-subscribers` streams open.
    EventSubscribers,
    /// The TLS handshake failed.
    TlsHandshake,
    /// A write without a client certificate (`--tls-anonymous-reads`).
    ClientCertificateRequired,
}

impl Refused {
    pub fn label(self) -> &'static str {
        match self {
            Refused::MaxConnections => "max_connections",
            Refused::EventSubscribers => "event_subscribers",
            Refused::TlsHandshake => "tls_handshake",
            Refused::ClientCertificateRequired => "client_certificate_required",
        }
    }
}

/// What a connection was waiting for when it timed out (`connections_timed_out_total{phase}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A request head (or, with TLS, the handshake and the first head).
    Header,
    /// A request body.
    Body,
    /// The next request on a kept-alive connection.
    Idle,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Header => "header",
            Phase::Body => "body",
            Phase::Idle => "idle",
        }
    }
}

/// One more in the series of `family` whose one label is `label=value`.
fn count(family: &Family<Labels, Counter>, label: &'static str, value: &str) {
    family
        .get_or_create(&vec![(label, value.to_string())])
        .inc();
}
