"""Supervised fine-tuning of a SID-aware agent: full or LoRA, packed, accumulated, resumable, data-parallel.

    sidekick train sft apps/shopping/sft.yaml --max-steps 300            # the CLI
    result = train_sft(load_config(SFTConfig, Path("apps/shopping/sft.yaml")), apps.kit("shopping").sft)

One optimizer step sees a global batch of ``batch_size * grad_accum`` rows (examples, or packs of
examples when ``packing``), read in that order from a row stream that is a fresh seeded permutation
of the rows every epoch. Its loss is the token-level cross-entropy over the assistant tokens of the
whole global batch,

    L = (1 / N) * sum_{rows r, positions t with target y_rt} -log p_theta(y_rt | x_r,<=t),

N = the number of target tokens in the global batch, so gradient accumulation and data parallelism
(:mod:`training.distributed`) give the same gradient as one big batch. Schedule: linear warmup over
``warmup_steps`` to ``lr``, then cosine decay to 0 at the last step (Loshchilov & Hutter, SGDR).
Compute in bf16 autocast over fp32 master weights where the hardware has native bf16.

LoRA (Hu et al. 2021) through peft. The SID tokens are new rows of the embedding (and of the LM
head, tied or not), so with LoRA alone they would stay at their initial values — the known pitfall.
``lora.embeddings="new_tokens"`` trains exactly those rows (peft ``trainable_token_indices``; a tied
head follows the input embedding); ``"full"`` trains the whole embedding and head (peft
``modules_to_save``, kept tied with ``ensure_weight_tying``).

Checkpoints (``out/checkpoints/step-NNNNNN/``) hold the trainable parameters, optimizer, scheduler,
per-rank RNG states and the data position; resuming one gives the same parameters as a run that was
never stopped. The final agent (LoRA merged) is ``out/final``, a normal HF directory with the SID
map beside it (:func:`training.models.save_agent`). Metrics go to ``log_dir/metrics.jsonl`` and, if
tensorboard is installed, ``log_dir/tb``.
"""

from __future__ import annotations

import copy
import json
import math
import random
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from harness.agent_dir import PROTOCOL_TOKENS, DtypeName, resolve_dtype, save_agent
from infra.logging import get_logger
from infra.manifest import write_manifest
from sid.tokens import SidTokenMap
from training.distributed import DistContext, run_data_parallel
from training.models import TINY, load_base, make_sid_aware
from training.sft_data import (
    IGNORE,
    Batch,
    Row,
    SftData,
    TrajectorySpec,
    collate,
    encode_all,
    pack_examples,
    rows_digest,
    shuffled,
)

log = get_logger(__name__)

CHECKPOINTS_DIR = "checkpoints"
FINAL_DIR = "final"
METRICS_FILE = "metrics.jsonl"
_CKPT_FORMAT = "sidekick.sft_checkpoint/1"
_META = "meta.json"
_RESUMABLE_CHANGES = {"out", "resume", "eval_every", "save_every", "keep_checkpoints", "log_every", "log_dir",
                      "cache_dir", "workers", "threads", "device"}
"""Config fields that may differ between a checkpoint and the run resuming it."""


class SFTError(ValueError):
    """An SFT run that cannot start or continue as configured; the message says what to change."""


class ResumeError(SFTError):
    """A checkpoint that does not belong to this run (other config, other data) or is incomplete."""


