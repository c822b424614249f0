//! The default priority must equal what `printf %s "$ID" | cksum` prints, on the real binary.

use std::io::Write;
use std::process::{Command, Stdio};

use pilot_election::election::default_priority;

fn posix_cksum(data: &[u8]) -> u32 {
    let mut child = Command::new("cksum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the cksum binary (coreutils) must be installed");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn default_priority_equals_posix_cksum() {
    let mut ids: Vec<String> = vec![
        String::new(),
        "a".into(),
        "node-1".into(),
        "node-2".into(),
        "worker.eu-west-1.example".into(),
        "ünïcödé-节点-🚀".into(),
        "with space and\ttab".into(),
        "x".repeat(255),
        "y".repeat(256),
        "z".repeat(70_000),
    ];
    // Numeric ids like the ones `pilotctl info` returns.
    ids.extend([0u64, 1, 5, 9, 42, 255, 256, 65_535, 65_536, 4_294_967_295].map(|n| n.to_string()));
    for id in &ids {
        assert_eq!(
            default_priority(id),
            posix_cksum(id.as_bytes()),
            "id {:?}",
            id.chars().take(40).collect::<String>()
        );
    }
}
