//! [`Client`]: the members, the HTTP client, and the failover between members.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderValue;
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;

use crate::{clock, Attempt, ConfigError, Error};

/// A client of a pilot-election cluster: asks its members who leads, watches leader changes,
/// runs work while a node leads.
///
/// Give it the API URL of every member (or of a load balancer in front of them). Each request
/// goes first to the member that answered last; a member that refuses the connection, times
/// out, or answers a 5xx other than `503 no_leader` is skipped and the next one asked. `503
/// no_leader` is an answer, not a failure: the member is up and knows of no leader (which is
/// what a majority of the cluster says during an election).
///
/// Cloning is cheap (the clones share the connection pool and the last member that answered).
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) members: Vec<Member>,
    pub(crate) http: reqwest::Client,
    /// The member that answered last: the first one asked next.
    pub(crate) preferred: AtomicUsize,
    pub(crate) opts: Options,
}

/// One member's API.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// The URL as shown to users: the base without its trailing slash.
    pub(crate) name: String,
    /// The base URL, ending in `/`, that the endpoints are joined to.
    pub(crate) base: Url,
    /// The node's own base URL, without the group's prefix: where a stream of many groups
    /// (`events?groups=`) is asked for.
    pub(crate) root: Url,
}

impl Member {
    pub(crate) fn endpoint(&self, path: &str) -> Url {
        // `path` is a fixed relative name such as "leader": joining it cannot fail.
        self.base.join(path).unwrap_or_else(|_| self.base.clone())
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) request_timeout: Duration,
    pub(crate) watch_idle_timeout: Duration,
    pub(crate) backoff_initial: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) lead_poll_interval: Duration,
    pub(crate) lead_margin: Duration,
    /// The value of [`OBSERVER_HEADER`] on every `GET /events`, checked.
    pub(crate) observer: Option<HeaderValue>,
}

/// The header that tells a member a `GET /events` stream is an observer's
/// ([`ClientBuilder::observer`]).
pub(crate) const OBSERVER_HEADER: &str = "X-Pilot-Election-Observer";

/// The longest observer id [`ClientBuilder::observer`] takes, in bytes.
const MAX_OBSERVER_ID: usize = 256;

/// Builds a [`Client`] with options other than the defaults ([`Client::builder`]).
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    urls: Vec<String>,
    connect_timeout: Duration,
    http: Option<reqwest::Client>,
    observer: Option<String>,
    group: Option<String>,
    start_at: usize,
    /// PEM bundles of certificate authorities to trust, beside the built-in roots.
    roots: Vec<Vec<u8>>,
    /// A PEM client certificate chain and its key.
    identity: Option<Vec<u8>>,
    opts: Options,
}

impl ClientBuilder {
    /// Trusts the certificate authorities in `pem` (one or more PEM certificates, such as the
    /// `--tls-client-ca` file of the members or the CA that signed their `--tls-cert`) for
    /// `https://` members, beside the built-in web roots. May be given more than once. A bad
    /// bundle is refused by [`ClientBuilder::build`]. Needs the `tls` feature (on by default).
    #[cfg(feature = "tls")]
    pub fn root_certificates_pem(mut self, pem: impl Into<Vec<u8>>) -> ClientBuilder {
        self.roots.push(pem.into());
        self
    }

    /// Presents this client certificate to members that ask for one (`--tls-client-ca`): `pem`
    /// holds the certificate chain and its private key (PKCS#8, PKCS#1 or SEC1). Needs the
    /// `tls` feature (on by default).
    #[cfg(feature = "tls")]
    pub fn identity_pem(mut self, pem: impl Into<Vec<u8>>) -> ClientBuilder {
        self.identity = Some(pem.into());
        self
    }

    /// How long a connection to a member may take before the next member is asked
    /// (default 1 s). Not used with [`ClientBuilder::http_client`]: that client's own connect
    /// timeout applies.
    pub fn connect_timeout(mut self, d: Duration) -> ClientBuilder {
        self.connect_timeout = d;
        self
    }

    /// How long a request (`GET /leader`, `GET /history`, a poll of [`Client::lead`]) may
    /// take, from sending it to the end of the answer, before the next member is asked
    /// (default 2 s). It does not limit a [`Client::watch`] stream, which is open for as long
    /// as it is watched (see [`ClientBuilder::watch_idle_timeout`]).
    pub fn request_timeout(mut self, d: Duration) -> ClientBuilder {
        self.opts.request_timeout = d;
        self
    }

