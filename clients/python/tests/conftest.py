from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator, List

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cluster import Cluster, Proxy  # noqa: E402


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three started nodes; killed by PID at teardown (their logs printed if the test failed)."""
    c = Cluster(tmp_path)
    c.start()
    yield c
    c.stop()
    sys.stderr.write(c.logs()[-6000:])


@pytest.fixture
def proxies() -> Iterator[List[Proxy]]:
    made: List[Proxy] = []
    yield made
    for p in made:
        p.close()
