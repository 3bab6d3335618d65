"""SASRec trained with full-softmax cross-entropy through RecBole: the sequential baseline of next-item benchmarks.

    ranker = train_sasrec(timelines, SasRecConfig(epochs=20))   # user -> item ids, oldest first
    ranker.rank(Query(history=("1", "2", "3"), exclude=frozenset({"1", "2", "3"})), k=10)
    ranker.info                                                 # epochs, best epoch, RecBole's own test metrics

SASRec (Kang & McAuley 2018, "Self-Attentive Sequential Recommendation"): a causal Transformer over the
item sequence; the score of item ``j`` after a sequence is ``s_j = h_T · e_j`` (``h_T`` the last hidden
state, ``e_j`` the item embedding, shared with the input). Trained here with RecBole's ``loss_type='CE'``:
the full softmax over every item,

    L = -log( exp(s_y) / sum_{j in items} exp(s_j) ),

not the one-negative BCE of the paper, which many papers quote and which is much weaker (Klenitskiy &
Vasilev 2023, "Turning Dross Into Gold Loss: is BERT4Rec really better than SASRec?").

Split (RecBole ``eval_args``: ``split LS valid_and_test``, ``order TO``, ``mode full``): for a timeline
``i_1 … i_n`` RecBole trains on ``i_1 … i_{n-2}`` (every prefix predicts its next item), validates on
``i_{n-1}`` (the best epoch by NDCG@10 is kept; early stopping after ``stopping_step`` epochs without
improvement) and tests on ``i_n``. Timelines are written to RecBole's atomic files with the position as
timestamp, so RecBole's order is exactly ours, ties and all. :meth:`SasRecRanker.rank` scores any history
with the trained model. ``info["recbole_test"]`` is RecBole's own full-ranking test result, a cross-check:
for sequential models RecBole does not exclude history items from the ranking, so it matches
:meth:`SasRecRanker.rank` with an empty ``exclude``, not the usual history-excluded protocol.

RecBole 1.2 against this environment (numpy 2, torch >= 2.6), patched here and nowhere else:
- its ``Config`` aliases removed numpy names (``np.float_``, ``np.complex_``, ``np.unicode_``) — the missing
  ones are defined before it runs;
- its ``Trainer`` opens a TensorBoard writer under ``./log_tensorboard`` of the working directory — a
  no-op writer is swapped in while the trainer is built;
- its ``Config`` reads ``--key=value`` options from ``sys.argv`` (a ``sidekick … --seed=1`` would reach
  it) — it sees only the program name;
- its ``Config`` sets ``CUDA_VISIBLE_DEVICES`` process-wide (to ``''`` on CPU) — the variable is restored;
- the best epoch is kept in memory (no checkpoint file, so no ``torch.load`` of pickled configs);
- importing its sequential models turns on autograd anomaly detection process-wide (``sine.py``), which
  makes every backward ~50x slower — the setting is put back right after the import;
- RecBole logs to the root logger and pandas warns about its chained assignments: both are silenced
  while RecBole runs. The global RNGs RecBole seeds are restored afterwards.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import random
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from eval.baselines import Query

DATASET = "sidekick"
"""Name of the RecBole dataset written from the timelines (``<workdir>/sidekick/sidekick.inter``)."""


class SasRecError(ValueError):
    """Timelines or settings SASRec cannot be trained on."""


class SasRecConfig(BaseModel):
    """SASRec and its RecBole training run. Defaults: RecBole's SASRec defaults, except dropout 0.2."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(default=50, ge=1, description="Most training epochs (default 50).")
    stopping_step: int = Field(default=10, ge=1, description="Stop after this many epochs without a better "
                               "validation NDCG@10 (default 10).")
    max_seq_len: int = Field(default=50, ge=2, description="Most recent items the model sees (RecBole "
                             "MAX_ITEM_LIST_LENGTH, default 50).")
    hidden_size: int = Field(default=64, ge=8, description="Item embedding and hidden width (default 64).")
    inner_size: int = Field(default=256, ge=8, description="Feed-forward width (default 256).")
    n_layers: int = Field(default=2, ge=1, description="Transformer layers (default 2).")
    n_heads: int = Field(default=2, ge=1, description="Attention heads (default 2).")
    dropout: float = Field(default=0.2, ge=0, lt=1, description="Hidden and attention dropout (default 0.2).")
    lr: float = Field(default=1e-3, gt=0, description="Adam learning rate (default 1e-3).")
    batch_size: int = Field(default=256, ge=1, description="Training sequences per batch (default 256).")
    item_init: Literal["random", "cooccurrence"] = Field(
        default="random", description="Where the item embeddings start: random (RecBole's N(0, 0.02), default) "
        "or cooccurrence: the PPMI eigenvectors of the training sequences (sid.cooccurrence, window "
        "`cooc_window`), each row scaled to a N(0, 0.02) row's norm (the SID model's item-id model starts so).")
    cooc_window: int = Field(default=10, ge=1, description="Co-occurrence window of item_init cooccurrence.")
    valid_metric: Literal["recbole", "history_excluded"] = Field(
        default="recbole", description="The validation NDCG@10 that picks the best epoch and stops training: "
        "recbole (default): RecBole's own, which ranks the user's history items too; history_excluded: the "
        "second-last item ranked with the history masked, as the benchmarks rank and as the SID models validate.")
    seed: int = Field(default=0, ge=0, description="RecBole seed (default 0).")
    threads: int = Field(default=0, ge=0, description="Torch threads while training; 0 = leave as is.")
    device: Literal["cpu", "auto"] = Field(default="cpu", description="cpu (default) or auto = the first GPU "
                                           "when torch sees one.")


