//! `GET /status`: this node's whole view, for operators.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use tokio::time::Instant;

use super::{age_ms, current_leader, AppState, ElectionApi, Group};
use crate::clock;
use crate::election::{rank, Announced, Candidacy, Rank, Role, Versions};
use crate::transport::Health;

#[derive(Serialize)]
pub struct StatusBody {
    node: String,
    /// Where clients reach this node (`--advertise-url`).
    url: Option<String>,
    /// This node's `--meta` labels.
    meta: BTreeMap<String, String>,
    role: Role,
    term: u64,
    leader: Option<String>,
    voted_for: Option<String>,
    priority: u32,
    eligible: bool,
    candidacy: Candidacy,
    can_campaign: bool,
    can_vote: bool,
    shutting_down: bool,
    cluster_size: usize,
    quorum: usize,
    /// Fingerprint of this node's member set; every member should show the same.
    fingerprint: String,
    protocol: ProtocolBody,
    /// A live member announces other timings than this node's (a rolling timing change in
    /// progress, or a configuration mistake): safe, but failovers take as long as the slowest.
    mixed_timings: bool,
    members: Vec<MemberBody>,
    timings: TimingsBody,
    transport: Health,
    /// The operator's maintenance pause holds here (rule 16): no automatic failover.
    paused: bool,
    /// The newest maintenance write this node has seen; `null` if none was ever made.
    maintenance: Option<super::pause::SettingBody>,
    /// A step-down waiting for its hour on this node; `null` if none.
    scheduled_step_down: Option<super::leadership::ScheduledBody>,
    /// The `--on-change` hook: its run in progress and its last run; `null` without one.
    on_change: Option<OnChangeBody>,
    /// The `--schedule` of this group: the next firing, the one running, the newest record
    /// every member holds and what this node accounted for; `null` without one.
    schedule: Option<crate::schedule::ScheduleStatus>,
    /// What this node advertises of its application's health (rule 17): always true without a
    /// health check.
    healthy: bool,
    /// The `--health-cmd` or `--health-url` check: its verdict, streaks and last result;
    /// `null` without one.
    health_check: Option<HealthCheckBody>,
    /// The observers this node knows of (on an observer: none).
    observers: ObserversBody,
    /// On an observer (`run --observe`): how it follows the election; `null` on a member.
    observer: Option<ObserverBody>,
}

/// Observers listed at most in `/status` (the counts cover them all).
const OBSERVERS_LISTED: usize = 100;

#[derive(Serialize)]
pub struct ObserversBody {
    /// Heard within 30 s (over pilot) or following this node's `/events` now (over http).
    count: usize,
    /// Of those, heard on the election topic.
    topic: usize,
    /// Of those, following this node's `/events`.
    events: usize,
    /// The first 100 by name.
    list: Vec<ObserverSeenBody>,
}

#[derive(Serialize)]
pub struct ObserverSeenBody {
    id: String,
    /// `topic` or `events`.
    via: &'static str,
    /// `/events` streams it has open here.
    streams: u32,
    first_seen_ms: u64,
    last_seen_ms: u64,
}

#[derive(Serialize)]
pub struct ObserverBody {
    /// `pilot` (the election topic) or `http` (a member's `/events`).
    transport: &'static str,
    /// Over http: the member URL it follows now; `null` while it reconnects, and over pilot.
    following: Option<String>,
    /// Messages are checked with the cluster key (pilot).
    verified: bool,
    /// Messages dropped as forged, replayed or malformed (pilot).
    rejected: u64,
    /// How long ago it last heard of the leader it reports; `null` when it knows none.
    leader_heard_ms: Option<u64>,
    /// The group it follows (`--observe-group`, or the members' default group).
    group: String,
}

#[derive(Serialize)]
pub struct HealthCheckBody {
    /// `command` or `url` (the command line and the URL are not shown: they may hold secrets).
    check: &'static str,
    healthy: bool,
    /// When the verdict last changed, or the checks began (RFC 3339, UTC).
    since: String,
    failures_in_row: u32,
    passes_in_row: u32,
    /// `--health-failures`: failures in a row that make the node unhealthy.
    failures_to_unhealthy: u32,
    /// `--health-successes`: passes in a row that make it healthy again.
    passes_to_healthy: u32,
    interval_ms: u64,
    timeout_ms: u64,
    /// `null` before the first check ended.
    last_check: Option<CheckBody>,
}

#[derive(Serialize)]
pub struct CheckBody {
    /// `pass`, `fail` or `timed_out`.
    outcome: &'static str,
    /// The command's exit code; `null` for a URL, or a command killed or never started.
    exit_code: Option<i32>,
    /// The URL's answer; `null` for a command, or when nothing answered.
    http_status: Option<u16>,
    duration_ms: u64,
    /// When it ended (RFC 3339, UTC).
    at: String,
    /// The start of the command's output, the answer's status line, or why it failed.
    detail: String,
}

