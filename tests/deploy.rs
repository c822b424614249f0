//! The Grafana dashboard and the Prometheus alert rules in `deploy/` name only metrics the binary
//! exports, with only labels those metrics carry (plus Prometheus' own `job` and `instance`).
//! A renamed metric or label fails here instead of leaving an empty panel or a silent alert.
//! PromQL syntax and the rules' behaviour are checked by promtool (`scripts/check-deploy.sh`).
//!
//! The systemd unit and the Kubernetes manifests keep the settings docs/guide/deploy.md explains,
//! with values derived from the binary's own timings (the exit budget, the heartbeat interval), and
//! name only flags and environment variables the binary accepts (clap's own parsing). Their
//! syntax is checked by systemd-analyze and kubectl (`scripts/check-deploy.sh`);
//! tests/it/systemd.rs and tests/it/kubernetes.rs run them with real nodes.
//!
//! `compose.yaml` publishes on loopback only, and its TLS override `compose.tls.yaml` gives each
//! node its own certificate and https:// peers with nothing but environment variables the binary
//! reads; tests/docker.rs brings both up.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use pilot_election::metrics::{
    ElectionResult, ExecExit, FiringOutcome, HealthCheckOutcome, MessageType, Metrics,
    OnChangeOutcome, Received, TransitionReason,
};

const DASHBOARD: &str = include_str!("../deploy/grafana-dashboard.json");
const ALERTS: &str = include_str!("../deploy/alerts.yml");
const UNIT: &str = include_str!("../deploy/pilot-election.service");
const UNIT_ENV: &str = include_str!("../deploy/pilot-election.env");
const STATEFULSET: &str = include_str!("../deploy/kubernetes/statefulset.yaml");
const SERVICES: &str = include_str!("../deploy/kubernetes/service.yaml");
const PDB: &str = include_str!("../deploy/kubernetes/poddisruptionbudget.yaml");
const COMPOSE: &str = include_str!("../compose.yaml");
const COMPOSE_TLS: &str = include_str!("../compose.tls.yaml");
const GITIGNORE: &str = include_str!("../.gitignore");

/// Labels every scraped series gets from Prometheus.
const TARGET_LABELS: &[&str] = &["job", "instance"];

/// Every exported sample name with its labels: one series of each labelled family is created
/// so that its labels show in the exposition.
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let m = Metrics::new();
    m.received(MessageType::Heartbeat, Received::Accepted);
    m.transition(TransitionReason::Elected);
    m.election(ElectionResult::Won);
    m.exec_exit(ExecExit::Ok);
    m.scheduled_firings(FiringOutcome::Ok, 1);
    m.on_change_run(OnChangeOutcome::Ok, std::time::Duration::from_millis(5));
    // Registered only on a node with --health-cmd or --health-url.
    m.enable_health_checks();
    m.health_check(
        HealthCheckOutcome::Pass,
        std::time::Duration::from_millis(5),
    );
    m.set_member_last_seen_age("b", 0.5);
    m.set_groups_shown([("shard-1", 3, true, true)]);
    m.set_ready("http", true);
    m.set_cert_expiry("server", 86_400);
    m.observe_publish(std::time::Duration::from_millis(1));
    let text = m.encode();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            // A family without series still counts, with the suffixes its type adds.
            let mut parts = rest.split_whitespace();
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            let names: Vec<String> = match kind {
                "counter" => vec![format!("{name}_total")],
                "histogram" => ["_bucket", "_sum", "_count"]
                    .iter()
                    .map(|s| format!("{name}{s}"))
                    .collect(),
                _ => vec![name.to_string()],
            };
            for n in names {
                out.entry(n).or_default();
            }
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_string()).or_default();
        if let Some(inner) = line[name_end..]
            .strip_prefix('{')
            .and_then(|r| r.split_once('}'))
        {
            labels.extend(label_names(inner.0));
        }
    }
    assert!(out.len() > 10, "too few metrics parsed:\n{text}");
    out
}

