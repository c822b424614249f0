#!/usr/bin/env bash
# cargo-mutants over the election core (crates/core), with the core's unit tests and the
# simulator as the test command (.cargo/mutants.toml); results, equivalent mutants and how to
# read them: docs/protocol.md, "The mutation check".
#
#   scripts/cargo-mutants.sh                  every mutant of the core (about 770; an hour or two)
#   scripts/cargo-mutants.sh --since REV      only mutants on core lines changed since REV (what
#                                             scripts/test runs, from .ci/mutants-base)
#   scripts/cargo-mutants.sh ARGS...          any other arguments go to cargo mutants
#                                             (for example -F 'timings.rs' or --list)
#
# Installs the pinned cargo-mutants into .tools/cargo-mutants when it is missing. The seeded
# simulation runs SIM_SEEDS seeds per mutant (100 unless set: a mutant the directed cases and
# unit tests miss is rarely caught by seed 100 but never by seed 500 only; scripts/mutants.py
# runs the rule mutants at CI's 500). Exit status: cargo mutants' own (0 all caught, 2 some
# missed, 3 some timed out, 4 the unmutated tree fails).
set -euo pipefail

VERSION=27.1.0
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=$root/.tools/cargo-mutants/bin
if [ "$("$bin/cargo-mutants" mutants --version 2>/dev/null)" != "cargo-mutants $VERSION" ]; then
    echo "installing cargo-mutants $VERSION into .tools/cargo-mutants" >&2
    cargo install cargo-mutants --version "$VERSION" --locked --quiet --root "$root/.tools/cargo-mutants"
fi
export PATH="$bin:$PATH"
export SIM_SEEDS=${SIM_SEEDS:-100} SIM_FAIL_FAST=1

args=()
if [ "${1:-}" = "--since" ]; then
    base=${2:?--since needs a commit}
    shift 2
    if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
        git fetch --quiet --unshallow 2>/dev/null || git fetch --quiet origin "$base" 2>/dev/null || true
    fi
    git cat-file -e "$base^{commit}" 2>/dev/null || {
        echo "cargo-mutants.sh: commit $base is not in this clone (needed to find the changed core lines)" >&2
        exit 1
    }
    mkdir -p target
    diff=target/core-since-mutants-base.diff
    git diff "$base" -- crates/core/src >"$diff"
    if [ ! -s "$diff" ]; then
        echo "cargo-mutants: no core line changed since $base"
        exit 0
    fi
    echo "cargo-mutants: core lines changed since $base ($(grep -c '^+[^+]' "$diff") added or changed)"
    args=(--in-diff "$diff")
fi
# The tests of both packages run against every mutant. No baseline run: cargo-mutants 27.1 runs
# the baseline with the mutated package's tests only, where the simulator's targets do not
# exist (scripts/test has run the unmutated tests by then anyway); so the timeouts are fixed:
# a mutant's tests take 5-30 s here, a build up to a minute.
exec cargo mutants --package pilot-election-core \
    --test-package pilot-election-core --test-package pilot-election-sim \
    --baseline skip --timeout 120 --build-timeout 600 \
    --output target "${args[@]}" "$@"