impl HealthCheckBody {
    fn of(s: &crate::health_check::HealthStatus) -> HealthCheckBody {
        HealthCheckBody {
            check: s.kind,
            healthy: s.healthy,
            since: crate::clock::wall::rfc3339(s.since_unix_ms),
            failures_in_row: s.failures_in_row,
            passes_in_row: s.passes_in_row,
            failures_to_unhealthy: s.failures,
            passes_to_healthy: s.successes,
            interval_ms: s.interval.as_millis() as u64,
            timeout_ms: s.timeout.as_millis() as u64,
            last_check: s.last_check.as_ref().map(|l| CheckBody {
                outcome: l.probed.outcome.as_str(),
                exit_code: l.probed.exit_code,
                http_status: l.probed.http_status,
                duration_ms: l.probed.took.as_millis() as u64,
                at: crate::clock::wall::rfc3339(l.at_unix_ms),
                detail: l.probed.detail.clone(),
            }),
        }
    }
}

#[derive(Serialize)]
pub struct OnChangeBody {
    /// The change whose run is in progress; `null` when none runs.
    running: Option<ChangeBody>,
    /// The last run that ended; `null` before the first.
    last_run: Option<HookRunBody>,
}

/// A change as the hook's environment has it (`null` for an empty `PILOT_ELECTION_LEADER` or
/// `PILOT_ELECTION_PREVIOUS`).
#[derive(Serialize)]
pub struct ChangeBody {
    role: &'static str,
    leader: Option<String>,
    term: u64,
    previous: Option<String>,
    reason: &'static str,
}

#[derive(Serialize)]
pub struct HookRunBody {
    #[serde(flatten)]
    change: ChangeBody,
    /// `ok`, `failed`, `timed_out` or `killed_at_exit`.
    outcome: &'static str,
    /// `null` when it did not exit by itself (killed, or never started).
    exit_code: Option<i32>,
    duration_ms: u64,
    /// When it ended (RFC 3339, UTC).
    at: String,
}

impl ChangeBody {
    fn of(c: &crate::runtime::Change) -> ChangeBody {
        ChangeBody {
            role: c.role.as_str(),
            leader: c.leader.clone(),
            term: c.term,
            previous: c.previous.clone(),
            reason: c.reason,
        }
    }
}

impl OnChangeBody {
    fn of(s: &crate::hooks::HookStatus) -> OnChangeBody {
        OnChangeBody {
            running: s.running.as_ref().map(ChangeBody::of),
            last_run: s.last_run.as_ref().map(|r| HookRunBody {
                change: ChangeBody::of(&r.change),
                outcome: r.outcome.as_str(),
                exit_code: r.exit_code,
                duration_ms: r.duration.as_millis() as u64,
                at: crate::clock::wall::rfc3339(r.at_unix_ms),
            }),
        }
    }
}

#[derive(Serialize)]
pub struct MemberBody {
    id: String,
    /// Where clients reach it, as it announced; `null` before it was heard or from a build that
    /// announces none.
    url: Option<String>,
    meta: BTreeMap<String, String>,
    priority: Option<u32>,
    candidacy: Option<Candidacy>,
    /// Advertises that it would lead now.
    eligible: bool,
    /// `null` when it has never been heard.
    last_seen_ms: Option<u64>,
    live: bool,
    /// Its latest message says it hears this node.
    two_way: bool,
    /// Could win an election now (two-way, hears a quorum, same member set).
    viable: bool,
    fingerprint: Option<String>,
    /// Same member set as this node; `null` when it has never been heard.
    matches: Option<bool>,
    /// 1 = would lead first among the members heard and this node; `null` if never heard.
    rank: Option<usize>,
    /// The timings its latest message announced; `null` before it was heard or from a
    /// version-2 build.
    timings: Option<Announced>,
    /// The protocol versions it speaks; `null` before it was heard.
    protocol: Option<Versions>,
    /// Its application's health as its adverts say (rule 17); `null` before its first advert.
    healthy: Option<bool>,
}

/// Which protocol version this node writes (the newest every member it heard speaks) and which
/// it can read and write (docs/protocol.md, rule 15).
#[derive(Serialize)]
pub struct ProtocolBody {
    writes: u32,
    speaks: Versions,
}

#[derive(Serialize)]
pub struct TimingsBody {
    heartbeat_ms: u64,
    lease_ms: u64,
    election_timeout_ms: u64,
    stagger_ms: u64,
    preempt_after_ms: u64,
    max_drift: f64,
}