/// Label names of a selector's or a sample's `{...}` content.
fn label_names(inner: &str) -> Vec<String> {
    inner
        .split(',')
        .filter_map(|m| {
            let name = m.split(['=', '!']).next()?.trim();
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

/// Each `pilot_election_*` name in `query` with the label names of its selector, if any, and
/// of the `by (...)`/`on (...)` clauses of the query.
fn references(query: &str) -> (Vec<(String, Vec<String>)>, Vec<String>) {
    let mut refs = Vec::new();
    let mut rest = query;
    while let Some(i) = rest.find("pilot_election_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_string();
        let labels = tail[end..]
            .strip_prefix('{')
            .and_then(|r| r.split_once('}'))
            .map(|(inner, _)| label_names(inner))
            .unwrap_or_default();
        refs.push((name, labels));
        rest = &tail[end..];
    }
    let mut grouping = Vec::new();
    for kw in ["by", "on", "without", "ignoring"] {
        let mut rest = query;
        while let Some(i) = rest.find(&format!("{kw} (")) {
            let after = &rest[i + kw.len() + 2..];
            let (inner, tail) = after.split_once(')').expect("closing parenthesis");
            grouping.extend(inner.split(',').map(|s| s.trim().to_string()));
            rest = tail;
        }
    }
    (refs, grouping)
}

/// Checks every query; returns how many metric references were checked.
fn check(source: &str, queries: &[String], exported: &BTreeMap<String, BTreeSet<String>>) -> usize {
    let mut checked = 0;
    for q in queries {
        let (refs, grouping) = references(q);
        let mut allowed: BTreeSet<String> = TARGET_LABELS.iter().map(|s| s.to_string()).collect();
        allowed.insert("le".into());
        for (name, labels) in &refs {
            let known = exported
                .get(name)
                .unwrap_or_else(|| panic!("{source}: `{name}` is not exported (in `{q}`)"));
            for l in labels {
                assert!(
                    known.contains(l) || TARGET_LABELS.contains(&l.as_str()),
                    "{source}: `{name}` has no label `{l}` (it has {known:?}) in `{q}`"
                );
            }
            allowed.extend(known.iter().cloned());
            checked += 1;
        }
        for g in grouping.iter().filter(|g| !g.is_empty()) {
            assert!(
                allowed.contains(g),
                "{source}: no metric of `{q}` has the label `{g}` it groups by"
            );
        }
    }
    checked
}

/// Every string under a key named `expr` or `query`, and every template query.
fn dashboard_queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                match (k.as_str(), child) {
                    ("expr" | "query" | "definition", Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_queries(child, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| dashboard_queries(i, out)),
        _ => {}
    }
}

#[test]
fn the_dashboard_queries_only_exported_metrics_and_labels() {
    let exported = exported();
    let dash: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    assert_eq!(dash["uid"], "pilot-election");
    let mut queries = Vec::new();
    dashboard_queries(&dash, &mut queries);
    let checked = check("grafana-dashboard.json", &queries, &exported);
    assert!(checked >= 20, "only {checked} metric references found");
    // Panels are well formed: unique ids, a place on the grid, the data source variable.
    let panels = dash["panels"].as_array().expect("panels");
    let ids: BTreeSet<u64> = panels.iter().filter_map(|p| p["id"].as_u64()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids must be unique");
    for p in panels.iter().filter(|p| p["type"] != "row") {
        assert!(p["gridPos"]["w"].as_u64().is_some(), "{}", p["title"]);
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
    }
    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vars, ["datasource", "job"]);
}

#[test]
fn the_alert_rules_query_only_exported_metrics_and_labels() {
    let exported = exported();
    let rules: serde_norway::Value = serde_norway::from_str(ALERTS).expect("alerts.yml is YAML");
    let mut queries = Vec::new();
    let mut names = Vec::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            queries.push(rule["expr"].as_str().expect("expr").to_string());
            names.push(rule["alert"].as_str().expect("alert").to_string());
        }
    }
    let checked = check("alerts.yml", &queries, &exported);
    assert!(checked >= 9, "only {checked} metric references found");
    for wanted in [
        "PilotElectionNoLeader",
        "PilotElectionMoreThanOneLeader",
        "PilotElectionLeadershipFlapping",
        "PilotElectionMemberSilent",
        "PilotElectionNodeNotReady",
        "PilotElectionRejectedPeerMessages",
        "PilotElectionPilotctlPublishFailures",
        "PilotElectionOnChangeHookFailing",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "no {wanted} in {names:?}"
        );
    }
}

