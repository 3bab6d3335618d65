"""infra/threads.py: a block runs with the asked torch thread count and the old one comes back."""

from __future__ import annotations

import pytest
import torch

from infra.threads import torch_threads


def test_torch_threads_sets_and_restores() -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with torch_threads(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with torch_threads(0):  # 0 leaves it as it is
            assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), torch_threads(1):  # restored on an error too
            raise RuntimeError("boom")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
