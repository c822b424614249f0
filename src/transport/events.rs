//! An observer's transport over http: it follows one member's `/events` (the client library's
//! `observe`), starting at a member picked by the observer's id so that many observers spread
//! over the members, and moves to the next member when the stream breaks or stays silent. Each
//! member serves the observers that follow it, one stream each, not every observer.
//!
//! What it hears is not the election's messages but the member's own reports, which it hands
//! the election loop as [`Report`]s on a channel of their own; it sends nothing (an observer
//! over http names itself in its stream's header instead of announcing itself).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::http::Peer;
use super::{Health, Link, Links, StartError, Transport};

/// How long the member followed may say nothing (it sends a keep-alive every second on an
/// observer's stream) before the stream counts as dead and the next member is tried, and how
/// long the leader it reported counts without a word from it.
pub const HTTP_SILENCE: Duration = Duration::from_secs(3);

/// The key of the transport's links in its health, and the state of the member followed: what
/// [`health_of`] writes and [`following`] reads.
const LINKS: &str = "members";
const FOLLOWING: &str = "following";

/// How many reports may wait for the election loop; a member sends about one a second.
const REPORTS_CAPACITY: usize = 64;

/// What the transport follows, and as whom.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    /// The members whose `/events` it may follow.
    pub members: Vec<Peer>,
    /// The observer's id: its stream's header names it, and it picks the first member.
    pub node_id: String,
    /// The group it follows; `None`: the members' default group, whose routes name none (as
    /// members of every release serve them).
    pub group: Option<String>,
    /// The client for `https://` members (`--peer-ca`, the client certificate); `None` uses the
    /// built-in roots.
    pub http: Option<reqwest::Client>,
}

/// What the member followed says: its leader and term, as of an event or a keep-alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The member that said it.
    pub node: String,
    pub leader: Option<String>,
    /// The leader's URL, when the member announced it.
    pub leader_url: Option<String>,
    pub term: u64,
}

/// The member an observer follows first: its id picks one, so that observers given the same
/// list spread over the members instead of all following the first.
pub fn first_member(node_id: &str, members: usize) -> usize {
    (crate::election::cksum(node_id.as_bytes()) as usize) % members.max(1)
}

/// The started transport: the follower runs on its own task until `stop`.
pub struct EventsTransport {
    health: Arc<Mutex<Health>>,
}

impl EventsTransport {
    /// Starts following; the reports come out of the returned receiver.
    pub fn start(
        config: EventsConfig,
        stop: CancellationToken,
    ) -> Result<(EventsTransport, mpsc::Receiver<Report>), StartError> {
        let urls: Vec<String> = config.members.iter().map(|p| p.url.clone()).collect();
        let mut builder = pilot_election_client::Client::builder(urls)
            .observer(config.node_id.clone())
            .start_at(first_member(&config.node_id, config.members.len()))
            .watch_idle_timeout(HTTP_SILENCE)
            .reconnect_backoff(Duration::from_millis(100), Duration::from_secs(2));
        if let Some(http) = config.http.clone() {
            builder = builder.http_client(http);
        }
        if let Some(group) = &config.group {
            builder = builder.group(group.clone());
        }
        let client = builder
            .build()
            .map_err(|e| StartError::Events(e.to_string()))?;
        let health = Arc::new(Mutex::new(health_of(&config.members, None, None)));
        let (tx, rx) = mpsc::channel(REPORTS_CAPACITY);
        tokio::spawn(follow(client, config.members, health.clone(), tx, stop));
        Ok((EventsTransport { health }, rx))
    }
}

impl Transport for EventsTransport {
    fn publish(&self, _bytes: Arc<[u8]>) {
        // An observer over http announces nothing: its stream's header names it.
        tracing::debug!("an observer over http sends no message");
    }

