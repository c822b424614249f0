//! The one error type of the API: every failure, including the framework's own rejections,
//! renders as `{"error": "<snake_code>", "message": "..."}` so that clients need one parser.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::transport::http::Refusal;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("no leader is known in term {term}")]
    NoLeader { term: u64 },
    #[error("this node is not the leader (term {term})")]
    NotLeader { term: u64, leader: Option<String> },
    #[error("expected term {expected} but the current term is {current}")]
    TermMismatch { expected: u64, current: u64 },
    #[error("successor {successor} cannot lead: {reason}")]
    SuccessorIneligible { successor: String, reason: String },
    #[error("missing `Authorization: Bearer <admin token>` header")]
    Unauthorized,
    #[error("the admin token is wrong")]
    Forbidden,
    #[error(
        "no admin token is configured (--admin-token-file or PILOT_ELECTION_ADMIN_TOKEN); \
         start the node with --allow-unauthenticated to allow this without one"
    )]
    AdminTokenNotConfigured,
    #[error("the body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("the body does not match the schema: {0}")]
    InvalidBody(String),
    #[error("the body must be sent with `Content-Type: application/json`")]
    UnsupportedMediaType,
    #[error("the body exceeds the {limit}-byte limit")]
    PayloadTooLarge { limit: usize },
    #[error("the body could not be read: {0}")]
    BadRequest(String),
    #[error("malformed wire message: {0}")]
    MalformedMessage(String),
    #[error("no route for {0}")]
    NotFound(String),
    #[error("method not allowed for this route")]
    MethodNotAllowed,
    #[error("the election loop is not running")]
    LoopStopped,
    #[error("too many messages queued; try again")]
    Overloaded,
    #[error("this node is at its connection limit (--max-connections); retry later")]
    TooManyConnections,
    #[error("this node already serves its {max} event subscribers (--max-event-subscribers); retry later")]
    TooManySubscribers { max: usize },
    #[error("the request body did not arrive within {after_ms} ms (--body-timeout)")]
    RequestTimeout { after_ms: u64 },
    #[error("{0}")]
    NoSuccessorInMaintenance(String),
    #[error("the setting could not be kept on disk, so it was not made: {0}")]
    StorageFailed(String),
    #[error(
        "the setting is on this node's disk and travels on its messages, but {} of {members} members hold it ({held_by:?}), fewer than the quorum of {quorum}, after {after_ms} ms: until a quorum holds it a failover can still happen; GET /pause shows who holds it",
        held_by.len()
    )]
    NotConfirmed {
        held_by: Vec<String>,
        quorum: usize,
        members: usize,
        after_ms: u64,
    },
    #[error("a newer maintenance setting (version {version}, made on {by}) replaced this one before a quorum held it; GET /pause shows it")]
    MaintenanceSuperseded { by: String, version: u64 },
    #[error(
        "step-down {operation} is already scheduled for {at}; cancel it first (DELETE /step-down)"
    )]
    AlreadyScheduled { operation: String, at: String },
    #[error("no step-down is scheduled on this node")]
    NothingScheduled,
    #[error("the message says it is from {from:?}, but the client certificate is issued for {names:?}; a peer's certificate must name its member id (a DNS name, or urn:pilot-election:member:<id>)")]
    WrongCertificate { from: String, names: Vec<String> },
    #[error("this request needs a client certificate (the node lets connections without one only read: --tls-anonymous-reads)")]
    ClientCertificateRequired,
    #[error("this node is an observer (run --observe): it neither votes nor leads, so it takes no command; send it to a member")]
    Observer,
    #[error("{0}")]
    InvalidGroup(String),
    #[error(
        "this node takes no part in the election of group {0:?} (GET /groups lists those it does)"
    )]
    UnknownGroup(String),
    #[error("this node takes part in the election of group {0:?} already")]
    GroupExists(String),
    #[error("the query string is not valid: {0}")]
    InvalidQuery(String),
    #[error(
        "consistent reads are answered by the leader, {leader} (term {term}){}",
        match location {
            Some(l) => format!(": ask it at {l}"),
            None => " which announced no API URL (--advertise-url): ask it directly".into(),
        }
    )]
    AskTheLeader {
        leader: String,
        term: u64,
        location: Option<String>,
    },
    #[error("no quorum confirmed this node's leadership of term {term} within {after_ms} ms: {why}; the leader is not known for certain, ask again")]
    ReadNotConfirmed {
        term: u64,
        after_ms: u64,
        why: String,
    },
    #[error("this node takes part in {max} groups, its --max-groups; remove one first")]
    TooManyGroups { max: usize },
    #[error("group {0:?} is the default group or given by --group: change the node's configuration and restart it to leave it")]
    ConfiguredGroup(String),
    #[error("this node is handing leadership of term {term} over: the held command must stop now, then give the hold back (DELETE)")]
    HandingOver { term: u64 },
    #[error("no hold {0} on this node: it was given back, or it expired")]
    UnknownHold(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            NoLeader { .. }
            | LoopStopped
            | Overloaded
            | TooManyConnections
            | TooManySubscribers { .. }
            | StorageFailed(_)
            | NotConfirmed { .. }
            | ReadNotConfirmed { .. }
            | AskTheLeader { location: None, .. } => StatusCode::SERVICE_UNAVAILABLE,
            AskTheLeader {
                location: Some(_), ..
            } => StatusCode::TEMPORARY_REDIRECT,
            RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            NotLeader { .. }
            | TermMismatch { .. }
            | NoSuccessorInMaintenance(_)
            | AlreadyScheduled { .. }
            | MaintenanceSuperseded { .. }
            | Observer
            | GroupExists(_)
            | TooManyGroups { .. }
            | ConfiguredGroup(_)
            | HandingOver { .. } => StatusCode::CONFLICT,
            SuccessorIneligible { .. } | InvalidBody(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Unauthorized | ClientCertificateRequired => StatusCode::UNAUTHORIZED,
            Forbidden | AdminTokenNotConfigured | WrongCertificate { .. } => StatusCode::FORBIDDEN,
            InvalidJson(_) | BadRequest(_) | MalformedMessage(_) | InvalidGroup(_)
            | InvalidQuery(_) => StatusCode::BAD_REQUEST,
            UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            NotFound(_) | NothingScheduled | UnknownGroup(_) | UnknownHold(_) => {
                StatusCode::NOT_FOUND
            }
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            NoLeader { .. } => "no_leader",
            NotLeader { .. } => "not_leader",
            TermMismatch { .. } => "term_mismatch",
            SuccessorIneligible { .. } => "successor_ineligible",
            Unauthorized => "unauthorized",
            Forbidden => "forbidden",
            AdminTokenNotConfigured => "admin_token_not_configured",
            InvalidJson(_) => "invalid_json",
            InvalidBody(_) => "invalid_body",
            UnsupportedMediaType => "unsupported_media_type",
            PayloadTooLarge { .. } => "payload_too_large",
            BadRequest(_) => "bad_request",
            MalformedMessage(_) => "malformed_message",
            NotFound(_) => "not_found",
            MethodNotAllowed => "method_not_allowed",
            LoopStopped => "loop_stopped",
            Overloaded => "overloaded",
            TooManyConnections => "too_many_connections",
            TooManySubscribers { .. } => "too_many_subscribers",
            RequestTimeout { .. } => "request_timeout",
            NoSuccessorInMaintenance(_) => "no_successor_in_maintenance",
            StorageFailed(_) => "storage_failed",
            NotConfirmed { .. } => "not_confirmed",
            MaintenanceSuperseded { .. } => "maintenance_superseded",
            AlreadyScheduled { .. } => "already_scheduled",
            NothingScheduled => "nothing_scheduled",
            WrongCertificate { .. } => "wrong_certificate",
            ClientCertificateRequired => "client_certificate_required",
            Observer => "observer",
            InvalidGroup(_) => "invalid_group",
            UnknownGroup(_) => "unknown_group",
            GroupExists(_) => "group_exists",
            TooManyGroups { .. } => "too_many_groups",
            ConfiguredGroup(_) => "configured_group",
            InvalidQuery(_) => "invalid_query",
            AskTheLeader { .. } => "ask_the_leader",
            ReadNotConfirmed { .. } => "read_not_confirmed",
            HandingOver { .. } => "handing_over",
            UnknownHold(_) => "unknown_hold",
        }
    }

    /// Fields a client can act on without parsing the message.
    fn extra(&self) -> Map<String, Value> {
        let mut m = Map::new();
        match self {
            ApiError::NoLeader { term } => {
                m.insert("term".into(), json!(term));
            }
            ApiError::NotLeader { term, leader } => {
                m.insert("term".into(), json!(term));
                m.insert("leader".into(), json!(leader));
            }
            ApiError::TermMismatch { expected, current } => {
                m.insert("expected_term".into(), json!(expected));
                m.insert("term".into(), json!(current));
            }
            ApiError::SuccessorIneligible { successor, reason } => {
                m.insert("successor".into(), json!(successor));
                m.insert("reason".into(), json!(reason));
            }
            ApiError::NotConfirmed {
                held_by,
                quorum,
                members,
                after_ms,
            } => {
                m.insert("held_by".into(), json!(held_by));
                m.insert("quorum".into(), json!(quorum));
                m.insert("members".into(), json!(members));
                m.insert("after_ms".into(), json!(after_ms));
            }
            ApiError::MaintenanceSuperseded { by, version } => {
                m.insert("by".into(), json!(by));
                m.insert("version".into(), json!(version));
            }
            ApiError::AskTheLeader {
                leader,
                term,
                location,
            } => {
                m.insert("leader".into(), json!(leader));
                m.insert("term".into(), json!(term));
                m.insert("location".into(), json!(location));
            }
            ApiError::ReadNotConfirmed {
                term,
                after_ms,
                why: _,
            } => {
                m.insert("term".into(), json!(term));
                m.insert("after_ms".into(), json!(after_ms));
            }
            ApiError::HandingOver { term } => {
                m.insert("term".into(), json!(term));
            }
            ApiError::TooManyGroups { max } => {
                m.insert("max".into(), json!(max));
            }
            ApiError::AlreadyScheduled { operation, at } => {
                m.insert("operation".into(), json!(operation));
                m.insert("at".into(), json!(at));
            }
            _ => {}
        }
        m
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = self.extra();
        body.insert("error".into(), json!(self.code()));
        body.insert("message".into(), json!(self.to_string()));
        let mut resp = (self.status(), axum::Json(Value::Object(body))).into_response();
        match self {
            ApiError::AskTheLeader {
                location: Some(l), ..
            } => {
                if let Ok(v) = HeaderValue::from_str(&l) {
                    resp.headers_mut().insert(header::LOCATION, v);
                }
            }
            ApiError::NoLeader { .. }
            | ApiError::ReadNotConfirmed { .. }
            | ApiError::AskTheLeader { location: None, .. }
            | ApiError::LoopStopped
            | ApiError::Overloaded
            | ApiError::TooManyConnections => {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            // Subscribers come and go slowly: a slot is unlikely to free up within a second.
            ApiError::TooManySubscribers { .. } => {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            ApiError::Unauthorized => {
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        resp
    }
}

/// A peer message the http transport's ingress refused answers as the API's own errors do.
impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        match r {
            Refusal::Body { error, limit } => super::extract::body_error(&error, limit),
            Refusal::TooLarge { limit } => ApiError::PayloadTooLarge { limit },
            Refusal::Malformed(e) => ApiError::MalformedMessage(e),
            Refusal::WrongCertificate { from, names } => ApiError::WrongCertificate { from, names },
            Refusal::Overloaded => ApiError::Overloaded,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        ApiError::from(self).into_response()
    }
}
