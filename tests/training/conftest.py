"""Fixtures for the training tests: the text of a tiny seeded shopping world, and a tiny SID directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.catalog import Catalog
from sid.build import LABELS_FILE, SIDS_FILE
from sid.codebook import SidMap
from sid.quantize import add_collision_suffix

SID_SIZES = [4, 3, 2]  # two quantiser levels + the collision suffix
SID_LABELS = {"<s1_0>": "boots hiking waterproof", "<s1_1>": "tent camping", "<s1_2>": "kitchen knife",
              "<s2_0>": "red", "<s2_1>": "blue wool"}  # <s1_3>, <s2_2> and the suffix level have no label


@pytest.fixture(scope="session")
def world_corpus(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Titles, category paths and task messages of a small seeded shopping world (what `tiny` trains on)."""
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world

    out = tmp_path_factory.mktemp("world")
    generate_shopping_world(ShoppingWorldConfig(items=600, tasks=120, sessions=20, customers=10), out)
    texts: list[str] = []
    for line in (out / "catalog.jsonl").open():
        item = json.loads(line)
        texts += [item["title"], " > ".join(item["category_path"])]
    for line in (out / "tasks.jsonl").open():
        texts += [m["content"] for m in json.loads(line)["messages"]]
    return texts


@pytest.fixture
def sid_dir(tmp_path: Path) -> Path:
    """``sids.jsonl`` (20 items, codes in ``SID_SIZES``) and ``labels.json`` for a few of the tokens."""
    rng = np.random.default_rng(0)
    combos = np.array([(a, b, c) for a in range(SID_SIZES[0]) for b in range(SID_SIZES[1])
                       for c in range(SID_SIZES[2])])
    rows = combos[::-1][np.r_[0, 1 + rng.choice(len(combos) - 1, size=19, replace=False)]]  # row 0: largest codes
    out = tmp_path / "sid"
    out.mkdir()
    SidMap([f"sku-{i:07d}" for i in range(len(rows))], rows).save(out / SIDS_FILE)
    (out / LABELS_FILE).write_text(json.dumps(SID_LABELS))
    return out


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
