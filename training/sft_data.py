"""SFT data for the shopping app: item alignment and intent -> SID examples, tokenised, masked and packed.

Two families of chat examples, each carrying a ``kind`` so evaluation can report per kind:

- **Item alignment** (LC-Rec, Zheng et al. 2024, "Adapting LLMs by Integrating Collaborative Semantics
  for Recommendation"): tasks that make SID tokens operable by the LLM — ``align_title_sid`` (title ->
  SID), ``align_sid_title`` (SID -> title), ``align_sid_category`` (SID -> category path) and
  ``align_attr_prefix`` (category, or category + brand / colour -> the majority SID prefix of those
  items, first 1-2 levels).
- **Intent -> SID retrieval** (ShopX-style "fulfil intents natively in item space"): a task's user
  message -> the assistant answers with the target item's SID as ``<|sid_start|><s1_…>…<|sid_end|>``.
  Set targets train on the first ``targets_per_task`` (best-rated) ids, one example each; bundles
  answer one SID per slot, one line each; ``multi_turn`` tasks become opening message -> clarifying
  question -> the hidden constraints as a second user turn -> SID. ``kind`` is the task's kind.

Tasks are split by a hash of ``task_id`` (:func:`is_held_out`), so a task is held out in every run,
whatever the world's size or order; only intent examples of held-out tasks are evaluated on.

Loss only on assistant tokens: :func:`encode_example` takes the mask from the chat template's
``{% generation %}`` blocks (``return_assistant_tokens_mask``). :func:`pack_examples` concatenates
short examples into rows of at most ``max_seq_len`` tokens whose ``position_ids`` restart at 0 for
every example; transformers turns restarting positions (with no 2-D attention mask) into a
block-diagonal causal mask, so packed examples never attend to each other. Targets are shifted
within each example (``targets[t]`` = the token at ``t + 1`` of the same example, else -100), so no
example is trained to predict the first token of the next one.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from harness.catalog import Catalog, Item
from harness.tasks import Task
from infra.layout import TASKS_FILE
from infra.recordio import RecordReader
from sid.build import SIDS_FILE, find_catalog
from sid.codebook import SidMap, sid_string
from training.models import SID_END, SID_START

IGNORE = -100
"""Label / target id that the loss ignores (prompt tokens, padding, the last token of each example)."""
ALIGN_KINDS = ("align_title_sid", "align_sid_title", "align_sid_category", "align_attr_prefix")
_SPLIT_SALT = "sidekick.sft.split/1"


class SftDataError(ValueError):
    """A world or SID directory that cannot yield SFT examples, or an example that cannot be encoded."""


@dataclass(frozen=True)
class ChatExample:
    """One chat (OpenAI-style messages ending with the assistant turn trained on) and what it teaches."""

    messages: list[dict[str, str]]
    kind: str
    source: str
    """The item id (alignment), the group key (attribute prefix) or the task id (intent)."""


@dataclass
class SftData:
    """Train and held-out examples of a world, the held-out tasks themselves, and counts by kind."""

    train: list[ChatExample]
    eval: list[ChatExample]
    eval_tasks: list[Task]
    counts: dict[str, int] = field(default_factory=dict)


def sid_span(sid: str) -> str:
    """``<s1_3><s2_7>`` -> ``<|sid_start|><s1_3><s2_7><|sid_end|>`` (the protocol's SID span)."""
    return f"{SID_START}{sid}{SID_END}"


def _unit(key: str) -> float:
    """A deterministic number in [0, 1) from ``key`` (first 8 bytes of sha256)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0**64


def is_held_out(task_id: str, eval_fraction: float) -> bool:
    """True for the ``eval_fraction`` share of task ids (by hash): held out of training in every run."""
    return _unit(f"{_SPLIT_SALT}:{task_id}") < eval_fraction


# ------------------------------------------------------------------------------------------------
# Loading a world
# ------------------------------------------------------------------------------------------------
def load_tasks(world: Path) -> list[Task]:
    """Shopping tasks with targets from ``world/tasks.jsonl``."""
    path = Path(world) / TASKS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{world}: no {TASKS_FILE} (SFT needs the world's tasks)")
    return [t for t in RecordReader(path, Task) if t.app == "shopping" and t.target is not None]


def world_corpus(world: Path) -> list[str]:
    """Titles, category paths and task messages of a world: what the ``tiny`` base trains its tokenizer on."""
    catalog_path, _ = find_catalog(Path(world))
    texts: list[str] = []
    for item in RecordReader(catalog_path, Item):
        texts += [item.title, " > ".join(item.category_path)]
    for task in load_tasks(world):
        texts += [m.content for m in task.messages]
    return texts


# ------------------------------------------------------------------------------------------------
# Item alignment (LC-Rec)
# ------------------------------------------------------------------------------------------------
_TITLE_SID = ("Which item is \"{title}\"?", "Give the semantic ID of: {title}", "{title}")
_SID_TITLE = ("What is {sid}?", "Name the item {sid}.", "{sid} is which product?")
_SID_CATEGORY = ("Which category is {sid} in?", "Category of {sid}?")


def _chat(user: str, assistant: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def _pick(templates: Sequence[str], key: str) -> str:
    return templates[int(_unit(key) * len(templates))]


def alignment_examples(items: Sequence[Item], sid_map: SidMap, max_items: int = -1) -> list[ChatExample]:
    """Title <-> SID, SID -> category for ``max_items`` items (-1 = all; a hash-chosen, stable subset),
    plus attribute -> SID prefix examples over all items. Items without a SID are skipped."""
    items = [i for i in items if i.item_id in sid_map]
    chosen = items if max_items < 0 else sorted(items, key=lambda i: _unit(i.item_id))[:max_items]
    out: list[ChatExample] = []
    for item in chosen:
        span, iid = sid_span(sid_map.sid_of(item.item_id)), item.item_id
        out += [
            ChatExample(_chat(_pick(_TITLE_SID, iid).format(title=item.title), span), "align_title_sid", iid),
            ChatExample(_chat(_pick(_SID_TITLE, iid).format(sid=span), item.title), "align_sid_title", iid),
            ChatExample(_chat(_pick(_SID_CATEGORY, iid).format(sid=span), " > ".join(item.category_path)),
                        "align_sid_category", iid),
        ]
    return out + prefix_examples(items, sid_map)


def prefix_examples(items: Sequence[Item], sid_map: SidMap) -> list[ChatExample]:
    """Attributes -> SID prefix: a category -> its items' majority 1-level prefix; category + brand and
    category + colour -> their majority 2-level prefix (ties: the smaller prefix). One example per group."""
    levels = min(2, sid_map.depth - 1)
    groups: dict[tuple[str, ...], list[tuple[int, ...]]] = defaultdict(list)
    for item in items:
        codes = sid_map.codes_of(item.item_id)
        path = " > ".join(item.category_path)
        groups[("category", path)].append(codes[:1])
        for attr in ("brand", "colour"):
            value = item.attributes.get(attr)
            if isinstance(value, str) and value:
                groups[(attr, path, value)].append(codes[:levels])
    out = []
    for key in sorted(groups):
        counts = Counter(groups[key])
        best = max(counts.items(), key=lambda kv: (kv[1], [-c for c in kv[0]]))[0]
        question = f"Which SID prefix holds {key[1]} items" + (f" with {key[0]} {key[2]}?" if len(key) == 3 else "?")
        out.append(ChatExample(_chat(question, sid_span(sid_string(best))), "align_attr_prefix", "|".join(key)))
    return out


# ------------------------------------------------------------------------------------------------
# Intent -> SID
# ------------------------------------------------------------------------------------------------
_ATTR_PHRASE = {"colour": "in {v}", "material": "made of {v}", "brand": "from {v}", "size": "in size {v}"}


def clarifying_question(task: Task) -> str:
    """The assistant's question for a ``multi_turn`` task, from the keys it must clarify (``meta.clarify``)."""
    clarify = list(task.meta.get("clarify", []))
    keys = [k for k in clarify if k != "price_max"]
    budget = "price_max" in clarify or "price_max" in task.hidden
    if keys:
        return f"Happy to help! Which {' and '.join(keys)} would you like" + (", and what is your budget?" if budget
                                                                          else "?")
    return "Happy to help! What is your budget?" if budget else "Happy to help! Any preferences?"


def hidden_constraints_text(hidden: dict[str, Any]) -> str:
    """The user's answer stating the hidden constraints, e.g. ``"I'd like it in red, from Acme, under $45."``."""
    parts = [_ATTR_PHRASE.get(k, k + " {v}").format(v=v) for k, v in (hidden.get("attributes") or {}).items()]
    if hidden.get("price_max") is not None:
        parts.append(f"under ${float(hidden['price_max']):g}")
    return "I'd like it " + ", ".join(parts) + "." if parts else "Anything is fine."


def intent_prompt(task: Task) -> list[dict[str, str]]:
    """The conversation up to the assistant's SID answer (what retrieval is asked at evaluation)."""
    messages = [{"role": m.role, "content": m.content} for m in task.messages]
    if task.kind == "multi_turn" and task.hidden:
        messages += [{"role": "assistant", "content": clarifying_question(task)},
                     {"role": "user", "content": hidden_constraints_text(task.hidden)}]
    return messages


def intent_query(task: Task) -> str:
    """The user's words of :func:`intent_prompt` joined: the query text of the dense and BM25 baselines."""
    return " ".join(m["content"] for m in intent_prompt(task) if m["role"] == "user")


def intent_examples(tasks: Iterable[Task], sid_map: SidMap, targets_per_task: int = 1) -> list[ChatExample]:
    """Up to ``targets_per_task`` examples per task (set targets: its first ids; bundles: the j-th id of
    every slot, one SID per line). Target ids without a SID are skipped; a task left with none is dropped."""
    out = []
    for task in tasks:
        assert task.target is not None, f"task {task.task_id} has no target"
        prompt = intent_prompt(task)
        slots = [[i for i in slot if i in sid_map] for slot in task.target.slots]
        if any(not s for s in slots):
            continue
        for j in range(min(targets_per_task, max(len(s) for s in slots))):
            answer = "\n".join(sid_span(sid_map.sid_of(s[j % len(s)])) for s in slots)
            out.append(ChatExample([*prompt, {"role": "assistant", "content": answer}], task.kind, task.task_id))
    return out


def build_shopping_sft(world: Path, sid_dir: Path, *, eval_fraction: float = 0.1, align_items: int = -1,
                       targets_per_task: int = 3) -> SftData:
    """All SFT examples of a shopping world: alignment + train intents, and the held-out intents."""
    sid_map = SidMap.load(Path(sid_dir) / SIDS_FILE)
    catalog, _ = Catalog.load(find_catalog(Path(world))[0])
    tasks = load_tasks(world)
    held = [t for t in tasks if is_held_out(t.task_id, eval_fraction)]
    kept = [t for t in tasks if not is_held_out(t.task_id, eval_fraction)]
    train = alignment_examples(list(catalog), sid_map, align_items) + intent_examples(kept, sid_map, targets_per_task)
    evals = intent_examples(held, sid_map, 1)
    if not train:
        raise SftDataError(f"{world} with {sid_dir} yields no training examples (do the SIDs match the catalog?)")
    counts = dict(sorted(Counter(e.kind for e in train).items()))
    counts |= {"train": len(train), "eval": len(evals), "eval_tasks": len(held), "train_tasks": len(kept)}
    return SftData(train=train, eval=evals, eval_tasks=held, counts=counts)


# ------------------------------------------------------------------------------------------------
# Tokenising, masking, packing
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Encoded:
    """One tokenised example: ``labels[t]`` = ``input_ids[t]`` on assistant tokens, else -100 (unshifted)."""

    input_ids: list[int]
    labels: list[int]
    kind: str


def encode_example(tokenizer: PreTrainedTokenizerBase, example: ChatExample, max_seq_len: int) -> Encoded | None:
    """Tokenise with the chat template; labels only on assistant tokens. Longer than ``max_seq_len``:
    truncated on the right; None when no assistant token is left to learn from."""
    out: Any = tokenizer.apply_chat_template(example.messages, tokenize=True, return_dict=True,
                                             return_assistant_tokens_mask=True)  # a BatchEncoding
    ids = [int(i) for i in out["input_ids"]][:max_seq_len]
    mask = [int(m) for m in out["assistant_masks"]][:max_seq_len]
    if len(mask) != len(ids):
        raise SftDataError("the chat template gave no assistant mask of the right length: it needs "
                           "{% generation %} blocks (see training.chat_template)")
    labels = [i if m else IGNORE for i, m in zip(ids, mask, strict=True)]
    if all(lab == IGNORE for lab in labels[1:]):
        return None
    return Encoded(ids, labels, example.kind)


def encode_all(tokenizer: PreTrainedTokenizerBase, examples: Sequence[ChatExample],
               max_seq_len: int) -> tuple[list[Encoded], int]:
    """Encode every example; returns the encoded ones and how many were dropped (nothing left to learn)."""
    encoded = [encode_example(tokenizer, e, max_seq_len) for e in examples]
    kept = [e for e in encoded if e is not None]
    return kept, len(encoded) - len(kept)


@dataclass(frozen=True)
class Row:
    """One training row: one or more examples back to back.

    ``targets[t]`` is the id to predict at position ``t`` (already shifted, -100 = no loss);
    ``position_ids`` restart at 0 at every example's first token.
    """

    input_ids: list[int]
    targets: list[int]
    position_ids: list[int]

    @property
    def n_targets(self) -> int:
        return sum(t != IGNORE for t in self.targets)


def _row(examples: Sequence[Encoded]) -> Row:
    ids: list[int] = []
    targets: list[int] = []
    positions: list[int] = []
    for e in examples:
        ids += e.input_ids
        targets += [*e.labels[1:], IGNORE]
        positions += range(len(e.input_ids))
    return Row(ids, targets, positions)


def pack_examples(encoded: Sequence[Encoded], max_seq_len: int, packing: bool = True) -> list[Row]:
    """Greedy packing in order: add examples to a row while it stays <= ``max_seq_len`` tokens.
    ``packing=False``: one example per row."""
    if not packing:
        return [_row([e]) for e in encoded]
    rows: list[Row] = []
    current: list[Encoded] = []
    length = 0
    for e in encoded:
        if current and length + len(e.input_ids) > max_seq_len:
            rows.append(_row(current))
            current, length = [], 0
        current.append(e)
        length += len(e.input_ids)
    if current:
        rows.append(_row(current))
    return rows


def shuffled(items: Sequence[Encoded], seed: int) -> list[Encoded]:
    """``items`` in a seeded random order (mixes kinds before packing)."""
    order = np.random.default_rng([seed, 7]).permutation(len(items))
    return [items[int(i)] for i in order]


@dataclass
class Batch:
    """Rows padded to one length. Padding is its own segment (positions from 0), so no token attends to it."""

    input_ids: torch.Tensor  # (B, T) int64
    targets: torch.Tensor  # (B, T) int64, -100 = no loss
    position_ids: torch.Tensor  # (B, T) int64

    def to(self, device: torch.device) -> Batch:
        return Batch(self.input_ids.to(device), self.targets.to(device), self.position_ids.to(device))


def collate(rows: Sequence[Row], pad_id: int) -> Batch:
    """Pad ``rows`` on the right to the longest one."""
    if not rows:
        raise SftDataError("cannot collate an empty batch")
    width = max(len(r.input_ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.int64)
    targets = torch.full((len(rows), width), IGNORE, dtype=torch.int64)
    positions = torch.zeros((len(rows), width), dtype=torch.int64)
    for b, r in enumerate(rows):
        n = len(r.input_ids)
        ids[b, :n] = torch.tensor(r.input_ids)
        targets[b, :n] = torch.tensor(r.targets)
        positions[b, :n] = torch.tensor(r.position_ids)
        positions[b, n:] = torch.arange(width - n)
    return Batch(ids, targets, positions)


def rows_digest(rows: Iterable[Row]) -> str:
    """sha256 of the rows' token ids and targets: a resumed run checks it sees the same data."""
    h = hashlib.sha256()
    for r in rows:
        h.update(np.asarray([*r.input_ids, -1, *r.targets, -2], np.int64).tobytes())
    return h.hexdigest()
