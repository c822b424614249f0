#!/usr/bin/env bash
# What an idle node of many groups costs, and what it reads: three nodes over http on
# 127.0.0.1 (free ports), each in IDLE_GROUPS groups (default 1000) at default timings. Once they
# have elected (WARM seconds, default 40), each node's CPU over WINDOW seconds (default 30),
# and the messages node n1 took per second in that window, by type and outcome
# (`pilot_election_messages_received_total`). Used to compare two builds side by side
# (docs/groups.md, "Judging liveness once per peer"); run the builds one after the other,
# more than once each: this machine's idle figures move by a tenth from one minute to the
# next.
#
#   scripts/idle-groups.sh target/release/pilot-election
#   IDLE_GROUPS=100 WINDOW=20 scripts/idle-groups.sh target/release/pilot-election
set -euo pipefail

BIN=${1:?usage: scripts/idle-groups.sh PATH-TO-pilot-election}
IDLE_GROUPS=${IDLE_GROUPS:-1000}
WARM=${WARM:-40}
WINDOW=${WINDOW:-30}
[ -x "$BIN" ] || { echo "idle-groups: $BIN is not an executable" >&2; exit 64; }
[ "$IDLE_GROUPS" -ge 1 ] 2>/dev/null || { echo "idle-groups: IDLE_GROUPS must be a number >= 1" >&2; exit 64; }

DIR=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT

# The default group is every node's own; the file names the others.
python3 -c "import sys; [print(f'shard-{i:04d}') for i in range(1, int(sys.argv[1]))]" \
    "$IDLE_GROUPS" > "$DIR/groups.txt"
# Three free ports, held by one process while all three are chosen so that none repeats.
read -r -a PORTS < <(python3 -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))')

for i in 0 1 2; do
    peers=()
    for j in 0 1 2; do
        [ "$i" = "$j" ] || peers+=(--peer "n$((j + 1))=http://127.0.0.1:${PORTS[$j]}")
    done
    "$BIN" run --node-id "n$((i + 1))" --listen "127.0.0.1:${PORTS[$i]}" "${peers[@]}" \
        --data-dir "$DIR/n$((i + 1))" --groups-file "$DIR/groups.txt" > "$DIR/n$((i + 1)).log" 2>&1 &
    PIDS+=($!)
done

# A node that exited during the warm-up (a bad flag, a port taken) says why.
sleep "$WARM"
for p in "${PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null || { echo "idle-groups: a node exited:" >&2; cat "$DIR"/n*.log >&2; exit 1; }
done

# utime and stime, counted after the command name, which sits in parentheses and may hold spaces.
ticks() { sed "s/.*) //" "/proc/$1/stat" | awk '{print $12 + $13}'; }
received() { curl -sf "http://127.0.0.1:${PORTS[0]}/metrics" | grep '^pilot_election_messages_received_total' || true; }

received > "$DIR/before"
before=(); for p in "${PIDS[@]}"; do before+=("$(ticks "$p")"); done
sleep "$WINDOW"
after=(); for p in "${PIDS[@]}"; do after+=("$(ticks "$p")"); done
received > "$DIR/after"

hz=$(getconf CLK_TCK)
leading=$(curl -sf "http://127.0.0.1:${PORTS[0]}/groups" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["leading"])')
echo "$IDLE_GROUPS groups, ${WINDOW}s window; n1 leads $leading"
for i in 0 1 2; do
    awk -v d=$(( ${after[$i]} - ${before[$i]} )) -v hz="$hz" -v w="$WINDOW" -v n="n$((i + 1))" \
        'BEGIN { printf "%s CPU %.2f %% of a core\n", n, 100 * d / hz / w }'
done
echo "n1 received per second (types and outcomes with none left out):"
join <(sort "$DIR/before") <(sort "$DIR/after") \
    | awk -v w="$WINDOW" '{ r = ($3 - $2) / w; if (r > 0) printf "  %s %.0f\n", $1, r }'