@dataclass
class SasRecRanker:
    """A trained SASRec as a :class:`~eval.baselines.Ranker`. Items it never saw in training are not ranked."""

    model: Any
    item_ids: list[str]
    """RecBole's item vocabulary: ``item_ids[j]`` is internal id ``j`` (0 = padding, ``"[PAD]"``)."""
    max_seq_len: int
    info: dict[str, Any] = field(default_factory=dict)
    name: str = "sasrec"

    def __post_init__(self) -> None:
        self.index = {item_id: j for j, item_id in enumerate(self.item_ids) if j > 0}

    def scores(self, histories: Sequence[Sequence[str]]) -> np.ndarray:
        """(B, V) float32 scores ``h_T · e_j`` of every internal item id after each history (column 0 = padding,
        -inf). Unknown history items are skipped; an empty history scores as a single padding step."""
        seqs = [[self.index[i] for i in h if i in self.index][-self.max_seq_len:] for h in histories]
        width = max(1, max((len(s) for s in seqs), default=1))
        item_seq = torch.zeros((len(seqs), width), dtype=torch.long)  # (B, L), right-padded as in RecBole
        for b, s in enumerate(seqs):
            item_seq[b, :len(s)] = torch.tensor(s, dtype=torch.long)
        lengths = torch.tensor([max(1, len(s)) for s in seqs], dtype=torch.long)  # (B,)
        device = next(self.model.parameters()).device
        self.model.eval()
        with torch.no_grad():
            h = self.model.forward(item_seq.to(device), lengths.to(device))  # (B, H)
            out = (h @ self.model.item_embedding.weight.T).float().cpu().numpy()  # (B, V)
        out[:, 0] = -np.inf
        return out

    def rank_many(self, queries: Sequence[Query], k: int, batch_size: int = 256) -> list[list[str]]:
        """:meth:`rank` for many queries, ``batch_size`` histories per forward pass."""
        out: list[list[str]] = []
        for start in range(0, len(queries), batch_size):
            batch = queries[start:start + batch_size]
            scores = self.scores([q.history for q in batch])  # (B, V)
            for q, row in zip(batch, scores, strict=True):
                for item in q.exclude:
                    j = self.index.get(item)
                    if j is not None:
                        row[j] = -np.inf
                out.append(_top_ids(row, k, self.item_ids))
        return out

    def rank(self, query: Query, k: int) -> list[str]:
        return self.rank_many([query], k)[0]


def _top_ids(row: np.ndarray, k: int, item_ids: Sequence[str]) -> list[str]:
    """Ids of the ``k`` best finite scores of ``row`` (V,), ties by internal id (RecBole's order of first sight)."""
    finite = np.flatnonzero(np.isfinite(row))
    order = finite[np.lexsort((finite, -row[finite]))][:k]
    return [item_ids[int(j)] for j in order]


def train_sasrec(timelines: Mapping[str, Sequence[str]], cfg: SasRecConfig, workdir: Path | None = None,
                 progress: Callable[[str], None] | None = None) -> SasRecRanker:
    """Train SASRec-CE on ``timelines`` (user id -> item ids, oldest first; the last two are validation and
    test, see the module docstring) and return it as a ranker.

    ``workdir`` holds RecBole's atomic files (default: a temporary directory, removed afterwards).
    ``progress`` gets one line per epoch. Users with fewer than 3 items only train.
    """
    if not any(len(t) >= 3 for t in timelines.values()):
        raise SasRecError("SASRec needs at least one timeline of 3 or more items (train, valid, test)")
    with contextlib.ExitStack() as stack:
        root = workdir if workdir is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        write_atomic_files(timelines, root)
        stack.enter_context(_recbole_sandbox(cfg.threads))
        return _fit(root, cfg, progress, timelines)


