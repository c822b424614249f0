//! `GET /history`: recent leader transitions, kept across restarts.

use axum::Json;
use serde::Serialize;

use super::Group;
use crate::store::HistoryEntry;

#[derive(Serialize)]
pub struct HistoryBody {
    node: String,
    transitions: Vec<HistoryEntry>,
}

pub async fn get_history(s: Group) -> Json<HistoryBody> {
    let snap = s.snapshot();
    Json(HistoryBody {
        node: snap.view.node_id.clone(),
        transitions: snap.history.iter().cloned().collect(),
    })
}
