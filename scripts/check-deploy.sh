#!/usr/bin/env bash
# Checks deploy/ with each format's own tool:
# - Prometheus: the alert rules parse (`promtool check rules`), their unit tests pass (`promtool
#   test rules`), and every PromQL query of the Grafana dashboard parses (each wrapped as a
#   recording rule, with Grafana's variables filled in);
# - systemd: `systemd-analyze verify` finds nothing to say about deploy/pilot-election.service
#   (unknown keys and bad values are only warnings there, so any output fails), and its
#   offline security exposure stays at 2.0 or below;
# - Kubernetes: every document in deploy/kubernetes/ parses as an object, and the StatefulSet
#   decodes into kubectl's apps/v1 types with no field left over (a misspelt field is dropped by
#   the typed decoding, so the difference names it). `kubectl apply --dry-run=client` cannot run
#   here: even client-side it asks an API server for discovery and the schema, and CI has no
#   cluster; `--local` is kubectl's offline mode.
# That the queries name only metrics and labels the binary exports, that the unit's ExecStart
# flags parse, and the settings docs/guide/deploy.md promises (Parallel, publishNotReadyAddresses,
# the PDB, the grace period) are checked by `cargo test --test deploy`; tests/it/systemd.rs and
# tests/it/kubernetes.rs run them.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "check-deploy: $*" >&2; exit 1; }
command -v promtool >/dev/null || die "promtool is missing: apt-get install -y prometheus (.ci/run does)"
command -v jq >/dev/null || die "jq is missing: apt-get install -y jq (.ci/run does)"
command -v systemd-analyze >/dev/null || die "systemd-analyze is missing: apt-get install -y systemd (scripts/test does)"
command -v kubectl >/dev/null || die "kubectl is missing: apt-get install -y kubernetes-client (scripts/test does)"

promtool check rules deploy/alerts.yml
promtool test rules deploy/alerts.test.yml

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
rules="$tmp/dashboard.rules.yml"
{
    printf 'groups:\n  - name: grafana-dashboard\n    rules:\n'
    jq -r '[.. | objects | select(has("expr")) | .expr] | to_entries[]
        | (.value | gsub("\\$__rate_interval"; "1m") | gsub("\\$job"; ".+")) as $q
        | "      - record: dashboard:query_\(.key)\n        expr: \($q | tojson)"' \
        deploy/grafana-dashboard.json
} >"$rules"
count="$(grep -c 'record:' "$rules")"
[ "$count" -gt 0 ] || die "no queries found in deploy/grafana-dashboard.json"
promtool check rules "$rules" >/dev/null || { promtool check rules "$rules"; die "a dashboard query does not parse"; }

# systemd. verify also checks that ExecStart's program exists: point it at a stand-in (the
# flags are tests/deploy.rs's business).
unit="$tmp/pilot-election.service"
sed 's#^ExecStart=/usr/local/bin/pilot-election #ExecStart=/bin/true #' deploy/pilot-election.service >"$unit"
grep -q '^ExecStart=/bin/true ' "$unit" || die "deploy/pilot-election.service: ExecStart no longer runs /usr/local/bin/pilot-election"
said="$(systemd-analyze verify --man=no "$unit" 2>&1)" || die "systemd-analyze verify failed: $said"
[ -z "$said" ] || die "systemd-analyze verify deploy/pilot-election.service: $said"
systemd-analyze security --offline=yes --threshold=20 "$unit" >"$tmp/security.txt" 2>&1 \
    || { grep -E '✗|Overall' "$tmp/security.txt" >&2; die "deploy/pilot-election.service: exposure above 2.0"; }
exposure="$(grep -o 'exposure level for [^:]*: [0-9.]*' "$tmp/security.txt" | awk '{print $NF}')"

# Kubernetes, offline.
kubectl label --local -f deploy/kubernetes/ -o json pilot-election.check=1 >"$tmp/objects.json" \
    || die "deploy/kubernetes/: a document is not a Kubernetes object"
objects="$(jq -s 'length' "$tmp/objects.json")"
sts=deploy/kubernetes/statefulset.yaml
kubectl label --local -f "$sts" -o json pilot-election.check=1 \
    | jq -c '[paths(scalars) | select(.[0:3] != ["metadata", "labels", "pilot-election.check"])]' >"$tmp/as-written.json"
kubectl set env --local -f "$sts" -o json PILOT_ELECTION_CHECK=1 \
    | jq -c '[paths(scalars)]' >"$tmp/typed.json" || die "$sts does not decode as an apps/v1 StatefulSet"
unknown="$(jq -n -c --slurpfile w "$tmp/as-written.json" --slurpfile t "$tmp/typed.json" '$w[0] - $t[0]')"
[ "$unknown" = "[]" ] || die "$sts: fields the StatefulSet type does not have: $unknown"

echo "check-deploy: alert rules, their tests and ${count} dashboard queries are valid;" \
    "the systemd unit verifies (exposure ${exposure}); ${objects} Kubernetes objects parse, the StatefulSet's fields are all known"
