#!/usr/bin/env bash
# Builds the previous release's binary from git history, for the rolling-upgrade tests and
# benchmark (docs/protocol.md, rule 15): the last build of wire protocol version 2 only, main at
# d9ce58b, which is what a cluster running today upgrades from. The binary lands in
# .tools/previous/<commit>/pilot-election (and the stable link .tools/previous/pilot-election);
# a second run with the binary in place builds nothing.
# Usage: scripts/build-previous.sh        (prints the binary's path)
set -euo pipefail
cd "$(dirname "$0")/.."

COMMIT="d9ce58b33e81c2a30b8a0a2afa24559a48a58786"
DIR=".tools/previous/${COMMIT}"
BIN="${DIR}/pilot-election"
LINK=".tools/previous/pilot-election"

die() { echo "build-previous: $*" >&2; exit 1; }

if [ ! -x "$BIN" ] || ! "$BIN" --version >/dev/null 2>&1; then
    if ! git cat-file -e "${COMMIT}^{commit}" 2>/dev/null; then
        # A shallow clone: its origin has the history.
        git fetch --quiet origin "$COMMIT" 2>/dev/null || git fetch --quiet --unshallow 2>/dev/null || true
    fi
    git cat-file -e "${COMMIT}^{commit}" 2>/dev/null \
        || die "commit ${COMMIT} is not in this clone's history (a shallow clone?): fetch it with git fetch --unshallow"
    src="${DIR}/src"
    rm -rf "$src"
    mkdir -p "$src"
    git archive "$COMMIT" | tar -x -C "$src"
    echo "build-previous: cargo build of ${COMMIT:0:7} (the previous release, about 2 minutes, once)" >&2
    # Its own target directory: the current workspace's must not be touched.
    (cd "$src" && CARGO_TARGET_DIR="$(pwd)/../target" cargo build --release --locked --bin pilot-election >&2) \
        || die "cargo build of ${COMMIT} failed"
    cp "${DIR}/target/release/pilot-election" "${BIN}.tmp"
    mv "${BIN}.tmp" "$BIN"
    rm -rf "$src" "${DIR}/target"
fi
ln -sfn "${COMMIT}/pilot-election" "$LINK"
"$BIN" --version >/dev/null || die "${BIN} does not run"
echo "$(pwd)/${LINK}"
