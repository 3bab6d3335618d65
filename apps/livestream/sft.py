"""The livestream app's SFT data: the compact protocol's ``answer`` call of each training task, read off its answer
key (:func:`apps.livestream.plan.plan_call`) and kept only when it answers the task correctly
(:class:`apps.teacher_sft.AnswerKeySft`), plus counterfactual twins (:func:`note_twins`) that make the note's fact
list, not the wording alone, decide between a fact and ``unknown``."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from apps.livestream.agent import ANSWER_PROMPT, UNKNOWN
from apps.livestream.kit import env
from apps.livestream.phrasings import PACK_SETS, pack_template, template_key
from apps.livestream.plan import plan_call
from apps.livestream.world import set_tasks
from apps.teacher_sft import AnswerKeySft
from harness.env import AppEnv
from harness.tasks import Task
from infra.layout import TASKS_FILE
from infra.recordio import RecordError, read_records, write_records
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

STUDENT_SETS = ("train", "dev", "dev2", "dev4", "dev5")
"""The sets a student trains on by default: the training wordings, the two sets the reader was tuned on and the
fifth and seventh authors' (:func:`apps.livestream.phrasings.dev4_packs`, :func:`~.dev5_packs`)."""
APART_SETS = ("dev3", "heldout", "heldout2")
"""The sets a student is measured on: no training question may share a wording with them."""


def student_tasks(world: Path, sets: Sequence[str] = STUDENT_SETS, apart: Sequence[str] = APART_SETS
                  ) -> tuple[list[Task], Counter[str]]:
    """The training questions of ``sets`` in ``world`` (``tasks.jsonl``, ``<set>/tasks.jsonl``) less every question
    whose template, placeholders and punctuation aside (:func:`apps.livestream.phrasings.template_key`), is also a
    template of a family of ``apart``: two authors sometimes write the same short wording ("allergen info
    {ref}"), and a student must never have seen a measured wording. Returns the kept tasks and, per set, how many
    were dropped."""
    unknown = [s for s in (*sets, *apart) if s not in PACK_SETS]
    if unknown:
        raise ValueError(f"unknown question set(s) {', '.join(unknown)}; expected some of {', '.join(PACK_SETS)}")
    if set(sets) & set(apart):
        raise ValueError(f"sets {sorted(set(sets) & set(apart))} are both trained on and measured")
    measured = {template_key(t) for name in apart for p in PACK_SETS[name]() for _, _, t in p.templates()}
    packs = [p for name in sets for p in PACK_SETS[name]()]
    kept: list[Task] = []
    dropped: Counter[str] = Counter()
    for name in sets:
        path = set_tasks(world, name)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no {name} questions (generate the world with its packs: "
                                    f"sidekick world livestream)")
        for task in read_records(path, Task)[0]:
            template = pack_template(packs, str(task.meta.get("template", "")))
            if template is None:
                raise ValueError(f"{path}: task {task.task_id}: template {task.meta.get('template')!r} is in no "
                                 f"pack of the {name} families (packs changed since the world was generated?)")
            if template_key(template) in measured:
                dropped[name] += 1
            else:
                kept.append(task)
    return kept, dropped


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m apps.livestream.sft",
        description="Write a livestream student's training questions: the world's training sets less every "
                    "question worded like a measured set (README, 'The reader first, the model for the rest').")
    parser.add_argument("world", type=Path, help="a livestream world (sidekick world livestream)")
    parser.add_argument("out", type=Path, help="directory to write tasks.jsonl into (a cascade config's tasks:)")
    parser.add_argument("--sets", default=",".join(STUDENT_SETS), help="sets to train on (default %(default)s)")
    parser.add_argument("--apart", default=",".join(APART_SETS), help="sets measured on (default %(default)s)")
    args = parser.parse_args(argv)
    split = lambda v: [x.strip() for x in v.split(",") if x.strip()]  # noqa: E731
    try:
        tasks, dropped = student_tasks(args.world, split(args.sets), split(args.apart))
    except (ValueError, OSError, RecordError) as e:
        parser.exit(2, f"error: {e}\n")
    n = write_records(args.out / TASKS_FILE, tasks)
    print(f"wrote {n} questions to {args.out / TASKS_FILE}; dropped as worded like {args.apart}: "
          f"{sum(dropped.values())} ({', '.join(f'{k} {v}' for k, v in sorted(dropped.items())) or 'none'})")


if __name__ == "__main__":
    main()
