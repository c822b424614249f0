//! `GET /history`: recent leader transitions, kept across restarts.

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use super::AppState;
use crate::store::HistoryEntry;

#[derive(Serialize)]
pub struct HistoryBody {
    node: String,
    transitions: Vec<HistoryEntry>,
}

pub async fn get_history(State(s): State<AppState>) -> Json<HistoryBody> {
    let snap = s.snapshot();
    Json(HistoryBody {
        node: snap.view.node_id.clone(),
        transitions: snap.history.iter().cloned().collect(),
    })
}
