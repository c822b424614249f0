#!/usr/bin/env bash
# cargo deny over the workspace's dependency graph (deny.toml): licences, bans (duplicate
# versions, wildcard requirements) and sources. Installs the pinned cargo-deny into
# .tools/cargo-deny when it is missing. Advisories are not checked here: the RustSec database
# lives on github.com, which CI cannot reach (deny.toml says so); `scripts/cargo-deny.sh
# advisories` checks them on a machine that can. Exit status: cargo deny's own.
set -euo pipefail

VERSION=0.20.2
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=$root/.tools/cargo-deny/bin
if [ "$("$bin/cargo-deny" --version 2>/dev/null)" != "cargo-deny $VERSION" ]; then
    echo "installing cargo-deny $VERSION into .tools/cargo-deny" >&2
    cargo install cargo-deny --version "$VERSION" --locked --quiet --root "$root/.tools/cargo-deny"
fi
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(licenses bans sources)
exec "$bin/cargo-deny" --locked check "${checks[@]}"
