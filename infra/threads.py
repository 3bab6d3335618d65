"""Torch's intra-op thread count for one block of work.

On a shared 2-core machine two spinning OpenMP threads are several times slower than one, so the benchmarks
run their models on ``threads`` (default 1) and put the process's setting back afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch threads (0 = leave the setting as it is), then restore the old number."""
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
