//! The data directory: the term survives restarts, a corrupt state file stops start-up.

use std::time::Duration;

use serde_json::json;

use crate::app::{app, free_port, serial, term_of};

#[tokio::test]
async fn a_node_restarts_at_the_term_its_data_dir_holds() {
    let _serial = serial().await;
    let mut a = app("solo", free_port(), &[], &[]);
    std::fs::create_dir_all(a.data_dir()).unwrap();
    std::fs::write(
        a.data_dir().join("state.json"),
        json!({"term": 7, "voted_for": "solo", "boot": 3}).to_string(),
    )
    .unwrap();
    a.start();
    let term = term_of(&a.url(), Duration::from_secs(10))
        .await
        .expect("the node answers");
    assert!(term >= 7, "term {term}");
    // The boot counter moved on, so sequence numbers keep increasing across restarts.
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(a.data_dir().join("state.json")).unwrap()).unwrap();
    let now_s = pilot_election::clock::wall::unix_ms_now() / 1000;
    let boot = state["boot"].as_u64().expect("boot");
    assert!(boot > 3, "boot epoch must rise: {boot}");
    assert!(
        boot + 60 >= now_s,
        "boot epoch is at least the wall clock: {boot} vs {now_s}"
    );
    assert!(state["term"].as_u64().unwrap() >= 7);
}

#[tokio::test]
async fn a_corrupt_state_file_is_refused_at_start_up() {
    let _serial = serial().await;
    let mut a = app("broken", free_port(), &[], &[]);
    std::fs::create_dir_all(a.data_dir()).unwrap();
    let file = a.data_dir().join("state.json");
    std::fs::write(&file, "{\"term\": 7, \"voted_for\"").unwrap();
    a.start();
    let status = a.wait_exit(Duration::from_secs(10)).await;
    assert!(!status.success());
    let log = a.log();
    assert!(log.contains(&file.display().to_string()), "{log}");
    assert!(log.contains("--reset-state"), "{log}");
    // The file is left as it was for the operator to inspect.
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "{\"term\": 7, \"voted_for\""
    );

    // The documented way out.
    a.args.push("--reset-state".into());
    a.start();
    let term = term_of(&a.url(), Duration::from_secs(10)).await;
    assert!(
        term.is_some(),
        "did not start with --reset-state:\n{}",
        a.log()
    );
}
