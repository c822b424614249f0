"""Real pilot-election nodes for the tests: processes, free ports, proxies, and waiting on
conditions with deadlines (never fixed sleeps)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, TypeVar

REPO = Path(__file__).resolve().parents[3]
TOKEN = "python-client-test-token"
T = TypeVar("T")

#: Generous: the machine has 2 cores shared with other jobs.
DEADLINE = 30.0


def binary() -> Path:
    path = Path(os.environ.get("PILOT_ELECTION_BIN", REPO / "target/release/pilot-election"))
    if not path.is_file():
        raise RuntimeError(
            f"the pilot-election binary is missing at {path}: run "
            f"`cargo build --release --bin pilot-election` (scripts/test-python-client.sh does), "
            f"or set PILOT_ELECTION_BIN"
        )
    return path


_given: Set[int] = set()
_given_lock = threading.Lock()


def free_port() -> int:
    """A port nobody listens on now (bind port 0, close), never handed out twice here."""
    with _given_lock:
        while True:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            s.close()
            if port not in _given:
                _given.add(port)
                return port


def wait_until(what: str, cond: Callable[[], Optional[T]], timeout: float = DEADLINE) -> T:
    """Polls ``cond`` every 20 ms until it returns something truthy; fails after ``timeout``."""
    end = time.monotonic() + timeout
    last_error: Optional[BaseException] = None
    while True:
        try:
            got = cond()
            if got:
                return got
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last_error = e
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error!r})")
        time.sleep(0.02)


def get_json(url: str, timeout: float = 2.0) -> Tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def post_json(url: str, body: Dict[str, Any], timeout: float = 2.0) -> Tuple[int, Any]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


class Node:
    def __init__(self, node_id: str, port: int, root: Path, args: List[str]) -> None:
        self.id = node_id
        self.port = port
        self.dir = root / node_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args = args
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, f"{self.id} is running"
        with open(self.dir / "node.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(binary()), *self.args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def signal(self, sig: int) -> None:
        """Sends ``sig`` to this node's process, by its PID."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """kill -9, and reaps it."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def leader(self) -> Optional[Dict[str, Any]]:
        status, body = get_json(self.url + "/leader", timeout=1.0)
        return body if status == 200 else None

    def history(self) -> List[Dict[str, Any]]:
        status, body = get_json(self.url + "/history")
        assert status == 200, body
        return list(body["transitions"])

    def log(self) -> str:
        try:
            return (self.dir / "node.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""


class Cluster:
    """Three nodes a, b, c on 127.0.0.1 with the fast timings of the Rust tests."""

    def __init__(self, root: Path, extra: Optional[Dict[str, List[str]]] = None) -> None:
        self.root = root
        token = root / "token"
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        ports = {i: free_port() for i in ("a", "b", "c")}
        self.nodes: Dict[str, Node] = {}
        for node_id, port in ports.items():
            args = [
                "run", "--node-id", node_id, "--group", "it",
                "--listen", f"127.0.0.1:{port}",
                "--data-dir", str(root / node_id / "data"),
            ]
            for peer, pport in ports.items():
                if peer != node_id:
                    args += ["--peer", f"{peer}=http://127.0.0.1:{pport}"]
            args += [
                "--heartbeat-interval", "100ms", "--lease", "400ms",
                "--election-timeout", "700ms", "--admin-token-file", str(token),
            ]
            args += (extra or {}).get(node_id, [])
            self.nodes[node_id] = Node(node_id, port, root, args)

    def __getitem__(self, node_id: str) -> Node:
        return self.nodes[node_id]

    @property
    def urls(self) -> List[str]:
        return [n.url for n in self.nodes.values()]

    def start(self) -> None:
        for n in self.nodes.values():
            n.start()

    def stop(self) -> None:
        for n in self.nodes.values():
            n.kill()

    def agreed_leader(self, timeout: float = DEADLINE) -> Tuple[str, int]:
        """The leader and term every live node reports, once they agree."""

        def agreed() -> Optional[Tuple[str, int]]:
            seen = set()
            for n in self.nodes.values():
                if n.alive:
                    body = n.leader()
                    if body is None:
                        return None
                    seen.add((body["leader"], body["term"]))
            return seen.pop() if len(seen) == 1 else None

        return wait_until("every live node to agree on a leader", agreed, timeout)

    def step_down(self, leader: str, successor: Optional[str] = None) -> None:
        body: Dict[str, Any] = {} if successor is None else {"successor": successor}
        status, answer = post_json(self.nodes[leader].url + "/step-down", body)
        assert status == 202, (status, answer)

    def leader_changes(self, since_term: int) -> Set[Tuple[int, str]]:
        """Every (term, leader) the live nodes' /history records from ``since_term`` on."""
        out = set()
        for n in self.nodes.values():
            if n.alive:
                for e in n.history():
                    if e["leader"] is not None and e["term"] >= since_term:
                        out.add((e["term"], e["leader"]))
        return out

    def logs(self) -> str:
        return "\n".join(f"--- {n.id} ---\n{n.log()}" for n in self.nodes.values())


class Proxy:
    """A TCP forwarder to one node that the test can cut (every connection closed, new ones
    closed at once) and mend: a network partition between the client and that node alone."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self.cut_off = threading.Event()
        self._lock = threading.Lock()
        self._open: List[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self.cut_off.set()
        with self._lock:
            socks, self._open = self._open, []
        for s in socks:
            _close(s)

    def mend(self) -> None:
        self.cut_off.clear()

    def close(self) -> None:
        self._stop.set()
        self.cut()
        _close(self.listener)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut_off.is_set():
                _close(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=2)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
