#!/usr/bin/env bash
# OpenAPI contract fuzzing from outside the process: a pinned schemathesis generates requests
# from the committed openapi/openapi.yaml and sends them to a live node on 127.0.0.1 (plain
# HTTP, then a second one over mutual TLS). Any 5xx
# the spec does not declare, or any status code, content type, header or body the spec does not
# describe, fails the run. The in-process contract test (tests/it, `contract`) checks that routes
# and spec agree; this checks that what the running binary actually answers agrees with the spec.
#
# Usage: scripts/schemathesis.sh [PATH_TO_BINARY]   (default target/release/pilot-election)
# Env:   SCHEMATHESIS_MAX_EXAMPLES (default 40), SCHEMATHESIS_MAX_TIME seconds per run
#        (default 50), SCHEMATHESIS_SEED (default: random, printed by schemathesis).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="4.32.5"
BIN="${1:-target/release/pilot-election}"
MAX_EXAMPLES="${SCHEMATHESIS_MAX_EXAMPLES:-40}"
MAX_TIME="${SCHEMATHESIS_MAX_TIME:-50}"

die() { echo "schemathesis.sh: $*" >&2; exit 1; }

# CPython 3.11 before 3.11.8 and 3.12 before 3.12.2 keep one AST recursion counter for every
# thread (cpython gh-106905): Hypothesis parses source to describe a strategy, in each of
# schemathesis's worker threads, and now and then one of them fails with "SystemError: AST
# constructor recursion depth mismatch", a tool error reported as a failed operation. Prefer an
# interpreter with the fix (pyenv's too); with none, run a single worker, which the race needs
# two of.
fixed() {
    "$1" -c 'import sys
v = sys.version_info[:3]
sys.exit(0 if v >= (3, 13) or (3, 12, 2) <= v < (3, 13) or (3, 11, 8) <= v < (3, 12) else 1)' \
        2>/dev/null
}
PY=""
PYENV_PYTHONS=()
if command -v pyenv >/dev/null; then
    mapfile -t PYENV_PYTHONS < <(ls -d "$(pyenv root)"/versions/3.*/bin/python3 2>/dev/null | sort -rV)
fi
for candidate in python3 "${PYENV_PYTHONS[@]}"; do
    if fixed "$candidate"; then
        PY="$candidate"
        break
    fi
done
WORKERS=2
if [ -z "$PY" ]; then
    PY=python3
    WORKERS=1
    echo "schemathesis.sh: no Python with the fix of cpython gh-106905 here: one worker" >&2
fi
PY_VERSION="$("$PY" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
VENV=".tools/schemathesis-${VERSION}-py${PY_VERSION}"
ST="${VENV}/bin/schemathesis"

# A venv under the ignored .tools/ keeps the system Python clean; the versioned directory makes
# a re-run free and a version bump a fresh install.
if ! "$ST" --version 2>/dev/null | grep -qF "$VERSION"; then
    rm -rf "$VENV"
    if ! "$PY" -m venv "$VENV" 2>/dev/null; then
        # Debian splits venv (and ensurepip) out of python3; install it when we may.
        rm -rf "$VENV"
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            { apt-get install -y -qq python3-venv >/dev/null 2>&1 \
                || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null; }; } \
                || die "could not install python3-venv"
        fi
        "$PY" -m venv "$VENV" || die "$PY -m venv failed (install python3-venv)"
    fi
    "${VENV}/bin/pip" install --quiet --disable-pip-version-check "schemathesis==${VERSION}"
fi

if [ ! -x "$BIN" ]; then
    [ "$BIN" = "target/release/pilot-election" ] || die "no executable at $BIN"
    cargo build --release --bin pilot-election
fi