    fn health(&self) -> Health {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Follows the members' `/events` until `stop`, handing on every report and keeping the
/// health current: before each report, and after each second without one, so that a lost
/// stream shows within a second.
async fn follow(
    client: pilot_election_client::Client,
    members: Vec<Peer>,
    health: Arc<Mutex<Health>>,
    reports: mpsc::Sender<Report>,
    stop: CancellationToken,
) {
    let mut stream = client.observe();
    let look = |stream: &pilot_election_client::Observe| {
        let status = stream.status();
        let now = health_of(
            &members,
            status.connected_to.as_deref(),
            status.last_error.clone(),
        );
        *health.lock().unwrap_or_else(|e| e.into_inner()) = now;
    };
    look(&stream);
    loop {
        tokio::select! {
            item = stream.next() => {
                let Some(o) = item else { return };
                // Before the report: the loop reads whom it came from as it takes it.
                look(&stream);
                let report = Report {
                    node: o.node,
                    leader: o.leader,
                    leader_url: o.leader_url,
                    term: o.term,
                };
                if reports.send(report).await.is_err() {
                    return;
                }
            }
            _ = crate::clock::sleep_until(crate::clock::now() + Duration::from_secs(1)) => {
                look(&stream);
            }
            _ = stop.cancelled() => return,
        }
    }
}

/// Whether the member URL `given` (as configured) is `connected` (as the client names it: the
/// URL parsed, without a trailing slash).
fn is_connected(given: &str, connected: &str) -> bool {
    let parsed = reqwest::Url::parse(given).map(|u| u.as_str().trim_end_matches('/').to_string());
    given.trim_end_matches('/') == connected || parsed.is_ok_and(|p| p == connected)
}

/// The transport's health: following the member at `connected`, or none while it reconnects.
fn health_of(members: &[Peer], connected: Option<&str>, last_error: Option<String>) -> Health {
    let entries = members
        .iter()
        .map(|p| {
            let state = if connected.is_some_and(|c| is_connected(&p.url, c)) {
                FOLLOWING
            } else {
                "standby"
            };
            Link::new(p.id.clone(), state, &serde_json::json!({ "url": p.url }))
        })
        .collect();
    Health {
        io: None,
        kind: "http",
        healthy: connected.is_some(),
        last_error,
        reason: connected
            .is_none()
            .then(|| "not connected to any member's /events yet".to_string()),
        links: Some(Links {
            list: LINKS,
            name: "member",
            entries,
        }),
    }
}

/// The member whose `/events` the transport follows now, from its health (its URL as
/// configured, without a trailing slash); `None` over another transport and while it reconnects.
pub fn following(health: &Health) -> Option<String> {
    let links = health.links.as_ref().filter(|l| l.list == LINKS)?;
    let link = links.entries.iter().find(|l| l.state == FOLLOWING)?;
    let url = link.detail.get("url")?.as_str()?;
    Some(url.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(id: &str, url: &str) -> Peer {
        Peer {
            id: id.into(),
            url: url.into(),
        }
    }

    /// The member followed is found however its URL was written, as the client names it
    /// parsed: a capital in the host, a default port, a trailing slash.
    #[test]
    fn the_member_followed_is_the_one_the_client_names() {
        let members = [
            peer("n1", "http://127.0.0.1:7001/"),
            peer("n2", "http://Node-2.example:80"),
        ];
        let states = |h: &Health| -> Vec<&'static str> {
            let links = h.links.as_ref().expect("links");
            links.entries.iter().map(|l| l.state).collect()
        };
        let h = health_of(&members, Some("http://node-2.example"), None);
        assert_eq!(states(&h), ["standby", "following"]);
        assert!(h.healthy && h.reason.is_none());
        assert_eq!(following(&h).as_deref(), Some("http://Node-2.example:80"));
        let h = health_of(&members, Some("http://127.0.0.1:7001"), None);
        assert_eq!(states(&h), ["following", "standby"]);
        assert_eq!(following(&h).as_deref(), Some("http://127.0.0.1:7001"));
        let h = health_of(&members, None, Some("refused".into()));
        assert!(!h.healthy && h.reason.is_some());
        assert_eq!(h.last_error.as_deref(), Some("refused"));
        assert_eq!(states(&h), ["standby", "standby"]);
        assert_eq!(following(&h), None);
        let links = h.links.unwrap();
        assert_eq!((links.list, links.name), ("members", "member"));
    }
}
