#!/usr/bin/env bash
# Every figure of BENCHMARKS.md in one go (about 47 minutes at 30 runs, plus 3 for etcd), each scenario's output
# in OUT_DIR/<name>.txt. The latency-sensitive scenarios (handover, idle cost, API) run last.
#
# scripts/bench-all.sh [RUNS] [OUT_DIR]   (defaults: 30, bench-out)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-30}"
OUT="${2:-bench-out}"
mkdir -p "$OUT"
cargo build --release --workspace --examples
B=target/release/examples/bench
{
    echo "date: $(date -u +%FT%TZ)"
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
    echo "kernel: $(uname -r)"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"
run() { local name="$1"; shift; echo "== $name: $*"; "$@" 2>&1 | tee "$OUT/$name.txt"; }
run failover-http-3 "$B" failover --nodes 3 --transport http --runs "$RUNS"
run failover-http-5 "$B" failover --nodes 5 --transport http --runs "$RUNS"
run failover-pilot-3 "$B" failover --nodes 3 --transport pilot --runs "$RUNS"
run failover-pilot-5 "$B" failover --nodes 5 --transport pilot --runs "$RUNS"
run sigterm-http-3 "$B" sigterm --nodes 3 --transport http --runs "$RUNS"
run step-down-http-3 "$B" step-down --nodes 3 --transport http --runs "$RUNS"
run sigterm-pilot-3 "$B" sigterm --nodes 3 --transport pilot --runs "$RUNS"
run step-down-pilot-3 "$B" step-down --nodes 3 --transport pilot --runs "$RUNS"
run rolling-http-3 "$B" rolling --nodes 3 --transport http --runs "$RUNS"
run rolling-http-5 "$B" rolling --nodes 5 --transport http --runs "$RUNS"
run rolling-pilot-3 "$B" rolling --nodes 3 --transport pilot --runs "$RUNS"
run rolling-pilot-5 "$B" rolling --nodes 5 --transport pilot --runs "$RUNS"
# Issue 11's persistent faults, 60 s watched after each; about 4.5 minutes per transport.
run faults-http-3 "$B" faults --transport http --secs 60 --runs 1
run faults-pilot-3 "$B" faults --transport pilot --secs 60 --runs 1
run stability-pilot-25 "$B" stability --nodes 25 --transport pilot --secs 120
run idle-pilot-25 "$B" idle --nodes 25 --transport pilot --secs 30
run idle-http-3 "$B" idle --nodes 3 --transport http --secs 30
run idle-pilot-3 "$B" idle --nodes 3 --transport pilot --secs 30
run api "$B" api --secs 10 --rounds 3
# Issue 39: consistent reads against plain ones (latency, and wrk's throughput over http).
run consistent-http "$B" consistent --transport http --runs 500 --secs 5 --rounds 2
run consistent-pilot "$B" consistent --transport pilot --runs 200
run tls "$B" tls --secs 10 --rounds 3
run attack "$B" attack --secs 10
# Issue 25: 100 /events watchers through the Rust client, 10 handovers; about a minute.
run watchers "$B" watchers --watchers 100 --changes 10
# Issue 38: 1, 10, 100 and 1000 groups per node (idle cost, kill -9 failover and a rolling
# restart per group), then 100 and 300 elections as processes and as groups side by side.
run groups "$B" groups --groups 1,10,100,1000 --secs 20
run side-by-side "$B" side-by-side --groups 100,300 --secs 20
run sim-figures target/release/examples/sim-figures
# Three minutes more: each etcd run waits out the 60 s session TTL.
if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
    run etcd scripts/bench-etcd.sh 3
else
    echo "== etcd: skipped (apt-get install -y etcd-server etcd-client)"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