#[test]
fn the_checker_catches_unknown_metrics_and_labels() {
    let exported = exported();
    for bad in [
        "pilot_election_no_such_metric",
        "pilot_election_term{reason=\"x\"}",
        "sum by (member) (pilot_election_term)",
    ] {
        let r = std::panic::catch_unwind(|| check("test", &[bad.to_string()], &exported));
        assert!(r.is_err(), "`{bad}` passed");
    }
    let good = "sum by (job, outcome) (rate(pilot_election_messages_received_total{outcome!~\"a|b\", job=~\"$job\"}[5m]))";
    assert_eq!(check("test", &[good.to_string()], &exported), 1);
}

/// The `[Service]` (or any) section's settings in order, `(key, value)`; repeated keys repeat.
fn unit_section<'a>(unit: &'a str, section: &str) -> Vec<(&'a str, &'a str)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
        } else if inside && !line.is_empty() && !line.starts_with('#') {
            let (k, v) = line.split_once('=').expect("KEY=VALUE");
            out.push((k, v));
        }
    }
    out
}

fn one<'a>(settings: &[(&str, &'a str)], key: &str) -> &'a str {
    let values: Vec<&str> = settings
        .iter()
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(values.len(), 1, "{key} should be set once: {values:?}");
    values[0]
}

/// The environment variable of every `run` flag.
fn run_env_twins() -> BTreeSet<String> {
    use clap::CommandFactory;
    let cli = pilot_election::cli::Cli::command();
    let run = cli.find_subcommand("run").expect("run");
    run.get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn the_systemd_unit_keeps_its_settings_and_execstart_parses() {
    use clap::Parser;
    let service = unit_section(UNIT, "Service");
    for (key, want) in [
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("Restart", "on-failure"),
        ("RestartPreventExitStatus", "64"),
        ("KillMode", "mixed"),
        ("DynamicUser", "yes"),
        ("StateDirectory", "pilot-election"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("EnvironmentFile", "-/etc/pilot-election/env"),
    ] {
        assert_eq!(one(&service, key), want, "{key}");
    }
    let duration = |key| {
        pilot_election::cli::parse_duration(one(&service, key))
            .unwrap_or_else(|e| panic!("{key}: {e}"))
    };
    // The stop's whole budget, and a margin for a loaded host, before systemd's SIGKILL.
    let stop = duration("TimeoutStopSec");
    let budget = pilot_election::exit_budget::total();
    assert!(
        stop >= budget + std::time::Duration::from_secs(2),
        "{stop:?} for a stop of {budget:?}"
    );
    // Pets are at most WatchdogSec/2 + 2h apart (src/notify.rs): WatchdogSec > 4h, with room.
    let watchdog = duration("WatchdogSec");
    let h = pilot_election::election::Timings::default().heartbeat;
    assert!(watchdog >= h * 8, "WatchdogSec {watchdog:?} for h = {h:?}");
    assert!(watchdog > pilot_election::election::Timings::default().lease);

    // ExecStart's flags are flags `run` accepts, with the unit's specifiers filled in.
    let exec = one(&service, "ExecStart")
        .replace("%S", "/var/lib")
        .replace("%d", "/run/credentials/pilot-election.service");
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(argv[0], "/usr/local/bin/pilot-election");
    let parsed = pilot_election::cli::Cli::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("ExecStart does not parse: {e}"));
    let pilot_election::cli::Command::Run(run) = parsed.command else {
        panic!("ExecStart does not run a node");
    };
    let state_dir = format!("/var/lib/{}", one(&service, "StateDirectory"));
    assert_eq!(
        run.data_dir.as_deref(),
        Some(std::path::Path::new(&state_dir))
    );
    // Each file ExecStart reads from %d is a credential the unit loads.
    let credentials: Vec<&str> = service
        .iter()
        .filter(|(k, _)| *k == "LoadCredential")
        .map(|(_, v)| v.split_once(':').expect("ID:PATH").0)
        .collect();
    for file in [&run.admin_token_file, &run.cluster_key_file] {
        let file = file.as_ref().expect("read from a credential");
        let id = file.file_name().unwrap().to_str().unwrap();
        assert!(
            credentials.contains(&id),
            "{id} is not loaded: {credentials:?}"
        );
    }

    // Every variable of the example environment file is a flag's twin.
    let twins = run_env_twins();
    let keys: Vec<&str> = UNIT_ENV
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once('=').expect("KEY=VALUE").0)
        .collect();
    assert!(keys.contains(&"PILOT_ELECTION_NODE_ID"), "{keys:?}");
    for k in keys {
        assert!(twins.contains(k), "{k} is no flag's environment variable");
    }
}

