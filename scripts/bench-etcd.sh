#!/usr/bin/env bash
# The etcd side of the failover comparison: a single-member etcd on 127.0.0.1, two
# `etcdctl elect` campaigners with etcdctl's default session TTL (60 s), kill -9 of the
# winner's etcdctl, time until the other one prints that it won. The lease of a killed client
# is never revoked, so etcd frees it only when the TTL runs out: a few runs, not 30.
#
# scripts/bench-etcd.sh [RUNS]   (default 3; needs Debian's etcd-server and etcd-client)
set -euo pipefail
RUNS="${1:-3}"
command -v etcd >/dev/null && command -v etcdctl >/dev/null \
    || { echo "bench-etcd: install etcd-server and etcd-client" >&2; exit 69; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CLIENT_PORT="$(free_port)"; PEER_PORT="$(free_port)"
DIR="$(mktemp -d)"
ENDPOINT="127.0.0.1:${CLIENT_PORT}"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$DIR"; }
trap cleanup EXIT

etcd --name bench --data-dir "$DIR/etcd" \
    --listen-client-urls "http://${ENDPOINT}" --advertise-client-urls "http://${ENDPOINT}" \
    --listen-peer-urls "http://127.0.0.1:${PEER_PORT}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${PEER_PORT}" \
    --initial-cluster "bench=http://127.0.0.1:${PEER_PORT}" >"$DIR/etcd.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do
    etcdctl --endpoints "$ENDPOINT" endpoint health >/dev/null 2>&1 && break
    sleep 0.05
done
etcdctl --endpoints "$ENDPOINT" endpoint health >/dev/null 2>&1 || { cat "$DIR/etcd.log" >&2; exit 1; }

now_ms() { date +%s%3N; }
# Output of `etcdctl elect NAME PROPOSAL` once it wins: the key, then the proposal.
won() { grep -q "^$2\$" "$1" 2>/dev/null; }

echo "etcd $(etcd --version | head -1 | awk '{print $3}') single member, etcdctl elect, default session TTL"
TIMES=()
for run in $(seq "$RUNS"); do
    etcdctl --endpoints "$ENDPOINT" elect "bench-$run" a >"$DIR/a-$run" 2>&1 & PA=$!; PIDS+=($PA)
    for _ in $(seq 400); do won "$DIR/a-$run" a && break; sleep 0.05; done
    won "$DIR/a-$run" a || { echo "run $run: a never won" >&2; exit 1; }
    etcdctl --endpoints "$ENDPOINT" elect "bench-$run" b >"$DIR/b-$run" 2>&1 & PB=$!; PIDS+=($PB)
    # b has campaigned once its key waits behind a's under the election prefix.
    for _ in $(seq 400); do
        [ "$(etcdctl --endpoints "$ENDPOINT" get --prefix --keys-only "bench-$run/" | grep -c .)" -ge 2 ] && break
        sleep 0.05
    done
    t0="$(now_ms)"
    kill -9 "$PA"
    deadline=$(( t0 + 120000 ))
    until won "$DIR/b-$run" b; do
        [ "$(now_ms)" -lt "$deadline" ] || { echo "run $run: b never won" >&2; exit 1; }
        sleep 0.05
    done
    dt=$(( $(now_ms) - t0 ))
    TIMES+=("$dt")
    echo "run $run: kill -9 of the winner -> other campaigner wins after ${dt} ms"
    kill -9 "$PB" 2>/dev/null || true
done
printf '%s\n' "${TIMES[@]}" | sort -n | awk '{a[NR]=$1} END {printf "etcdctl elect failover: runs=%d min=%d ms median=%d ms max=%d ms\n", NR, a[1], a[int((NR+1)/2)], a[NR]}'