class LoraSettings(BaseModel):
    """LoRA adapters (peft) on the attention and MLP projections; the SID rows of the embeddings still train."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(default=16, ge=1, description="Rank of each adapter (default 16).")
    alpha: int = Field(default=32, ge=1, description="Updates are scaled by alpha / r (default 32).")
    dropout: float = Field(default=0.05, ge=0, lt=1, description="Dropout on the adapter input (default 0.05).")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1, description="Module names that get adapters (default: every Llama attention/MLP projection).")
    embeddings: Literal["new_tokens", "full"] = Field(
        default="new_tokens", description="new_tokens (default) = train only the SID and protocol token rows of the "
        "embedding and LM head; full = train the whole embedding and LM head.")


class SFTConfig(BaseModel):
    """One SFT run. Paths are relative to the working directory."""

    model_config = ConfigDict(extra="forbid")

    base: str = Field(default=TINY, description="Base model: 'tiny', 'smollm2-135m' or an HF checkpoint directory.")
    world: Path = Field(description="World directory (catalog.jsonl + tasks.jsonl) to build examples from.")
    sid: Path = Field(description="SID directory (sids.jsonl, labels.json) of that world's catalog.")
    tasks: Path | None = Field(default=None, description="Tasks to train on (a tasks.jsonl or a directory holding "
                                                         "one, e.g. a curated train split); None = world/tasks.jsonl.")
    out: Path = Field(description="Run directory: checkpoints/, logs/ and the final agent in final/.")
    lora: LoraSettings | None = Field(default=None, description="LoRA settings; None (default) = full fine-tune.")
    lr: float = Field(default=1e-3, gt=0, description="Peak learning rate after warmup (default 1e-3).")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW decoupled weight decay on matrices (default 0).")
    warmup_steps: int = Field(default=20, ge=0, description="Optimizer steps of linear warmup (default 20; "
                              "capped at half the run's steps, so a short --max-steps run still decays).")
    max_steps: int = Field(default=-1, ge=-1, description="Optimizer steps; -1 (default) = from epochs.")
    epochs: float = Field(default=1.0, gt=0, description="Passes over the training rows when max_steps = -1.")
    batch_size: int = Field(default=16, ge=1, description="Rows per micro-batch, all workers together (default 16).")
    grad_accum: int = Field(default=1, ge=1, description="Micro-batches per optimizer step (default 1).")
    max_seq_len: int = Field(default=256, ge=16, description="Tokens per row; longer examples are cut (default 256).")
    packing: bool = Field(default=True, description="Pack short examples into rows of max_seq_len tokens, "
                          "each example attending only to itself (default true).")
    precision: DtypeName = Field(default="auto", description="Compute: bf16 = fp32 weights + bf16 autocast; fp32; "
                                 "auto (default) = bf16 where the CPU/GPU has native bf16.")
    max_grad_norm: float = Field(default=1.0, ge=0, description="Clip the global gradient norm; 0 = off.")
    eval_every: int = Field(default=100, ge=0, description="Eval loss every N steps (and at the end); 0 = end only.")
    eval_max: int = Field(default=512, ge=0, description="Held-out examples in the eval loss (default 512).")
    eval_fraction: float = Field(default=0.1, ge=0, lt=1, description="Share of tasks held out (by task-id hash).")
    align_items: int = Field(default=-1, ge=-1, description="Catalog items with alignment examples; -1 = all.")
    targets_per_task: int = Field(default=3, ge=1, description="Examples per task (set targets: its first ids).")
    trajectories_per_task: int = Field(default=0, ge=0, description="Tool-call trajectories per training task in "
                                       "the harness protocol (sid_retrieve / bundle -> respond; ask_user first for "
                                       "multi_turn); 0 (default) = none. Needs trajectory_spec, and a max_seq_len "
                                       "that holds the system prompt and tool schemas (about 2k tokens on tiny).")
    theme_bundles: int = Field(default=0, ge=0, description="Shopping, compact protocol: extra find_bundle plan "
                               "examples over themes made from the catalog's departments (apps/shopping/themes.py), "
                               "so that a theme no training task had is still planned as a bundle; 0 (default) = "
                               "none. Needs trajectories_per_task > 0.")
    trajectory_spec: TrajectorySpec | None = Field(
        default=None, description="The app's system prompt and tool schemas that trajectories are rendered with "
        "(as the serving loop renders them); required when trajectories_per_task > 0, dropped when it is 0 (so a "
        "caller may always pass it). None (default) = unset.")
    save_every: int = Field(default=100, ge=0, description="Checkpoint every N steps (and at the end); 0 = end only.")
    keep_checkpoints: int = Field(default=2, ge=1, description="Most recent checkpoints kept (default 2).")
    log_every: int = Field(default=10, ge=1, description="Steps between metric lines (default 10).")
    seed: int = Field(default=0, ge=0, description="Seeds data order, trajectory results, LoRA init and dropout "
                      "(default 0).")
    workers: int = Field(default=1, ge=1, description="Data-parallel workers; 1 (default) = this process, "
                         ">1 = Ray actors with torch.distributed.")
    threads: int = Field(default=0, ge=0, description="Torch threads per worker; 0 = torch's default (one "
                         "worker) or CPUs / workers (Ray workers). On a busy box 1 is often fastest.")
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="auto = cuda if available, else cpu.")
    log_dir: Path | None = Field(default=None, description="Metrics and TensorBoard; None = out/logs.")
    cache_dir: Path | None = Field(default=None, description="Model caches; None = settings.cache_dir.")
    resume: bool = Field(default=False, description="Continue from the latest checkpoint in out/checkpoints.")

    @model_validator(mode="after")
    def _compatible(self) -> SFTConfig:
        if self.batch_size % self.workers:
            raise ValueError(f"batch_size {self.batch_size} must be a multiple of workers {self.workers} "
                             "(each worker takes an equal share of every micro-batch)")
        if self.theme_bundles and not self.trajectories_per_task:
            raise ValueError(f"theme_bundles {self.theme_bundles} needs trajectories_per_task > 0: the theme bundles "
                             "are plan examples of the served protocol")
        if self.trajectories_per_task == 0:
            self.trajectory_spec = None  # unused: kept out of checkpoints, manifests and the resume check
        return self

    @property
    def global_batch(self) -> int:
        """Rows per optimizer step."""
        return self.batch_size * self.grad_accum

    @property
    def logs(self) -> Path:
        return self.log_dir if self.log_dir is not None else self.out / "logs"


@dataclass(frozen=True)
class TrainProgress:
    """What a progress callback receives after every optimizer step (``eval_loss`` only after an eval)."""

    step: int
    total_steps: int
    loss: float
    lr: float
    tokens_per_s: float
    eval_loss: float | None = None


@dataclass
class SFTResult:
    """Where a run stands: ``finished`` once the last step is done and ``final_dir`` is written."""

    out: Path
    step: int
    total_steps: int
    finished: bool
    final_dir: Path | None = None
    train_loss: float | None = None
    eval_loss: float | None = None
    tokens: int = 0
    train_seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        """Row tokens (padding excluded, all workers) per second of optimizer steps (eval and saves excluded)."""
        return self.tokens / self.train_seconds if self.train_seconds > 0 else 0.0


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SFTError("device cuda: no GPU is visible; use device: auto or cpu")
    return torch.device(device)


def cosine_with_warmup(step: int, warmup: int, total: int) -> float:
    """LR multiplier: ``(step + 1) / warmup`` during warmup, then ``0.5 (1 + cos(pi * progress))``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


