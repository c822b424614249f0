//! The HTTP API (its contract: openapi/openapi.yaml; its place among the layers:
//! docs/architecture.md): one file per resource, all errors as [`ApiError`].
//!
//! Handlers only read the latest [`crate::runtime::Snapshot`] of their election ([`Group`]
//! resolves which) or send a [`crate::runtime::Command`] to the election loop; none of
//! them can block it. Leadership is judged against the current time, not the snapshot's, so a
//! stuck loop stops claiming leadership once its lease is over.

mod consistent;
mod election;
mod error;
mod events;
mod extract;
mod groups;
mod health;
mod history;
mod jobs;
mod leader;
mod leadership;
mod metrics;
mod openapi;
mod page;
mod pause;
mod role;
mod status;

use std::sync::Arc;

use axum::http::{Method, Uri};
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::watch;
use tokio::time::Instant;

pub use election::{
    ElectionApi, Elections, EventSource, Group, GroupControl, GroupFuture, GroupRefusal,
    GROUP_PREFIX,
};
pub use error::ApiError;
pub use events::{start_log as start_event_log, EventLog, Subscribers};
pub use extract::{Auth, BodyTimedOut, BODY_LIMIT};
pub use openapi::OPENAPI_YAML;
pub use page::PAGE_HTML;

use crate::clock::wall::unix_ms_now;
use crate::election::View;
use crate::metrics::Metrics;
use crate::runtime::LastTurn;

/// What every handler may use. axum clones the state for every request (the route's handler
/// and the `State` extractor each take one), so it is one `Arc`: a clone of the parts would be
/// a dozen atomic counters bounced between the cores on every `GET /leader`.
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

