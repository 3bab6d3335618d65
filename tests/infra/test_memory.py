"""release_memory gives freed heap memory back to the system (glibc's malloc_trim).

Run: .venv/bin/python -m pytest tests/infra/test_memory.py -q
"""

from __future__ import annotations

import gc
import platform

import pytest

from infra.memory import _malloc_trim, release_memory, rss_bytes


@pytest.mark.skipif(platform.system() != "Linux", reason="RSS from /proc and glibc's malloc_trim: Linux only")
def test_freed_small_chunks_go_back_to_the_system() -> None:
    assert _malloc_trim() is not None, "this Linux has no glibc malloc_trim"
    start = rss_bytes()
    assert start is not None
    chunks = [bytearray(100_000) for _ in range(10_000)]  # ~1 GB in chunks below glibc's mmap threshold
    last = chunks[-1]  # a live chunk at the top of the heap: free() alone cannot shrink it
    grown = rss_bytes()
    assert grown is not None and grown - start > 800 * 2**20
    del chunks
    gc.collect()
    kept = rss_bytes()
    assert kept is not None and kept - start > 800 * 2**20, "free() returned the memory itself: nothing to test"
    assert release_memory() is True
    after = rss_bytes()
    assert after is not None and after - start < 100 * 2**20, f"{(after - start) / 2**20:.0f} MB still held"
    assert len(last) == 100_000
