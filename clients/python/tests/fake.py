"""A scripted HTTP server in a thread, standing in for a member in the unit tests."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional

Handler = Callable[["Request"], None]


class Request:
    def __init__(self, h: BaseHTTPRequestHandler) -> None:
        self.h = h
        self.path = h.path
        self.headers = h.headers

    def reply(self, status: int, body: str, ctype: str = "application/json",
              headers: Optional[Dict[str, str]] = None) -> None:
        data = body.encode()
        self.h.send_response(status)
        self.h.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.h.send_header(k, v)
        self.h.send_header("Content-Length", str(len(data)))
        if status == 503:
            self.h.send_header("Retry-After", "1")
        self.h.end_headers()
        self.h.wfile.write(data)

    def stream(self) -> None:
        """Starts an event stream (no length: it ends when the connection closes)."""
        self.h.send_response(200)
        self.h.send_header("Content-Type", "text/event-stream")
        self.h.send_header("Connection", "close")
        self.h.end_headers()
        self.h.close_connection = True

    def send(self, text: str) -> None:
        self.h.wfile.write(text.encode())
        self.h.wfile.flush()


class FakeMember:
    def __init__(self) -> None:
        self.routes: Dict[str, Handler] = {}
        self.seen: List[Request] = []
        member = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                req = Request(self)
                member.seen.append(req)
                handler = member.routes.get(self.path.split("?")[0])
                if handler is None:
                    req.reply(404, '{"error":"not_found","message":"no"}')
                else:
                    handler(req)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def leader_body(leader: str = "b", term: int = 4, is_self: bool = False, node: str = "a",
                lease_ms: Optional[int] = None) -> str:
    import json

    return json.dumps({
        "leader": leader, "term": term, "is_self": is_self, "node": node,
        "elected_at": "2026-12-01T17:00:00Z", "last_heartbeat_ms": None if is_self else 42,
        "lease_remaining_ms": lease_ms, "leader_url": f"http://{leader}:7070",
        "leader_meta": {"zone": "z1"}, "node_url": f"http://{node}:7070",
    })
