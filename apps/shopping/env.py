"""The shopping RL environment's own parts: a WebShop-style reward and a simulated shopper.

The environment itself is the shared :class:`~harness.agent.AgentLoop` with the shopping app; a
rollout runs turns, answers the agent's questions with :func:`simulated_user`, and scores the
final answer with :func:`reward`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from apps.shopping.constraints import hidden_constraints_text, item_matches
from harness.agent import Final
from harness.catalog import Catalog, Item
from harness.env import Reward
from harness.tasks import Task

NUDGE = "Just show me the best option."


@dataclass(frozen=True)
class RewardBreakdown:
    """A scored answer: the reward and its parts (None = the task asks nothing of that kind).

    ``constraint_success``: every constraint of the task is met (the WebShop success criterion);
    ``target_hit``: the chosen item is one of the target slot's ids (bundles: every slot's item is).
    """

    reward: float
    r_type: float
    r_attributes: float | None = None
    r_options: float | None = None
    r_price: float | None = None
    constraint_success: bool = False
    target_hit: bool = False
    chosen: list[str] = field(default_factory=list)
    slot_scores: list[float] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def parts(self) -> dict[str, float]:
        """The numeric parts (those the task asks for), for logging next to the scalar reward."""
        parts = {"r_type": self.r_type, "r_attributes": self.r_attributes, "r_options": self.r_options,
                 "r_price": self.r_price, "target_hit": float(self.target_hit)}
        return {k: float(v) for k, v in parts.items() if v is not None}


def type_score(path: Sequence[str], category: Sequence[str] | None) -> float:
    """WebShop's ``r_type`` on a category path: 1 under the wanted path, 0.5 in the same top-level
    category only, else 0 (another kind of product altogether). No category asked: 1."""
    if not category:
        return 1.0
    if list(path[:len(category)]) == list(category):
        return 1.0
    return 0.5 if path[:1] == list(category[:1]) else 0.0


def _same(have: Any, want: Any) -> bool:
    return have is not None and str(have).lower() == str(want).lower()


def _item_parts(item: Item, c: dict[str, Any]) -> tuple[float | None, float | None, float | None, int, float]:
    """``(r_attributes, r_options, r_price, n_terms, matched_terms)`` of one item against constraints ``c``."""
    attrs = dict(c.get("attributes") or {})
    size = attrs.pop("size", None)
    att_hits = sum(_same(item.attributes.get(k), v) for k, v in attrs.items())
    have_f = item.attributes.get("features", [])
    have_set = {f.lower() for f in have_f} if isinstance(have_f, list) else set()
    options = [f.lower() in have_set for f in c.get("features") or []]
    if size is not None:
        options.append(_same(item.attributes.get("size"), size))
    bounded = c.get("price_max") is not None or c.get("price_min") is not None
    price_ok = (item.price is not None and (c.get("price_max") is None or item.price <= c["price_max"])
                and (c.get("price_min") is None or item.price >= c["price_min"]))
    n = len(attrs) + len(options) + int(bounded)
    matched = att_hits + sum(options) + int(bounded and price_ok)
    return (att_hits / len(attrs) if attrs else None, sum(options) / len(options) if options else None,
            float(price_ok) if bounded else None, n, float(matched))


def reward(task: Task, final: Final, catalog: Catalog) -> RewardBreakdown:
    """Score ``final`` against ``task`` in the manner of WebShop (Yao et al. 2022, "WebShop: Towards
    Scalable Real-World Web Interaction with Grounded Language Agents", sec. 3.2).

    One item (the first the answer names — the one the shopper would buy)::

        r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[price within bounds]) / (|U_att| + |U_opt| + 1)

    with ``U_att`` the wanted attribute values other than size (brand, colour, material…),
    ``U_opt`` the wanted options (each feature, and the size), the price term present only when the
    task bounds the price, and ``r_type`` from :func:`type_score` (WebShop's type gate: a cheap item
    of the wrong kind earns nothing). An unknown or out-of-stock item (it cannot be bought) earns 0.

    Bundles: :func:`bundle_reward`.
    """
    if (task.target is not None and task.target.kind == "bundle") or task.constraints.get("slots"):
        return bundle_reward(task, final, catalog)
    chosen = final.item_ids[:1] or [i for b in final.bundles for i in b][:1]
    if not chosen:
        return RewardBreakdown(reward=0.0, r_type=0.0, note="no item named")
    item = catalog.get(chosen[0])
    if item is None:
        return RewardBreakdown(reward=0.0, r_type=0.0, chosen=chosen, note="unknown item")
    c = task.constraints
    r_type = type_score(item.category_path, c.get("category"))
    r_att, r_opt, r_price, n, matched = _item_parts(item, c)
    r = r_type * matched / n if n else r_type
    buyable = item.in_stock or not c.get("in_stock", True)
    hit = task.target is not None and chosen[0] in task.target.slots[0]
    return RewardBreakdown(reward=r if buyable else 0.0, r_type=r_type, r_attributes=r_att, r_options=r_opt,
                           r_price=r_price, constraint_success=item_matches(item, c), target_hit=hit, chosen=chosen,
                           note="" if buyable else "out of stock")


def _assign_slots(items: Sequence[Item], slots: Sequence[Sequence[str] | None]) -> list[tuple[Item | None, float]]:
    """Each slot in order takes the unused in-stock item with the best type score for it: ``(item, score)``."""
    free = [i for i in items if i.in_stock]
    out: list[tuple[Item | None, float]] = []
    for slot in slots:
        scored = [(type_score(i.category_path, slot), -k, i) for k, i in enumerate(free)]
        if not scored:
            out.append((None, 0.0))
            continue
        score, _, best = max(scored, key=lambda s: (s[0], s[1]))
        free.remove(best)
        out.append((best, score))
    return out


def bundle_reward(task: Task, final: Final, catalog: Catalog) -> RewardBreakdown:
    """WebShop's formula per bundle: each slot is a product whose only asked facet is its type, plus the
    budget as the price term::

        r = (sum_j r_type(slot j) + 1[every slot filled and total <= budget]) / (S + 1)

    The answer's first bundle (else its item list) is matched to the slots: each slot, in order,
    takes the unused in-stock item that fits it best. Success: every slot fits and the total fits.
    """
    c = task.constraints
    n_slots = len(task.target.slots) if task.target is not None else len(c.get("slots") or [])
    slots: list[Sequence[str] | None] = list(c.get("slots") or [None] * n_slots)
    chosen = list(final.bundles[0]) if final.bundles else list(final.item_ids)
    if not slots or not chosen:
        return RewardBreakdown(reward=0.0, r_type=0.0, chosen=chosen, note="no bundle named")
    known = [i for i in (catalog.get(x) for x in dict.fromkeys(chosen)) if i is not None]
    assigned = _assign_slots(known, slots)
    scores = [s for _, s in assigned]
    filled = all(i is not None for i, _ in assigned)
    total = sum(i.price if i is not None and i.price is not None else float("inf") for i, _ in assigned)
    budget = c.get("budget")
    budget_ok = filled and (budget is None or total <= float(budget))
    r = (sum(scores) + (float(budget_ok) if budget is not None else 0.0)) / (len(slots) + (budget is not None))
    hit = task.target is not None and filled and all(
        i is not None and i.item_id in slot for (i, _), slot in zip(assigned, task.target.slots, strict=False))
    return RewardBreakdown(reward=r, r_type=sum(scores) / len(scores),
                           r_price=float(budget_ok) if budget is not None else None,
                           constraint_success=budget_ok and all(s == 1.0 for s in scores),
                           target_hit=hit, chosen=chosen, slot_scores=scores,
                           note="" if known else "unknown items")


def reward_fn(catalog: Catalog) -> Callable[[Task, Final], Reward]:
    """:func:`reward` as the :class:`harness.env.Episode` reward: value, constraint success and parts."""

    def score(task: Task, final: Final) -> Reward:
        b = reward(task, final, catalog)
        return Reward(value=b.reward, success=b.constraint_success, parts=b.parts())

    return score


def simulated_user(task: Task, assistant_text: str) -> str:
    """The shopper's next message: a question is answered from ``task.hidden`` (the constraints the
    shopper states only when asked); anything else gets a short nudge to answer."""
    if "?" in assistant_text:
        return hidden_constraints_text(task.hidden) if task.hidden else "No preference. " + NUDGE
    return NUDGE