pub async fn get_status(State(s): State<AppState>, e: Group) -> Json<StatusBody> {
    let snap = e.snapshot();
    let now: Instant = clock::now();
    let v = &snap.view;
    let own = snap.member_set.fingerprint().to_string();
    let heard = snap
        .members
        .iter()
        .filter(|m| m.last_seen.is_some())
        .map(|m| Rank::new(m.priority, &m.id));
    let positions =
        rank::positions(heard.chain(std::iter::once(Rank::new(v.priority, &v.node_id))));
    let rank_of = |id: &str| positions.iter().find(|(r, _)| r.id == id).map(|(_, i)| *i);
    let members = snap
        .members
        .iter()
        .map(|m| MemberBody {
            id: m.id.clone(),
            url: snap.info_of(&m.id).map(|i| i.url.clone()),
            meta: snap
                .info_of(&m.id)
                .map(|i| i.meta.clone())
                .unwrap_or_default(),
            priority: m.last_seen.map(|_| m.priority),
            candidacy: m.candidacy,
            eligible: m.candidacy == Some(Candidacy::Eligible),
            last_seen_ms: m.last_seen.map(|at| age_ms(at, now)),
            live: m.live,
            two_way: m.two_way,
            viable: m.viable,
            fingerprint: m.fingerprint.clone(),
            matches: m.matches(&own),
            rank: rank_of(&m.id),
            timings: m.timings,
            protocol: m.speaks,
            healthy: m.healthy,
        })
        .collect();
    let ours = Announced::of(&snap.timings);
    let mixed_timings = snap
        .members
        .iter()
        .filter(|m| m.live)
        .filter_map(|m| m.timings)
        .any(|a| a != ours);
    let t = &snap.timings;
    let role = v.role_at(now);
    Json(StatusBody {
        node: v.node_id.clone(),
        url: snap.info.as_ref().map(|i| i.url.clone()),
        meta: snap
            .info
            .as_ref()
            .map(|i| i.meta.clone())
            .unwrap_or_default(),
        role,
        term: v.term,
        leader: current_leader(v, now),
        voted_for: v.voted_for.clone(),
        priority: v.priority,
        eligible: v.eligible,
        candidacy: v.candidacy,
        can_campaign: v.can_campaign,
        can_vote: v.can_vote,
        shutting_down: v.shutting_down,
        cluster_size: snap.member_set.len(),
        quorum: snap.member_set.quorum(),
        fingerprint: own,
        protocol: ProtocolBody {
            writes: v.writes_version,
            speaks: Versions::OURS,
        },
        mixed_timings,
        members,
        timings: TimingsBody {
            heartbeat_ms: t.heartbeat.as_millis() as u64,
            lease_ms: t.lease.as_millis() as u64,
            election_timeout_ms: t.election_timeout.as_millis() as u64,
            stagger_ms: t.stagger.as_millis() as u64,
            preempt_after_ms: t.preempt_after.as_millis() as u64,
            max_drift: t.max_drift,
        },
        transport: Health::clone(&snap.transport),
        paused: v.maintenance,
        maintenance: snap.maintenance.as_ref().map(super::pause::SettingBody::of),
        scheduled_step_down: e.scheduler.pending().map(super::leadership::scheduled_body),
        on_change: e.hooks.as_ref().map(|h| OnChangeBody::of(&h.status())),
        schedule: e.schedule.as_ref().map(|sc| sc.status(&snap)),
        healthy: v.healthy,
        health_check: e.health.as_ref().map(|h| HealthCheckBody::of(&h.status())),
        observers: observers_body(&e, now),
        observer: s.observing.as_ref().map(|o| {
            let o = o.borrow();
            ObserverBody {
                transport: o.transport,
                following: o.following.clone(),
                verified: o.verified,
                rejected: o.rejected,
                leader_heard_ms: v
                    .leader
                    .as_ref()
                    .and(v.leader_heard_at)
                    .map(|at| age_ms(at, now)),
                group: e.group.clone(),
            }
        }),
    })
}

fn observers_body(s: &ElectionApi, now: Instant) -> ObserversBody {
    use crate::observer_table::Via;
    let table = s.observers.lock().unwrap_or_else(|e| e.into_inner());
    let all = table.list(now);
    ObserversBody {
        count: all.len(),
        topic: all.iter().filter(|o| o.via == Via::Topic).count(),
        events: all.iter().filter(|o| o.via == Via::Events).count(),
        list: all
            .into_iter()
            .take(OBSERVERS_LISTED)
            .map(|o| ObserverSeenBody {
                id: o.id,
                via: o.via.as_str(),
                streams: o.streams,
                first_seen_ms: age_ms(o.first, now),
                last_seen_ms: age_ms(o.last, now),
            })
            .collect(),
    }
}