    /// How long a [`Client::watch`] or [`Client::observe`] stream may stay silent before it is
    /// taken for dead and reconnected (default 30 s; the node sends a keep-alive comment every
    /// 10 s, and every second to an [`observer`](ClientBuilder::observer)'s stream).
    pub fn watch_idle_timeout(mut self, d: Duration) -> ClientBuilder {
        self.opts.watch_idle_timeout = d;
        self
    }

    /// The delay before a [`Client::watch`] or [`Client::observe`] stream's first reconnection
    /// attempt, doubled after
    /// each failed attempt up to `max` (defaults 100 ms and 2 s). Each delay is shortened by a
    /// random fraction of up to a half, so that many watchers do not reconnect in lockstep.
    pub fn reconnect_backoff(mut self, initial: Duration, max: Duration) -> ClientBuilder {
        self.opts.backoff_initial = initial;
        self.opts.backoff_max = max;
        self
    }

    /// How often [`Client::lead`] asks its node whether it still leads, and, while it waits
    /// for leadership, whether it leads yet (default 200 ms). Keep it well below the lease
    /// (`--lease`, 2 s by default): every answer renews the deadline by which the work is
    /// cancelled.
    pub fn lead_poll_interval(mut self, d: Duration) -> ClientBuilder {
        self.opts.lead_poll_interval = d;
        self
    }

    /// How long before the end of the lease last reported [`Client::lead`] cancels the work
    /// when no renewed answer came (default 300 ms): room for the work to notice the
    /// cancellation, and for the two clocks (the node's and this process's) to disagree.
    pub fn lead_margin(mut self, d: Duration) -> ClientBuilder {
        self.opts.lead_margin = d;
        self
    }

    /// Sends every request with `http` instead of an HTTP client of its own: one with its own
    /// TLS roots, a client certificate, a proxy, a user agent. Its settings are used as they
    /// are: the connect timeout is that client's ([`ClientBuilder::connect_timeout`] is then
    /// ignored), and so are its user agent and pool. The request timeout, the watch idle
    /// timeout and the backoff are still this builder's, applied to each request.
    pub fn http_client(mut self, http: reqwest::Client) -> ClientBuilder {
        self.http = Some(http);
        self
    }

    /// Makes every `GET /events` request ([`Client::observe`], [`Client::watch`],
    /// [`Client::lead`]'s stream) carry the header `X-Pilot-Election-Observer: <id>`, so that
    /// members recognise the stream as an observer's: a process that follows the election
    /// without a vote. A member answers such a stream with a keep-alive every second instead of
    /// every 10 s, which [`Client::observe`] yields as fresh confirmations of the member's
    /// state, and lists its observers in `/status`.
    ///
    /// `id` names the observer (its node id, a host name): 1 to 256 bytes of visible ASCII
    /// (`!` to `~`, no spaces or control characters); anything else is refused by
    /// [`ClientBuilder::build`] with [`ConfigError::InvalidOption`].
    pub fn observer(mut self, id: impl Into<String>) -> ClientBuilder {
        self.observer = Some(id.into());
        self
    }

    /// Follow the election of `group` rather than the members' default group: every request
    /// and stream goes to `/groups/<group>/...` (a node takes part in many groups: `--group`,
    /// `POST /groups`). `group` is 1 to 128 bytes of ASCII letters, digits, `-`, `_` and `.`,
    /// starting with a letter or a digit, as the nodes require; anything else is refused by
    /// [`ClientBuilder::build`] with [`ConfigError::InvalidOption`]. One client follows one
    /// group: build one per group to watch several.
    pub fn group(mut self, group: impl Into<String>) -> ClientBuilder {
        self.group = Some(group.into());
        self
    }

    /// The member asked first: `index` into the member list as given, taken modulo the number
    /// of members (default 0, the first). After that, each request and each stream goes first
    /// to the member that answered last, as always.
    ///
    /// Many clients given the same list all start on its first member, so all their
    /// [`Client::observe`] or [`Client::watch`] streams open there. Give each a different
    /// start (a hash of its own id is enough: it need not be below the number of members) to
    /// spread them over the members.
    pub fn start_at(mut self, index: usize) -> ClientBuilder {
        self.start_at = index;
        self
    }

