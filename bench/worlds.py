"""Benchmark world generation: items/s and peak RSS, Sidekick's streaming generator vs a naive baseline.

    python bench/worlds.py --quick      # 20k and 200k items (about a minute)
    python bench/worlds.py              # 20k and 1M items (about 3 minutes)

The baseline is what a user of the contracts would write first: build every listing as a pydantic
``Item``, keep them in a list, then write the list with ``write_records``. Both produce the same
catalog facets; each run is a fresh subprocess so peak RSS is its own. Writes bench/results/worlds.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_SIDEKICK = """
import json, resource, sys, time
from pathlib import Path
from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
n, tasks, sessions, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
t = time.perf_counter()
generate_shopping_world(ShoppingWorldConfig(items=n, tasks=tasks, sessions=sessions), out)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_BASELINE = """
import json, resource, sys, time
from pathlib import Path
import numpy as np
from apps.shopping.world import CHUNK, _chunk_columns, _Tables, build_leaves, facets_of, item_id
from harness.catalog import Item
from infra.recordio import write_records
n, out = int(sys.argv[1]), Path(sys.argv[4])
t = time.perf_counter()
leaves = build_leaves()
tables = _Tables(0, leaves)
items = []
for k, start in enumerate(range(0, n, CHUNK)):
    c = _chunk_columns(k, min(CHUNK, n - start), 0, tables, 0.12)
    for j in range(len(c.leaf)):
        f = facets_of(c, j, leaves)
        attrs = {"brand": f.brand, "colour": f.colour, "material": f.material, "features": f.features}
        if f.size:
            attrs["size"] = f.size
        rating = float(c.rating[j])
        items.append(Item(item_id=item_id(start + j), title=f"{f.brand} {f.leaf.names[0]} {f.colour}",
                          category_path=f.leaf.path, attributes=attrs, price=float(c.price[j]),
                          stock=int(c.stock[j]), rating=None if np.isnan(rating) else rating))
out.mkdir(parents=True, exist_ok=True)
write_records(out / "catalog.jsonl", items, Item)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run(code: str, n: int, tasks: int, sessions: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-c", code, str(n), str(tasks), str(sessions), tmp + "/w"],
                              capture_output=True, text=True, cwd=ROOT, check=False)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        size = sum(p.stat().st_size for p in Path(tmp, "w").rglob("*") if p.is_file())
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["items_per_s"] = n / result["seconds"]
    result["output_mb"] = size / 1e6
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20k and 200k items instead of 20k and 1M")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "worlds.json")
    args = parser.parse_args()
    sizes = (20_000, 200_000) if args.quick else (20_000, 1_000_000)
    rows = []
    for n in sizes:
        rows.append({"impl": "sidekick (catalog only)", "items": n, **_run(_SIDEKICK, n, 0, 0)})
        rows.append({"impl": "baseline: pydantic list", "items": n, **_run(_BASELINE, n, 0, 0)})
    rows.append({"impl": "sidekick (full world)", "items": sizes[0], **_run(_SIDEKICK, sizes[0], 2000, 5000)})
    print(f"{'implementation':<26}{'items':>10}{'seconds':>10}{'items/s':>12}{'peak RSS MB':>13}{'output MB':>11}")
    for r in rows:
        print(f"{r['impl']:<26}{r['items']:>10,}{r['seconds']:>10.2f}{r['items_per_s']:>12,.0f}"
              f"{r['peak_rss_mb']:>13.0f}{r['output_mb']:>11.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"created": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": rows}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
