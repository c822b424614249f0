# pilot-election container image.
#
#   docker build -t pilot-election .          # needs Docker Hub (or a mirror) for the bases
#   scripts/build-test-image.sh               # no registry at all: same `runtime` stage, see below
#
# Base images are build arguments so that a mirror or a local base can stand in; the defaults are
# pinned so that a rebuild gets the same toolchain and the same Debian point release.
ARG RUST_IMAGE=rust:1.95.0-bookworm
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
ARG RUNTIME_BASE=debian:12.15-slim
# The stage or image the runtime takes `/out/pilot-election` and `/out/pilotctl` from. The test
# script passes an image it made from artifacts built on the host, so that what it tests is this
# very `runtime` stage and not a copy of it.
ARG ARTIFACTS=artifacts-from-source

# The classic builder (no BuildKit) builds every stage before the target whether the target needs
# it or not; BuildKit skips them. With PREBUILT=1 (and these stages' bases pointed at a local
# image) the download and the compile below do nothing, so `--target runtime` needs no registry.

# The real pilotctl, a static Go binary inside the pinned wheel (scripts/fetch-pilotctl.sh): the pip console
# script is a Python wrapper whose Go child survives a timeout that kills the wrapper.
FROM ${PYTHON_IMAGE} AS pilotctl
ARG PREBUILT=
ARG PILOTPROTOCOL_VERSION=1.18.0
ARG PILOTPROTOCOL_WHEEL=pilotprotocol-1.18.0-py3-none-manylinux_2_34_x86_64.manylinux_2_35_x86_64.whl
ARG PILOTPROTOCOL_WHEEL_SHA256=08c19477e96934097313c95cb6b018fc32e328c20f5efbff9353e2e82db4a319
WORKDIR /fetch
RUN set -eu; mkdir -p /out; \
    if [ -n "$PREBUILT" ]; then exit 0; fi; \
    pip download --no-cache-dir --no-deps --only-binary=:all: \
        --platform manylinux_2_35_x86_64 --dest . "pilotprotocol==${PILOTPROTOCOL_VERSION}"; \
    echo "${PILOTPROTOCOL_WHEEL_SHA256}  ${PILOTPROTOCOL_WHEEL}" | sha256sum -c -; \
    python -c 'import sys, zipfile; open("/out/pilotctl", "wb").write(zipfile.ZipFile(sys.argv[1]).read("pilotprotocol/bin/pilotctl"))' \
        "${PILOTPROTOCOL_WHEEL}"; \
    chmod 0755 /out/pilotctl; \
    /out/pilotctl version | grep -F "${PILOTPROTOCOL_VERSION}"

FROM ${RUST_IMAGE} AS build
ARG PREBUILT=
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# The workspace's other members: the core is compiled into the binary; cargo reads the others'
# manifests to resolve the workspace.
COPY crates ./crates
COPY openapi ./openapi
RUN set -eu; mkdir -p /out; \
    if [ -n "$PREBUILT" ]; then exit 0; fi; \
    cargo build --release --locked --bin pilot-election; \
    cp target/release/pilot-election /out/pilot-election

FROM scratch AS artifacts-from-source
COPY --from=build /out/ /out/
COPY --from=pilotctl /out/ /out/

FROM ${ARTIFACTS} AS artifacts

# What users run. Nothing is installed: TLS is rustls inside the binary (no OpenSSL, no CA bundle
# needed: the CAs come from the TLS flags) and pilotctl is static.
FROM ${RUNTIME_BASE} AS runtime
# A fixed uid so that a bind-mounted data dir can be chowned to it ahead of time.
ARG UID=10001
RUN groupadd --gid "${UID}" pilot \
    && useradd --uid "${UID}" --gid pilot --home-dir /var/lib/pilot-election \
        --no-create-home --shell /usr/sbin/nologin pilot \
    && mkdir -p /var/lib/pilot-election \
    && chown pilot:pilot /var/lib/pilot-election \
    && chmod 0700 /var/lib/pilot-election
COPY --from=artifacts /out/pilot-election /usr/local/bin/pilot-election
COPY --from=artifacts /out/pilotctl /usr/local/bin/pilotctl
# Inside a container the API must listen beyond loopback; the client commands (and the
# HEALTHCHECK) read PILOT_ELECTION_URL, so changing the port means changing both. From 0.0.0.0
# no URL for clients can be derived: set PILOT_ELECTION_ADVERTISE_URL per container (compose.yaml
# does), or the node refuses to start and says so.
ENV PILOT_ELECTION_LISTEN=0.0.0.0:7070 \
    PILOT_ELECTION_URL=http://127.0.0.1:7070 \
    PILOT_ELECTION_DATA_DIR=/var/lib/pilot-election \
    PILOT_ELECTION_PILOTCTL=/usr/local/bin/pilotctl
USER ${UID}:${UID}
# The term and vote must survive the container: a node that forgets its vote could vote twice.
VOLUME ["/var/lib/pilot-election"]
EXPOSE 7070
# A leader that gets SIGTERM hands over before it exits; Docker's default 10 s grace is enough.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=3 \
    CMD ["pilot-election", "healthcheck"]
ENTRYPOINT ["pilot-election"]
CMD ["run"]