    /// Checks the URLs and the options and builds the client.
    pub fn build(self) -> Result<Client, ConfigError> {
        if self.urls.is_empty() {
            return Err(ConfigError::NoMembers);
        }
        let group = self.group.as_deref().map(group_path).transpose()?;
        let mut members: Vec<Member> = Vec::with_capacity(self.urls.len());
        for url in &self.urls {
            let mut m = parse_member(url)?;
            if let Some(path) = &group {
                // Every endpoint is a group's ("leader", "events", "history"), so the group's
                // prefix goes on the base once.
                m.base = m.base.join(path).map_err(|e| ConfigError::InvalidUrl {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
            }
            if members.iter().any(|o| o.base == m.base) {
                return Err(ConfigError::InvalidUrl {
                    url: url.clone(),
                    reason: "it is listed twice".into(),
                });
            }
            members.push(m);
        }
        let o = &self.opts;
        for (option, d) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", o.request_timeout),
            ("watch_idle_timeout", o.watch_idle_timeout),
            ("reconnect_backoff", o.backoff_initial),
            ("lead_poll_interval", o.lead_poll_interval),
        ] {
            if d.is_zero() {
                return Err(ConfigError::InvalidOption {
                    option,
                    reason: "must be longer than zero".into(),
                });
            }
        }
        if o.backoff_max < o.backoff_initial {
            return Err(ConfigError::InvalidOption {
                option: "reconnect_backoff",
                reason: format!(
                    "the maximum ({:?}) is below the initial delay ({:?})",
                    o.backoff_max, o.backoff_initial
                ),
            });
        }
        let mut opts = self.opts;
        opts.observer = self.observer.as_deref().map(observer_header).transpose()?;
        let http = match self.http {
            Some(_) if !self.roots.is_empty() || self.identity.is_some() => {
                return Err(ConfigError::InvalidOption {
                    option: "http_client",
                    reason: "root certificates and a client identity are set on the HTTP client \
                             given, not on the builder"
                        .into(),
                })
            }
            Some(http) => http,
            None => {
                let b = reqwest::Client::builder()
                    .connect_timeout(self.connect_timeout)
                    .user_agent(concat!("pilot-election-client/", env!("CARGO_PKG_VERSION")));
                #[cfg(feature = "tls")]
                let b = tls(b, &self.roots, self.identity.as_deref())?;
                b.build().map_err(ConfigError::Http)?
            }
        };
        let first = self.start_at % members.len();
        Ok(Client {
            inner: Arc::new(Inner {
                members,
                http,
                preferred: AtomicUsize::new(first),
                opts,
            }),
        })
    }
}

/// Checks a group name ([`ClientBuilder::group`]) and makes it the relative path of the group's
/// endpoints.
fn group_path(group: &str) -> Result<String, ConfigError> {
    let refuse = |reason: String| ConfigError::InvalidOption {
        option: "group",
        reason,
    };
    if group.is_empty() || group.len() > 128 {
        return Err(refuse(format!("{} bytes; give 1 to 128", group.len())));
    }
    let bad = group
        .char_indices()
        .find(|(at, c)| !(c.is_ascii_alphanumeric() || (*at > 0 && matches!(c, '-' | '_' | '.'))));
    if let Some((at, c)) = bad {
        return Err(refuse(format!(
            "{c:?} at byte {at}: a group is ASCII letters, digits, '-', '_' and '.', starting with a letter or a digit"
        )));
    }
    Ok(format!("groups/{group}/"))
}

/// Checks an observer id ([`ClientBuilder::observer`]) and makes it a header value.
fn observer_header(id: &str) -> Result<HeaderValue, ConfigError> {
    let bad = |reason: String| ConfigError::InvalidOption {
        option: "observer",
        reason,
    };
    if id.is_empty() {
        return Err(bad("the id is empty".into()));
    }
    if id.len() > MAX_OBSERVER_ID {
        return Err(bad(format!(
            "the id is {} bytes long, more than {MAX_OBSERVER_ID}",
            id.len()
        )));
    }
    if let Some((at, c)) = id.char_indices().find(|(_, c)| !c.is_ascii_graphic()) {
        return Err(bad(format!(
            "the id {id:?} has {c:?} at byte {at}: only visible ASCII ('!' to '~') may be used"
        )));
    }
    HeaderValue::from_str(id).map_err(|e| bad(format!("the id {id:?} is not a header value: {e}")))
}

/// The builder's root certificates and identity on a reqwest builder.
#[cfg(feature = "tls")]
fn tls(
    mut b: reqwest::ClientBuilder,
    roots: &[Vec<u8>],
    identity: Option<&[u8]>,
) -> Result<reqwest::ClientBuilder, ConfigError> {
    let bad = |option, e: reqwest::Error| ConfigError::InvalidOption {
        option,
        reason: format!(
            "{e} ({:?})",
            std::error::Error::source(&e).map(|s| s.to_string())
        ),
    };
    b = b.use_rustls_tls();
    for pem in roots {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| bad("root_certificates_pem", e))?;
        if certs.is_empty() {
            return Err(ConfigError::InvalidOption {
                option: "root_certificates_pem",
                reason: "no PEM certificate in it".into(),
            });
        }
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    if let Some(pem) = identity {
        b = b.identity(reqwest::Identity::from_pem(pem).map_err(|e| bad("identity_pem", e))?);
    }
    Ok(b)
}

/// Checks one member URL: absolute `http` or `https` with a host, no query or fragment. A path
/// is kept as a prefix (a node behind a reverse proxy at `https://host/election/`).
fn parse_member(given: &str) -> Result<Member, ConfigError> {
    let bad = |reason: &str| ConfigError::InvalidUrl {
        url: given.to_string(),
        reason: reason.to_string(),
    };
    let trimmed = given.trim();
    if trimmed.is_empty() {
        return Err(bad("it is empty"));
    }
    if !trimmed.contains("://") {
        return Err(bad("it is not absolute: write it as http://HOST:PORT"));
    }
    let mut url = Url::parse(trimmed).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(&format!(
            "the scheme is {:?}; only http and https are supported",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it has no host"));
    }
    if url.query().is_some() {
        return Err(bad("it has a query (?...): give the node's base URL only"));
    }
    if url.fragment().is_some() {
        return Err(bad(
            "it has a fragment (#...): give the node's base URL only",
        ));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    let name = url.as_str().trim_end_matches('/').to_string();
    Ok(Member {
        name,
        root: url.clone(),
        base: url,
    })
}

/// The current leader as one member reported it, with how fresh that report is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's node id.
    pub id: String,
    /// Where the leader's API is reached (its `--advertise-url`); `None` when the leader is of
    /// an older build that does not announce one, or the answering node does not know it.
    pub url: Option<String>,
    /// The leader's `--meta` labels (empty when it announces none).
    pub meta: BTreeMap<String, String>,
    /// The term it leads in: the fencing token to attach to writes.
    pub term: u64,
    /// Whether the node that answered is the leader itself.
    pub is_self: bool,
    /// The id of the node that answered.
    pub node: String,
    /// The URL the answering node announces for itself (`None` from an older build).
    pub node_url: Option<String>,
    /// The member URL (as given to the client) that answered.
    pub answered_by: String,
    /// When the leader was elected, RFC 3339 UTC, as the answering node knows it.
    pub elected_at: Option<String>,
    /// On a follower: how long before answering it last heard the leader's heartbeat.
    pub last_heartbeat: Option<Duration>,
    /// On the leader itself: how much of its lease was left when it answered.
    pub lease_remaining: Option<Duration>,
    /// When the request left this process.
    pub requested_at: Instant,
    /// When the answer had arrived.
    pub received_at: Instant,
}

impl Leader {
    /// How long ago the answer arrived.
    pub fn age(&self) -> Duration {
        clock::since(self.received_at)
    }

    /// The latest instant until which this answer vouches for the leader: on the leader
    /// itself, the end of its lease counted from when the request *left* (the answer cannot
    /// have been written before that, so the lease cannot end later than this says); `None`
    /// from a follower, which knows no lease.
    pub fn lease_deadline(&self) -> Option<Instant> {
        self.lease_remaining.map(|l| self.requested_at + l)
    }
}

/// One entry of a node's `GET /history`: a change of leader this node saw. A `snapshot` event
/// lists those a watcher may have missed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct Transition {
    /// The term the node was in after the change.
    pub term: u64,
    /// The leader it knew after the change; `None` starts a stretch without one.
    pub leader: Option<String>,
    /// The leader it knew before; `None` ends a stretch without one.
    pub previous: Option<String>,
    /// Why (`elected`, `leader_timeout`, `step_down`, ...).
    pub reason: String,
    /// When, RFC 3339 UTC.
    pub at: String,
    /// For a new leader: how long the node knew none before it, in milliseconds.
    #[serde(default)]
    pub leaderless_ms: Option<u64>,
}

/// `GET /leader`'s answer (the fields of newer builds default when missing).
#[derive(Deserialize)]
struct LeaderBody {
    leader: String,
    term: u64,
    is_self: bool,
    node: String,
    #[serde(default)]
    elected_at: Option<String>,
    #[serde(default)]
    last_heartbeat_ms: Option<u64>,
    #[serde(default)]
    lease_remaining_ms: Option<u64>,
    #[serde(default)]
    leader_url: Option<String>,
    #[serde(default)]
    leader_meta: Option<BTreeMap<String, String>>,
    #[serde(default)]
    node_url: Option<String>,
}

#[derive(Deserialize)]
struct HistoryBody {
    transitions: Vec<Transition>,
}

/// `GET /leader`'s two answers.
pub(crate) enum Answer {
    Leader(Box<Leader>),
    NoLeader { term: Option<u64> },
}

/// A usable answer of one member.
pub(crate) struct Reply {
    pub(crate) member: usize,
    pub(crate) status: StatusCode,
    pub(crate) body: Value,
    pub(crate) requested_at: Instant,
    pub(crate) received_at: Instant,
}

impl Reply {
    fn is_no_leader(&self) -> bool {
        self.status == StatusCode::SERVICE_UNAVAILABLE && self.body["error"] == "no_leader"
    }
}

impl Client {
    /// A client of the members at `urls` with the default options.
    ///
    /// Each URL must be absolute `http://` or `https://` with a host (a path is kept as a
    /// prefix), without a query or fragment, and listed once; an empty list is refused.
    ///
    /// ```
    /// use pilot_election_client::{Client, ConfigError};
    ///
    /// let client = Client::new(["http://10.0.0.1:7070", "http://10.0.0.2:7070"]).unwrap();
    /// assert_eq!(client.members().count(), 2);
    /// assert!(matches!(Client::new(Vec::<String>::new()), Err(ConfigError::NoMembers)));
    /// let bad = Client::new(["10.0.0.1:7070"]).unwrap_err();
    /// assert!(bad.to_string().contains("10.0.0.1:7070"), "{bad}");
    /// ```
    pub fn new<I, S>(urls: I) -> Result<Client, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Client::builder(urls).build()
    }