class SftSource(Protocol):
    """Where an SFT run's examples come from: an app's kit (``AppKit.sft``, e.g. ``apps/shopping/sft.py``).

    ``corpus(cfg)`` is what the ``tiny`` base trains its tokenizer on (the world's texts and the app's
    prompt and tools); ``build(cfg)`` the train and held-out examples; ``trajectory_spec()`` the app's
    system prompt and tool schemas, which tool-call trajectories are rendered with. Picklable (Ray workers).
    Optional: ``app_files(cfg) -> {file name: text}``, what the app learns from the same training split besides
    the weights, saved in the agent directory (e.g. shopping's ``vocabulary.json``).
    """

    def corpus(self, cfg: SFTConfig) -> list[str]: ...

    def build(self, cfg: SFTConfig) -> SftData: ...

    def trajectory_spec(self) -> TrajectorySpec: ...


def train_sft(cfg: SFTConfig, source: SftSource,
              progress: Callable[[TrainProgress], None] | None = None) -> SFTResult:
    """Run ``cfg`` to the end (in this process, or on ``cfg.workers`` Ray workers); the CLI calls this.

    Data-parallel: each Ray worker builds ``SFTTrainer(cfg, source, its DistContext)``; one GPU per worker on
    cuda. ``source`` is the app's SFT data (its kit's ``sft``).
    """
    if cfg.workers > 1:
        gpus = 1 if resolve_device(cfg.device).type == "cuda" else 0
        return run_data_parallel(partial(SFTTrainer, cfg, source), cfg.workers, gpus_per_worker=gpus,
                                 threads=cfg.threads, progress=progress)
    trainer = SFTTrainer(cfg, source)
    try:
        trainer.setup()
        return trainer.train(progress)
    finally:
        trainer.close()


