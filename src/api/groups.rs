//! `GET /groups`: every election this node takes part in, each with the leader and term this
//! node can vouch for now; `POST /groups` and `DELETE /groups/{group}`: an operator adds and
//! removes groups while the node runs (kept across restarts). `/groups/{group}/...` answers for
//! one group (see [`super::Group`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::extract::{Admin, JsonBody};
use super::{current_leader, ApiError, AppState, ElectionApi, Group, GroupRefusal};
use crate::group::GroupName;

#[derive(Serialize)]
pub struct GroupsBody {
    node: String,
    /// The group the routes that name none answer for.
    default: String,
    count: usize,
    /// How many of them this node leads now.
    leading: usize,
    groups: Vec<GroupBody>,
}

#[derive(Serialize)]
pub struct GroupBody {
    group: String,
    term: u64,
    /// The leader this node can vouch for now (`null`: none).
    leader: Option<String>,
    /// This node leads the group now.
    is_self: bool,
}

impl GroupBody {
    fn of(e: &ElectionApi) -> GroupBody {
        let now = crate::clock::now();
        let snap = e.snapshot();
        GroupBody {
            group: e.group.clone(),
            term: snap.view.term,
            leader: current_leader(&snap.view, now),
            is_self: snap.view.is_leader_at(now),
        }
    }
}

pub async fn get_groups(State(s): State<AppState>) -> Json<GroupsBody> {
    let groups: Vec<GroupBody> = s.elections.all().iter().map(|e| GroupBody::of(e)).collect();
    Json(GroupsBody {
        node: s.elections.default().snapshot().view.node_id.clone(),
        default: s.elections.default_group().to_string(),
        count: groups.len(),
        leading: groups.iter().filter(|g| g.is_self).count(),
        groups,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddGroupRequest {
    group: String,
}

/// Adds a group: answered once its election runs here and the addition is on disk.
pub async fn post_groups(
    admin: Admin,
    State(s): State<AppState>,
    JsonBody(req): JsonBody<AddGroupRequest>,
) -> Result<(StatusCode, Json<GroupBody>), ApiError> {
    let control = s.groups.as_ref().ok_or(ApiError::Observer)?;
    let name = GroupName::new(&req.group).map_err(|e| ApiError::InvalidGroup(e.to_string()))?;
    let election = Arc::new(control.add(name.as_str()).await.map_err(refused)?);
    s.elections.insert(election.clone());
    tracing::info!(source = %admin.source, group = %name, "group added");
    Ok((StatusCode::CREATED, Json(GroupBody::of(&election))))
}

/// Removes a group: its routes answer `unknown_group` from now on; a leader resigns first.
pub async fn delete_group(
    admin: Admin,
    State(s): State<AppState>,
    g: Group,
) -> Result<Json<GroupBody>, ApiError> {
    let control = s.groups.as_ref().ok_or(ApiError::Observer)?;
    let last = GroupBody::of(&g);
    control.remove(&g.group).await.map_err(refused)?;
    s.elections.remove(&g.group);
    tracing::info!(source = %admin.source, group = %g.group, "group removed");
    Ok(Json(last))
}

fn refused(r: GroupRefusal) -> ApiError {
    match r {
        GroupRefusal::Exists(g) => ApiError::GroupExists(g),
        GroupRefusal::TooMany { max } => ApiError::TooManyGroups { max },
        GroupRefusal::Configured(g) => ApiError::ConfiguredGroup(g),
        GroupRefusal::Unknown(g) => ApiError::UnknownGroup(g),
        GroupRefusal::Storage(e) => ApiError::StorageFailed(e),
        GroupRefusal::Stopped => ApiError::LoopStopped,
    }
}
