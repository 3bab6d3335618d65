"""release_memory gives freed heap memory back to the system (glibc's malloc_trim).

Run: .venv/bin/python -m pytest tests/infra/test_memory.py -q
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# In a fresh process: a heap that earlier tests filled would be reused and hide the growth.
SCENARIO = """
import gc, json
from infra.memory import _malloc_trim, release_memory, rss_bytes
assert _malloc_trim() is not None, "this Linux has no glibc malloc_trim"
start = rss_bytes()
chunks = [bytearray(100_000) for _ in range(10_000)]  # ~1 GB in chunks below glibc's mmap threshold
last = chunks[-1]  # a live chunk at the top of the heap: free() alone cannot shrink the heap
grown = rss_bytes()
del chunks
gc.collect()
kept = rss_bytes()
trimmed = release_memory()
print(json.dumps({"start": start, "grown": grown, "kept": kept, "after": rss_bytes(), "trimmed": trimmed,
                  "last": len(last)}))
"""


@pytest.mark.skipif(platform.system() != "Linux", reason="glibc's malloc_trim: Linux only")
def test_freed_small_chunks_go_back_to_the_system() -> None:
    out = subprocess.run([sys.executable, "-c", SCENARIO], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout.strip().splitlines()[-1])
    mb = {k: (m[k] - m["start"]) / 2**20 for k in ("grown", "kept", "after")}
    assert mb["grown"] > 800, mb
    assert mb["kept"] > 800, f"free() returned the memory itself: nothing to test {mb}"
    assert m["trimmed"] is True and mb["after"] < 100, f"{mb['after']:.0f} MB still held after release_memory"
