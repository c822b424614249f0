"""Members' URLs and one HTTP exchange with a member, on http.client."""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Union
from urllib.parse import urlsplit

Connection = Union[http.client.HTTPConnection, http.client.HTTPSConnection]


@dataclass(frozen=True)
class Member:
    """A member's API, parsed from its URL (``http://host:port`` with an optional path prefix)."""

    url: str
    scheme: str
    host: str
    port: int
    prefix: str

    def connect(self, timeout: float, ssl_context: Optional[ssl.SSLContext]) -> Connection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=ssl_context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def parse_member(url: object) -> Member:
    """Parses a member's URL, with a :class:`ValueError` that says what is wrong with it."""
    if not isinstance(url, str):
        raise ValueError(f"a member URL must be a string such as 'http://10.0.0.1:7070', got {url!r}")
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise ValueError(f"bad member URL {url!r}: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(
            f"bad member URL {url!r}: it must start with http:// or https:// "
            f"(such as 'http://10.0.0.1:7070')"
        )
    if not parts.hostname:
        raise ValueError(f"bad member URL {url!r}: it names no host")
    if parts.query or parts.fragment:
        raise ValueError(f"bad member URL {url!r}: it must not have a query or a fragment")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"bad member URL {url!r}: credentials in the URL are not supported")
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    prefix = parts.path.rstrip("/")
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    return Member(
        url=f"{parts.scheme}://{shown}:{port}{prefix}",
        scheme=parts.scheme,
        host=host,
        port=port,
        prefix=prefix,
    )


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))

    def error_code(self) -> Optional[str]:
        """The ``error`` of an error body ``{"error": ..., "message": ...}``, if it is one."""
        try:
            doc = self.json()
        except ValueError:
            return None
        code = doc.get("error") if isinstance(doc, dict) else None
        return code if isinstance(code, str) else None


def request(
    member: Member,
    path: str,
    timeout: float,
    ssl_context: Optional[ssl.SSLContext] = None,
    method: str = "GET",
    headers: Optional[Dict[str, str]] = None,
) -> Response:
    """One request on a connection of its own (raises OSError or http.client.HTTPException)."""
    conn = member.connect(timeout, ssl_context)
    try:
        hdrs = {"Accept": "application/json", "Connection": "close"}
        hdrs.update(headers or {})
        conn.request(method, member.prefix + path, headers=hdrs)
        resp = conn.getresponse()
        body = resp.read(1 << 20)
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, body)
    finally:
        conn.close()
