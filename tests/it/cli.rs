//! The binary as scripts see it: exit codes, one-line configuration errors, client commands,
//! JSON logs, and the demo.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::app::{app, bin, free_port, serial, wait_for, TempDir, TOKEN};

/// The binary with `args`, to completion (no admin token from the environment).
pub(crate) fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("PILOT_ELECTION_ADMIN_TOKEN")
        .output()
        .expect("run pilot-election")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn invalid_configuration_exits_64_with_one_line() {
    // Usage errors are reported (exit 64) before the pilotctl version is checked.
    let pilot = [
        "run",
        "--node-id",
        "a",
        "--transport",
        "pilot",
        "--broker",
        "hub",
        "--pilotctl",
        "/bin/sh",
    ];
    let pilot_peer_listen = [
        &pilot[..],
        &["--member", "a,b,c", "--peer-listen", "127.0.0.1:7071"],
    ]
    .concat();
    let pilot_no_group = [&pilot[..], &["--member", "a,b,c", "--group", ""]].concat();
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--node-id", "a", "--lease", "3s"],
            "unsafe timings",
        ),
        (
            // Announced as 1000 ms beside a lease of 1000 ms, every message of this node would
            // be refused by the others (issue 39).
            &[
                "run",
                "--node-id",
                "a",
                "--heartbeat-interval",
                "999.5ms",
                "--lease",
                "1s",
            ],
            "heartbeat interval (999.5ms) must be a whole number of milliseconds",
        ),
        (
            &["run", "--node-id", "a", "--group", "a/b"],
            "--group: the group name \"a/b\" has '/' at byte 1: a group name is ASCII letters, digits",
        ),
        (
            &["run", "--node-id", "a", "--metrics-groups", "shard-9"],
            "--metrics-groups: shard-9 is not one of this node's --group(s)",
        ),
        (
            &["run", "--node-id", "a", "--metrics-groups", " , "],
            "--metrics-groups: give `all`, `default` or group names",
        ),
        (
            &["run", "--node-id", "a", "--exec-groups", "all"],
            "--exec-groups needs --exec",
        ),
        (
            &["run", "--observe", "--metrics-groups", "all"],
            "--metrics-groups cannot be used with --observe",
        ),
        (
            &["run", "--node-id", "a", "--observe-group", "shard-01"],
            "--observe-group needs --observe",
        ),
        (
            // Checked before the pilot settings: the topic is made from it.
            &pilot_no_group,
            "--group: a group name may not be empty",
        ),
        (
            &["run", "--node-id", "a", "--transport", "pilot"],
            "--broker HOST[,HOST...] is required",
        ),
        (
            // The quorum needs the members, whatever pilotctl is.
            &pilot,
            "the pilot transport needs its members: --member ID",
        ),
        (
            &[
                "run",
                "--node-id",
                "a",
                "--transport",
                "pilot",
                "--broker",
                "hub",
                "--pilotctl",
                "/bin/sh",
                "--cluster-size",
                "3",
            ],
            "--cluster-size 3 no longer decides the quorum: list the 3 members instead",
        ),
        (
            &[
                "run",
                "--node-id",
                "a",
                "--peer",
                "b=http://x:1",
                "--member",
                "a,b,c",
            ],
            "over http every member needs a --peer",
        ),
        (&["run"], "--node-id is required"),
        (&["run", "--node-id", "a", "--peer", "b"], "must be ID=URL"),
        (&["run", "--node-id", "a", "--lease", "2"], "needs a unit"),
        (
            &[
                "run",
                "--node-id",
                "a",
                "--cluster-size",
                "1",
                "--peer",
                "b=http://x:1",
            ],
            "--cluster-size 1 does not match the 2 members",
        ),
        (&["no-such-command"], "unrecognized subcommand"),
        (
            &[
                "run",
                "--node-id",
                "a",
                "--cluster-key-file",
                "/nonexistent/key",
            ],
            "/nonexistent/key",
        ),
        (
            &["run", "--node-id", "a", "--cluster-key", "k1=short"],
            "k1",
        ),
        (
            &["run", "--node-id", "a", "--header-timeout", "0s"],
            "--header-timeout must be more than 0",
        ),
        (
            &["run", "--node-id", "a", "--max-connections=lots"],
            "--max-connections",
        ),
        (
            &["run", "--node-id", "a", "--max-connections", "10"],
            "--max-event-subscribers 128 must be below --max-connections 10",
        ),
        (
            &pilot_peer_listen,
            "--peer-listen is for the http transport",
        ),
        (
            &["run", "--node-id", "a", "--exec", " "],
            "--exec needs a command line",
        ),
        (
            &["run", "--node-id", "a", "--exec-step-down-on-failure"],
            "--exec-step-down-on-failure needs --exec",
        ),
        (
            &["run", "--node-id", "a", "--on-change", ""],
            "--on-change needs a command line",
        ),
        (
            &[
                "run",
                "--node-id",
                "a",
                "--on-change",
                "true",
                "--on-change-timeout",
                "0s",
            ],
            "--on-change-timeout must be more than 0",
        ),
        (
            &["run", "--node-id", "a", "--on-change-timeout", "soon"],
            "--on-change-timeout",
        ),
    ];
    for (args, needle) in cases {
        let o = run(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line, got {err}"
        );
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // PILOT_ELECTION_MEMBERS is the comma-separated --member: three members here, so a
    // --cluster-size of 2 is refused for not matching them (a check that follows the pilotctl
    // version check, hence the real pilotctl).
    let ctl = crate::devnet::pilotctl_path().display().to_string();
    let o = Command::new(bin())
        .args(&pilot[..pilot.len() - 2])
        .args(["--pilotctl", &ctl, "--cluster-size", "2"])
        .env("PILOT_ELECTION_MEMBERS", "a,b,c")
        .output()
        .expect("run pilot-election");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(64), "{err}");
    assert!(err.contains("does not match the 3 members"), "{err}");
    // An address that cannot be bound stops the node as --listen does, after its start-up
    // warnings: exit 64, the last line saying which.
    let o = run(&[
        "run",
        "--node-id",
        "a",
        "--listen",
        "127.0.0.1:0",
        "--peer-listen",
        "256.0.0.1:1",
    ]);
    let (last, err) = last_line_of_usage_error(&o);
    assert!(last.contains("cannot listen on 256.0.0.1:1"), "{err}");
}

