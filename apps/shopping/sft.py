"""SFT data of the shopping app: item alignment, intent -> SID and tool-call trajectories (the kit's ``sft`` source).

Three families of chat examples, each carrying a ``kind`` so evaluation can report per kind:

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
- **Tool-call trajectories** (``traj_<task kind>``): what a good agent does in the harness
  (:class:`harness.agent.AgentLoop`), rendered as serving renders it — the app's system prompt and
  tool schemas (a :class:`TrajectorySpec`, filled by the caller from the app: ``training`` never
  imports ``apps``), the user's intent, then the assistant calls ``sid_retrieve`` (filters the user
  stated: ``price_max``), the tool answers with item cards (the targets and a few distractors that
  break a stated constraint, in a seeded order), and the assistant calls ``respond`` with the
  targets' ids, best first. Bundles call ``bundle`` (slots + budget) and respond with one item per
  slot; ``multi_turn`` tasks first call ``ask_user`` with the clarifying question and get the hidden
  constraints as the next user turn. See :func:`trajectory_examples`.

Tasks are split by a hash of ``task_id`` (:func:`is_held_out`), so a task is held out in every run,
whatever the world's size or order; only intent examples of held-out tasks are evaluated on.

Tokenising, masking and packing are generic: :mod:`training.sft_data`.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from apps.shopping.agent import PLAN_PROMPT, ShoppingIndex
from apps.shopping.constraints import hidden_constraints_text
from apps.shopping.plan import ASK_USER as PLAN_ASK
from apps.shopping.plan import clarifying_question, needs_question, plan_call
from apps.shopping.themes import catalog_bundle_tasks
from apps.shopping.vocabulary import VOCABULARY_FILE, Vocabulary, describe, learn, searches
from data_curation.records import Session
from harness.catalog import Catalog, Item, item_card
from harness.protocol import ToolCall, ToolResult, assistant_message, render_call
from harness.tasks import Task
from infra.layout import LOGS_FILE, TASKS_FILE
from infra.recordio import RecordReader
from sid.build import SIDS_FILE, find_catalog
from sid.codebook import SidMap, sid_string
from training.sft import SFTConfig
from training.sft_data import (
    TRAJ_PREFIX,
    ChatExample,
    SftData,
    SftDataError,
    TrajectorySpec,
    is_held_out,
    sid_span,
    unit_hash,
)

log = logging.getLogger(__name__)

ALIGN_KINDS = ("align_title_sid", "align_sid_title", "align_sid_category", "align_attr_prefix")

# ------------------------------------------------------------------------------------------------
# Loading a world
# ------------------------------------------------------------------------------------------------
def load_tasks(world: Path, tasks: Path | None = None) -> list[Task]:
    """Shopping tasks with targets from ``tasks`` (a file, or a directory holding tasks.jsonl), by default
    ``world/tasks.jsonl``."""
    path = Path(world) / TASKS_FILE if tasks is None else Path(tasks)
    if path.is_dir():
        path = path / TASKS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such tasks file (SFT needs the world's tasks)")
    return [t for t in RecordReader(path, Task) if t.app == KIT_NAME and t.target is not None]


def world_corpus(world: Path, spec: TrajectorySpec | None = None, tasks: Path | None = None,
                 theme_bundles: int = 0, seed: int = 0) -> list[str]:
    """Titles, category paths and task messages of a world: what the ``tiny`` base trains its tokenizer on.

    With ``spec`` (trajectories are trained) also its system prompt and tool schemas, which every
    trajectory and every serving prompt carries: ~40 % fewer tokens for them in the tiny vocabulary. Under
    the compact protocol (no schemas) the system prompt and the calls come once per task, as often as the
    served episodes carry them, so the tokenizer learns them as whole words."""
    catalog_path, _ = find_catalog(Path(world))
    texts: list[str] = []
    items = list(RecordReader(catalog_path, Item))
    for item in items:
        texts += [item.title, " > ".join(item.category_path)]
    themed = catalog_bundle_tasks(items, theme_bundles, seed) if spec is not None and not spec.tools else []
    for task in load_tasks(world, tasks) + themed:
        texts += [m.content for m in task.messages]
        if spec is not None and not spec.tools:  # the compact protocol: what every served episode carries
            texts += [spec.system_prompt, render_call(*plan_call(task, asked=True))]
            if needs_question(task):
                texts += [render_call(*plan_call(task, asked=False)), ToolResult(
                    name=PLAN_ASK, call_id="c", ok=True, content=_SENT).to_message()["content"]]
    return texts + (spec.corpus() if spec is not None else [])


# ------------------------------------------------------------------------------------------------
# Item alignment (LC-Rec)
# ------------------------------------------------------------------------------------------------
_TITLE_SID = ("Which item is \"{title}\"?", "Give the semantic ID of: {title}", "{title}")
_SID_TITLE = ("What is {sid}?", "Name the item {sid}.", "{sid} is which product?")
_SID_CATEGORY = ("Which category is {sid} in?", "Category of {sid}?")


def _chat(user: str, assistant: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def _pick(templates: Sequence[str], key: str) -> str:
    return templates[int(unit_hash(key) * len(templates))]


def alignment_examples(items: Sequence[Item], sid_map: SidMap, max_items: int = -1) -> list[ChatExample]:
    """Title <-> SID, SID -> category for ``max_items`` items (-1 = all; a hash-chosen, stable subset),
    plus attribute -> SID prefix examples over all items; ``max_items`` 0 = none at all (a plan-only model).
    Items without a SID are skipped."""
    if max_items == 0:
        return []
    items = [i for i in items if i.item_id in sid_map]
    chosen = items if max_items < 0 else sorted(items, key=lambda i: unit_hash(i.item_id))[:max_items]
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


# ------------------------------------------------------------------------------------------------
# Tool-call trajectories (the harness protocol)
# ------------------------------------------------------------------------------------------------
SID_RETRIEVE, BUNDLE, ASK_USER, RESPOND = "sid_retrieve", "bundle", "ask_user", "respond"
TRAJECTORY_TOOLS = (SID_RETRIEVE, BUNDLE, ASK_USER, RESPOND)
"""The tools a trajectory calls; a :class:`TrajectorySpec` must declare them."""
_SENT = {"sent": True}
"""What the loop tells the model after a grounded ``ask_user`` / ``respond`` (``AgentLoop._ground``)."""
_REPLY_ONE = ("Here is the best match for you.", "I found this one for you.", "This one fits what you asked for.")
_REPLY_MANY = ("Here are {n} options that fit what you asked for, best first.", "I found {n} good matches for you.",
               "These {n} items match your request.")




def check_spec(spec: TrajectorySpec) -> None:
    """Trajectories call :data:`TRAJECTORY_TOOLS`: the spec's tool schemas must declare them."""
    names = {(t.get("function") or t).get("name") for t in spec.tools}
    missing = [n for n in TRAJECTORY_TOOLS if n not in names]
    if missing:
        raise SftDataError(f"the tool schemas lack {missing}, which trajectories call")



