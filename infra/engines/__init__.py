"""Generation engines behind one `Engine` interface: ``hf`` (the CPU default) and ``vllm`` (GPU).

    engine = make_engine("hf", model, tokenizer, dtype="auto")
    [[completion]] = engine.generate([GenerationRequest(prompt="hi", params=SamplingParams(temperature=0))])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from infra.engines.base import (
    Completion,
    Engine,
    EngineAsleep,
    EngineError,
    EngineUnavailable,
    GenerationRequest,
    LogitsConstraint,
    RowLogitsProcessor,
    SamplingParams,
    WeightsMissing,
)
from infra.engines.hf import HFEngine
from infra.engines.vllm import VllmEngine

__all__ = [
    "Completion",
    "Engine",
    "EngineAsleep",
    "EngineError",
    "EngineUnavailable",
    "GenerationRequest",
    "HFEngine",
    "LogitsConstraint",
    "RowLogitsProcessor",
    "SamplingParams",
    "VllmEngine",
    "WeightsMissing",
    "make_engine",
]


def make_engine(backend: Literal["hf", "vllm"], model: Any, tokenizer: Any, **kwargs: Any) -> Engine:
    """Build an engine: ``hf`` takes a loaded model; ``vllm`` a checkpoint directory (tokenizer may be None).

    ``kwargs`` go to the backend's constructor, whose keyword-only arguments reject typos.
    """
    engines: dict[str, Callable[..., Engine]] = {"hf": HFEngine, "vllm": VllmEngine}
    if backend not in engines:
        raise ValueError(f"unknown engine backend {backend!r}; choose one of {sorted(engines)}")
    return engines[backend](model, tokenizer, **kwargs)
