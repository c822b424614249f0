//! The container of deploy/kubernetes/statefulset.yaml, run as its three pods would run it but as
//! three processes on 127.0.0.1. The container's command, args and env are taken as the manifest
//! has them, with Kubernetes' `$(VAR)` expansion and the downward API values of pods
//! `pilot-election-0..2` in namespace `default`. Only what differs between a pod network and one
//! host is substituted:
//!
//! - each member's stable name and port, `pilot-election-N.pilot-election.default.svc.cluster.local:7070`,
//!   becomes `127.0.0.1:<a free port of its own>` (in `MEMBER_URLS` and the advertise URL);
//! - the listen address `0.0.0.0:7070` becomes the same `127.0.0.1:<port>`;
//! - the mount paths of the data volume and of the secret become directories per node (the
//!   test writes the secret's `admin-token` and `cluster-key` files);
//! - `PATH` starts with this build's binary directory (the image has the binary in
//!   `/usr/local/bin`).
//!
//! Then the three elect exactly one leader, which advertises the URL the manifest builds from
//! its pod name; every node passes the readiness probe; and after a kill -9 of the leader by PID
//! the other two elect another one.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize as _;
use serde_json::Value;

use crate::agree::agree;
use crate::app::{bin, free_port, get_json, serial, wait_ready, App, TempDir, T};

/// Start-up (`T` plus staggers) and the failover, with room for a loaded 2-core machine.
const AGREE: Duration = Duration::from_secs(30);
const NAMESPACE: &str = "default";

/// Every document of a manifest file, as JSON.
pub fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

fn manifests() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/kubernetes")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files.iter().flat_map(|f| documents(f)).collect()
}

