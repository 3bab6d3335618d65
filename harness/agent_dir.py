"""The agent directory: a SID-aware model saved as an HF checkpoint with its SID map beside it.

Below serving and training, so both read and write it without importing each other:

    save_agent(model, tokenizer, token_map, Path("runs/sid"), Path("runs/agent"))
    agent = load_agent(Path("runs/agent"))            # model, tokenizer, SID token map, SID map

Precision: ``dtype="auto"`` loads bf16 weights on CPUs with native bf16 (AVX512-BF16/AMX), fp32
elsewhere — right for inference; a trainer loads with ``dtype="fp32"``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from infra.engines import Engine, EngineSettings, build_engine
from infra.text_encoder import bf16_supported
from sid.build import LABELS_FILE, SIDS_FILE
from sid.codebook import SidMap
from sid.tokens import TOKEN_MAP_FILE, SidTokenMap

DtypeName = Literal["auto", "bf16", "fp32"]
SID_START = "<|sid_start|>"
SID_END = "<|sid_end|>"
PROTOCOL_TOKENS = (SID_START, SID_END)
"""Special tokens of the action protocol: a SID span is ``<|sid_start|><s1_a><s2_b>…<|sid_end|>``."""
AGENT_FILE = "agent.json"
BASE_KEY = "sidekick_base"
"""Config attribute naming the base model (``"smollm2-135m"``, ``"tiny"`` or a path); saved in config.json."""
_AGENT_FORMAT = "sidekick.agent/1"
_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class ModelError(ValueError):
    """A base model name, checkpoint or agent directory that cannot be loaded as asked."""


def resolve_dtype(dtype: DtypeName) -> torch.dtype:
    """``"auto"`` = bf16 where the CPU has native bf16 (or on a GPU with bf16), else fp32."""
    if dtype == "auto":
        native = (torch.cuda.is_available() and torch.cuda.is_bf16_supported()) or bf16_supported()
        return torch.bfloat16 if native else torch.float32
    if dtype not in _DTYPES:
        raise ModelError(f"dtype {dtype!r}: choose auto, bf16 or fp32")
    return _DTYPES[dtype]


@contextmanager
def _no_hf_progress() -> Iterator[None]:
    """Silence transformers' per-load progress bars (noise for sub-second loads and saves); restore after."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _load_dir(path: Path, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model + tokenizer from a local HF directory; pad falls back to eos (batching needs one)."""
    if not (path / "config.json").is_file():
        raise ModelError(f"{path} is not an HF checkpoint directory (no config.json)")
    with _no_hf_progress():
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        # use_kernels=False: transformers would otherwise fetch "hub kernels" when a CUDA model enters train or
        # eval mode (found on the GPU check); Sidekick runs offline and uses the model's own layers
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True, use_kernels=False)
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.eval(), tokenizer


@dataclass
class Agent:
    """A SID-aware model loaded from an agent directory (see :func:`save_agent`)."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    token_map: SidTokenMap
    sid_map: SidMap
    path: Path
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def sid_start_id(self) -> int:
        return int(self.tokenizer.get_vocab()[SID_START])

    @property
    def sid_end_id(self) -> int:
        return int(self.tokenizer.get_vocab()[SID_END])


def save_agent(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, token_map: SidTokenMap, sid_dir: Path,
               out_dir: Path, app_files: Mapping[str, str] | None = None) -> Path:
    """Write a normal HF checkpoint directory plus the SID files beside it; returns ``out_dir``.

    Adds ``sid_tokens.json`` (token map), copies of ``sids.jsonl`` and ``labels.json``, the app's own files
    (``app_files``: file name -> text, what the app learnt in training besides the weights, e.g. shopping's
    ``vocabulary.json``; listed in agent.json, carried on by :func:`agent_app_files`), and ``agent.json``
    (base, dtype, SID levels, created) — written last, so its presence means complete.
    """
    sid_dir, out_dir = Path(sid_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / AGENT_FILE).unlink(missing_ok=True)
    with _no_hf_progress():
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
    token_map.save(out_dir)
    for name in (SIDS_FILE, LABELS_FILE):
        if (sid_dir / name).is_file():
            shutil.copyfile(sid_dir / name, out_dir / name)
    for name, text in (app_files or {}).items():
        if Path(name).name != name or name in (AGENT_FILE, SIDS_FILE, LABELS_FILE, TOKEN_MAP_FILE):
            raise ValueError(f"app file name {name!r}: a plain file name, not one of the agent's own files")
        (out_dir / name).write_text(text)
    info = {
        "format": _AGENT_FORMAT,
        "base": getattr(model.config, BASE_KEY, None) or model.config.name_or_path,
        "dtype": str(model.dtype).removeprefix("torch."),
        "sid_levels": token_map.depth, "sid_sizes": token_map.sizes,
        "protocol_tokens": list(PROTOCOL_TOKENS),
        "sid_dir": str(sid_dir.resolve()),
        "app_files": sorted(app_files or {}),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out_dir / AGENT_FILE).write_text(json.dumps(info, indent=1))
    return out_dir


def agent_app_files(agent: Agent) -> dict[str, str]:
    """The app files an agent directory carries (see :func:`save_agent`), to save with a later stage's agent."""
    return {name: (agent.path / name).read_text() for name in agent.info.get("app_files", [])
            if (agent.path / name).is_file()}


def load_agent(agent_dir: Path, *, dtype: DtypeName | None = None) -> Agent:
    """Load what :func:`save_agent` wrote. ``dtype=None`` keeps the saved dtype (an exact round trip)."""
    agent_dir = Path(agent_dir)
    info_path = agent_dir / AGENT_FILE
    if not info_path.is_file():
        raise ModelError(f"{agent_dir} is not an agent directory (no {AGENT_FILE}; an interrupted save?)")
    info = json.loads(info_path.read_text())
    if info.get("format") != _AGENT_FORMAT:
        raise ModelError(f"{info_path}: format {info.get('format')!r}, expected {_AGENT_FORMAT!r}")
    torch_dtype = resolve_dtype(dtype) if dtype is not None else getattr(torch, info["dtype"])
    model, tokenizer = _load_dir(agent_dir, torch_dtype)
    if not (agent_dir / TOKEN_MAP_FILE).is_file():
        raise ModelError(f"{agent_dir} has no {TOKEN_MAP_FILE}")
    token_map = SidTokenMap.load(agent_dir)
    vocab = tokenizer.get_vocab()
    wrong = [t for t, i in token_map.token_ids.items() if vocab.get(t) != i]
    if wrong:
        raise ModelError(f"{agent_dir}: {len(wrong)} SID tokens have other ids in the tokenizer, e.g. {wrong[:3]}")
    sid_map = SidMap.load(agent_dir / SIDS_FILE)
    if sid_map.depth > token_map.depth:
        raise ModelError(f"{agent_dir}: SIDs have {sid_map.depth} levels but the tokens only {token_map.depth}")
    return Agent(model=model, tokenizer=tokenizer, token_map=token_map, sid_map=sid_map, path=agent_dir, info=info)


def agent_engine(agent: Agent, settings: EngineSettings | None = None) -> Engine:
    """The agent's model behind the engine its settings name (``hf`` by default), through the one factory."""
    return build_engine(settings or EngineSettings(), agent.model, agent.tokenizer, checkpoint=agent.path)
