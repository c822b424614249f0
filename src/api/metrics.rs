//! `GET /metrics`: Prometheus text; ages are computed now, from the latest snapshot.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::{AppState, Group};
use crate::metrics::ObserverVia;
use crate::observer_table::Via;

impl From<Via> for ObserverVia {
    fn from(via: Via) -> ObserverVia {
        match via {
            Via::Topic => ObserverVia::Topic,
            Via::Events => ObserverVia::Events,
        }
    }
}

/// The totals over every group, and the series of the groups `--metrics-groups` names.
fn groups(s: &AppState, now: tokio::time::Instant) {
    let default_group = s.elections.default_group();
    let (mut count, mut leading, mut leaderless) = (0, 0, 0);
    let mut shown = Vec::new();
    for e in s.elections.all() {
        let snap = e.snapshot();
        let leads = snap.view.is_leader_at(now);
        let has_leader = super::current_leader(&snap.view, now).is_some();
        count += 1;
        leading += i64::from(leads);
        leaderless += i64::from(!has_leader);
        let asked = s
            .metrics_groups
            .as_ref()
            .is_some_and(|sel| sel.includes(&e.group, e.group == default_group));
        if asked {
            shown.push((e.group.clone(), snap.view.term, leads, has_leader));
        }
    }
    let m = &s.metrics;
    m.groups.set(count);
    m.groups_leading.set(leading);
    m.groups_leaderless.set(leaderless);
    m.set_groups_shown(shown.iter().map(|(g, t, l, h)| (g.as_str(), *t, *l, *h)));
}

pub async fn get_metrics(State(s): State<AppState>, e: Group) -> impl IntoResponse {
    let snap = e.snapshot();
    let now = crate::clock::now();
    let m = &s.metrics;
    m.is_leader.set(i64::from(snap.view.is_leader_at(now)));
    m.term.set(snap.view.term as i64);
    let hb_age = match (&snap.view.leader, snap.view.leader_heard_at) {
        (Some(_), Some(at)) => now.saturating_duration_since(at).as_secs_f64(),
        _ => -1.0,
    };
    m.last_heartbeat_age.set(hb_age);
    m.event_subscribers.set(s.subscribers.open() as i64);
    {
        let table = e.observers.lock().unwrap_or_else(|e| e.into_inner());
        for via in [Via::Topic, Via::Events] {
            m.set_observers(via.into(), table.count(now, via));
        }
    }
    m.maintenance.set(i64::from(snap.view.maintenance));
    if let Some(tls) = &s.tls {
        let now = (crate::clock::wall::unix_ms_now() / 1000) as i64;
        for e in tls.expiry() {
            m.set_cert_expiry(e.role, e.not_after - now);
        }
    }
    m.step_down_scheduled
        .set(i64::from(e.scheduler.pending().is_some()));
    let ready = match s.observing {
        Some(_) => super::health::observer_readiness(&snap).ready,
        None => super::health::readiness(&snap).ready,
    };
    m.set_ready(snap.transport.kind, ready);
    groups(&s, now);
    for member in &snap.members {
        // -1 for a member never heard, like the heartbeat age without a leader.
        let age = member
            .last_seen
            .map_or(-1.0, |at| now.saturating_duration_since(at).as_secs_f64());
        m.set_member_last_seen_age(&member.id, age);
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.encode(),
    )
}