/// Kubernetes' expansion of `$(NAME)` in an env value: names defined earlier in the list are
/// replaced, others are left as written, and `$$` is a literal `$`.
fn expand(value: &str, defined: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = tail
            .strip_prefix("$(")
            .and_then(|t| t.split_once(')'))
            .filter(|(n, _)| defined.iter().any(|(k, _)| k == n))
        {
            let v = &defined
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .expect("defined")
                .1;
            out.push_str(v);
            rest = after;
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The container's environment in pod `pod`, as the kubelet would set it.
fn pod_env(container: &Value, pod: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for e in container["env"].as_array().expect("env") {
        let name = e["name"].as_str().expect("env name").to_string();
        let value = if let Some(v) = e["value"].as_str() {
            expand(v, &env)
        } else {
            match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => pod.to_string(),
                Some("metadata.namespace") => NAMESPACE.to_string(),
                _ => panic!("{name}: this test knows only metadata.name and .namespace: {e}"),
            }
        };
        env.push((name, value));
    }
    env
}

fn mount_path(container: &Value, volume: &str) -> String {
    container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["name"] == volume)
        .and_then(|m| m["mountPath"].as_str())
        .unwrap_or_else(|| panic!("no mount of volume {volume}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_statefulsets_container_elects_and_fails_over() {
    let _serial = serial().await;
    let docs = manifests();
    let sts = docs
        .iter()
        .find(|d| d["kind"] == "StatefulSet")
        .expect("a StatefulSet");
    let name = sts["metadata"]["name"].as_str().expect("name");
    let service = sts["spec"]["serviceName"].as_str().expect("serviceName");
    let replicas = sts["spec"]["replicas"].as_u64().expect("replicas") as usize;
    let pod_spec = &sts["spec"]["template"]["spec"];
    let container = &pod_spec["containers"][0];
    let container_port = container["ports"][0]["containerPort"]
        .as_u64()
        .expect("containerPort");
    let secret_volume = pod_spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v.get("secret").is_some())
        .and_then(|v| v["name"].as_str())
        .expect("a secret volume");
    let secret_path = mount_path(container, secret_volume);
    let claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
        .as_str()
        .expect("a volume claim");
    let data_path = mount_path(container, claim);
    let argv: Vec<String> = container["command"]
        .as_array()
        .into_iter()
        .chain(container["args"].as_array())
        .flatten()
        .map(|a| a.as_str().expect("a string argument").to_string())
        .collect();
    assert!(!argv.is_empty(), "the container names its command");
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"], "/readyz",
        "wait_ready below polls /readyz"
    );
    let liveness = container["livenessProbe"]["httpGet"]["path"]
        .as_str()
        .expect("a liveness probe");

    let pods: Vec<String> = (0..replicas).map(|i| format!("{name}-{i}")).collect();
    let ports: Vec<u16> = pods.iter().map(|_| free_port()).collect();
    let key = "k1=kubernetes-test-cluster-key-0123456789";
    let bin_dir = bin().parent().expect("target dir").display().to_string();
    let path = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let mut nodes: Vec<App> = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let dir = TempDir::new(pod);
        let secret = dir.0.join("secret");
        std::fs::create_dir_all(&secret).expect("secret dir");
        std::fs::write(secret.join("admin-token"), "kubernetes-test-admin-token\n").unwrap();
        std::fs::write(secret.join("cluster-key"), format!("{key}\n")).unwrap();
        let data = dir.0.join("data");
        let mut env = pod_env(container, pod);
        for (_, v) in env.iter_mut() {
            for (j, other) in pods.iter().enumerate() {
                let stable =
                    format!("{other}.{service}.{NAMESPACE}.svc.cluster.local:{container_port}");
                *v = v.replace(&stable, &format!("127.0.0.1:{}", ports[j]));
            }
            *v = v
                .replace(
                    &format!("0.0.0.0:{container_port}"),
                    &format!("127.0.0.1:{}", ports[i]),
                )
                .replace(&data_path, &data.display().to_string())
                .replace(&secret_path, &secret.display().to_string());
            assert!(
                !v.contains("cluster.local") && !v.contains("0.0.0.0"),
                "an address the test does not substitute: {v}"
            );
        }
        eprintln!("{pod}: {env:?}");
        env.push(("PATH".into(), path.clone()));
        let mut a = App::new(pod, ports[i], dir, argv[1..].to_vec());
        a.binary = Some(argv[0].clone().into());
        a.env = env;
        a.start();
        nodes.push(a);
    }
    let logs = crate::app::logs_of;

    let all: Vec<&App> = nodes.iter().collect();
    let (leader, term) = agree(
        &all,
        AGREE,
        |l, _| pods.iter().any(|p| p == l),
        || logs(&nodes),
    )
    .await;
    eprintln!("leader {leader} in term {term}");
    let leading: Vec<&str> = {
        let mut l = Vec::new();
        for n in &nodes {
            let (_, body) = get_json(&format!("{}/leader", n.url())).await;
            if body["is_self"] == true {
                l.push(n.id.as_str());
            }
            // The advertise URL the manifest builds from the pod name, with the address swapped.
            assert_eq!(
                body["node_url"].as_str(),
                Some(n.url().as_str()),
                "{}: {body}",
                n.id
            );
        }
        l
    };
    assert_eq!(leading, [leader.as_str()], "exactly one node says it leads");
    for n in &nodes {
        if let Err(last) = wait_ready(&n.url(), AGREE).await {
            panic!(
                "{} never passed the readiness probe: {last}\n{}",
                n.id,
                logs(&nodes)
            );
        }
        let (code, body) = get_json(&format!("{}{liveness}", n.url())).await;
        assert_eq!(code, 200, "{} liveness: {body}", n.id);
    }

    let i = nodes.iter().position(|n| n.id == leader).expect("a node");
    nodes[i].kill9();
    let rest: Vec<&App> = nodes.iter().filter(|n| n.id != leader).collect();
    let failover = |l: &str, t| l != leader && t > term;
    let (next, next_term) = agree(&rest, T + AGREE, failover, || logs(&nodes)).await;
    eprintln!("failover: {next} in term {next_term}");
}
