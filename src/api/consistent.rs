//! `?consistent=true` on `GET /leader`, `/term` and `/role/leader` (issue 39, item 4): an answer
//! that a quorum confirmed after the request arrived, like etcd's ReadIndex or Consul's
//! `?consistent`. A plain read answers from this node's view, which on a follower may name a
//! leader that is already gone for up to `T`; a consistent one is answered by the leader only,
//! once a quorum acknowledged a heartbeat it sent after the read arrived (docs/protocol.md,
//! "Consistent reads"). Any other member names the leader to ask: `307` to its announced URL.

use std::sync::{Arc, Mutex};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use tokio::time::Instant;

use super::{ApiError, AppState, ElectionApi};
use crate::election::{CommandError, Input};
use crate::runtime::Snapshot;

/// Whether the request asked for a consistent read: `consistent=true` (or `1`, or the bare
/// word) in its query string. Every other parameter is left alone, as on every read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Consistency {
    pub consistent: bool,
}

impl Consistency {
    fn parse(query: Option<&str>) -> Result<Consistency, ApiError> {
        let mut consistent = false;
        for pair in query.unwrap_or_default().split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if key != "consistent" {
                continue;
            }
            consistent = match value {
                "" | "true" | "1" => true,
                "false" | "0" => false,
                other => {
                    return Err(ApiError::InvalidQuery(format!(
                        "consistent must be true or false, not {other:?}"
                    )))
                }
            };
        }
        Ok(Consistency { consistent })
    }
}

impl FromRequestParts<AppState> for Consistency {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        Consistency::parse(parts.uri.query())
    }
}

/// Where the read is asked again when this node cannot answer it: the path and query of the
/// request it answers, on the leader's URL.
pub struct Asked<'a> {
    pub path_and_query: &'a str,
}

/// The confirmation rounds of one election's consistent reads: at most one in flight, and
/// every read that arrives while it is shares the next one, so that a thousand concurrent
/// reads cost a few heartbeats, not a thousand.
#[derive(Debug, Default)]
pub struct ReadRounds {
    /// When the latest round was asked of the election loop.
    asked: Mutex<Option<Instant>>,
}

impl ReadRounds {
    /// Whether a read that arrived at `arrived` must ask for a round now, the leader's newest
    /// confirmation being `confirmed`; if so, the round counts as asked from now. Not when a
    /// round asked after the read arrived will answer it, nor while an earlier round is still
    /// in flight (the read asks for the next one when that one is confirmed).
    fn needs_round(&self, arrived: Instant, confirmed: Option<Instant>) -> bool {
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        match *asked {
            Some(a) if a >= arrived => false,
            Some(a) if confirmed.is_none_or(|c| c < a) => false,
            _ => {
                *asked = Some(crate::clock::now());
                true
            }
        }
    }
}

/// The snapshot in which this node, as leader, had a quorum confirm a heartbeat it sent after
/// the read arrived; otherwise why not. Waits at most `T`: a quorum that has not answered by
/// then (several heartbeat intervals) cannot be reached now.
pub async fn confirmed(s: &ElectionApi, asked: Asked<'_>) -> Result<Arc<Snapshot>, ApiError> {
    let snap = s.snapshot();
    let arrived = crate::clock::now();
    if !snap.view.is_leader_at(arrived) {
        return Err(elsewhere(&snap, arrived, asked));
    }
    let term = snap.view.term;
    let wait = snap.timings.election_timeout;
    let deadline = arrived + wait;
    let not_confirmed = |why: &str| ApiError::ReadNotConfirmed {
        term,
        after_ms: wait.as_millis() as u64,
        why: why.into(),
    };
    loop {
        let verdict = s.settle(deadline, |snap| {
            let v = &snap.view;
            if v.term != term || !v.is_leader_at(crate::clock::now()) {
                return Some(Err(not_confirmed(
                    "this node stopped leading while it waited",
                )));
            }
            if v.leader_heard_at.is_some_and(|c| c >= arrived) {
                return Some(Ok(Some(snap.clone())));
            }
            s.reads
                .needs_round(arrived, v.leader_heard_at)
                .then_some(Ok(None))
        });
        match verdict.await {
            Ok(Ok(Some(snap))) => return Ok(snap),
            Ok(Ok(None)) => match s.command(Input::ConfirmLeadership).await? {
                Ok(_) => {}
                Err(CommandError::NotLeader { .. }) => {
                    return Err(elsewhere(&s.snapshot(), crate::clock::now(), asked))
                }
                Err(e) => return Err(not_confirmed(&e.to_string())),
            },
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(not_confirmed(
                    "no quorum acknowledged a heartbeat sent after the read arrived",
                ))
            }
        }
    }
}

/// This node does not lead: the leader it knows, and where to ask it if it announced its URL.
fn elsewhere(snap: &Snapshot, now: Instant, asked: Asked<'_>) -> ApiError {
    let v = &snap.view;
    let Some(leader) = v.leader_at(now) else {
        return ApiError::NoLeader { term: v.term };
    };
    let url = snap
        .info_of(leader)
        .map(|i| format!("{}{}", i.url.trim_end_matches('/'), asked.path_and_query));
    ApiError::AskTheLeader {
        leader: leader.to_string(),
        term: v.term,
        location: url,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One round in flight at a time; a read that arrived before a round was asked shares it;
    /// one that arrived during it asks for the next once it is confirmed.
    #[test]
    fn reads_share_rounds_and_one_round_is_in_flight_at_a_time() {
        let rounds = ReadRounds::default();
        let ms = std::time::Duration::from_millis;
        let first = crate::clock::now();
        let before = first - ms(5);
        assert!(
            rounds.needs_round(first, Some(before)),
            "the first read asks"
        );
        let asked = rounds.asked.lock().unwrap().expect("asked");
        assert!(!rounds.needs_round(first, Some(before)), "it is asked");
        assert!(
            !rounds.needs_round(asked, Some(before)),
            "asked after it arrived"
        );
        let later = asked + ms(1);
        assert!(
            !rounds.needs_round(later, Some(before)),
            "one round in flight"
        );
        assert!(
            !rounds.needs_round(later, Some(asked - ms(1))),
            "still in flight"
        );
        assert!(
            rounds.needs_round(later, Some(asked)),
            "confirmed: the next one"
        );
        assert!(rounds.asked.lock().unwrap().expect("asked") > asked);
    }

    #[test]
    fn the_query_says_consistent_in_the_usual_spellings_and_refuses_others() {
        for (q, want) in [
            (None, false),
            (Some(""), false),
            (Some("consistent"), true),
            (Some("consistent="), true),
            (Some("consistent=true"), true),
            (Some("consistent=1"), true),
            (Some("a=b&consistent=true&c"), true),
            (Some("consistent=false"), false),
            (Some("consistent=0"), false),
            (Some("consistently=true"), false),
        ] {
            assert_eq!(
                Consistency::parse(q).map(|c| c.consistent).ok(),
                Some(want),
                "{q:?}"
            );
        }
        for q in [
            "consistent=yes",
            "consistent=TRUE",
            "consistent=true&consistent=2",
        ] {
            let e = Consistency::parse(Some(q)).unwrap_err();
            assert!(matches!(e, ApiError::InvalidQuery(_)), "{q}: {e:?}");
        }
    }
}
