#!/usr/bin/env bash
# Fetches the pinned real pilotctl (Go binary from the pilotprotocol 1.18.0 wheel) into
# .tools/pilot/pilotctl so that tests run against the real CLI rather than a stand-in.
# The wheel is pinned by sha256: a different file means a different binary, and tests must not
# silently run against it. The Go binary is used directly because the pip console script is a
# Python wrapper whose child survives a timeout that kills the wrapper.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="1.18.0"
WHEEL="pilotprotocol-${VERSION}-py3-none-manylinux_2_34_x86_64.manylinux_2_35_x86_64.whl"
SHA256="08c19477e96934097313c95cb6b018fc32e328c20f5efbff9353e2e82db4a319"
DEST_DIR=".tools/pilot"
DEST="${DEST_DIR}/pilotctl"
WHEEL_PATH="${DEST_DIR}/${WHEEL}"

die() { echo "fetch-pilotctl: $*" >&2; exit 1; }

wheel_ok() {
    [ -f "$WHEEL_PATH" ] && echo "${SHA256}  ${WHEEL_PATH}" | sha256sum --check --status
}

mkdir -p "$DEST_DIR"

if ! wheel_ok; then
    rm -f "$WHEEL_PATH"
    command -v python3 >/dev/null || die "python3 is needed to run pip download"
    # The platform is pinned so that a CI host with an older glibc still gets the same wheel:
    # the binaries inside are static, only the tag says otherwise.
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
        --platform manylinux_2_35_x86_64 --python-version 3.11 \
        --dest "$DEST_DIR" "pilotprotocol==${VERSION}" >&2 \
        || die "pip download pilotprotocol==${VERSION} failed"
    [ -f "$WHEEL_PATH" ] || die "pip did not produce ${WHEEL_PATH} (got: $(ls "$DEST_DIR"))"
    actual="$(sha256sum "$WHEEL_PATH" | cut -d' ' -f1)"
    if [ "$actual" != "$SHA256" ]; then
        rm -f "$WHEEL_PATH"
        die "SHA256 MISMATCH for ${WHEEL}: expected ${SHA256}, got ${actual}; refusing to use it"
    fi
fi

# Re-extract when the binary is missing or is not the one from the verified wheel.
expected_bin_sha="$(python3 - "$WHEEL_PATH" <<'PY'
import hashlib, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    print(hashlib.sha256(z.read("pilotprotocol/bin/pilotctl")).hexdigest())
PY
)" || die "wheel has no pilotprotocol/bin/pilotctl"

if [ ! -x "$DEST" ] || [ "$(sha256sum "$DEST" | cut -d' ' -f1)" != "$expected_bin_sha" ]; then
    python3 - "$WHEEL_PATH" "$DEST" <<'PY' || die "could not extract pilotctl"
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
tmp = dest + ".tmp"
with zipfile.ZipFile(wheel) as z, open(tmp, "wb") as out:
    out.write(z.read("pilotprotocol/bin/pilotctl"))
os.chmod(tmp, 0o755)
os.replace(tmp, dest)
PY
fi

version="$("$DEST" version 2>/dev/null || true)"
case "$version" in
    *"$VERSION"*) ;;
    *) die "${DEST} reports version '${version}', expected ${VERSION}" ;;
esac

echo "$(pwd)/${DEST}"