fn yaml_documents(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_norway::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn the_kubernetes_manifests_keep_their_settings() {
    let sts = &yaml_documents(STATEFULSET)[0];
    assert_eq!(sts["kind"], "StatefulSet");
    let services = yaml_documents(SERVICES);
    let pdb = &yaml_documents(PDB)[0];
    let labels = &sts["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&sts["spec"]["selector"]["matchLabels"], labels);

    // Quorum systems: start every pod at once, resolve pods before they are ready.
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["spec"]["podManagementPolicy"], "Parallel");
    let headless = services
        .iter()
        .find(|s| s["metadata"]["name"] == sts["spec"]["serviceName"])
        .expect("the StatefulSet's headless Service");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
    for s in &services {
        assert_eq!(&s["spec"]["selector"], labels, "{}", s["metadata"]["name"]);
    }
    assert_eq!(pdb["kind"], "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);

    let pod = &sts["spec"]["template"]["spec"];
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("a grace period");
    let budget = pilot_election::exit_budget::total();
    assert!(
        std::time::Duration::from_secs(grace) >= budget + std::time::Duration::from_secs(2),
        "{grace}s for a stop of {budget:?}"
    );
    assert_eq!(pod["enableServiceLinks"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    // The Dockerfile's and compose.yaml's image name.
    assert_eq!(c["image"], "pilot-election");

    // Every PILOT_ELECTION_* variable is a flag's twin, the id comes from the pod's name, and the
    // data directory is the claim's mount.
    let twins = run_env_twins();
    let env = c["env"].as_array().expect("env");
    let mut values = BTreeMap::new();
    for e in env {
        let name = e["name"].as_str().unwrap();
        if name.starts_with("PILOT_ELECTION_") {
            assert!(
                twins.contains(name),
                "{name} is no flag's environment variable"
            );
        }
        values.insert(name, e);
    }
    assert_eq!(
        values["PILOT_ELECTION_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(values["PILOT_ELECTION_TRANSPORT"]["value"], "http");
    // One member per replica, each by its pod's stable name under the headless Service.
    let name = sts["metadata"]["name"].as_str().unwrap();
    let service = sts["spec"]["serviceName"].as_str().unwrap();
    let members: Vec<&str> = values["MEMBER_URLS"]["value"]
        .as_str()
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(
        members.len() as u64,
        sts["spec"]["replicas"].as_u64().unwrap()
    );
    for (i, m) in members.iter().enumerate() {
        let want = format!(
            "{name}-{i}=http://{name}-{i}.{service}.$(POD_NAMESPACE).svc.cluster.local:7070"
        );
        assert_eq!(*m, want);
    }
    assert!(values.contains_key("PILOT_ELECTION_ADVERTISE_URL"));
    let claim = &sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"];
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| &m["name"] == claim)
        .expect("the claim is mounted");
    assert_eq!(
        values["PILOT_ELECTION_DATA_DIR"]["value"],
        mount["mountPath"]
    );
}

/// Every environment variable of a client command (`healthcheck`): the URL and the TLS files.
fn client_env_twins() -> BTreeSet<String> {
    use clap::CommandFactory;
    let cli = pilot_election::cli::Cli::command();
    let check = cli.find_subcommand("healthcheck").expect("healthcheck");
    check
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect()
}

/// A Compose file with its `<<` merge keys applied, as docker-compose reads it.
fn compose_file(text: &str) -> Value {
    let mut v: serde_norway::Value = serde_norway::from_str(text).expect("YAML");
    v.apply_merge().expect("merge keys");
    serde_json::to_value(v).expect("JSON")
}

#[test]
fn the_compose_files_publish_on_loopback_only_and_the_tls_override_is_mutual_tls_everywhere() {
    let base = compose_file(COMPOSE);
    let tls = compose_file(COMPOSE_TLS);
    let (run, client) = (run_env_twins(), client_env_twins());
    let services = base["services"].as_object().expect("services");
    let nodes: Vec<&str> = services.keys().map(String::as_str).collect();
    assert_eq!(nodes, ["node-a", "node-b", "node-c"]);
    for (name, s) in services {
        for p in s["ports"].as_array().expect("ports") {
            let p = p.as_str().expect("short syntax");
            assert!(
                p.starts_with("127.0.0.1:"),
                "{name} publishes {p} beyond loopback"
            );
        }
        for k in s["environment"].as_object().expect("environment").keys() {
            assert!(
                run.contains(k),
                "{name}: {k} is no flag's environment variable"
            );
        }
    }

    // The override adds nothing but environment and secrets: its ports, volumes and healthcheck
    // are compose.yaml's (a list such as `ports` would be appended to, not replaced).
    let overrides = tls["services"].as_object().expect("services");
    assert_eq!(
        overrides.keys().collect::<Vec<_>>(),
        services.keys().collect::<Vec<_>>()
    );
    let files = tls["secrets"].as_object().expect("secrets");
    for (name, s) in overrides {
        let keys: BTreeSet<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, BTreeSet::from(["environment", "secrets"]), "{name}");
        let env = s["environment"].as_object().expect("environment");
        for k in env.keys() {
            assert!(
                run.contains(k) || client.contains(k),
                "{name}: {k} is no environment variable of `run` or of the client commands"
            );
        }
        let var = |k: &str| env[k].as_str().unwrap_or_else(|| panic!("{name}: {k}"));
        assert_eq!(
            var("PILOT_ELECTION_ADVERTISE_URL"),
            format!("https://{name}:7070")
        );
        let mut peers: Vec<&str> = var("PILOT_ELECTION_PEERS").split(',').collect();
        peers.sort_unstable();
        let want: Vec<String> = nodes
            .iter()
            .filter(|n| *n != name)
            .map(|n| format!("{n}=https://{n}:7070"))
            .collect();
        assert_eq!(peers, want, "{name}");
        assert!(
            var("PILOT_ELECTION_URL").starts_with("https://127.0.0.1:"),
            "{name}"
        );
        assert!(
            !env.contains_key("PILOT_ELECTION_TLS_ANONYMOUS_READS"),
            "{name}"
        );
        // The healthcheck and the CLI present the node's own certificate.
        assert_eq!(
            var("PILOT_ELECTION_CLIENT_CERT"),
            var("PILOT_ELECTION_TLS_CERT")
        );
        assert_eq!(
            var("PILOT_ELECTION_CLIENT_KEY"),
            var("PILOT_ELECTION_TLS_KEY")
        );

        // Each TLS file is a secret this service mounts, made by scripts/make-tls-certs.sh: only
        // the CA's certificate and the node's own certificate and key.
        let mounted: BTreeSet<&str> = s["secrets"]
            .as_array()
            .expect("secrets")
            .iter()
            .map(|v| v.as_str().expect("short syntax"))
            .collect();
        let mut used = BTreeSet::new();
        for (k, file) in [
            ("PILOT_ELECTION_TLS_CERT", format!("{name}.pem")),
            ("PILOT_ELECTION_TLS_KEY", format!("{name}.key")),
            ("PILOT_ELECTION_TLS_CLIENT_CA", "ca.pem".to_string()),
            ("PILOT_ELECTION_PEER_CA", "ca.pem".to_string()),
            ("PILOT_ELECTION_CA", "ca.pem".to_string()),
        ] {
            let secret = var(k)
                .strip_prefix("/run/secrets/")
                .unwrap_or_else(|| panic!("{name}: {k} is not a secret"));
            assert!(
                mounted.contains(secret),
                "{name}: {k} names {secret}, not mounted"
            );
            assert_eq!(
                files[secret]["file"].as_str().expect("a file secret"),
                format!("${{PILOT_ELECTION_TLS_DIR:-./tls}}/{file}"),
                "{name}: {k}"
            );
            used.insert(secret);
        }
        assert_eq!(mounted, used, "{name} mounts more than its TLS files");
    }
    // The default certificate directory is never committed.
    assert!(
        GITIGNORE.lines().any(|l| l == "/tls"),
        ".gitignore lacks /tls"
    );
}