def breaks_constraints(item: Item, constraints: dict[str, Any]) -> bool:
    """True when ``item`` visibly fails a stated shopping constraint (keys of ``apps/shopping/constraints.py``):
    out of stock, outside the category, another facet value, a missing feature, a price out of bounds.
    What makes a distractor safe: an item that meets every constraint but is not a target is never one."""
    category = constraints.get("category")
    if not item.in_stock or (category and item.category_path[:len(category)] != list(category)):
        return True
    for key, want in (constraints.get("attributes") or {}).items():
        if str(item.attributes.get(key, "")).lower() != str(want).lower():
            return True
    have = item.attributes.get("features", [])
    have_set = {f.lower() for f in have} if isinstance(have, list) else set()
    if any(f.lower() not in have_set for f in constraints.get("features") or []):
        return True
    lo, hi = constraints.get("price_min"), constraints.get("price_max")
    if (lo is not None or hi is not None) and item.price is None:
        return True
    return (lo is not None and item.price is not None and item.price < lo) or \
        (hi is not None and item.price is not None and item.price > hi)


class _Calls:
    """Numbers the calls of one trajectory (``call_1``, ``call_2``…): ids are not rendered, but stay stable."""

    def __init__(self) -> None:
        self.n = 0

    def turn(self, name: str, arguments: dict[str, Any], content: Any) -> list[dict[str, Any]]:
        """The assistant message making one call, and the tool message with its (successful) result."""
        self.n += 1
        call = ToolCall(name=name, arguments=arguments, id=f"call_{self.n}")
        result = ToolResult(name=name, call_id=call.id, ok=True, content=content)
        return [assistant_message("", [call]), result.to_message()]

    def last(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The final assistant message (the call that ends the turn; its result is not part of the example)."""
        self.n += 1
        return assistant_message("", [ToolCall(name=name, arguments=arguments, id=f"call_{self.n}")])


@dataclass
class _Neighbours:
    """Items with a SID grouped by their first one and two code levels: where a SID beam search's misses lie."""

    catalog: Catalog
    sid_map: SidMap
    by_prefix: dict[tuple[int, ...], list[str]]
    all_ids: list[str]

    @classmethod
    def build(cls, catalog: Catalog, sid_map: SidMap) -> _Neighbours:
        ids = [i for i in sid_map.item_ids if i in catalog]
        groups: dict[tuple[int, ...], list[str]] = defaultdict(list)
        for item_id in ids:
            codes = sid_map.codes_of(item_id)
            groups[codes[:2]].append(item_id)
            groups[codes[:1]].append(item_id)
        return cls(catalog, sid_map, dict(groups), ids)

    def distractors(self, near: str, constraints: dict[str, Any], price_max: float | None, exclude: set[str],
                    n: int, rng: np.random.Generator) -> list[str]:
        """Up to ``n`` items a filtered SID retrieval could return (in stock, within ``price_max``) that break a
        constraint, nearest to ``near`` in SID space first (same 2-level prefix, then 1-level, then any)."""
        codes = self.sid_map.codes_of(near)
        out: list[str] = []
        for pool in (self.by_prefix.get(codes[:2], []), self.by_prefix.get(codes[:1], []), self.all_ids):
            for k in rng.permutation(len(pool)):
                item = self.catalog[pool[int(k)]]
                if item.item_id in exclude or not item.in_stock or not breaks_constraints(item, constraints):
                    continue
                if price_max is not None and (item.price is None or item.price > price_max):
                    continue
                out.append(item.item_id)
                exclude.add(item.item_id)
                if len(out) == n:
                    return out
        return out


def _opening(task: Task, spec: TrajectorySpec, calls: _Calls) -> list[dict[str, Any]]:
    """System prompt and the user's intent; for ``multi_turn``: + ask_user, its result, the question as the loop
    writes it (context, ``weight`` 0) and the user's answer with the hidden constraints."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": spec.system_prompt}]
    messages += [{"role": m.role, "content": m.content} for m in task.messages if m.role != "system"]
    if task.kind == "multi_turn" and task.hidden:
        question = clarifying_question(task)
        messages += calls.turn(ASK_USER, {"question": question}, _SENT)
        messages += [{"role": "assistant", "content": question, "weight": 0},
                     {"role": "user", "content": hidden_constraints_text(task.hidden)}]
    return messages


def _retrieval_trajectory(task: Task, spec: TrajectorySpec, nb: _Neighbours, j: int, rng: np.random.Generator,
                          shown_targets: int, distractors: int) -> list[dict[str, Any]] | None:
    """intent -> sid_retrieve -> cards (targets + distractors, shuffled) -> respond(targets, best first)."""
    assert task.target is not None
    slot = [i for i in task.target.slots[0] if i in nb.sid_map and i in nb.catalog and nb.catalog[i].in_stock]
    if not slot:
        return None
    rotated = slot[j % len(slot):] + slot[:j % len(slot)]
    targets = sorted(rotated[:shown_targets], key=slot.index)  # best first, as the task lists them
    price_max = task.constraints.get("price_max")
    args: dict[str, Any] = {} if price_max is None else {"price_max": float(price_max)}
    extra = nb.distractors(targets[0], task.constraints, args.get("price_max"), set(task.target.item_ids),
                           distractors, rng)
    shown = [targets[int(k)] if k < len(targets) else extra[int(k) - len(targets)]
             for k in rng.permutation(len(targets) + len(extra))]
    calls = _Calls()
    messages = _opening(task, spec, calls)
    messages += calls.turn(SID_RETRIEVE, args, {"items": [item_card(nb.catalog[i]) for i in shown]})
    text = (_pick(_REPLY_ONE, f"{task.task_id}:{j}") if len(targets) == 1
            else _pick(_REPLY_MANY, f"{task.task_id}:{j}").format(n=len(targets)))
    return [*messages, calls.last(RESPOND, {"text": text, "item_ids": targets})]


def _bundle_pick(task: Task, catalog: Catalog, j: int) -> list[Item] | None:
    """One target per slot within the budget: each slot's j-th best (wrapping), else each slot's cheapest."""
    assert task.target is not None
    raw_budget = task.constraints.get("budget")
    budget = float("inf") if raw_budget is None else float(raw_budget)
    slots = [[catalog[i] for i in s if i in catalog and catalog[i].in_stock and catalog[i].price is not None]
             for s in task.target.slots]
    if any(not s for s in slots):
        return None
    for pick in ([s[j % len(s)] for s in slots], [min(s, key=lambda i: (i.price, i.item_id)) for s in slots]):
        if sum(float(i.price or 0.0) for i in pick) <= budget + 1e-9 and len({i.item_id for i in pick}) == len(pick):
            return pick
    return None


def _bundle_trajectory(task: Task, spec: TrajectorySpec, catalog: Catalog, j: int) -> list[dict[str, Any]] | None:
    """intent -> bundle(slots, budget) -> one card per slot (what the tool returns) -> respond(bundles=[ids])."""
    slots, raw_budget = task.constraints.get("slots"), task.constraints.get("budget")
    if not slots or raw_budget is None:
        return None
    budget = float(raw_budget)
    pick = _bundle_pick(task, catalog, j)
    if pick is None or len(slots) != len(pick):
        return None
    total = round(sum(float(i.price or 0.0) for i in pick), 2)
    cards = [{**item_card(i), "slot": " > ".join(s)} for i, s in zip(pick, slots, strict=True)]
    calls = _Calls()
    messages = _opening(task, spec, calls)
    messages += calls.turn(BUNDLE, {"slots": [list(s) for s in slots], "budget": budget},
                           {"items": cards, "total": total, "budget": budget})
    text = f"Here is a bundle within your budget of {budget:g} (total {total:.2f})."
    return [*messages, calls.last(RESPOND, {"text": text, "bundles": [[i.item_id for i in pick]]})]


def trajectory_examples(tasks: Iterable[Task], catalog: Catalog, sid_map: SidMap, spec: TrajectorySpec, *,
                        per_task: int = 1, seed: int = 0, shown_targets: int = 3,
                        distractors: int = 3) -> list[ChatExample]:
    """``per_task`` tool-call trajectories per task (kind ``traj_<task kind>``), as the harness renders them.

    Single and set targets: the ``sid_retrieve`` result holds ``shown_targets`` targets (trajectory
    ``j`` starts at the slot's ``j``-th id, so set targets vary) and up to ``distractors`` items that
    break a stated constraint, nearest the first target in SID space, in an order drawn from
    ``(seed, task_id, j)``; ``respond`` names the shown targets, best first. Bundles: the ``bundle``
    result holds one target per slot within the budget. A task whose targets are gone (not in the
    catalog, no SID, out of stock) or whose bundle fits no budget yields none.
    """
    nb = _Neighbours.build(catalog, sid_map)
    out = []
    for task in tasks:
        assert task.target is not None, f"task {task.task_id} has no target"
        for j in range(per_task):
            rng = np.random.default_rng([seed, int(unit_hash(f"traj:{task.task_id}") * 2**32), j])
            if task.target.kind == "bundle":
                messages = _bundle_trajectory(task, spec, catalog, j)
            else:
                messages = _retrieval_trajectory(task, spec, nb, j, rng, shown_targets, distractors)
            if messages is not None:
                out.append(ChatExample(messages, TRAJ_PREFIX + task.kind, task.task_id, tools=spec.tools))
    return out


def plan_examples(tasks: Iterable[Task], spec: TrajectorySpec, per_task: int = 1) -> list[ChatExample]:
    """Served-format examples of the compact protocol (kind ``traj_<task kind>``): the system prompt, the user's
    intent and the one call :func:`apps.shopping.plan.plan_call` gives; ``multi_turn`` tasks first ask (the call,
    its result and the question as the loop records them) and get the hidden constraints as the next user turn.
    ``per_task`` repeats each (the calls are deterministic)."""
    out = []
    for task in tasks:
        calls = _Calls()
        messages: list[dict[str, Any]] = [{"role": "system", "content": spec.system_prompt}]
        messages += [{"role": m.role, "content": m.content} for m in task.messages if m.role != "system"]
        if needs_question(task):
            name, args = plan_call(task, asked=False)
            assert name == PLAN_ASK
            messages += calls.turn(name, args, _SENT)
            messages += [{"role": "assistant", "content": args["question"], "weight": 0},
                         {"role": "user", "content": hidden_constraints_text(task.hidden)}]
        messages.append(calls.last(*plan_call(task, asked=True)))
        out += [ChatExample(messages, TRAJ_PREFIX + task.kind, task.task_id)] * per_task
    return out


def build_shopping_sft(world: Path, sid_dir: Path, *, eval_fraction: float = 0.1, align_items: int = -1,
                       targets_per_task: int = 3, trajectories_per_task: int = 0, spec: TrajectorySpec | None = None,
                       seed: int = 0, tasks_path: Path | None = None, theme_bundles: int = 0) -> SftData:
    """All SFT examples of a shopping world: alignment + train intents (+ train trajectories), and the
    held-out intents (+ one trajectory per held-out task), grouped by task.

    ``trajectories_per_task`` > 0 needs ``spec`` (the app's system prompt and tool schemas). Under the compact
    protocol ``theme_bundles`` adds that many plan examples of bundle requests over the catalog's own themes
    (:mod:`apps.shopping.themes`; training only, kind ``traj_theme_bundle``)."""
    if trajectories_per_task > 0 and spec is None:
        raise SftDataError("trajectories need the app's system prompt and tool schemas: pass spec=TrajectorySpec(…)")
    compact = spec is not None and not spec.tools  # the served protocol lists no tools: plan examples
    if theme_bundles and not (compact and trajectories_per_task > 0):
        raise SftDataError(f"theme_bundles={theme_bundles} needs the compact protocol's plan examples "
                           "(trajectories_per_task > 0 and a spec without tool schemas)")
    if spec is not None and trajectories_per_task > 0 and not compact:
        check_spec(spec)
    sid_map = SidMap.load(Path(sid_dir) / SIDS_FILE)
    catalog, _ = Catalog.load(find_catalog(Path(world))[0])
    tasks = load_tasks(world, tasks_path)
    held = [t for t in tasks if is_held_out(t.task_id, eval_fraction)]
    kept = [t for t in tasks if not is_held_out(t.task_id, eval_fraction)]
    train = alignment_examples(list(catalog), sid_map, align_items) + intent_examples(kept, sid_map, targets_per_task)
    evals = intent_examples(held, sid_map, 1)
    if trajectories_per_task > 0 and compact:
        assert spec is not None
        train += plan_examples(kept, spec, per_task=trajectories_per_task)
        themed = plan_examples(catalog_bundle_tasks(list(catalog), theme_bundles, seed), spec)
        train += [ChatExample(e.messages, TRAJ_PREFIX + "theme_bundle", e.source) for e in themed]
        evals += plan_examples(held, spec)
        order = {t.task_id: k for k, t in enumerate(held)}
        evals.sort(key=lambda e: order[e.source])
    elif trajectories_per_task > 0:
        assert spec is not None
        train += trajectory_examples(kept, catalog, sid_map, spec, per_task=trajectories_per_task, seed=seed)
        evals += trajectory_examples(held, catalog, sid_map, spec, per_task=1, seed=seed)
        order = {t.task_id: k for k, t in enumerate(held)}
        evals.sort(key=lambda e: order[e.source])  # stable: per task its intent, then its trajectory
    if not train:
        raise SftDataError(f"{world} with {sid_dir} yields no training examples (do the SIDs match the catalog?)")
    counts = dict(sorted(Counter(e.kind for e in train).items()))
    counts |= {"train": len(train), "eval": len(evals), "eval_tasks": len(held), "train_tasks": len(kept)}
    return SftData(train=train, eval=evals, eval_tasks=held, counts=counts)


KIT_NAME = "shopping"


def app_spec() -> TrajectorySpec:
    """What every served prompt renders: the compact protocol's system prompt and no tool schemas."""
    return TrajectorySpec.of(PLAN_PROMPT, [])


class ShoppingSft:
    """The shopping kit's SFT source (``training.sft.SftSource``): the tiny tokenizer's corpus and the examples."""

    def trajectory_spec(self) -> TrajectorySpec:
        return app_spec()

    def corpus(self, cfg: SFTConfig) -> list[str]:
        return world_corpus(cfg.world, cfg.trajectory_spec or app_spec(), cfg.tasks, cfg.theme_bundles, cfg.seed)

    def app_files(self, cfg: SFTConfig) -> dict[str, str]:
        """The shoppers' vocabulary learnt from the same training tasks and their logged searches."""
        return {VOCABULARY_FILE: learn_vocabulary(cfg.world, cfg.tasks, cfg.eval_fraction).to_json()}

    def build(self, cfg: SFTConfig) -> SftData:
        return build_shopping_sft(cfg.world, cfg.sid, eval_fraction=cfg.eval_fraction, align_items=cfg.align_items,
                                  targets_per_task=cfg.targets_per_task,
                                  trajectories_per_task=cfg.trajectories_per_task,
                                  spec=cfg.trajectory_spec, seed=cfg.seed, tasks_path=cfg.tasks,
                                  theme_bundles=cfg.theme_bundles)


def learn_vocabulary(world: Path, tasks: Path | None = None, eval_fraction: float = 0.0) -> Vocabulary:
    """:func:`apps.shopping.vocabulary.learn` over the SFT's training tasks (its own held-out ones left out)
    and the searches logged beside them (``logs.jsonl`` next to the tasks file, if there is one)."""
    catalog, _ = Catalog.load(find_catalog(Path(world))[0])
    index = ShoppingIndex.build(catalog)
    every = load_tasks(world, tasks)
    kept = [t for t in every if not is_held_out(t.task_id, eval_fraction)]
    held = {t.task_id for t in every} - {t.task_id for t in kept}
    tasks_file = Path(world) / TASKS_FILE if tasks is None else Path(tasks)
    logs = (tasks_file if tasks_file.is_dir() else tasks_file.parent) / LOGS_FILE
    sessions = (s for s in RecordReader(logs, Session, skip_bad=True) if s.task_id not in held) \
        if logs.is_file() and logs.stat().st_size > 0 else ()
    vocabulary = learn(kept, index.lexicon, index.paths, searches(sessions, catalog))
    log.info("shopping vocabulary: %s", describe(vocabulary))
    return vocabulary


SOURCE = ShoppingSft()