WORK="$(mktemp -d)"
NODE_PID=""
TLS_PID=""
cleanup() {
    for pid in $NODE_PID $TLS_PID; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

TOKEN="fuzz-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
printf '%s\n' "$TOKEN" >"$WORK/admin-token"
chmod 600 "$WORK/admin-token"

# A free port: the kernel picks one for a socket that is closed right away. Another process could
# take it before the node binds, in which case the node exits and the health wait below says so.
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
URL="http://127.0.0.1:${PORT}"

"$BIN" run --node-id solo --listen "127.0.0.1:${PORT}" --data-dir "$WORK/data" \
    --admin-token-file "$WORK/admin-token" >"$WORK/node.log" 2>&1 &
NODE_PID=$!

# /healthz answers once the API is up; a single-node cluster then elects itself within ~3 s,
# which the fuzzing does not need (leaderless answers are part of the spec too).
deadline=$((SECONDS + 30))
until curl -fsS -o /dev/null "${URL}/healthz" 2>/dev/null; do
    if ! kill -0 "$NODE_PID" 2>/dev/null; then
        cat "$WORK/node.log" >&2
        die "the node exited before answering /healthz"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
        cat "$WORK/node.log" >&2
        die "no answer from ${URL}/healthz within 30 s"
    fi
    sleep 0.1
done

CHECKS="not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance"
COMMON=(
    --config-file scripts/schemathesis.toml
    run openapi/openapi.yaml
    --url "$URL"
    --checks "$CHECKS"
    --max-examples "$MAX_EXAMPLES"
    --max-time "$MAX_TIME"
    --workers "$WORKERS"
    --request-timeout 10
    --generation-database none
    --no-color
    # GET /events is an endless text/event-stream: a request never completes, so every example
    # would only measure the request timeout. tests/it covers the stream's events. A group's
    # stream too, should a generated name be one the node takes part in (tests/api.rs covers
    # its refusals).
    --exclude-path /events
    --exclude-path '/groups/{group}/events'
)
if [ -n "${SCHEMATHESIS_SEED:-}" ]; then
    COMMON+=(--seed "$SCHEMATHESIS_SEED")
fi

status=0
echo "schemathesis.sh: fuzzing ${URL} as the operator (bearer token)"
"$ST" "${COMMON[@]}" --header "Authorization: Bearer ${TOKEN}" || status=1

# Without a token the mutating endpoints must answer 401 as the spec says, whatever the body.
echo "schemathesis.sh: fuzzing the mutating endpoints of ${URL} without a token"
"$ST" "${COMMON[@]}" --include-path /candidacy --include-path /step-down \
    --include-path /pause --max-examples 20 --max-time 20 || status=1

if ! kill -0 "$NODE_PID" 2>/dev/null; then
    echo "schemathesis.sh: the node died during the run; its log:" >&2
    cat "$WORK/node.log" >&2
    status=1
fi

# The same contract over mutual TLS: a second node with a server certificate and client
# certificates required, fuzzed with the operator's certificate (made here with openssl, never
# committed).
command -v openssl >/dev/null || die "openssl is missing: apt-get install -y openssl"
tls="$WORK/tls"
mkdir -p "$tls"
# With the extensions Python 3.13's strict verification requires of a CA and its leaves.
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 2 \
    -subj "/CN=schemathesis CA" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
for who in node operator; do
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj "/CN=$who" \
        -keyout "$tls/$who.key" -out "$tls/$who.csr" 2>/dev/null
    printf '%s\n' "subjectAltName=DNS:${who},DNS:localhost,IP:127.0.0.1" \
        "extendedKeyUsage=serverAuth,clientAuth" "keyUsage=critical,digitalSignature" \
        "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid,issuer" >"$tls/$who.ext"
    openssl x509 -req -in "$tls/$who.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
        -CAcreateserial -days 2 -extfile "$tls/$who.ext" -out "$tls/$who.pem" 2>/dev/null
done
TLS_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
TLS_URL="https://127.0.0.1:${TLS_PORT}"
"$BIN" run --node-id solo --listen "127.0.0.1:${TLS_PORT}" --data-dir "$WORK/tls-data" \
    --admin-token-file "$WORK/admin-token" --tls-cert "$tls/node.pem" --tls-key "$tls/node.key" \
    --tls-client-ca "$tls/ca.pem" >"$WORK/tls-node.log" 2>&1 &
TLS_PID=$!
CURL_TLS=(--cacert "$tls/ca.pem" --cert "$tls/operator.pem" --key "$tls/operator.key")
deadline=$((SECONDS + 30))
until curl -fsS "${CURL_TLS[@]}" -o /dev/null "${TLS_URL}/healthz" 2>/dev/null; do
    if ! kill -0 "$TLS_PID" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
        cat "$WORK/tls-node.log" >&2
        kill "$TLS_PID" 2>/dev/null || true
        die "the TLS node did not answer ${TLS_URL}/healthz within 30 s"
    fi
    sleep 0.1
done
echo "schemathesis.sh: fuzzing ${TLS_URL} over mutual TLS as the operator"
"$ST" "${COMMON[@]/$URL/$TLS_URL}" --header "Authorization: Bearer ${TOKEN}" \
    --tls-verify "$tls/ca.pem" --request-cert "$tls/operator.pem" \
    --request-cert-key "$tls/operator.key" --max-examples 20 --max-time 30 || status=1
if ! kill -0 "$TLS_PID" 2>/dev/null; then
    echo "schemathesis.sh: the TLS node died during the run; its log:" >&2
    cat "$WORK/tls-node.log" >&2
    status=1
fi
kill "$TLS_PID" 2>/dev/null || true
wait "$TLS_PID" 2>/dev/null || true
[ "$status" -eq 0 ] || die "schemathesis found failures (report above)"
echo "schemathesis.sh: no failures"