def write_atomic_files(timelines: Mapping[str, Sequence[str]], root: Path) -> Path:
    """``root/sidekick/sidekick.inter``: one line per interaction, the timeline position as timestamp."""
    folder = root / DATASET
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{DATASET}.inter"
    with path.open("w", encoding="utf-8") as fh:
        fh.write("user_id:token\titem_id:token\ttimestamp:float\n")
        for user, items in timelines.items():
            for t, item in enumerate(items):
                if "\t" in user or "\t" in item or "\n" in user or "\n" in item:
                    raise SasRecError(f"ids may not hold tabs or newlines: user {user!r}, item {item!r}")
                fh.write(f"{user}\t{item}\t{t}\n")
    return path


def recbole_config(root: Path, cfg: SasRecConfig) -> dict[str, Any]:
    """RecBole settings of one run (the keys RecBole documents in ``properties/overall.yaml``)."""
    gpu = cfg.device == "auto" and torch.cuda.is_available()
    return {
        "data_path": str(root), "checkpoint_dir": str(root / "saved"), "use_gpu": gpu, "gpu_id": "0" if gpu else "",
        "seed": cfg.seed, "reproducibility": True, "state": "WARNING", "show_progress": False, "log_wandb": False,
        "worker": 0, "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
        "eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO", "mode": "full", "group_by": "user"},
        "train_neg_sample_args": None, "loss_type": "CE", "metrics": ["Hit", "NDCG"], "topk": [10],
        "valid_metric": "NDCG@10", "epochs": cfg.epochs, "stopping_step": cfg.stopping_step,
        "train_batch_size": cfg.batch_size, "eval_batch_size": 4096, "learning_rate": cfg.lr,
        "MAX_ITEM_LIST_LENGTH": cfg.max_seq_len, "hidden_size": cfg.hidden_size, "inner_size": cfg.inner_size,
        "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "hidden_dropout_prob": cfg.dropout,
        "attn_dropout_prob": cfg.dropout,
    }


def _import_recbole() -> None:
    """Import what :func:`_fit` uses; importing RecBole's sequential models runs ``sine.py``, which turns on
    ``torch.autograd.set_detect_anomaly(True)`` process-wide (every op then records a stack trace: ~50x
    slower training here). The previous setting is put back."""
    anomaly = torch.is_anomaly_enabled()
    try:
        import recbole.model.sequential_recommender.sasrec  # noqa: F401
    finally:
        torch.autograd.set_detect_anomaly(anomaly)


def _fit(root: Path, cfg: SasRecConfig, progress: Callable[[str], None] | None,
         timelines: Mapping[str, Sequence[str]]) -> SasRecRanker:
    _import_recbole()
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.sequential_recommender.sasrec import SASRec
    from recbole.utils import init_seed

    t0 = time.perf_counter()
    config = Config(model=SASRec, dataset=DATASET, config_dict=recbole_config(root, cfg))
    init_seed(config["seed"], config["reproducibility"])
    dataset = create_dataset(config)
    train_data, valid_data, test_data = data_preparation(config, dataset)
    model = SASRec(config, train_data.dataset).to(config["device"])
    if cfg.item_init == "cooccurrence":
        _cooccurrence_init(model, dataset, timelines, cfg)
    trainer = _trainer(config, model)
    item_ids = [str(t) for t in dataset.field2id_token[dataset.iid_field]]
    if cfg.valid_metric == "history_excluded":
        ranker = SasRecRanker(model=model, item_ids=item_ids, max_seq_len=cfg.max_seq_len)
        users = [t for t in timelines.values() if len(t) >= 3]
        histories, targets = [list(t[:-2]) for t in users], [t[-2] for t in users]

        def history_excluded(valid_data: Any, show_progress: bool = False) -> tuple[float, dict[str, float]]:
            score = validation_ndcg(ranker, histories, targets)  # RecBole's next epoch puts the model back in train
            return score, {"ndcg@10": score}

        trainer._valid_epoch = history_excluded  # RecBole's early stopping and best epoch then follow it
    best: dict[str, Any] = {}

    def on_epoch(epoch: int, valid_score: float) -> None:
        if trainer.cur_step == 0:  # RecBole just recorded a new best validation score
            best.update(epoch=epoch, state=copy.deepcopy(model.state_dict()), valid_ndcg10=float(valid_score))
        if progress is not None:
            progress(f"sasrec epoch {epoch + 1}/{cfg.epochs}: valid ndcg@10 {valid_score:.4f}, "
                     f"best {trainer.best_valid_score:.4f}")

    trainer.fit(train_data, valid_data, verbose=False, saved=False, show_progress=False, callback_fn=on_epoch)
    if "state" in best:
        model.load_state_dict(best["state"])
    train_s = time.perf_counter() - t0
    test = trainer.evaluate(test_data, load_best_model=False, show_progress=False)
    info = {"epochs_run": len(trainer.train_loss_dict), "best_epoch": best.get("epoch", -1) + 1,
            "valid_ndcg@10": best.get("valid_ndcg10"), "train_s": round(train_s, 2),
            "recbole_test": {str(k): round(float(v), 6) for k, v in test.items()},
            "items": len(item_ids) - 1, "users": int(dataset.user_num) - 1, "config": cfg.model_dump()}
    return SasRecRanker(model=model, item_ids=item_ids, max_seq_len=cfg.max_seq_len, info=info)