impl AppState {
    pub fn new(parts: AppParts) -> AppState {
        AppState(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// The handles an [`AppState`] shares: the node's, and each election's ([`ElectionApi`]).
pub struct AppParts {
    /// The elections this node answers for, by group.
    pub elections: Elections,
    /// Adds and removes groups while the node runs; `None` on an observer.
    pub groups: Option<Arc<dyn GroupControl>>,
    /// The TLS configuration in use, for the certificate expiry metric.
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// The routes the node's transport serves for its peers (the http transport's
    /// `POST /peer/messages`), merged into the API's; `None` when it serves none.
    pub ingress: Option<Router>,
    pub last_turn: LastTurn,
    pub metrics: Arc<Metrics>,
    /// `--metrics-groups`: the groups whose own series `/metrics` exports (`None`: none; the
    /// totals over every group are always there).
    pub metrics_groups: Option<crate::group::GroupSelection>,
    pub auth: Arc<Auth>,
    /// The `/events` streams and their cap.
    pub subscribers: Subscribers,
    /// On an observer (`run --observe`): how it follows, for `/status`. `Some` makes this an
    /// observer's API: it refuses every command, and never answers 200 on `/role/leader`.
    pub observing: Option<watch::Receiver<crate::runtime::Observing>>,
}

/// Every route of the service: the API's and the transport's ingress. Pure: building it starts
/// nothing.
pub fn router(state: AppState) -> Router {
    if state.observing.is_some() {
        return observer_router(state);
    }
    let ingress = state.ingress.clone().unwrap_or_default();
    let mut r = node_reads(Router::new());
    for prefix in ["", GROUP_PREFIX] {
        r = commands(election_reads(r, prefix), prefix);
    }
    r.with_state(state)
        .merge(ingress)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

/// An observer's routes (it follows one group, the default one): the same reads, and every
/// command refused with `409 observer` (it neither votes nor leads, so there is nothing to step
/// down from or pause).
fn observer_router(state: AppState) -> Router {
    election_reads(node_reads(Router::new()), "")
        .route("/candidacy", post(refuse_observer))
        .route("/jobs/holds", post(refuse_observer))
        .route(
            "/step-down",
            post(refuse_observer)
                .get(leadership::get_step_down)
                .delete(refuse_observer),
        )
        .route(
            "/pause",
            get(pause::get_pause)
                .post(refuse_observer)
                .delete(refuse_observer),
        )
        .with_state(state)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

/// The operator commands of one election, under `prefix` (`""` for the default group's,
/// [`GROUP_PREFIX`] for a named group's).
fn commands(r: Router<AppState>, prefix: &str) -> Router<AppState> {
    r.route(
        &format!("{prefix}/candidacy"),
        post(leadership::post_candidacy),
    )
    .route(
        &format!("{prefix}/step-down"),
        post(leadership::post_step_down)
            .get(leadership::get_step_down)
            .delete(leadership::delete_step_down),
    )
    .route(
        &format!("{prefix}/pause"),
        get(pause::get_pause)
            .post(pause::post_pause)
            .delete(pause::delete_pause),
    )
    .route(&format!("{prefix}/jobs/holds"), post(jobs::post_hold))
    .route(
        &format!("{prefix}/jobs/holds/{{id}}"),
        axum::routing::put(jobs::put_hold).delete(jobs::delete_hold),
    )
}

/// The reads of one election under `prefix`, the same on a member and an observer.
fn election_reads(r: Router<AppState>, prefix: &str) -> Router<AppState> {
    r.route(&format!("{prefix}/leader"), get(leader::get_leader))
        .route(&format!("{prefix}/term"), get(leader::get_term))
        .route(&format!("{prefix}/status"), get(status::get_status))
        .route(&format!("{prefix}/events"), get(events::get_events))
        .route(&format!("{prefix}/history"), get(history::get_history))
        .route(
            &format!("{prefix}/role/leader"),
            get(role::get_role_leader).options(role::options_role_leader),
        )
        .route(
            &format!("{prefix}/role/follower"),
            get(role::get_role_follower).options(role::options_role_follower),
        )
}

/// The reads of the node as a whole, the same on a member and an observer.
fn node_reads(r: Router<AppState>) -> Router<AppState> {
    r.route("/", get(page::get_page))
        .route("/groups", get(groups::get_groups).post(groups::post_groups))
        .route(GROUP_PREFIX, axum::routing::delete(groups::delete_group))
        .route("/healthz", get(health::get_healthz))
        .route("/readyz", get(health::get_readyz))
        .route("/metrics", get(metrics::get_metrics))
        .route("/openapi.yaml", get(openapi::get_openapi))
}

async fn refuse_observer() -> ApiError {
    ApiError::Observer
}

/// The paths `router` serves, for the contract test against the OpenAPI document: the API's,
/// then the http transport's ingress (served when the node's transport is http).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/"),
    ("get", "/leader"),
    ("get", "/term"),
    ("get", "/status"),
    ("post", "/candidacy"),
    ("post", "/step-down"),
    ("get", "/step-down"),
    ("delete", "/step-down"),
    ("get", "/pause"),
    ("post", "/pause"),
    ("delete", "/pause"),
    ("post", "/jobs/holds"),
    ("put", "/jobs/holds/{id}"),
    ("delete", "/jobs/holds/{id}"),
    ("get", "/events"),
    ("get", "/history"),
    ("get", "/role/leader"),
    ("head", "/role/leader"),
    ("options", "/role/leader"),
    ("get", "/role/follower"),
    ("head", "/role/follower"),
    ("options", "/role/follower"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.yaml"),
    ("get", "/groups"),
    ("post", "/groups"),
    ("delete", "/groups/{group}"),
    ("get", "/groups/{group}/leader"),
    ("get", "/groups/{group}/term"),
    ("get", "/groups/{group}/status"),
    ("post", "/groups/{group}/candidacy"),
    ("post", "/groups/{group}/step-down"),
    ("get", "/groups/{group}/step-down"),
    ("delete", "/groups/{group}/step-down"),
    ("get", "/groups/{group}/pause"),
    ("post", "/groups/{group}/pause"),
    ("delete", "/groups/{group}/pause"),
    ("post", "/groups/{group}/jobs/holds"),
    ("put", "/groups/{group}/jobs/holds/{id}"),
    ("delete", "/groups/{group}/jobs/holds/{id}"),
    ("get", "/groups/{group}/events"),
    ("get", "/groups/{group}/history"),
    ("get", "/groups/{group}/role/leader"),
    ("head", "/groups/{group}/role/leader"),
    ("options", "/groups/{group}/role/leader"),
    ("get", "/groups/{group}/role/follower"),
    ("head", "/groups/{group}/role/follower"),
    ("options", "/groups/{group}/role/follower"),
    ("post", crate::transport::http::PEER_MESSAGES),
];

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("{method} {}", uri.path()))
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// The leader this node can vouch for now ([`View::leader_at`], the one judgement of it).
fn current_leader(view: &View, now: Instant) -> Option<String> {
    view.leader_at(now).map(str::to_string)
}

fn age_ms(at: Instant, now: Instant) -> u64 {
    now.saturating_duration_since(at).as_millis() as u64
}

/// Monotonic instants are shown as wall-clock time, for people only.
fn wall_clock(at: Instant, now: Instant) -> String {
    crate::clock::wall::rfc3339(unix_ms_now().saturating_sub(age_ms(at, now)))
}
