//! [`Client::watch_groups`]: the leader changes of many groups on one connection
//! (`GET /events?groups=`), for a dashboard or an agent that follows a thousand shards with one
//! stream instead of a thousand.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use serde::Deserialize;
use tokio::time::Instant;

use crate::sse::SseEvent;
use crate::watch::{Items, Streamed};
use crate::{Client, WatchStatus};

/// What [`Client::watch_groups`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupEvent {
    /// A group has a new leader: each group's terms once, rising.
    Leader(GroupChange),
    /// The member the stream is connected to no longer takes part in the group (an operator
    /// removed it). If it comes back, its leader is yielded again.
    Removed {
        /// The group removed.
        group: String,
        /// The member URL (as given to the client) the stream was connected to.
        answered_by: String,
    },
}

/// A new leader of one group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupChange {
    /// The group.
    pub group: String,
    /// The term the leader leads in: the group's fencing token.
    pub term: u64,
    /// The leader's node id.
    pub leader: String,
    /// The leader's URL as it announced it (`None` when it announced none).
    pub leader_url: Option<String>,
    /// The id of the node that reported it.
    pub node: String,
    /// The member URL (as given to the client) the stream was connected to.
    pub answered_by: String,
}

/// The stream [`Client::watch_groups`] returns: [`GroupEvent`]s, for as long as it is polled.
///
/// Its connections are a [`Watch`](crate::Watch)'s: a stream that breaks is reopened after a
/// backoff, on the same member and then on the next ones. A member starts every stream with
/// each group's current state, so after a reconnection a group's leader is yielded only if its
/// term is above the last one yielded for that group: each group's changes come once, in
/// rising term order. Changes that happened while no stream was open are not recovered one by
/// one (ask a group's history); the state after them is. Stretches without a leader are not
/// yielded.
///
/// Drop it to close the connection.
pub struct GroupsWatch(Streamed<GroupEvent>);

impl std::fmt::Debug for GroupsWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.debug("GroupsWatch", f)
    }
}

impl GroupsWatch {
    /// What the stream is doing now ([`WatchStatus::last_term`] is the term of the last change
    /// yielded, whichever group it was of).
    pub fn status(&self) -> WatchStatus {
        self.0.status()
    }
}

impl Stream for GroupsWatch {
    type Item = GroupEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<GroupEvent>> {
        self.0.inner.as_mut().poll_next(cx)
    }
}

impl Client {
    /// The leader changes of `groups` on one stream (see [`GroupsWatch`]). The groups are the
    /// cluster's, whatever group the client was built for; each member must take part in
    /// every one of them (a member that does not answers `404 unknown_group`, and the next one
    /// is tried).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use futures_util::StreamExt;
    /// use pilot_election_client::GroupEvent;
    /// let client = pilot_election_client::Client::new(["http://10.0.0.1:7070", "http://10.0.0.2:7070"])?;
    /// let mut changes = client.watch_groups(["shard-1", "shard-2"]);
    /// while let Some(event) = changes.next().await {
    ///     if let GroupEvent::Leader(c) = event {
    ///         println!("{}: term {}, {} leads", c.group, c.term, c.leader);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn watch_groups<I, S>(&self, groups: I) -> GroupsWatch
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let names: Vec<String> = groups
            .into_iter()
            .map(|g| g.as_ref().trim().to_string())
            .filter(|g| !g.is_empty())
            .collect();
        // No name at all would be every group; say that with `watch_all_groups`.
        let query = if names.is_empty() {
            String::from(",")
        } else {
            names.join(",")
        };
        self.groups_stream(query)
    }

    /// The leader changes of every group of the member the stream is connected to, those
    /// added while it is open too (see [`GroupsWatch`]).
    pub fn watch_all_groups(&self) -> GroupsWatch {
        self.groups_stream("all".into())
    }

    fn groups_stream(&self, query: String) -> GroupsWatch {
        let items = GroupTracker {
            query,
            terms: BTreeMap::new(),
        };
        GroupsWatch(self.streamed(items, None, None))
    }
}

#[derive(Deserialize)]
struct LeaderData {
    group: String,
    node: String,
    leader: Option<String>,
    #[serde(default)]
    leader_url: Option<String>,
    term: u64,
}

#[derive(Deserialize)]
struct RemovedData {
    group: String,
}

/// Turns the events of a stream of many groups into changes: per group, each term's leader
/// once, terms only rising.
struct GroupTracker {
    query: String,
    terms: BTreeMap<String, u64>,
}

impl Items for GroupTracker {
    type Item = GroupEvent;

    fn event(
        &mut self,
        ev: &SseEvent,
        answered_by: &str,
        _at: Instant,
    ) -> Result<Vec<GroupEvent>, String> {
        match ev.event.as_str() {
            "leader" => {
                let d: LeaderData = serde_json::from_str(&ev.data).map_err(|e| {
                    format!("a leader event that does not parse ({e}): {}", ev.data)
                })?;
                let Some(leader) = d.leader else {
                    return Ok(Vec::new());
                };
                if self.terms.get(&d.group).is_some_and(|t| d.term <= *t) {
                    return Ok(Vec::new());
                }
                self.terms.insert(d.group.clone(), d.term);
                Ok(vec![GroupEvent::Leader(GroupChange {
                    group: d.group,
                    term: d.term,
                    leader,
                    leader_url: d.leader_url,
                    node: d.node,
                    answered_by: answered_by.to_string(),
                })])
            }
            "removed" => {
                let d: RemovedData = serde_json::from_str(&ev.data).map_err(|e| {
                    format!("a removed event that does not parse ({e}): {}", ev.data)
                })?;
                self.terms.remove(&d.group);
                Ok(vec![GroupEvent::Removed {
                    group: d.group,
                    answered_by: answered_by.to_string(),
                }])
            }
            _ => Ok(Vec::new()),
        }
    }

    fn term(item: &GroupEvent) -> u64 {
        match item {
            GroupEvent::Leader(c) => c.term,
            GroupEvent::Removed { .. } => 0,
        }
    }

    fn groups(&self) -> Option<&str> {
        Some(&self.query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: None,
        }
    }

    #[test]
    fn each_groups_terms_come_once_and_rising_and_a_removal_forgets_them() {
        let mut t = GroupTracker {
            query: "all".into(),
            terms: BTreeMap::new(),
        };
        let now = crate::clock::now();
        let leader = |g: &str, term: u64, l: Option<&str>| {
            let d = serde_json::json!({"group": g, "node": "n1", "leader": l, "leader_url": null, "term": term, "role": "follower"});
            ev("leader", &d.to_string())
        };
        let mut yielded = Vec::new();
        for e in [
            leader("a", 3, Some("n1")),
            leader("b", 1, Some("n2")),
            leader("a", 3, Some("n1")), // the same state again (a reconnection)
            leader("a", 4, None),       // an election: nothing
            leader("a", 2, Some("n3")), // a member behind the others
            leader("a", 5, Some("n2")),
            ev("removed", r#"{"group":"b"}"#),
            leader("b", 1, Some("n2")), // added back: yielded again
        ] {
            for item in t.event(&e, "http://m", now).unwrap() {
                yielded.push(match item {
                    GroupEvent::Leader(c) => format!("{} {} {}", c.group, c.term, c.leader),
                    GroupEvent::Removed { group, .. } => format!("{group} removed"),
                });
            }
        }
        assert_eq!(
            yielded,
            ["a 3 n1", "b 1 n2", "a 5 n2", "b removed", "b 1 n2"]
        );
        assert!(t.event(&ev("leader", "{"), "http://m", now).is_err());
    }
}