    /// A builder for a client of the members at `urls`, to set timeouts and the other options.
    pub fn builder<I, S>(urls: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        ClientBuilder {
            urls: urls.into_iter().map(|u| u.as_ref().to_string()).collect(),
            connect_timeout: Duration::from_secs(1),
            http: None,
            observer: None,
            group: None,
            start_at: 0,
            roots: Vec::new(),
            identity: None,
            opts: Options {
                request_timeout: Duration::from_secs(2),
                watch_idle_timeout: Duration::from_secs(30),
                backoff_initial: Duration::from_millis(100),
                backoff_max: Duration::from_secs(2),
                lead_poll_interval: Duration::from_millis(200),
                lead_margin: Duration::from_millis(300),
                observer: None,
            },
        }
    }

    /// The member URLs, normalised (without a trailing slash), in the order given.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.inner.members.iter().map(|m| m.name.as_str())
    }

    /// The member that answered last, which is asked first next time.
    pub fn last_answered_by(&self) -> &str {
        &self.inner.members[self.preferred()].name
    }

    pub(crate) fn preferred(&self) -> usize {
        self.inner.preferred.load(Ordering::Relaxed) % self.inner.members.len()
    }

    pub(crate) fn set_preferred(&self, member: usize) {
        self.inner.preferred.store(member, Ordering::Relaxed);
    }

    /// Who leads, as the first member that answers says.
    ///
    /// `Ok(None)` when that member knows no leader (`503 no_leader`: during an election, or
    /// when no quorum is up). [`Error::Unavailable`] when no member answered at all.
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        Ok(match self.leader_answer().await? {
            Answer::Leader(l) => Some(*l),
            Answer::NoLeader { .. } => None,
        })
    }

    /// Who leads, as a quorum confirmed it after the request arrived (`GET
    /// /leader?consistent=true`, docs/clients.md): the leader itself answers, once a quorum
    /// acknowledged a heartbeat it sent after the request; a follower's `307` to the leader's
    /// announced URL is followed. Slower than [`Client::leader`] by a round trip from the leader
    /// to a quorum, and never names a leader that is already gone.
    ///
    /// `Ok(None)` when the member asked knows no leader. A member that cannot confirm within
    /// its `T` (`503 read_not_confirmed`) or whose redirect leads nowhere counts as unavailable,
    /// and the next member is asked.
    pub async fn leader_consistent(&self) -> Result<Option<Leader>, Error> {
        Ok(
            match self.leader_answer_of("leader?consistent=true").await? {
                Answer::Leader(l) => Some(*l),
                Answer::NoLeader { .. } => None,
            },
        )
    }

    /// [`Client::leader`] with the term of a `503 no_leader`.
    pub(crate) async fn leader_answer(&self) -> Result<Answer, Error> {
        self.leader_answer_of("leader").await
    }

    /// The answer to `GET path`, a read of the leader.
    async fn leader_answer_of(&self, path: &str) -> Result<Answer, Error> {
        let reply = self.get(path).await?;
        if reply.is_no_leader() {
            return Ok(Answer::NoLeader {
                term: reply.body["term"].as_u64(),
            });
        }
        let member = &self.inner.members[reply.member];
        if reply.status != StatusCode::OK {
            return Err(status_error(&member.name, &reply));
        }
        let b: LeaderBody = serde_json::from_value(reply.body).map_err(|e| Error::Unavailable {
            attempts: vec![Attempt {
                url: member.name.clone(),
                reason: format!("GET /{path} answered 200 with an unexpected body: {e}"),
            }],
        })?;
        Ok(Answer::Leader(Box::new(Leader {
            id: b.leader,
            url: b.leader_url,
            meta: b.leader_meta.unwrap_or_default(),
            term: b.term,
            is_self: b.is_self,
            node: b.node,
            node_url: b.node_url,
            answered_by: member.name.clone(),
            elected_at: b.elected_at,
            last_heartbeat: b.last_heartbeat_ms.map(Duration::from_millis),
            lease_remaining: b.lease_remaining_ms.map(Duration::from_millis),
            requested_at: reply.requested_at,
            received_at: reply.received_at,
        })))
    }

    /// The recent leader transitions the first member that answers has seen (its `GET
    /// /history`, oldest first; kept across its restarts).
    pub async fn history(&self) -> Result<Vec<Transition>, Error> {
        let reply = self.get("history").await?;
        let member = &self.inner.members[reply.member];
        if reply.status != StatusCode::OK {
            return Err(status_error(&member.name, &reply));
        }
        serde_json::from_value::<HistoryBody>(reply.body)
            .map(|h| h.transitions)
            .map_err(|e| Error::Unavailable {
                attempts: vec![Attempt {
                    url: member.name.clone(),
                    reason: format!("GET /history answered 200 with an unexpected body: {e}"),
                }],
            })
    }

    /// `GET path` from the members in turn, starting at the preferred one, until one gives a
    /// usable answer: any answer but a 5xx (other than `503 no_leader`) or a 200 whose body is
    /// not JSON. The member that gave it becomes the preferred one.
    pub(crate) async fn get(&self, path: &str) -> Result<Reply, Error> {
        let n = self.inner.members.len();
        let first = self.preferred();
        let mut attempts = Vec::new();
        for k in 0..n {
            let i = (first + k) % n;
            match self.get_from(i, path).await {
                Ok(reply) => {
                    self.set_preferred(i);
                    return Ok(reply);
                }
                Err(reason) => attempts.push(Attempt {
                    url: self.inner.members[i].name.clone(),
                    reason,
                }),
            }
        }
        Err(Error::Unavailable { attempts })
    }

    /// Member `i`'s `GET /events`, resuming after `last_id` if given, with the observer header
    /// if the client has one.
    pub(crate) fn events_request(
        &self,
        i: usize,
        last_id: Option<&str>,
        groups: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let inner = &self.inner;
        let member = &inner.members[i];
        let url = match groups {
            None => member.endpoint("events"),
            Some(groups) => {
                let mut url = member
                    .root
                    .join("events")
                    .unwrap_or_else(|_| member.root.clone());
                url.query_pairs_mut().append_pair("groups", groups);
                url
            }
        };
        let mut req = inner
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .header(reqwest::header::CACHE_CONTROL, "no-cache");
        if let Some(id) = last_id {
            req = req.header("Last-Event-ID", id);
        }
        if let Some(observer) = &inner.opts.observer {
            req = req.header(OBSERVER_HEADER, observer.clone());
        }
        req
    }

    /// One member's answer to `GET path`, or why it is not usable.
    pub(crate) async fn get_from(&self, i: usize, path: &str) -> Result<Reply, String> {
        let member = &self.inner.members[i];
        let requested_at = clock::now();
        let fetch = async {
            let resp = self
                .inner
                .http
                .get(member.endpoint(path))
                .header(reqwest::header::ACCEPT, "application/json")
                .send()
                .await
                .map_err(|e| describe(&e))?;
            let status = resp.status();
            let bytes = resp.bytes().await.map_err(|e| describe(&e))?;
            Ok::<_, String>((status, bytes))
        };
        let timeout = self.inner.opts.request_timeout;
        let (status, bytes) = tokio::time::timeout(timeout, fetch)
            .await
            .map_err(|_| format!("no answer within {timeout:?}"))??;
        let received_at = clock::now();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let reply = Reply {
            member: i,
            status,
            body,
            requested_at,
            received_at,
        };
        if status.is_server_error() && !reply.is_no_leader() {
            return Err(format!(
                "answered {}{}",
                status.as_u16(),
                reply.body["error"]
                    .as_str()
                    .map(|c| format!(" {c}"))
                    .unwrap_or_default()
            ));
        }
        if status.is_success() && reply.body.is_null() {
            return Err(format!(
                "answered {} with a body that is not JSON",
                status.as_u16()
            ));
        }
        Ok(reply)
    }
}