class MetricsLog:
    """JSON lines (one object per event) plus TensorBoard scalars when tensorboard is installed."""

    def __init__(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._fh = (log_dir / METRICS_FILE).open("a", encoding="utf-8")
        self._tb: Any = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(log_dir / "tb"))
        except ImportError:
            log.info("tensorboard is not installed: metrics go to %s only", log_dir / METRICS_FILE)

    def write(self, step: int, values: dict[str, float]) -> None:
        self._fh.write(json.dumps({"step": step, "time": round(time.time(), 3), **values}) + "\n")
        self._fh.flush()
        if self._tb is not None:
            for key, value in values.items():
                self._tb.add_scalar(key, value, step)

    def close(self) -> None:
        self._fh.close()
        if self._tb is not None:
            self._tb.close()


class SFTTrainer:
    """``setup()`` -> ``train()`` (-> ``evaluate()``, ``save_checkpoint()``) -> ``close()``."""

    def __init__(self, cfg: SFTConfig, source: SftSource, dist_ctx: DistContext | None = None) -> None:
        self.cfg, self.source = cfg, source
        self.dist = dist_ctx or DistContext()
        self.device = resolve_device(cfg.device)
        if self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.rank % torch.cuda.device_count())
        self.step = 0
        self.total_steps = 0
        self.model: Any = None
        self.tokenizer: PreTrainedTokenizerBase | None = None
        self.token_map: SidTokenMap | None = None
        self.rows: list[Row] = []
        self.eval_rows: list[Row] = []
        self.counts: dict[str, int] = {}
        self._metrics: MetricsLog | None = None
        self._tokens = 0
        self._train_seconds = 0.0
        self._last_loss: float | None = None
        self._last_eval: float | None = None
        self._perms: dict[int, np.ndarray] = {}
        self._bf16 = False

    # ---- setup ------------------------------------------------------------------------------
    def setup(self) -> None:
        """Model, data, optimizer; then the latest checkpoint when ``cfg.resume``."""
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        random.seed(self.cfg.seed + self.dist.rank)
        np.random.seed(self.cfg.seed + self.dist.rank)
        torch.manual_seed(self.cfg.seed)  # the same LoRA init on every rank
        self._setup_model()
        self._setup_data()
        self._setup_optim()
        torch.manual_seed(self.cfg.seed + self.dist.rank)  # then per-rank dropout streams
        checkpoint = self._latest_checkpoint()
        if checkpoint is not None and not self.cfg.resume:
            raise SFTError(f"{self.cfg.out} has checkpoints of an earlier run ({checkpoint.name}): pass --resume "
                           "(resume: true) to continue it, or choose another --out")
        if checkpoint is not None:
            self.load_checkpoint(checkpoint)
        if self.dist.is_main:
            self._metrics = MetricsLog(self.cfg.logs)

    def _setup_model(self) -> None:
        cfg = self.cfg
        corpus = self.source.corpus(cfg) if cfg.base == TINY else None
        model, tokenizer = load_base(cfg.base, dtype="fp32", cache_dir=cfg.cache_dir, corpus=corpus)
        self.token_map = make_sid_aware(model, tokenizer, cfg.sid)
        self.tokenizer = tokenizer
        if cfg.lora is not None:
            vocab = tokenizer.get_vocab()
            new_ids = sorted(self.token_map.token_ids.values()) + [int(vocab[t]) for t in PROTOCOL_TOKENS]
            model = apply_lora(model, cfg.lora, new_ids)
        self.model = model
        self.model.to(self.device).train()
        self._bf16 = resolve_dtype(cfg.precision) == torch.bfloat16

    def _setup_data(self) -> None:
        cfg = self.cfg
        assert self.tokenizer is not None
        if cfg.trajectories_per_task > 0 and cfg.trajectory_spec is None:
            raise SFTError("trajectories_per_task > 0 needs trajectory_spec: the app's system prompt and tool "
                           "schemas (its kit's sft.trajectory_spec())")
        data = self.source.build(cfg)
        train, dropped = encode_all(self.tokenizer, data.train, cfg.max_seq_len)
        evals, _ = encode_all(self.tokenizer, data.eval[:cfg.eval_max], cfg.max_seq_len)
        self.rows = pack_examples(shuffled(train, cfg.seed), cfg.max_seq_len, cfg.packing)
        if not self.rows:
            raise SFTError(f"no training example of {cfg.world} fits max_seq_len {cfg.max_seq_len}: raise it")
        self.eval_rows = pack_examples(evals, cfg.max_seq_len, cfg.packing)
        self.counts = {**data.counts, "dropped_no_target": dropped, "rows": len(self.rows),
                       "eval_rows": len(self.eval_rows)}
        if cfg.max_steps > 0:
            self.total_steps = cfg.max_steps
        else:
            self.total_steps = max(1, math.ceil(cfg.epochs * len(self.rows) / cfg.global_batch))
        log.info("sft data", extra={"fields": self.counts})

    def _setup_optim(self) -> None:
        params = self.trainable_parameters()
        if not params:
            raise SFTError("the model has no trainable parameters")
        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": self.cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        self.optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=self.cfg.lr, betas=(0.9, 0.95),
                                           eps=1e-8)
        warmup, total = min(self.cfg.warmup_steps, self.total_steps // 2), self.total_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: cosine_with_warmup(s, warmup, total))

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    # ---- data stream ------------------------------------------------------------------------
    def _row_at(self, position: int) -> Row:
        """Row at ``position`` of the endless stream: epoch ``position // n`` in its own seeded order."""
        epoch, offset = divmod(position, len(self.rows))
        perm = self._perms.get(epoch)
        if perm is None:
            self._perms = {epoch: np.random.default_rng([self.cfg.seed, 11, epoch]).permutation(len(self.rows))}
            perm = self._perms[epoch]
        return self.rows[int(perm[offset])]

    def _step_rows(self, step: int) -> tuple[list[list[Row]], int, int]:
        """This rank's rows of each micro-batch of ``step``, and the global target and token counts."""
        cfg, w = self.cfg, self.dist.world_size
        start = step * cfg.global_batch
        rows = [self._row_at(start + i) for i in range(cfg.global_batch)]
        share = cfg.batch_size // w
        micro = [rows[m * cfg.batch_size + self.dist.rank * share:][:share] for m in range(cfg.grad_accum)]
        return micro, sum(r.n_targets for r in rows), sum(len(r.input_ids) for r in rows)

    # ---- training ---------------------------------------------------------------------------
    def _autocast(self) -> AbstractContextManager[Any]:
        if not self._bf16:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def _loss_sum(self, batch: Batch) -> tuple[torch.Tensor, int]:
        """Summed cross-entropy over the batch's targets, and how many targets there were."""
        batch = batch.to(self.device)
        parts = _plain_head(self.model)
        if parts is not None:  # the head only where there is a target: most positions are prompt
            decoder, head = parts
            keep = batch.targets != IGNORE  # (B, T)
            with self._autocast():
                hidden = decoder(input_ids=batch.input_ids, position_ids=batch.position_ids,
                                 use_cache=False).last_hidden_state  # (B, T, H)
                logits = head(hidden[keep])  # (N, V)
            loss = F.cross_entropy(logits.float(), batch.targets[keep], reduction="sum")
            return loss, int(keep.sum())
        with self._autocast():
            logits = self.model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False).logits
        assert logits.shape[:2] == batch.targets.shape, f"logits {tuple(logits.shape)} vs {tuple(batch.targets.shape)}"
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE,
                               reduction="sum")  # logits (B*T, V), targets (B*T,)
        return loss, int((batch.targets != IGNORE).sum())

    def _train_step(self) -> tuple[float, float]:
        """One optimizer step on the global batch of ``self.step``; returns (loss per target, grad norm)."""
        assert self.tokenizer is not None
        micro, n_targets, n_tokens = self._step_rows(self.step)
        pad = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), dtype=torch.float64)
        for rows in micro:
            loss, _ = self._loss_sum(collate(rows, pad))
            (loss / max(1, n_targets)).backward()
            loss_sum += loss.detach().double().cpu()
        params = self.trainable_parameters()
        self.dist.all_reduce_grads(params)
        self.dist.all_reduce_sum(loss_sum)
        norm = 0.0
        if self.cfg.max_grad_norm > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm))
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        self._tokens += n_tokens
        return float(loss_sum) / max(1, n_targets), norm

    def train(self, progress: Callable[[TrainProgress], None] | None = None,
              stop_at: int | None = None) -> SFTResult:
        """Train from the current step to ``stop_at`` (default: the end). At the end: eval, checkpoint and
        the final agent. Eval and checkpoints also every ``eval_every`` / ``save_every`` steps."""
        end = self.total_steps if stop_at is None else min(stop_at, self.total_steps)
        window_tokens, window_s = self._tokens, self._train_seconds  # tokens/s over optimizer steps only
        while self.step < end:
            t0 = time.perf_counter()
            loss, norm = self._train_step()
            self._train_seconds += time.perf_counter() - t0
            self._last_loss = loss
            lr = float(self.scheduler.get_last_lr()[0])
            tok_s = (self._tokens - window_tokens) / max(1e-9, self._train_seconds - window_s)
            last = self.step == self.total_steps
            if self.step % self.cfg.log_every == 0 or last:
                self._log({"loss": loss, "lr": lr, "grad_norm": norm, "tokens_per_s": tok_s})
                window_tokens, window_s = self._tokens, self._train_seconds
            eval_loss = None
            if last or (self.cfg.eval_every and self.step % self.cfg.eval_every == 0):
                eval_loss = self.evaluate()
            if last or (self.cfg.save_every and self.step % self.cfg.save_every == 0):
                self.save_checkpoint()
            if progress is not None:
                progress(TrainProgress(self.step, self.total_steps, loss, lr, tok_s, eval_loss))
        if self.step >= self.total_steps:
            return self._finish()
        return self._result(finished=False)

    def _log(self, values: dict[str, float]) -> None:
        if self._metrics is not None:
            self._metrics.write(self.step, values)

    @torch.no_grad()
    def evaluate(self) -> float | None:
        """Mean cross-entropy per assistant token on the held-out rows (all workers); None if there are none."""
        if not self.eval_rows:
            return None
        assert self.tokenizer is not None
        pad = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
        mine = self.eval_rows[self.dist.rank::self.dist.world_size]
        size = self.cfg.batch_size // self.dist.world_size
        totals = torch.zeros(2, dtype=torch.float64)  # (loss sum, targets)
        self.model.eval()
        try:
            for start in range(0, len(mine), size):
                loss, n = self._loss_sum(collate(mine[start:start + size], pad))
                totals += torch.tensor([float(loss), n], dtype=torch.float64)
        finally:
            self.model.train()
        self.dist.all_reduce_sum(totals)
        self._last_eval = float(totals[0] / max(1.0, float(totals[1])))
        self._log({"eval_loss": self._last_eval})
        return self._last_eval

    def _result(self, finished: bool, final_dir: Path | None = None) -> SFTResult:
        return SFTResult(out=self.cfg.out, step=self.step, total_steps=self.total_steps, finished=finished,
                         final_dir=final_dir, train_loss=self._last_loss, eval_loss=self._last_eval,
                         tokens=self._tokens, train_seconds=self._train_seconds, counts=dict(self.counts))

    def _finish(self) -> SFTResult:
        final = self.cfg.out / FINAL_DIR
        if self.dist.is_main:
            self.export(final)
        self.dist.barrier()
        return self._result(finished=True, final_dir=final)

    def export(self, out_dir: Path) -> Path:
        """Write the agent (LoRA merged into a copy of the model) as a normal HF directory + SID files."""
        assert self.tokenizer is not None and self.token_map is not None
        model = self.model
        if self.cfg.lora is not None:
            model = copy.deepcopy(model).merge_and_unload()
        app_files = getattr(self.source, "app_files", None)
        save_agent(model, self.tokenizer, self.token_map, self.cfg.sid, out_dir,
                   app_files=app_files(self.cfg) if callable(app_files) else None)
        counts: dict[str, Any] = {**self.counts, "steps": self.step, "tokens": self._tokens}
        if self._last_eval is not None:
            counts["eval_loss"] = round(self._last_eval, 5)
        write_manifest(out_dir, stage="training.sft", config=self.cfg.model_dump(mode="json"), counts=counts,
                       inputs=[self.cfg.world, self.cfg.sid])
        return out_dir

    # ---- checkpoints ------------------------------------------------------------------------
    def _checkpoints(self) -> Iterator[Path]:
        """Complete checkpoints (their meta.json written), oldest first."""
        root = self.cfg.out / CHECKPOINTS_DIR
        if root.is_dir():
            yield from sorted(p for p in root.glob("step-*") if (p / _META).is_file() and p.suffix != ".tmp")

    def _latest_checkpoint(self) -> Path | None:
        found = list(self._checkpoints())
        return found[-1] if found else None

    def _data_position(self) -> dict[str, Any]:
        seen = self.step * self.cfg.global_batch
        return {"rows_seen": seen, "epoch": seen // len(self.rows), "offset": seen % len(self.rows),
                "rows": len(self.rows), "rows_sha256": rows_digest(self.rows)}

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-NNNNNN`` (via a temp dir renamed into place); keep the newest few."""
        root = self.cfg.out / CHECKPOINTS_DIR
        path = root / f"step-{self.step:06d}"
        tmp = root / f"step-{self.step:06d}.tmp"
        if self.dist.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        self.dist.barrier()
        torch.save(_rng_state(), tmp / f"rng-rank{self.dist.rank}.pt")
        self.dist.barrier()
        if self.dist.is_main:
            trainable = {n: p.detach().cpu() for n, p in self.model.named_parameters() if p.requires_grad}
            torch.save({"format": _CKPT_FORMAT, "step": self.step, "model": trainable,
                        "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                        "data": self._data_position(), "tokens": self._tokens,
                        "train_seconds": self._train_seconds, "config": self.cfg.model_dump(mode="json")},
                       tmp / "state.pt")
            (tmp / _META).write_text(json.dumps({"format": _CKPT_FORMAT, "step": self.step,
                                                 "world_size": self.dist.world_size}, indent=1))
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
            for old in list(self._checkpoints())[:-self.cfg.keep_checkpoints]:
                shutil.rmtree(old, ignore_errors=True)
        self.dist.barrier()
        return path

    def load_checkpoint(self, path: Path) -> None:
        """Restore parameters, optimizer, scheduler, RNG and data position from ``path``."""
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
        if state.get("format") != _CKPT_FORMAT:
            raise ResumeError(f"{path}: format {state.get('format')!r}, expected {_CKPT_FORMAT!r}")
        self._check_compatible(path, state)
        params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        if set(params) != set(state["model"]):
            raise ResumeError(f"{path}: trainable parameters differ from this model's (LoRA settings changed?)")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(state["model"][name])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step, self._tokens = int(state["step"]), int(state["tokens"])
        self._train_seconds = float(state["train_seconds"])
        rng = path / f"rng-rank{self.dist.rank}.pt"
        if rng.is_file():
            _set_rng_state(torch.load(rng, weights_only=False))
        else:
            log.warning("%s has no RNG state for rank %d (worker count changed?): dropout differs", path,
                        self.dist.rank)
        log.info("resumed from %s at step %d", path, self.step)

    def _check_compatible(self, path: Path, state: dict[str, Any]) -> None:
        saved, now = state["config"], self.cfg.model_dump(mode="json")
        changed = sorted(k for k in now if k not in _RESUMABLE_CHANGES and saved.get(k) != now[k])
        if changed:
            raise ResumeError(f"{path} was written with other settings for {changed}: resume with the same config "
                              "or start a new --out")
        data = state["data"]
        if data["rows"] != len(self.rows) or data["rows_sha256"] != rows_digest(self.rows):
            raise ResumeError(f"{path}: the training rows changed since the checkpoint (world, SIDs or tokenizer "
                              "differ); start a new --out")

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _module_name(model: torch.nn.Module, module: torch.nn.Module | None) -> str | None:
    """The last component of ``module``'s name inside ``model`` (what peft matches on)."""
    if module is None:
        return None
    return next((name.rsplit(".", 1)[-1] for name, m in model.named_modules() if m is module), None)


