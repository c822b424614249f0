#!/usr/bin/env bash
# The Python client's tests (clients/python): unit tests and tests against a real 3-node
# cluster of the binary. Creates a venv under .tools/venv-python-client (python3 -m venv), installs
# pytest, mypy and the package (pip install ./clients/python, as a user would), checks the types
# with mypy --strict, then runs pytest. Exits non-zero on any failure; a skipped test counts as
# a failure.
#
# The binary is $PILOT_ELECTION_BIN, by default target/release/pilot-election, built here with
# `cargo build --release --bin pilot-election` when missing. Extra arguments go to pytest.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$root/.tools/venv-python-client"
export PILOT_ELECTION_BIN="${PILOT_ELECTION_BIN:-$root/target/release/pilot-election}"

if [[ ! -x "$PILOT_ELECTION_BIN" ]]; then
    echo "test-python-client: building $PILOT_ELECTION_BIN" >&2
    cargo build --release --bin pilot-election
fi

if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv" || {
        echo "test-python-client: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
        exit 1
    }
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check pytest==9.2.0 mypy==2.4.1
# --force-reinstall of the package alone: the tests run against the code as it is now.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --force-reinstall "$root/clients/python"

cd "$root/clients/python"
# The installed package, not the source tree, is what the tests import.
"$venv/bin/python" -c 'import pilot_election_client, sys; sys.exit(0 if "site-packages" in pilot_election_client.__file__ else 1)' || {
    echo "test-python-client: the tests would not import the installed package" >&2
    exit 1
}
"$venv/bin/python" -m mypy --strict --cache-dir "$venv/mypy-cache" src tests

report="$(mktemp)"
trap 'rm -f "$report"' EXIT
status=0
"$venv/bin/python" -m pytest -p no:cacheprovider -rs --strict-markers --junitxml="$report" "$@" tests || status=$?
if [[ $status -ne 0 ]]; then
    exit "$status"
fi
skipped="$("$venv/bin/python" -c '
import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
print(sum(int(s.get("skipped", 0)) for s in r.iter("testsuite")))' "$report")"
if [[ "$skipped" != 0 ]]; then
    echo "test-python-client: $skipped test(s) skipped; a skip counts as a failure" >&2
    exit 1
fi