/// A node that stopped at start-up after logging its warnings: exit 64, and the last line of
/// stderr (the one that says why) with the whole of it.
fn last_line_of_usage_error(o: &Output) -> (String, String) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(64), "{err}");
    let last = err
        .trim_end()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    (last, err)
}

/// Rule 1: a data directory that ran with {a, b, c} refuses {a, d, e} (two changes at once),
/// naming the ids and what to do, before the node sends anything.
#[test]
fn a_member_set_two_ids_from_the_last_one_exits_64() {
    let dir = TempDir::new("members");
    std::fs::write(
        dir.0.join("members.json"),
        r#"{"members": ["a", "b", "c"], "fingerprint": "00000000"}"#,
    )
    .unwrap();
    let data = dir.0.display().to_string();
    let o = run(&[
        "run",
        "--node-id",
        "a",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        &data,
        "--peer",
        "d=http://127.0.0.1:9",
        "--peer",
        "e=http://127.0.0.1:9",
    ]);
    let (last, err) = last_line_of_usage_error(&o);
    assert!(
        last.contains("by 4 ids (b, c, d, e)") && last.contains("one member at a time"),
        "{err}"
    );
}

#[test]
fn an_unreachable_node_is_exit_2() {
    let url = format!("http://127.0.0.1:{}", free_port());
    for cmd in ["leader", "status", "healthcheck"] {
        let o = run(&[cmd, "--url", &url]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
    }
}

#[tokio::test]
async fn client_commands_against_a_single_node() {
    let _serial = serial().await;
    let tokens = TempDir::new("tok");
    let tf = tokens.0.join("token");
    std::fs::write(&tf, TOKEN).unwrap();
    let tf = tf.display().to_string();
    let mut a = app(
        "single",
        free_port(),
        &[],
        &["--admin-token-file", &tf, "--log-format", "json"],
    );
    a.start();
    let url = a.url();
    // Until it has waited out its start-up window there is no leader: exit 1.
    let early = run(&["leader", "--url", &url]);
    assert!(matches!(early.status.code(), Some(1) | Some(2)));
    let led = wait_for(Duration::from_secs(15), || {
        let url = url.clone();
        async move {
            let o = tokio::task::spawn_blocking(move || run(&["leader", "--url", &url]))
                .await
                .unwrap();
            (o.status.code() == Some(0)).then_some(o)
        }
    })
    .await
    .expect("a leader");
    let line = String::from_utf8_lossy(&led.stdout);
    assert!(line.contains("leader single"), "{line}");

    let o = run(&["status", "--url", &url, "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).expect("--json prints JSON");
    assert_eq!(v["role"], "leader");
    assert_eq!(run(&["healthcheck", "--url", &url]).status.code(), Some(0));

    // Mutations: refused without the token (exit 1), done with it.
    let o = run(&["candidacy", "--url", &url, "--eligible", "true"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("unauthorized"), "{}", stderr(&o));
    let o = run(&[
        "step-down",
        "--url",
        &url,
        "--expected-term",
        "999",
        "--admin-token-file",
        &tf,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("term_mismatch"), "{}", stderr(&o));
    let o = run(&[
        "candidacy",
        "--url",
        &url,
        "--eligible",
        "true",
        "--priority",
        "5",
        "--admin-token-file",
        &tf,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // --log-format json: every log line is one JSON object; the token never appears.
    let log = a.log();
    let first = log.lines().next().expect("some log");
    let parsed: Value = serde_json::from_str(first).expect("JSON log line");
    assert!(parsed.get("fields").is_some(), "{first}");
    assert!(!log.contains(TOKEN));
}

#[tokio::test]
async fn the_demo_elects_fails_over_and_hands_over() {
    check_demo(&[]).await;
}

#[tokio::test]
async fn the_demo_runs_over_the_real_pilotctl_too() {
    let pilotctl = crate::devnet::pilotctl_path().display().to_string();
    let out = check_demo(&["--transport", "pilot", "--pilotctl", &pilotctl]).await;
    assert!(out.contains("emulated Pilot network"), "{out}");
}

/// Runs the demo to completion and checks its timeline; returns what it printed.
async fn check_demo(extra: &[&str]) -> String {
    let _serial = serial().await;
    // Three consecutive free ports: try a few random bases.
    let base = (0..50)
        .map(|i| 20_000 + ((std::process::id() as u16).wrapping_mul(7) % 20_000) + i * 97)
        .find(|b| (0..3).all(|k| std::net::TcpListener::bind(("127.0.0.1", b + k)).is_ok()))
        .expect("three free ports");
    let base = base.to_string();
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let o = tokio::task::spawn_blocking(move || {
        let mut args = vec!["demo", "--base-port", &base, "--duration", "0s"];
        args.extend(extra.iter().map(String::as_str));
        run(&args)
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    for needle in [
        "first leader",
        "crashed",
        "failover:",
        "no new term",
        "handover:",
        "allow-unauthenticated",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
    }
    out.into_owned()
}
