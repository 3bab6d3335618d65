"""SID building end to end on a small real world with the real MiniLM encoder.

    pytest -m integration tests/sid/test_build.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
from harness.catalog import Catalog, Item
from infra.recordio import write_records
from sid.build import SidBuildConfig, build_sids, explain, item_text, report_sid_dir, update_sids
from sid.codebook import SidMap, parse_sid

pytestmark = pytest.mark.integration
SIDEKICK = str(Path(sys.executable).parent / "sidekick")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("w") / "world"
    generate_shopping_world(ShoppingWorldConfig(items=800, tasks=20, sessions=300, customers=50), out)
    return out


@pytest.fixture(scope="module")
def sid_dir(world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sid")
    build_sids(SidBuildConfig(levels=2, codebook_size=32), world, out, cache_dir=out.parent / "cache")
    return out


def test_item_text_has_title_category_and_attributes_but_not_seller() -> None:
    item = Item(item_id="a", title="Trail Boots", category_path=["Outdoor", "Footwear"],
                attributes={"brand": "Northpeak", "features": ["waterproof", "light"], "seller": "MegaMart"})
    text = item_text(item)
    assert text == "Trail Boots. Outdoor > Footwear. brand: Northpeak; features: waterproof, light"


def test_every_item_gets_exactly_one_sid(world: Path, sid_dir: Path) -> None:
    catalog, _ = Catalog.load(world / "catalog.jsonl")
    sids = SidMap.load(sid_dir / "sids.jsonl")
    assert sorted(sids.item_ids) == sorted(catalog.ids()) and sids.depth == 3
    assert len({tuple(r) for r in sids.codes}) == len(catalog)  # bijection
    assert sids.codes[:, :2].max() < 32


def test_report_and_labels(sid_dir: Path) -> None:
    report = json.loads((sid_dir / "report.json").read_text())
    assert report["items"] == 800 and 0 <= report["collision_rate"] < 1
    assert [lv["used"] for lv in report["per_level"]] == [32, 32]  # no dead codes
    assert all(p["top_category_purity"] > 0.3 for p in report["purity"])
    labels = json.loads((sid_dir / "labels.json").read_text())
    assert len(labels) == 64 and all(isinstance(v, str) and v for v in labels.values())
    again = report_sid_dir(sid_dir)
    assert again["collision_rate"] == report["collision_rate"] and again["purity"] == report["purity"]


def test_similar_items_share_level1_more_than_chance(world: Path, sid_dir: Path) -> None:
    catalog, _ = Catalog.load(world / "catalog.jsonl")
    sids = SidMap.load(sid_dir / "sids.jsonl")
    leaf = np.array([hash(tuple(catalog[i].category_path)) for i in sids.item_ids])
    same_leaf = leaf[:, None] == leaf[None, :]
    same_code = sids.codes[:, :1] == sids.codes[:, :1].T
    np.fill_diagonal(same_leaf, False)
    assert same_code[same_leaf].mean() > 5 * same_code[~same_leaf].mean()


def test_explain(sid_dir: Path) -> None:
    sids = SidMap.load(sid_dir / "sids.jsonl")
    item = sids.item_ids[0]
    result = explain(sid_dir, sids.sid_of(item))
    assert result["item_id"] == item and len(result["levels"]) == 3
    assert result["levels"][0]["items"] >= result["levels"][1]["items"] >= 1 and result["levels"][0]["words"]
    prefix = explain(sid_dir, "".join(sids.sid_of(item).split(">")[:1]) + ">")
    assert prefix["item_id"] is None and len(prefix["levels"]) == 1


def test_category_aligned_level1(world: Path, tmp_path: Path) -> None:
    build_sids(SidBuildConfig(levels=2, codebook_size=32, align_level1="category"), world, tmp_path,
               cache_dir=tmp_path / "cache")
    catalog, _ = Catalog.load(world / "catalog.jsonl")
    sids = SidMap.load(tmp_path / "sids.jsonl")
    tops = sorted({i.category_path[0] for i in catalog})
    for iid, row in zip(sids.item_ids, sids.codes, strict=True):
        assert tops[row[0]] == catalog[iid].category_path[0]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["purity"][0]["top_category_purity"] == 1.0


def test_incremental_update(world: Path, sid_dir: Path, tmp_path: Path) -> None:
    import shutil

    work = tmp_path / "sid"
    shutil.copytree(sid_dir, work)
    catalog, _ = Catalog.load(world / "catalog.jsonl")
    items = list(catalog)
    kept, removed = items[5:], items[:5]
    new = [Item(item_id=f"new-{k}", title=f"Northpeak waterproof hiking boots model {k}",
                category_path=["Outdoor", "Footwear", "Hiking boots"], price=80.0, stock=3) for k in range(4)]
    write_records(tmp_path / "catalog.jsonl", kept + new, Item)
    before = SidMap.load(sid_dir / "sids.jsonl")
    counts = update_sids(work, tmp_path / "catalog.jsonl", cache_dir=tmp_path / "cache")
    assert counts == {"items": 799, "added": 4, "removed": 5}
    after = SidMap.load(work / "sids.jsonl")
    for item in kept:
        assert after.codes_of(item.item_id) == before.codes_of(item.item_id)
    assert all(i.item_id not in after for i in removed)
    assert len({tuple(r) for r in after.codes}) == len(after)


def test_cli_build_report_explain(world: Path, tmp_path: Path) -> None:
    out = tmp_path / "sid"
    proc = subprocess.run([SIDEKICK, "sid", "build", str(world), "--out", str(out), "--levels", "2",
                           "--codebook-size", "16"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "collision rate before suffix" in " ".join(proc.stdout.split())
    proc = subprocess.run([SIDEKICK, "sid", "report", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and (out / "report.json").is_file()
    sid = SidMap.load(out / "sids.jsonl").sid_of("sku-0000003")
    proc = subprocess.run([SIDEKICK, "sid", "explain", str(out), sid], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "= item sku-0000003" in proc.stdout
    assert parse_sid(sid)
    proc = subprocess.run([SIDEKICK, "sid", "explain", str(out), "<s1_99999>"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and "no item has the prefix" in proc.stderr and "Traceback" not in proc.stderr
