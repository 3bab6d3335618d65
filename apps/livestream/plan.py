"""What a good livestream agent calls under the compact protocol, read off a task's answer key.

The compact protocol (:data:`apps.livestream.agent.ANSWER_PROMPT`) is one call per question,
``answer(item, fact, versus)``. :func:`plan_call` gives that call for a task: the product as the viewer
referred to it (the task's ``meta.reference``: ``this`` for the product on screen, ``before`` for the one
shown before it, ``#N`` for an ordinal, else the brand and/or noun the question names), the fact of the
answer key, ``unknown`` for what no fact sheet says and ``chat`` for messages not about the products. It is
the served-format SFT target (:mod:`apps.livestream.sft`) and the cascade's teacher (:func:`plan_teacher`),
which may read the answer key because it only ever acts on training tasks.
"""

from __future__ import annotations

from typing import Any

from apps.livestream.agent import CHAT, UNKNOWN
from apps.livestream.world import Stream
from harness.catalog import Catalog
from harness.env import Episode
from harness.protocol import render_call
from harness.tasks import Task

ANSWER = "answer"


def reference(kind: str, item_id: str, stream: Stream | None, catalog: Catalog) -> str:
    """How a call names ``item_id`` when the viewer referred to it by ``kind`` (a world's reference kinds)."""
    if kind == "this_one":
        return "this"
    if kind == "previous":
        return "before"
    if kind == "ordinal" and stream is not None and item_id in stream.item_ids:
        return f"#{stream.item_ids.index(item_id) + 1}"
    item = catalog.get(item_id)
    if item is None:
        return item_id
    brand = str(item.attributes.get("brand", "")).strip()
    leaf = item.category_path[-1].lower() if item.category_path else ""
    if kind == "brand" and brand:
        return brand
    if kind == "leaf" and leaf:
        return leaf
    return " ".join(p for p in (brand, leaf) if p) or item_id


def plan_call(task: Task, catalog: Catalog, streams: dict[str, Stream]) -> tuple[str, dict[str, Any]]:
    """``(tool name, arguments)`` a good agent calls for ``task``."""
    if task.kind == "off_topic":
        return ANSWER, {"fact": CHAT}
    stream = streams.get(str(task.constraints.get("stream_id")))
    ids = [str(i) for i in task.constraints.get("item_ids") or []]
    kinds = [str(task.meta.get("reference", "named")), str(task.meta.get("other_reference", "named"))]
    refs = [reference(kind, item_id, stream, catalog) for kind, item_id in zip(kinds, ids, strict=False)]
    args: dict[str, Any] = {"item": refs[0] if refs else "this"}
    if task.kind == "unanswerable" or not task.facts:
        args["fact"] = UNKNOWN
        return ANSWER, args
    args["fact"] = str(task.facts[0]).rpartition(".")[2]
    if task.kind == "comparison" and len(refs) > 1:
        args["versus"] = refs[1]
    return ANSWER, args


def plan_teacher(episode: Episode, model: Any) -> str:
    """The cascade's teacher under the compact protocol: :func:`plan_call` for the episode's task, written as the
    model writes a call (``AppEnv.teacher``)."""
    streams = getattr(episode.env.spec.resources, "streams", {})
    name, args = plan_call(episode.task, episode.env.spec.catalog, streams)
    return render_call(name, args)
