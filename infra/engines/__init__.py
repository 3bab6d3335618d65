"""Generation engines behind one `Engine` interface: ``hf`` (the CPU default) and ``vllm`` (GPU).

    engine = make_engine("hf", model, tokenizer, dtype="auto")
    engine = build_engine(EngineSettings(backend="vllm"), model, tokenizer, checkpoint=Path("runs/agent"))
    [[completion]] = engine.generate([GenerationRequest(prompt="hi", params=SamplingParams(temperature=0))])
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infra.engines.base import (
    Completion,
    Engine,
    EngineAsleep,
    EngineError,
    EngineUnavailable,
    GenerationRequest,
    JumpOracle,
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
    "EngineSettings",
    "EngineUnavailable",
    "GenerationRequest",
    "HFEngine",
    "JumpOracle",
    "LogitsConstraint",
    "RowLogitsProcessor",
    "SamplingParams",
    "VllmEngine",
    "WeightsMissing",
    "build_engine",
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


class EngineSettings(BaseModel):
    """Which engine serves a model and how: the ``engine:`` section of the serve config and of RL rollout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["hf", "vllm"] = Field("hf", description="hf (transformers; the CPU default) or vllm (GPU).")
    dtype: Literal["auto", "bf16", "fp32"] = Field("auto", description="auto = bf16 where the hardware has it.")
    max_batch_size: int = Field(32, ge=1, description="Most sequences in one engine batch.")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1, description="vllm: share of GPU memory it may take.")
    max_model_len: int | None = Field(None, ge=64, description="vllm: context length; None = the model's.")
    enforce_eager: bool = Field(False, description="vllm: no CUDA graphs (faster start, slower decode).")
    prefix_min_tokens: int = Field(256, ge=1, description="hf: a call reuses the KV of its prompts' shared leading "
                                   "tokens (kept across calls) when they share at least this many.")


def build_engine(settings: EngineSettings, model: Any, tokenizer: Any, *, checkpoint: Path | None = None) -> Engine:
    """The one engine factory that serving and RL rollout use: ``hf`` runs the loaded ``model``; ``vllm`` loads
    ``checkpoint`` (an HF directory, e.g. an agent directory) on the GPU with ``tokenizer`` rendering prompts."""
    if settings.backend == "hf":
        return make_engine("hf", model, tokenizer, dtype=settings.dtype, max_batch_size=settings.max_batch_size,
                           prefix_min_tokens=settings.prefix_min_tokens)
    if checkpoint is None:
        raise ValueError("engine backend vllm needs the model's checkpoint directory")
    return make_engine("vllm", str(checkpoint), tokenizer, dtype=settings.dtype,
                       max_batch_size=settings.max_batch_size,
                       gpu_memory_utilization=settings.gpu_memory_utilization,
                       max_model_len=settings.max_model_len, enforce_eager=settings.enforce_eager)