def validation_ndcg(ranker: SasRecRanker, histories: Sequence[Sequence[str]], targets: Sequence[str], k: int = 10,
                    batch_size: int = 512) -> float:
    """Mean NDCG@k of each target ranked among the items not in its history (one relevant item: 1 / log2(rank +
    2) when its 0-based rank, the number of those items scoring strictly higher, is below k; a target that is in
    its history or that the model never saw scores 0)."""
    from training.genrec import ndcg_at

    total = 0.0
    for s in range(0, len(histories), batch_size):
        hist, tgt = histories[s:s + batch_size], targets[s:s + batch_size]
        sc = ranker.scores(hist)  # (B, V); column 0, the padding, is -inf
        for b, h in enumerate(hist):
            sc[b, [ranker.index[i] for i in h if i in ranker.index]] = -np.inf
        total += float(ndcg_at(sc, [ranker.index.get(t, 0) for t in tgt], k).sum())  # unknown: the padding
    return total / max(1, len(histories))


def _cooccurrence_init(model: Any, dataset: Any, timelines: Mapping[str, Sequence[str]], cfg: SasRecConfig) -> None:
    """Start the item embeddings (internal ids; row 0, the padding, untouched) at the co-occurrence eigenvectors of
    the training part of each timeline (all but its last two items when it has 3 or more, as RecBole splits),
    scaled to the expected norm of a N(0, 0.02) row."""
    from sid.cooccurrence import cooccurrence_embeddings

    token2id = {str(t): j for j, t in enumerate(dataset.field2id_token[dataset.iid_field]) if j > 0}
    rows = [[token2id[i] for i in (t[:-2] if len(t) >= 3 else t)] for t in timelines.values()]
    weight = model.item_embedding.weight
    x = cooccurrence_embeddings(rows, weight.shape[0], weight.shape[1], cfg.cooc_window, cfg.seed)
    with torch.no_grad():
        weight[1:] = torch.as_tensor(x[1:] * (0.02 * np.sqrt(weight.shape[1])), dtype=weight.dtype)


class _NullWriter:
    """Stands in for RecBole's TensorBoard ``SummaryWriter`` (which would write under ./log_tensorboard)."""

    def add_scalar(self, *args: Any, **kwargs: Any) -> None:
        return None

    def add_hparams(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> None:
        return None


def _trainer(config: Any, model: Any) -> Any:
    """RecBole's Trainer, built with the no-op TensorBoard writer."""
    import recbole.trainer.trainer as rb_trainer

    original = rb_trainer.get_tensorboard
    rb_trainer.get_tensorboard = lambda logger: _NullWriter()
    try:
        return rb_trainer.Trainer(config, model)
    finally:
        rb_trainer.get_tensorboard = original


def _numpy_compat() -> None:
    """Define the numpy aliases RecBole 1.2 reads that numpy 2 removed (only the missing ones)."""
    for name, value in (("float_", np.float64), ("complex_", np.complex128), ("unicode_", np.str_)):
        if not hasattr(np, name):
            setattr(np, name, value)


@contextlib.contextmanager
def _recbole_sandbox(threads: int) -> Iterator[None]:
    """Run RecBole without its process-wide side effects leaking out (see the module docstring)."""
    _numpy_compat()
    cuda_env = os.environ.get("CUDA_VISIBLE_DEVICES")
    argv = sys.argv
    py_state, np_state = random.getstate(), np.random.get_state()
    root_logger = logging.getLogger()
    level = root_logger.level
    old_threads = torch.get_num_threads()
    deterministic = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    try:
        if threads:
            torch.set_num_threads(threads)
        root_logger.setLevel(logging.WARNING)
        sys.argv = argv[:1]  # RecBole's Config reads `--key=value` options off the command line
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.argv = argv
        root_logger.setLevel(level)
        torch.set_num_threads(old_threads)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = deterministic
        random.setstate(py_state)
        np.random.set_state(np_state)
        if cuda_env is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = cuda_env
