//! `GET /openapi.yaml`: the contract, compiled in so that it always matches the binary.

use axum::http::header;
use axum::response::IntoResponse;

pub const OPENAPI_YAML: &str = include_str!("../../openapi/openapi.yaml");

pub async fn get_openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML)
}
