"""VllmEngine's own bookkeeping around ``vllm.LLM`` — aborted requests dropped, sinks fed after the call, speed —
checked against a stand-in ``vllm`` module (CI has no GPU and no vLLM; ``bench/engines.py --vllm`` checks the real one).

Run: .venv/bin/python -m pytest tests/infra/engines/test_vllm_fake.py -q
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerFast

from infra.engines import vllm as vllm_engine
from infra.engines.base import GenerationRequest, Measured, SamplingParams
from infra.engines.vllm import VllmEngine


@dataclasses.dataclass
class EngineArgs:
    model: str = ""


class FakeLLM:
    """``vllm.LLM`` as far as VllmEngine samples with it: completion j of any prompt is [10 + j, 11 + j, 12 + j]."""

    def __init__(self, **engine_args: Any) -> None:
        self.engine_args = engine_args  # kept for inspection: the engine's whole LLM(...) configuration
        self.batches: list[list[list[int]]] = []

    def generate(self, prompts: list[dict[str, list[int]]], params: list[Any], use_tqdm: bool) -> list[Any]:
        self.batches.append([p["prompt_token_ids"] for p in prompts])
        time.sleep(0.003)
        return [types.SimpleNamespace(outputs=[self._output(j) for j in range(p.n)]) for p in params]

    @staticmethod
    def _output(j: int) -> Any:
        ids = [10 + j, 11 + j, 12 + j]
        return types.SimpleNamespace(token_ids=ids, logprobs=[{t: types.SimpleNamespace(logprob=-1.0)} for t in ids],
                                     finish_reason="length", stop_reason=None, text=f"text {j}")


@pytest.fixture
def engine(tmp_path: Path, tokenizer: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch) -> Iterator[VllmEngine]:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here; bench/engines.py --vllm exercises it")
    fake = types.ModuleType("vllm")
    fake.EngineArgs = EngineArgs  # type: ignore[attr-defined]
    fake.LLM = FakeLLM  # type: ignore[attr-defined]
    fake.SamplingParams = types.SimpleNamespace  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # restored afterwards (the engine sets it)
    vllm_engine._adapter_class.cache_clear()
    yield VllmEngine(str(tmp_path), tokenizer)  # no generation config there: eos from the tokenizer
    vllm_engine._adapter_class.cache_clear()


def test_aborted_requests_are_not_sent_and_sinks_get_tokens_after_the_call(engine: VllmEngine) -> None:
    got: list[tuple[int, int]] = []
    params = SamplingParams(n=2, max_new_tokens=3)
    out = engine.generate([GenerationRequest(prompt=[5, 6], params=params, deadline=time.monotonic() - 1),
                           GenerationRequest(prompt=[7, 8], params=params, stream=lambda i, t: got.append((i, t)))])
    llm = engine._llm
    assert isinstance(llm, FakeLLM) and llm.batches == [[[7, 8]]]
    assert [(c.token_ids, c.finish_reason) for c in out[0]] == [([], "abort"), ([], "abort")]
    assert [c.token_ids for c in out[1]] == [[10, 11, 12], [11, 12, 13]]
    assert got == [(0, 10), (0, 11), (0, 12), (1, 11), (1, 12), (1, 13)]


def test_speed_spreads_the_call_over_its_tokens(engine: VllmEngine) -> None:
    assert isinstance(engine, Measured)
    engine.generate([GenerationRequest(prompt=[5, 6], params=SamplingParams(n=2, max_new_tokens=3))] * 3)  # 6 rows
    table = engine.speed.snapshot()
    assert set(table["prefill_ms"]) == {8}
    assert table["prefill_ms"][8] == pytest.approx(table["step_ms"][8]) and table["prefill_ms"][8] >= 1.0  # 3+ ms / 3
