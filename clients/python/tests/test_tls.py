"""The client against a real member over mutual TLS (``https://``, ``--tls-client-ca``): with
an ``ssl_context`` that trusts the cluster's CA and carries a client certificate it reads the
leader and follows its changes; without the certificate or the CA no member can be used."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path
from typing import List, Tuple

import pytest

from pilot_election_client import Client, Unavailable

from cluster import Node, free_port, wait_until


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def certificates(d: Path) -> Tuple[Path, List[Tuple[Path, Path]]]:
    """A CA, then a leaf for the member and one for the client, each for 127.0.0.1."""
    ca, ca_key = d / "ca.pem", d / "ca.key"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(ca_key), "-out", str(ca), "-days", "2", "-subj", "/CN=test CA")
    leaves = []
    for name in ("solo", "service"):
        cert, key, csr = d / f"{name}.pem", d / f"{name}.key", d / f"{name}.csr"
        ext = d / f"{name}.ext"
        ext.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:" + name + "\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
        )
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext))
        leaves.append((cert, key))
    return ca, leaves


def test_reads_and_watches_over_mutual_tls(tmp_path: Path) -> None:
    ca, [(cert, key), (client_cert, client_key)] = certificates(tmp_path)
    port = free_port()
    node = Node("solo", port, tmp_path, [
        "run", "--node-id", "solo", "--listen", f"127.0.0.1:{port}",
        "--data-dir", str(tmp_path / "solo" / "data"),
        "--tls-cert", str(cert), "--tls-key", str(key), "--tls-client-ca", str(ca),
    ])
    node.start()
    try:
        url = f"https://127.0.0.1:{port}"
        ctx = ssl.create_default_context(cafile=str(ca))
        ctx.load_cert_chain(str(client_cert), str(client_key))
        client = Client([url], ssl_context=ctx)
        leader = wait_until("a leader read over TLS", client.leader)
        assert (leader.id, leader.answered_by) == ("solo", url)
        with client.watch() as changes:
            first = next(iter(changes))
        assert (first.leader, first.term) == ("solo", leader.term)

        no_certificate = ssl.create_default_context(cafile=str(ca))
        no_ca = ssl.create_default_context()
        no_ca.load_cert_chain(str(client_cert), str(client_key))
        for ctx in (no_certificate, no_ca):
            with pytest.raises(Unavailable):
                Client([url], ssl_context=ctx).leader()
    finally:
        node.kill()
