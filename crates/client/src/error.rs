//! The crate's error types.

use std::fmt;

/// A [`Client`](crate::Client) that cannot be built: the member list or an option is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The client was given no member URL at all.
    #[error("no member URL given: a client needs the URL of at least one member of the cluster")]
    NoMembers,
    /// A member URL cannot be used.
    #[error("member URL {url:?} cannot be used: {reason}")]
    InvalidUrl {
        /// The URL as it was given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An option of the builder is out of range.
    #[error("option {option}: {reason}")]
    InvalidOption {
        /// The builder method that set it.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be built (such as a TLS backend that failed to load).
    #[error("cannot build the HTTP client: {0}")]
    Http(#[source] reqwest::Error),
}

/// One member that did not give a usable answer, as [`Error::Unavailable`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The member's URL.
    pub url: String,
    /// What went wrong: a refused connection, a timeout, a status such as `503
    /// too_many_connections`, an answer that did not parse.
    pub reason: String,
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.url, self.reason)
    }
}

/// A request that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Every member was asked and none gave a usable answer (each was unreachable, timed out,
    /// or answered a 5xx other than `503 no_leader`).
    #[error("no member answered: {}", join(attempts))]
    Unavailable {
        /// One entry per member asked, in the order they were asked.
        attempts: Vec<Attempt>,
    },
    /// A member answered with an error status the client does not fail over on (a 4xx: the
    /// request itself, or the URL, is wrong).
    #[error("{url} answered {status}{}: {message}", code.as_deref().map(|c| format!(" {c}")).unwrap_or_default())]
    Status {
        /// The member that answered.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The API's error code (`"error"` in the body), when the body had one.
        code: Option<String>,
        /// The API's message, or the body as text.
        message: String,
    },
    /// [`Client::lead`](crate::Client::lead) needs a client of exactly one member: the node
    /// whose leadership it follows (the service's own sidecar).
    #[error(
        "lead() follows one node's leadership, but this client has {members} members: build a \
         client with the URL of the service's own node only"
    )]
    NotOneMember {
        /// How many members the client has.
        members: usize,
    },
}

fn join(attempts: &[Attempt]) -> String {
    if attempts.is_empty() {
        return "no member was asked".into();
    }
    attempts
        .iter()
        .map(Attempt::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A term lower than one a [`Fence`](crate::Fence) has already seen: the write it came with is
/// from a deposed leader and must be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "stale term {term}: term {highest} has already been seen, so term {term}'s leader is deposed"
)]
pub struct StaleTerm {
    /// The term that was refused.
    pub term: u64,
    /// The highest term seen when it was refused.
    pub highest: u64,
}
