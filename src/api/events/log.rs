//! The log behind `/events`: the last [`LOG_LEN`] leader events of this node's run, each with an
//! id, so that a watcher that reconnects with `Last-Event-ID` gets exactly what it missed
//! (docs/clients.md). One task writes it, judging each snapshot as every stream used to on its
//! own, including the instant a lease or a promise runs out while the loop publishes nothing.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::current_leader;
use crate::election::Role;
use crate::runtime::Snapshot;

/// Events kept for watchers that reconnect; one older than these gets a snapshot instead.
pub const LOG_LEN: usize = 1024;

/// What a watcher is told: who leads, as this node can vouch for it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaderEvent {
    pub node: String,
    pub leader: Option<String>,
    /// Where clients reach the leader, as it announced.
    pub leader_url: Option<String>,
    pub term: u64,
    pub role: Role,
}

/// The event for `snap` as of `now`, and when the same snapshot would say something else (the
/// lease or the promise to the leader runs out).
pub fn event_of(snap: &Snapshot, now: Instant) -> (LeaderEvent, Option<Instant>) {
    let v = &snap.view;
    let leader = current_leader(v, now);
    let leader_url = leader
        .as_deref()
        .and_then(|l| snap.info_of(l))
        .map(|i| i.url.clone());
    let event = LeaderEvent {
        node: v.node_id.clone(),
        leader,
        leader_url,
        term: v.term,
        role: v.role_at(now),
    };
    (event, v.leader_until.filter(|u| *u > now))
}

/// One event and its place in this run's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub seq: u64,
    pub event: LeaderEvent,
}

/// The log of this run (`run` names it among every run of every member).
#[derive(Debug, Clone)]
pub struct EventLog {
    run: String,
    entries: VecDeque<Logged>,
}

impl EventLog {
    pub fn new(run: String, first: LeaderEvent) -> EventLog {
        EventLog {
            run,
            entries: VecDeque::from([Logged {
                seq: 1,
                event: first,
            }]),
        }
    }

    /// The SSE id of `l`: the run, the position, and the term, which any member can resume from
    /// by its history.
    pub fn id(&self, l: &Logged) -> String {
        format!("{}-{}-{}", self.run, l.seq, l.event.term)
    }

    pub fn latest(&self) -> &Logged {
        self.entries.back().expect("never empty")
    }

    /// Every event after `seq`, or `None` when the log no longer reaches back to it.
    pub fn after(&self, seq: u64) -> Option<Vec<Logged>> {
        let oldest = self.entries.front().expect("never empty").seq;
        if seq + 1 < oldest || seq > self.latest().seq {
            return None;
        }
        Some(
            self.entries
                .iter()
                .filter(|l| l.seq > seq)
                .cloned()
                .collect(),
        )
    }

    /// Where a watcher that sent `id` resumes here: `Some(seq)` when the id is this run's and
    /// still in the log.
    pub fn resumes(&self, id: &LastId) -> Option<u64> {
        let seq = id
            .seq
            .filter(|_| id.run.as_deref() == Some(self.run.as_str()))?;
        self.after(seq).map(|_| seq)
    }

    fn push(&mut self, event: LeaderEvent) {
        let seq = self.latest().seq + 1;
        self.entries.push_back(Logged { seq, event });
        while self.entries.len() > LOG_LEN {
            self.entries.pop_front();
        }
    }
}

/// A `Last-Event-ID` as a watcher sent it; any part may be missing or malformed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LastId {
    pub run: Option<String>,
    pub seq: Option<u64>,
    pub term: Option<u64>,
}

impl LastId {
    pub fn parse(text: &str) -> LastId {
        let mut parts = text.trim().splitn(3, '-');
        let run = parts.next().filter(|r| !r.is_empty()).map(str::to_string);
        let seq = parts.next().and_then(|s| s.parse().ok());
        let term = parts.next().and_then(|t| t.parse().ok());
        LastId { run, seq, term }
    }
}

/// Starts the task that writes the log from the snapshots; it ends with the election loop (or
/// when nobody reads the log any more).
pub fn start(
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    run: String,
) -> watch::Receiver<Arc<EventLog>> {
    let (first, mut wake) = event_of(&snapshots.borrow_and_update(), crate::clock::now());
    let (tx, rx) = watch::channel(Arc::new(EventLog::new(run, first)));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = snapshots.changed() => if changed.is_err() {
                    return;
                },
                _ = crate::clock::sleep_until(wake.unwrap_or_else(crate::clock::now)),
                    if wake.is_some() => {}
                _ = tx.closed() => return,
            }
            let (ev, next) = event_of(&snapshots.borrow_and_update(), crate::clock::now());
            wake = next;
            if tx.borrow().latest().event != ev {
                tx.send_modify(|log| Arc::make_mut(log).push(ev));
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(term: u64, leader: Option<&str>) -> LeaderEvent {
        LeaderEvent {
            node: "a".into(),
            leader: leader.map(str::to_string),
            leader_url: None,
            term,
            role: Role::Follower,
        }
    }

    #[test]
    fn a_watcher_resumes_only_from_an_id_of_this_run_still_in_the_log() {
        let mut log = EventLog::new("r1".into(), event(1, None));
        for t in 2..=(LOG_LEN as u64 + 10) {
            log.push(event(t, Some("b")));
        }
        assert_eq!(log.entries.len(), LOG_LEN);
        let latest = log.latest().clone();
        assert_eq!(
            log.id(&latest),
            format!("r1-{}-{}", latest.seq, latest.event.term)
        );
        let id = |s: &str| LastId::parse(s);
        assert_eq!(
            log.resumes(&id(&log.id(&latest))),
            Some(latest.seq),
            "nothing missed"
        );
        assert_eq!(log.after(latest.seq), Some(vec![]));
        let oldest = log.entries.front().unwrap().seq;
        assert_eq!(
            log.resumes(&id(&format!("r1-{}-5", oldest - 1))),
            Some(oldest - 1)
        );
        assert_eq!(log.after(oldest - 1).unwrap().len(), LOG_LEN);
        assert_eq!(
            log.resumes(&id(&format!("r1-{}-5", oldest - 2))),
            None,
            "too old"
        );
        assert_eq!(
            log.resumes(&id(&format!("r1-{}-5", latest.seq + 1))),
            None,
            "ahead"
        );
        assert_eq!(
            log.resumes(&id(&format!("r0-{}-5", latest.seq))),
            None,
            "another run"
        );
        assert_eq!(log.resumes(&id("garbage")), None);
        assert_eq!(log.resumes(&id("")), None);
    }

    #[test]
    fn an_id_is_read_part_by_part() {
        assert_eq!(
            LastId::parse("ab12-7-3"),
            LastId {
                run: Some("ab12".into()),
                seq: Some(7),
                term: Some(3)
            }
        );
        assert_eq!(
            LastId::parse("ab12-x-3"),
            LastId {
                run: Some("ab12".into()),
                seq: None,
                term: Some(3)
            }
        );
        assert_eq!(
            LastId::parse("nonsense"),
            LastId {
                run: Some("nonsense".into()),
                seq: None,
                term: None
            }
        );
        assert_eq!(LastId::parse(""), LastId::default());
    }
}
