"""Fixtures for the training tests: the text of a tiny seeded shopping world, and a tiny SID directory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sid.build import LABELS_FILE, SIDS_FILE
from sid.codebook import SidMap

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
