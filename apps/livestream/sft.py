"""The livestream app's SFT data: the compact protocol's ``answer`` call of each training task, read off its answer
key (:func:`apps.livestream.plan.plan_call`) and kept only when it answers the task correctly
(:class:`apps.teacher_sft.AnswerKeySft`), plus counterfactual twins (:func:`note_twins`) that make the note's fact
list, not the wording alone, decide between a fact and ``unknown``."""

from __future__ import annotations

from typing import Any

from apps.livestream.agent import ANSWER_PROMPT, UNKNOWN
from apps.livestream.kit import env
from apps.livestream.plan import plan_call
from apps.teacher_sft import AnswerKeySft
from harness.env import AppEnv
from harness.tasks import Task
from training.sft_data import unit_hash

FACTS = "facts: "
"""Where a livestream note's fact list starts (:func:`apps.livestream.agent.turn_note`)."""
DROP_SHARE = 0.15
"""The share of answerable questions that also get a twin whose note lacks the asked fact."""


def task_call(env: AppEnv, task: Task) -> tuple[str, dict[str, Any]]:
    return plan_call(task, env.spec.catalog, getattr(env.spec.resources, "streams", {}))


def asked_fact(task: Task) -> str | None:
    """The fact an unanswerable question asks for, from its template id (``unanswerable:warranty_months:2``,
    ``de/unanswerable:waterproof:0``); None for a generic one."""
    parts = str(task.meta.get("template", "")).split(":")
    at = next((k for k, p in enumerate(parts[:-1]) if p.rpartition("/")[2] == "unanswerable"), None)
    name = parts[at + 1] if at is not None else ""
    return name if name and name != "generic" else None


def note_twins(task: Task, user: list[dict[str, Any]],
               arguments: dict[str, Any]) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Counterfactual copies of a training example whose answer the note decides.

    A student trained on the answer calls alone learns ``unknown`` from the wording ("does it come with a
    warranty" -> unknown) and then calls an unseen wording of an answerable question unknown too, with the fact it
    asks for listed in its note. The twins tie the choice to the note: for :data:`DROP_SHARE` of the answerable
    questions (by task-id hash) the same words with the asked fact left out of the note's list -> ``unknown``; for
    every unanswerable question that asks a named fact, the same words with that fact added to the list -> that
    fact. Only the call is trained on, so no fact value is invented."""
    note = str(user[-1].get("note") or "") if user else ""
    head, sep, listed = note.rpartition(FACTS)
    if not sep:
        return []
    facts = [f for f in listed.split(", ") if f]
    fact = str(arguments.get("fact", ""))
    if task.kind == "question" and fact in facts and len(facts) > 1 and unit_hash(f"twin:{task.task_id}") < DROP_SHARE:
        changed = [f for f in facts if f != fact]
        twin = {k: v for k, v in arguments.items() if k != "versus"} | {"fact": UNKNOWN}
    elif task.kind == "unanswerable" and (named := asked_fact(task)) is not None and named not in facts:
        at = int(unit_hash(f"twin-at:{task.task_id}") * (len(facts) + 1))
        changed, twin = [*facts[:at], named, *facts[at:]], {**arguments, "fact": named}
    else:
        return []
    return [([*user[:-1], {**user[-1], "note": f"{head}{FACTS}{', '.join(changed)}"}], twin)]


SOURCE = AnswerKeySft(ANSWER_PROMPT, env, task_call, note_twins)
