#!/usr/bin/env bash
# Checks deploy/ with Prometheus' own tool: the alert rules parse (`promtool check rules`), their
# unit tests pass (`promtool test rules`), and every PromQL query of the Grafana dashboard parses
# (each wrapped as a recording rule, with Grafana's variables filled in). That the queries name
# only metrics and labels the binary exports is checked by `cargo test --test deploy`.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "check-deploy: $*" >&2; exit 1; }
command -v promtool >/dev/null || die "promtool is missing: apt-get install -y prometheus (.ci/run does)"
command -v jq >/dev/null || die "jq is missing: apt-get install -y jq (.ci/run does)"

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
echo "check-deploy: alert rules, their tests and ${count} dashboard queries are valid"
