"""SFT data, app-agnostic: chat examples, the held-out split, tokenising, masking and packing.

Each app's kit brings its own examples (``AppKit.sft``, an :class:`SftSource`: e.g. ``apps/shopping/sft.py``);
this module turns any list of :class:`ChatExample` into training rows.

Loss only on assistant tokens: :func:`encode_example` takes the mask from the chat template's
``{% generation %}`` blocks (``return_assistant_tokens_mask``); an assistant message with
``"weight": 0`` (as in OpenAI's fine-tuning format) is context, not target — the loop writes it, the
model never generates it. Trajectories are never truncated: one longer than ``max_seq_len`` is an
error that names the length needed. :func:`pack_examples` concatenates
short examples into rows of at most ``max_seq_len`` tokens whose ``position_ids`` restart at 0 for
every example; transformers turns restarting positions (with no 2-D attention mask) into a
block-diagonal causal mask, so packed examples never attend to each other. Targets are shifted
within each example (``targets[t]`` = the token at ``t + 1`` of the same example, else -100), so no
example is trained to predict the first token of the next one.
"""


from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from transformers import PreTrainedTokenizerBase

from harness.agent import for_model
from harness.agent_dir import SID_END, SID_START
from harness.tasks import Task

TRAJ_PREFIX = "traj_"
"""Kind prefix of tool-call trajectories (``traj_explicit``, ``traj_bundle``, …): never truncated."""
IGNORE = -100
"""Label / target id that the loss ignores (prompt tokens, padding, the last token of each example)."""
_SPLIT_SALT = "sidekick.sft.split/1"


class SftDataError(ValueError):
    """A world or SID directory that cannot yield SFT examples, or an example that cannot be encoded."""


@dataclass(frozen=True)
class ChatExample:
    """One chat (OpenAI-style messages ending with the assistant turn trained on) and what it teaches."""

    messages: list[dict[str, Any]]
    kind: str
    source: str
    """The item id (alignment), the group key (attribute prefix) or the task id (intent, trajectory)."""
    tools: list[dict[str, Any]] | None = None
    """Tool schemas the chat template lists in the system turn (trajectories); None = no tools."""


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


def unit_hash(key: str) -> float:
    """A deterministic number in [0, 1) from ``key`` (first 8 bytes of sha256)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0**64


def is_held_out(task_id: str, eval_fraction: float) -> bool:
    """True for the ``eval_fraction`` share of task ids (by hash): held out of training in every run."""
    return unit_hash(f"{_SPLIT_SALT}:{task_id}") < eval_fraction




class TrajectorySpec(BaseModel):
    """What the serving loop renders before every conversation: the app's system prompt and tool schemas.

    Trajectories must be rendered exactly as :class:`harness.agent.TurnRun` renders a prompt, so the caller
    fills this from the app's spec: :func:`TrajectorySpec.of`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    system_prompt: str = Field(min_length=1, description="The app's system prompt (AppSpec.system_prompt).")
    tools: list[dict[str, Any]] = Field(description="OpenAI tool schemas, in the order the app lists them "
                                        "(AppSpec.prompt_schemas()); [] = the compact protocol (none rendered).")

    @classmethod
    def of(cls, system_prompt: str, tools: list[dict[str, Any]]) -> TrajectorySpec:
        """From an app's spec: ``TrajectorySpec.of(spec.system_prompt, spec.prompt_schemas())``."""
        return cls(system_prompt=system_prompt, tools=tools)

    def corpus(self) -> list[str]:
        """The system prompt and one JSON line per tool (as the chat template lists them)."""
        return [self.system_prompt, *(json.dumps(t) for t in self.tools)]


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
    """Tokenise with the chat template (and the example's tools); labels only on assistant tokens, not on
    assistant messages with ``"weight": 0``. Longer than ``max_seq_len``: truncated on the right, None when
    no assistant token is left to learn from — except trajectories, where it raises (a cut trajectory
    teaches a broken call)."""
    tools: Any = example.tools
    out: Any = tokenizer.apply_chat_template(for_model(example.messages), tools=tools, tokenize=True,
                                             return_dict=True, return_assistant_tokens_mask=True)  # a BatchEncoding
    full = [int(i) for i in out["input_ids"]]
    mask = [int(m) for m in out["assistant_masks"]]
    if len(mask) != len(full):
        raise SftDataError("the chat template gave no assistant mask of the right length: it needs "
                           "{% generation %} blocks (see training.chat_template)")
    if len(full) > max_seq_len and example.kind.startswith(TRAJ_PREFIX):
        raise SftDataError(f"a {example.kind} example ({example.source}) is {len(full)} tokens, over max_seq_len "
                           f"{max_seq_len}: raise max_seq_len (trajectories carry the system prompt and tool schemas)")
    mask = _drop_unweighted(mask, example.messages)
    ids, mask = full[:max_seq_len], mask[:max_seq_len]
    labels = [i if m else IGNORE for i, m in zip(ids, mask, strict=True)]
    if all(lab == IGNORE for lab in labels[1:]):
        return None
    return Encoded(ids, labels, example.kind)


def _drop_unweighted(mask: list[int], messages: Sequence[dict[str, Any]]) -> list[int]:
    """``mask`` with the tokens of ``"weight": 0`` assistant messages cleared. Each assistant message is one
    ``{% generation %}`` block, so its tokens are the k-th run of ones in the mask."""
    weights = [m.get("weight", 1) for m in messages if m.get("role") == "assistant"]
    if all(weights):
        return mask
    starts = [t for t, m in enumerate(mask) if m and (t == 0 or not mask[t - 1])]
    if len(starts) != len(weights):
        raise SftDataError(f"{len(weights)} assistant messages but {len(starts)} masked spans: cannot tell which "
                           "tokens belong to a weight-0 message")
    out = list(mask)
    for start, weight in zip(starts, weights, strict=True):
        t = start
        while t < len(out) and mask[t]:
            if not weight:
                out[t] = 0
            t += 1
    return out


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