PLAIN_HEAD_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
"""Model types whose causal-LM logits are exactly ``lm_head(decoder(...).last_hidden_state)`` (no scaling or
soft-capping), so the loss may run the head on the target positions alone."""


def _plain_head(model: Any) -> tuple[Any, Any] | None:
    """``(decoder, head)`` of a causal LM (LoRA-wrapped or not) whose logits are the head over the decoder's last
    hidden state; None for any other model (the loss then takes the model's own logits). On the SmolLM2 LoRA
    seed the head over every position cost a quarter of a training step (``bench/sft_step.py``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base.config, "model_type", None) not in PLAIN_HEAD_TYPES or not hasattr(base, "get_decoder"):
        return None
    decoder, head = base.get_decoder(), base.get_output_embeddings()
    return (decoder, head) if decoder is not None and head is not None else None


def apply_lora(model: PreTrainedModel, lora: LoraSettings, new_token_ids: list[int]) -> Any:
    """Wrap ``model`` with LoRA adapters; the new tokens' embedding (and head) rows train as well."""
    from peft import LoraConfig, get_peft_model

    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    emb_name, head_name = _module_name(model, emb), _module_name(model, head)
    if emb_name is None:
        raise SFTError(f"{type(model).__name__}: cannot find the input embedding module for LoRA")
    head_w = getattr(head, "weight", None)
    emb_w = getattr(emb, "weight", None)
    tied = isinstance(head_w, torch.Tensor) and isinstance(emb_w, torch.Tensor) and \
        head_w.data_ptr() == emb_w.data_ptr()
    names = [emb_name] + ([head_name] if head_name is not None else [])
    token_indices = None
    modules_to_save = None
    if lora.embeddings == "new_tokens":
        token_indices = {emb_name: new_token_ids} if tied or head_name is None else {n: new_token_ids for n in names}
    else:
        modules_to_save = names
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=list(lora.target_modules), task_type="CAUSAL_LM",
                        trainable_token_indices=token_indices, modules_to_save=modules_to_save,
                        ensure_weight_tying=tied and modules_to_save is not None)
    with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5; nothing for us to change
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)