fn status_error(url: &str, reply: &Reply) -> Error {
    Error::Status {
        url: url.to_string(),
        status: reply.status.as_u16(),
        code: reply.body["error"].as_str().map(String::from),
        message: reply.body["message"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| reply.body.to_string()),
    }
}

/// A transport error in a few words: a refused connection, a timeout, a reset.
pub(crate) fn describe(e: &reqwest::Error) -> String {
    let what = if e.is_connect() {
        "cannot connect"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "the answer was cut off"
    } else {
        "request failed"
    };
    // The innermost cause says the most ("Connection refused (os error 111)").
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    format!("{what}: {cause}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(url: &str) -> String {
        match parse_member(url) {
            Err(ConfigError::InvalidUrl { reason, .. }) => reason,
            other => panic!("{url} should be refused, got {other:?}"),
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn bad_certificates_are_refused_by_name() {
        let option = |b: ClientBuilder| match b.build() {
            Err(ConfigError::InvalidOption { option, .. }) => option,
            other => panic!("should be refused, got {other:?}"),
        };
        let b = || Client::builder(["https://10.0.0.1:7070"]);
        assert_eq!(
            option(b().root_certificates_pem("not a certificate")),
            "root_certificates_pem"
        );
        assert_eq!(
            option(
                b().identity_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
            ),
            "identity_pem"
        );
        let http = reqwest::Client::new();
        assert_eq!(
            option(b().http_client(http).root_certificates_pem("x")),
            "http_client"
        );
    }

    #[test]
    fn a_group_prefixes_every_endpoint_and_a_bad_one_is_refused() {
        let c = Client::builder(["http://10.0.0.1:7070", "https://b.example/api"])
            .group("shard-01")
            .build()
            .unwrap();
        let at: Vec<String> = (c.inner.members.iter())
            .map(|m| m.endpoint("leader").to_string())
            .collect();
        assert_eq!(
            at,
            [
                "http://10.0.0.1:7070/groups/shard-01/leader",
                "https://b.example/api/groups/shard-01/leader"
            ]
        );
        assert_eq!(c.inner.members[0].name, "http://10.0.0.1:7070");
        for bad in ["", "a/b", "-a", "a b", "ü", &"a".repeat(129)] {
            let r = Client::builder(["http://10.0.0.1:7070"]).group(bad).build();
            assert!(
                matches!(
                    r,
                    Err(ConfigError::InvalidOption {
                        option: "group",
                        ..
                    })
                ),
                "{bad:?}: {r:?}"
            );
        }
    }

    #[test]
    fn member_urls_are_normalised() {
        let m = parse_member("http://127.0.0.1:7070").unwrap();
        assert_eq!(m.name, "http://127.0.0.1:7070");
        assert_eq!(
            m.endpoint("leader").as_str(),
            "http://127.0.0.1:7070/leader"
        );
        let m = parse_member(" https://lb.example/election ").unwrap();
        assert_eq!(m.name, "https://lb.example/election");
        assert_eq!(
            m.endpoint("events").as_str(),
            "https://lb.example/election/events"
        );
        let m = parse_member("http://[::1]:7070/").unwrap();
        assert_eq!(m.endpoint("history").as_str(), "http://[::1]:7070/history");
    }

    #[test]
    fn bad_member_urls_say_what_is_wrong() {
        assert!(reason("").contains("empty"));
        assert!(reason("127.0.0.1:7070").contains("not absolute"));
        assert!(reason("localhost:7070").contains("not absolute"));
        assert!(reason("ftp://host:21").contains("only http and https"));
        assert!(reason("http://h:7070/?x=1").contains("query"));
        assert!(reason("http://h:7070/#top").contains("fragment"));
        assert!(reason("http://h:99999").contains("port"));
        assert!(reason("http://").contains("host"), "{}", reason("http://"));
    }

    #[test]
    fn the_list_is_checked_as_a_whole() {
        assert!(matches!(
            Client::new(Vec::<&str>::new()),
            Err(ConfigError::NoMembers)
        ));
        let e = Client::new(["http://a:1", "http://b:1", "http://a:1/"]).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
        let e = Client::new(["http://a:1", "nope"]).unwrap_err();
        assert!(e.to_string().contains("\"nope\""), "names the URL: {e}");
        let e = Client::builder(["http://a:1"])
            .request_timeout(Duration::ZERO)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("request_timeout"), "{e}");
        let e = Client::builder(["http://a:1"])
            .reconnect_backoff(Duration::from_secs(2), Duration::from_secs(1))
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("reconnect_backoff"), "{e}");
        let c = Client::new(["http://a:1", "http://b:1/"]).unwrap();
        assert_eq!(
            c.members().collect::<Vec<_>>(),
            ["http://a:1", "http://b:1"]
        );
    }

    fn observer_refused(id: &str) -> String {
        match Client::builder(["http://a:1"]).observer(id).build() {
            Err(ConfigError::InvalidOption {
                option: "observer",
                reason,
            }) => reason,
            other => panic!("{id:?} should be refused, got {other:?}"),
        }
    }

    #[test]
    fn observer_ids_are_checked() {
        let c = Client::builder(["http://a:1"])
            .observer("obs-7.eu_1:x/y~!")
            .build()
            .unwrap();
        assert_eq!(
            c.inner.opts.observer.as_ref().map(|v| v.to_str().unwrap()),
            Some("obs-7.eu_1:x/y~!")
        );
        assert_eq!(
            Client::new(["http://a:1"]).unwrap().inner.opts.observer,
            None
        );
        let longest = "o".repeat(MAX_OBSERVER_ID);
        assert!(Client::builder(["http://a:1"])
            .observer(&longest)
            .build()
            .is_ok());
        assert!(observer_refused("").contains("empty"));
        let r = observer_refused(&format!("{longest}o"));
        assert!(r.contains("257 bytes"), "{r}");
        let r = observer_refused("obs 1");
        assert!(r.contains("' '") && r.contains("byte 3"), "{r}");
        assert!(observer_refused("obs\n").contains("'\\n'"));
        assert!(observer_refused("obs\u{7f}").contains("visible ASCII"));
        assert!(observer_refused("nœud").contains("byte 1"));
    }

    #[test]
    fn start_at_is_the_first_member_asked_modulo_the_list() {
        let urls = ["http://a:1", "http://b:1", "http://c:1"];
        let first = |i| Client::builder(urls).start_at(i).build().unwrap();
        assert_eq!(Client::new(urls).unwrap().last_answered_by(), "http://a:1");
        assert_eq!(first(1).last_answered_by(), "http://b:1");
        assert_eq!(first(5).last_answered_by(), "http://c:1");
        assert_eq!(first(usize::MAX).last_answered_by(), urls[usize::MAX % 3]);
    }

    #[test]
    fn a_given_http_client_is_used_and_the_other_options_still_checked() {
        let http = reqwest::Client::builder().build().unwrap();
        assert!(Client::builder(["http://a:1"])
            .http_client(http.clone())
            .build()
            .is_ok());
        let e = Client::builder(["http://a:1"])
            .http_client(http)
            .watch_idle_timeout(Duration::ZERO)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("watch_idle_timeout"), "{e}");
    }
}
