#!/usr/bin/env bash
# Builds the image `pilot-election:test` without any container registry, through the `runtime`
# stage of the repository's Dockerfile, so that the container tests run what users run:
#   1. a minimal Debian bookworm root filesystem (debootstrap --variant=minbase), imported as
#      pilot-election-base:bookworm; the tarball is cached under .tools/docker/ so re-runs skip it;
#   2. the release binary built by cargo on the host (or --binary PATH) and the pinned pilotctl
#      checked against its sha256, packed into an image that the Dockerfile's ARTIFACTS names;
#   3. `docker build --target runtime` with the local base and PREBUILT=1, labelled with the
#      sha256 of its inputs (base, binary, pilotctl, Dockerfile): a re-run with the same inputs
#      builds nothing.
# Usage: scripts/build-test-image.sh [--binary PATH] [--tag NAME]
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_IMAGE="pilot-election-base:${SUITE}"
ARTIFACTS_IMAGE="pilot-election-artifacts:test"
TAG="pilot-election:test"
BINARY=""
CACHE=".tools/docker"
ROOTFS_TAR="${CACHE}/${SUITE}-minbase.tar"

die() { echo "build-test-image: $*" >&2; exit 1; }
step() { echo "build-test-image: $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
        --tag) TAG="${2:?--tag needs a name}"; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "the Docker engine is not reachable (is dockerd running?)"
mkdir -p "$CACHE"
start=$(date +%s)

# 1. The base image. debootstrap needs root (chroot, device nodes); CI runs as root.
if [ ! -s "$ROOTFS_TAR" ]; then
    [ "$(id -u)" = 0 ] || die "debootstrap needs root to make ${ROOTFS_TAR}"
    if ! command -v debootstrap >/dev/null; then
        step "installing debootstrap"
        apt-get install -y -qq debootstrap >/dev/null 2>&1 \
            || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; } \
            || die "cannot install debootstrap"
    fi
    rootfs="$(mktemp -d "${CACHE}/rootfs.XXXXXX")"
    trap 'rm -rf "$rootfs"' EXIT
    step "debootstrap --variant=minbase ${SUITE} (about 2 minutes, once)"
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" >"${CACHE}/debootstrap.log" 2>&1 \
        || die "debootstrap failed; see ${CACHE}/debootstrap.log"
    # What debian:*-slim leaves out too: nothing at run time reads these, and they are a third
    # of the size. The host's resolv.conf and hostname are the container engine's to provide.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
        "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
        "$rootfs"/var/log/*.log "$rootfs"/var/cache/debconf/*-old
    find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
    : >"$rootfs/etc/resolv.conf"
    : >"$rootfs/etc/hostname"
    tar --numeric-owner --sort=name -C "$rootfs" -cf "${ROOTFS_TAR}.tmp" .
    mv "${ROOTFS_TAR}.tmp" "$ROOTFS_TAR"
    rm -rf "$rootfs"
    trap - EXIT
fi
rootfs_sha="$(sha256sum "$ROOTFS_TAR" | cut -c1-64)"
if [ "$(docker image inspect -f '{{index .Config.Labels "org.pilot-election.rootfs-sha256"}}' \
        "$BASE_IMAGE" 2>/dev/null)" != "$rootfs_sha" ]; then
    step "importing ${ROOTFS_TAR} as ${BASE_IMAGE}"
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' \
        --change "LABEL org.pilot-election.rootfs-sha256=${rootfs_sha}" \
        "$ROOTFS_TAR" "$BASE_IMAGE" >/dev/null
fi

# 2. The artifacts.
if [ -z "$BINARY" ]; then
    step "cargo build --release --bin pilot-election"
    cargo build --release --locked --bin pilot-election >&2
    BINARY="${CARGO_TARGET_DIR:-target}/release/pilot-election"
fi
[ -x "$BINARY" ] || die "${BINARY} is not an executable"
# fetch-pilotctl.sh owns the pin and checks the wheel's sha256; it prints the path.
PILOTCTL="$(scripts/fetch-pilotctl.sh)"
"$PILOTCTL" version | grep -qF 1.18.0 || die "${PILOTCTL} is not pilotctl 1.18.0"

# Up to date when the image was built from these very inputs: nothing is imported or built again.
inputs_sha="$({ echo "rootfs ${rootfs_sha}"; sha256sum "$BINARY" "$PILOTCTL" Dockerfile | cut -c1-64; } \
    | sha256sum | cut -c1-64)"
if [ "$(docker image inspect -f '{{index .Config.Labels "org.pilot-election.inputs-sha256"}}' \
        "$TAG" 2>/dev/null)" = "$inputs_sha" ]; then
    step "${TAG} is up to date (same binary, pilotctl, Dockerfile and base)"
    exit 0
fi

# The Dockerfile's ARTIFACTS: an image holding only /out/, made without a Dockerfile so that no
# stage outside `runtime` has to be defined for the test.
staging="$(mktemp -d "${CACHE}/artifacts.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
mkdir "$staging/out"
cp "$BINARY" "$staging/out/pilot-election"
cp "$PILOTCTL" "$staging/out/pilotctl"
chmod 0755 "$staging/out/pilot-election" "$staging/out/pilotctl"
tar --numeric-owner --owner=0 --group=0 -C "$staging" -c out \
    | docker import - "$ARTIFACTS_IMAGE" >/dev/null
rm -rf "$staging"
trap - EXIT

# 3. The runtime stage, exactly as users get it, on the local base.
step "docker build --target runtime -t ${TAG}"
docker build --target runtime \
    --build-arg RUNTIME_BASE="$BASE_IMAGE" \
    --build-arg RUST_IMAGE="$BASE_IMAGE" \
    --build-arg PYTHON_IMAGE="$BASE_IMAGE" \
    --build-arg PREBUILT=1 \
    --build-arg ARTIFACTS="$ARTIFACTS_IMAGE" \
    --label "org.pilot-election.inputs-sha256=${inputs_sha}" \
    -t "$TAG" . >&2
docker run --rm --entrypoint pilot-election "$TAG" --version >&2 \
    || die "the image was built but its binary does not run"
step "${TAG} built in $(($(date +%s) - start)) s, $(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.1f MB", $1/1e6}')"
