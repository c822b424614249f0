//! Refused mutations against a real process: each is logged with its source and reason, and the
//! admin token never reaches the logs. (Every error answer of the router, and the contract, are
//! checked in-process by `tests/api.rs`.)

use serde_json::json;

use crate::app::{post_json, serial, wait_up, Cluster, TOKEN};

#[tokio::test]
async fn refused_mutations_are_logged_and_the_token_never_is() {
    let _serial = serial().await;
    let c = Cluster::start(1, &[]);
    wait_up(&c.nodes[0]).await;
    let url = c.nodes[0].url();
    for token in [None, Some("wrong")] {
        let (status, body) = post_json(&url, "/step-down", token, &json!({})).await;
        assert!(matches!(status, 401 | 403), "{status} {body}");
    }
    // Accepted requests, which pass the token through the same code, must not log it either.
    let (status, body) =
        post_json(&url, "/candidacy", Some(TOKEN), &json!({"eligible": true})).await;
    assert_eq!(status, 200, "{body}");
    let log = c.logs();
    assert_eq!(
        log.matches("refused mutation").count(),
        2,
        "each refusal is logged once:\n{log}"
    );
    // The reason of each, by its error code.
    for code in ["unauthorized", "forbidden"] {
        assert!(log.contains(&format!("error=\"{code}\"")), "{code}:\n{log}");
    }
    assert!(!log.contains(TOKEN), "the token leaked into the logs");
}
