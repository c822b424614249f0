#!/usr/bin/env bash
# Makes the certificates compose.tls.yaml mounts, with openssl only (P-256, as docs/guide/tls.md
# step 1 does): a CA, one certificate per node and one for the operator.
# Usage: scripts/make-tls-certs.sh DIR
#
#   scripts/make-tls-certs.sh tls                 # as root (or sudo): node files owned by 10001
#   docker-compose -f compose.yaml -f compose.tls.yaml up -d
#   curl --cacert tls/ca.pem --cert tls/operator.pem --key tls/operator.key https://127.0.0.1:7071/leader
#
# DIR (created, mode 0700; it must not hold a ca.pem already) gets:
#   ca.pem, ca.key               the CA; ca.key is never mounted: keep it off the nodes
#   node-X.pem, node-X.key       X = a, b, c: SAN DNS:node-X (the member id and the name the
#                                peers use) and URI urn:pilot-election:member:node-X, plus
#                                DNS:localhost and IP:127.0.0.1 so that the healthcheck inside the
#                                container and curl on the host (the published 127.0.0.1 ports)
#                                can verify the node; serverAuth and clientAuth (it is the node's
#                                client certificate towards its peers too)
#   operator.pem, operator.key   the client certificate for curl and the CLI on the host
# The containers run as uid 10001 (PILOT_ELECTION_UID to change it) and read ca.pem and their
# node's files through bind mounts. As root, those files are chowned to that uid (keys 0400) and
# the operator's files and ca.key to $SUDO_UID if set. Without root nothing can be chowned: the
# node files are made world-readable (0444) and the 0700 directory is what keeps other host
# users away from them (a bind mount does not pass through it).
# Certificates are valid 365 days (the CA 3650; PILOT_ELECTION_CERT_DAYS to change the former).
# Never commit DIR.
set -euo pipefail

die() { echo "make-tls-certs: $*" >&2; exit 1; }
[ $# -eq 1 ] && [ "${1#-}" = "$1" ] || { sed -n '2,25p' "$0" >&2; exit 64; }
DIR="$1"
UID_IN_CONTAINER="${PILOT_ELECTION_UID:-10001}"
DAYS="${PILOT_ELECTION_CERT_DAYS:-365}"
NODES=(node-a node-b node-c)
command -v openssl >/dev/null || die "openssl is missing: apt-get install -y openssl"
[ -e "$DIR/ca.pem" ] && die "$DIR/ca.pem exists already: remove $DIR to start over"

umask 077
mkdir -p "$DIR"
chmod 0700 "$DIR"
work="$(mktemp -d "$DIR/.work.XXXXXX")"
trap 'rm -rf "$work"' EXIT

quiet() { "$@" 2>"$work/openssl.log" || { cat "$work/openssl.log" >&2; die "$1 failed"; }; }

quiet openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 3650 \
    -subj "/CN=pilot-election compose CA" -keyout "$DIR/ca.key" -out "$DIR/ca.pem"

issue() { # name subjectAltName
    quiet openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj "/CN=$1" \
        -keyout "$DIR/$1.key" -out "$work/$1.csr"
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$2" >"$work/$1.ext"
    quiet openssl x509 -req -in "$work/$1.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" \
        -CAserial "$work/ca.srl" -CAcreateserial -days "$DAYS" -extfile "$work/$1.ext" \
        -out "$DIR/$1.pem"
}
for n in "${NODES[@]}"; do
    issue "$n" "DNS:$n,URI:urn:pilot-election:member:$n,DNS:localhost,IP:127.0.0.1"
done
issue operator "DNS:localhost,IP:127.0.0.1"

chmod 0444 "$DIR"/*.pem
chmod 0400 "$DIR"/*.key
if [ "$(id -u)" = 0 ]; then
    chown "$UID_IN_CONTAINER:$UID_IN_CONTAINER" "$DIR/ca.pem"
    for n in "${NODES[@]}"; do
        chown "$UID_IN_CONTAINER:$UID_IN_CONTAINER" "$DIR/$n.pem" "$DIR/$n.key"
    done
    if [ -n "${SUDO_UID:-}" ]; then
        chown "$SUDO_UID:${SUDO_GID:-$SUDO_UID}" "$DIR" "$DIR/ca.key" "$DIR/operator.pem" \
            "$DIR/operator.key"
    fi
else
    for n in "${NODES[@]}"; do
        chmod 0444 "$DIR/$n.key"
    done
    echo "make-tls-certs: not root, so the node keys are 0444 for uid $UID_IN_CONTAINER;" \
        "only the 0700 directory $DIR keeps other host users away from them" >&2
fi
echo "make-tls-certs: $DIR: CA, ${NODES[*]} and operator certificates (valid $DAYS days)" >&2
