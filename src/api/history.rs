//! `GET /history`: recent leader transitions, kept across restarts, and with `--schedule` the
//! firings this node accounted for as leader.

use axum::Json;
use serde::Serialize;

use super::Group;
use crate::store::HistoryEntry;

#[derive(Serialize)]
pub struct HistoryBody {
    node: String,
    transitions: Vec<HistoryEntry>,
    /// With `--schedule`: the firings this node accounted for, newest last.
    #[serde(skip_serializing_if = "Option::is_none")]
    firings: Option<Vec<crate::schedule::Finished>>,
}

pub async fn get_history(s: Group) -> Json<HistoryBody> {
    let snap = s.snapshot();
    Json(HistoryBody {
        node: snap.view.node_id.clone(),
        transitions: snap.history.iter().cloned().collect(),
        firings: s.schedule.as_ref().map(|sc| sc.finished()),
    })
}
