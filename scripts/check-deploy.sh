#!/usr/bin/env bash
# Checks deploy/ with each format's own tool:
# - Prometheus: the alert rules parse (`promtool check rules`), their unit tests pass (`promtool
#   test rules`), and every PromQL query of the Grafana dashboard parses (each wrapped as a
#   recording rule, with Grafana's variables filled in);
# - systemd: `systemd-analyze verify` finds nothing to say about deploy/pilot-election.service
#   (unknown keys and bad values are only warnings there, so any output fails), and its
#   offline security exposure stays at 2.0 or below;
# That the queries name only metrics and labels the binary exports, that the unit's ExecStart
# flags parse, and the settings the README promises are checked by `cargo test --test deploy`;
# tests/it/systemd.rs runs the unit's part with a real node.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "check-deploy: $*" >&2; exit 1; }
command -v promtool >/dev/null || die "promtool is missing: apt-get install -y prometheus (.ci/run does)"
command -v jq >/dev/null || die "jq is missing: apt-get install -y jq (.ci/run does)"
command -v systemd-analyze >/dev/null || die "systemd-analyze is missing: apt-get install -y systemd (scripts/test does)"

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

echo "check-deploy: alert rules, their tests and ${count} dashboard queries are valid;" \
    "the systemd unit verifies (exposure ${exposure})"
