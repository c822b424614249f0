//! `GET /healthz` (the election loop runs) and `GET /readyz` (this node counts towards a
//! quorum: an orchestrator may take the next node down).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;

use super::{AppState, Group};
use crate::clock;
use crate::election::Readiness;
use crate::runtime::Snapshot;
use crate::transport::Health;

#[derive(Serialize)]
pub struct HealthBody {
    status: &'static str,
    loop_age_ms: u64,
    lease_ms: u64,
}

/// Fails once the loop has not run for longer than the lease: by then a leader on this node
/// would have lost its lease without noticing.
pub async fn get_healthz(State(s): State<AppState>, e: Group) -> (StatusCode, Json<HealthBody>) {
    let last = *s.last_turn.lock().unwrap_or_else(|e| e.into_inner());
    let lease = e.snapshot.borrow().timings.lease;
    let age = clock::now().saturating_duration_since(last);
    let ok = age <= lease && e.snapshot.has_changed().is_ok();
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        Json(HealthBody {
            status: if ok { "ok" } else { "stalled" },
            loop_age_ms: age.as_millis() as u64,
            lease_ms: lease.as_millis() as u64,
        }),
    )
}

#[derive(Serialize)]
pub struct ReadyBody {
    pub ready: bool,
    /// Past its start-up guard: its vote counts.
    can_vote: bool,
    /// Members heard within the election timeout with this node's member set, this node
    /// included, and how many a quorum needs.
    voters_heard: usize,
    quorum: usize,
    /// Members whose member set differs from this node's (their votes do not count).
    mismatched_members: Vec<String>,
    /// Why it is not ready, one sentence each; empty when ready.
    reasons: Vec<String>,
    /// The first of `reasons`, up front for probes (for the pilot transport it names the
    /// broker, what it is doing and what to run).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    transport: Health,
}

/// Ready when this node's vote counts towards a quorum again: past its start-up guard, not
/// stopping, its transport working, and hearing enough members that share its member set to
/// form a quorum. A readiness-driven rolling restart therefore never takes a second voter down
/// while the first cannot vote yet (docs/protocol.md, rule 8).
pub fn readiness(snap: &Snapshot) -> ReadyBody {
    let own = snap.member_set.fingerprint();
    let Readiness {
        voters_heard,
        quorum,
        mismatched,
        ..
    } = Readiness::of(&snap.view, &snap.members, &snap.member_set);
    let mut reasons = Vec::new();
    let v = &snap.view;
    if v.shutting_down {
        reasons.push("shutting down".to_string());
    } else if !v.config_conflicts.is_empty() {
        let diffs: Vec<String> = snap
            .members
            .iter()
            .filter(|m| v.config_conflicts.contains(&m.id))
            .map(|m| format!("{} (differs by {})", m.id, m.member_difference.join(", ")))
            .collect();
        reasons.push(format!(
            "no node votes while members list member sets more than one member apart: {}; \
             change one member at a time",
            diffs.join("; ")
        ));
    } else if !v.can_vote {
        reasons.push(format!(
            "starting up: cannot vote until the start-up guard ends ({} ms after start, longer \
             when it may still be bound by a promise to a leader with a longer election \
             timeout; sooner when the leader hands over)",
            snap.timings.election_timeout.as_millis()
        ));
    }
    if !snap.transport.healthy {
        // The transport's own explanation (pilot: which broker, why, what to run) beats the
        // bare last error.
        let why = (snap.transport.reason.as_deref())
            .or(snap.transport.last_error.as_deref())
            .unwrap_or("no error reported yet");
        reasons.push(format!(
            "transport {} not working: {why}",
            snap.transport.kind
        ));
    }
    if voters_heard < quorum {
        let mut r = format!(
            "hears {voters_heard} of the {quorum} members a quorum needs (this node included)"
        );
        if !mismatched.is_empty() {
            r.push_str(&format!(
                "; members {} list other members (fingerprint ≠ ours {own}): give every node the same --member/--peer list",
                mismatched.join(", ")
            ));
        }
        reasons.push(r);
    }
    ReadyBody {
        ready: reasons.is_empty(),
        reason: reasons.first().cloned(),
        can_vote: v.can_vote,
        voters_heard,
        quorum,
        mismatched_members: mismatched,
        reasons,
        transport: Health::clone(&snap.transport),
    }
}

/// An observer votes for nobody: it is ready when it follows the election, its transport
/// working (over http: a member's stream open) and a member heard within its time.
pub fn observer_readiness(snap: &Snapshot) -> ReadyBody {
    let heard = snap.members.iter().filter(|m| m.live).count();
    let mut reasons = Vec::new();
    if !snap.transport.healthy {
        let why = (snap.transport.reason.as_deref())
            .or(snap.transport.last_error.as_deref())
            .unwrap_or("no error reported yet");
        reasons.push(format!(
            "observer: transport {} not following: {why}",
            snap.transport.kind
        ));
    }
    if heard == 0 {
        reasons.push("observer: no member heard yet".to_string());
    }
    ReadyBody {
        ready: reasons.is_empty(),
        reason: reasons.first().cloned(),
        can_vote: false,
        voters_heard: heard,
        quorum: snap.member_set.quorum(),
        mismatched_members: Vec::new(),
        reasons,
        transport: Health::clone(&snap.transport),
    }
}

pub async fn get_readyz(State(s): State<AppState>, e: Group) -> (StatusCode, Json<ReadyBody>) {
    let snap = e.snapshot();
    let body = match s.observing {
        Some(_) => observer_readiness(&snap),
        None => readiness(&snap),
    };
    let code = if body.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}
