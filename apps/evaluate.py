"""Assemble one offline evaluation from an agent directory and a directory of logged tasks (``sidekick eval``).

    sidekick eval runs/train/final --logs runs/c/test            # report in runs/eval/train-final
    sidekick eval compare runs/eval/before runs/eval/after --out runs/eval/compare

With an agent the baselines are, by default, the apps' no-model fallback replayed on the same tasks, BM25 and
dense retrieval; the report gives paired bootstrap confidence intervals of the agent against each of them, and
a comparison of two runs gives them for B − A (pairing tasks by id).

``--logs`` is a directory with ``tasks.jsonl`` (a curated split such as ``runs/c/test``, or a world
directory), or a tasks file. Each app the tasks belong to needs its world (catalog; livestream also
``streams.jsonl``): the ``--world`` directories first, then the logs directory and its parent (a curated
split's catalog is one level up), then the world the agent was trained on. The agent's engine sits
behind serving's batching front, so the replay's worker threads share engine batches. Without an agent
directory each app's fallback answers alone (what ``sidekick serve`` does without a model).

This is the apps layer: it knows the apps (rewards, simulated users, request constraints) and serving
(model loading, batching); :mod:`eval.run` receives them ready-made.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal

import apps as app_table
from apps.serve import ServeSetupError, load_app, sid_builder, trained_worlds
from eval.paired import read_per_task
from eval.report import compare_reports, load_run, write_compare
from eval.run import EvalConfig, Ranker, run_evaluation
from harness.agent import ModelAccess
from harness.env import AppEnv
from harness.tasks import Task
from infra.layout import CATALOG_FILE, TASKS_FILE
from infra.recordio import read_records

log = logging.getLogger(__name__)

BASELINES = ("fallback", "popularity", "bm25", "dense", "sasrec")
"""Baseline names ``--baselines`` accepts: ``fallback`` (the apps' no-model fallback replayed on the same tasks)
and rankers from ``eval/baselines.py``."""
DEFAULT_BASELINES = ("fallback", "bm25", "dense")
"""What runs without ``--baselines`` when an agent is evaluated (the fallback replays fast; ``dense`` embeds the
catalog once, then it is cached)."""
DEFAULT_BASELINES_NO_AGENT = ("popularity", "bm25")
"""What runs without ``--baselines`` when the fallback itself is evaluated (cheap, like the run itself)."""


class EvalSetupError(ValueError):
    """A logs, world or agent directory that cannot be evaluated, with what to change."""


# ------------------------------------------------------------------------------------------------ inputs
def tasks_file(logs: Path) -> Path:
    """The tasks file of ``--logs``: the path itself, or ``tasks.jsonl`` inside it."""
    logs = Path(logs)
    if logs.is_file():
        return logs
    if not logs.is_dir():
        raise EvalSetupError(f"--logs {logs}: no such directory")
    path = logs / TASKS_FILE
    if path.is_file():
        return path
    splits = [s for s in ("test", "val", "train") if (logs / s / TASKS_FILE).is_file()]
    hint = f"; a curated directory: pass --logs {logs / splits[0]}" if splits else ""
    raise EvalSetupError(f"--logs {logs}: no {TASKS_FILE}{hint}")


def load_tasks(logs: Path) -> list[Task]:
    """Every task of ``--logs`` (strictly validated: the first bad record stops it, naming the line)."""
    tasks = list(read_records(tasks_file(logs), Task)[0])
    if not tasks:
        raise EvalSetupError(f"--logs {logs}: {TASKS_FILE} holds no tasks")
    return tasks


def _app_of(world: Path) -> str | None:
    try:
        return app_table.world_app_name(world)
    except app_table.AppError:
        return None


def find_worlds(logs: Path, apps: Sequence[str], worlds: Sequence[Path] = (), agent_dir: Path | None = None
                ) -> dict[str, Path]:
    """The world directory of each app in ``apps`` (see the module docstring for the search order)."""
    root = Path(logs) if Path(logs).is_dir() else Path(logs).parent
    explicit = [Path(w) for w in worlds]
    for w in explicit:
        if not (w / CATALOG_FILE).is_file():
            raise EvalSetupError(f"--world {w}: no {CATALOG_FILE} (is this a world directory?)")
    try:
        trained = trained_worlds(agent_dir) if agent_dir is not None else []
    except ServeSetupError as e:
        raise EvalSetupError(str(e)) from e
    candidates = [*explicit, root, root.parent, *trained]
    found: dict[str, Path] = {}
    for app in apps:
        fits = [c for c in candidates if (c / CATALOG_FILE).is_file() and _app_of(c) == app]
        wanted = app_table.kit(app).world_files  # what the tools read; a curated copy may have only the catalog
        fits.sort(key=lambda c: not all((c / f).is_file() for f in wanted))
        if not fits:
            raise EvalSetupError(f"no {app} world (catalog) found beside --logs {logs}: pass --world DIR")
        found[app] = fits[0]
    return found


def eval_app(world: Path, name: str) -> AppEnv:
    """An app ready for replay: its spec over ``world`` with its reward, simulated user and request constraints."""
    try:
        return load_app(world, name=name)
    except ServeSetupError as e:
        raise EvalSetupError(str(e)) from e


def with_form(env: AppEnv, name: str) -> AppEnv:
    """``env`` sending what the app's form frontend sends (its kit's ``form_request``); unchanged without one."""
    form = app_table.kit(name).form_request
    return dataclasses.replace(env, request_fn=form) if form is not None else env


def model_only(env: AppEnv) -> AppEnv:
    """``env`` whose model answers every turn: the app's :attr:`~harness.agent.AppSpec.first_answer` left out."""
    return dataclasses.replace(env, spec=dataclasses.replace(env.spec, first_answer=None))


# ------------------------------------------------------------------------------------------------ the model
def load_eval_model(agent_dir: Path, apps: dict[str, AppEnv], cfg: EvalConfig, stack: ExitStack,
                    dtype: Literal["auto", "bf16", "fp32"] = "auto") -> ModelAccess:
    """The agent's engine (behind a batching front when tasks run in parallel), closed with ``stack``."""
    import torch

    from harness.agent_dir import ModelError
    from infra.engines import EngineSettings
    from serving.batcher import BatchingEngine
    from serving.model import load_model

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    engine = EngineSettings(dtype=dtype, max_batch_size=cfg.max_batch)
    try:
        model, _ = load_model(Path(agent_dir), sid_builder(apps), engine=engine)
    except (ModelError, OSError, ServeSetupError) as e:
        raise EvalSetupError(f"{agent_dir}: cannot load the agent: {e}") from e
    if cfg.workers == 1:
        return model
    front = BatchingEngine(model.engine, max_batch=cfg.max_batch, gather_ms=cfg.gather_ms)
    stack.callback(front.close)
    return ModelAccess(engine=front, tokenizer=model.tokenizer, sid=model.sid)


# ------------------------------------------------------------------------------------------------ baselines
def baseline_rankers(names: Sequence[str], worlds: dict[str, Path], tasks: Sequence[Task] = ()
                     ) -> tuple[dict[str, Ranker], str | None]:
    """Rankers for ``names`` (from :mod:`eval.baselines`) over the world of the app whose tasks name
    target items (``worlds``), and a note for the report.

    They see each task's user messages (not the answers to the agent's questions) and rank the whole catalog;
    popularity counts the item events of the world's training logs. A baseline that cannot be built here is
    left out and the note says why; SASRec needs user histories, which the MovieLens benchmark has. Dense embeds
    the queries of ``tasks`` in batches up front (one at a time costs ~25x more).
    """
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise EvalSetupError(f"--baselines {', '.join(unknown)}: expected some of {', '.join(BASELINES)} or none")
    names = [n for n in names if n != "fallback"]  # replayed by eval.run, not ranked
    if not names:
        return {}, None
    if not worlds:
        return {}, "the baselines rank catalog items; no task here has target items to rank"
    app = sorted(worlds)[0]
    from eval.baselines import BaselineError, DenseRanker, Query, build_baselines, task_ranker
    from infra.settings import get_settings

    notes = ["baselines see each task's user messages only (not the answers to clarifying questions)"]
    if "sasrec" in names:
        notes.append("sasrec needs user histories: it runs in `sidekick eval movielens`")
    rankers: dict[str, Ranker] = {}
    for name in (n for n in names if n != "sasrec"):
        try:
            built = build_baselines([name], worlds[app], cache_dir=get_settings().cache_dir)
        except (BaselineError, OSError, ValueError) as e:
            notes.append(f"{name} left out: {e}")
            continue
        ranker = built[name]
        if isinstance(ranker, DenseRanker):
            ranker.prepare(Query.of_task(t) for t in tasks if t.target is not None)
        rankers[name] = task_ranker(ranker)
    return rankers, "; ".join(notes)


# ------------------------------------------------------------------------------------------------ run
def evaluate(agent_dir: Path | None, logs: Path, out: Path, cfg: EvalConfig, *, worlds: Sequence[Path] = (),
             baselines: Sequence[str] = (), dtype: Literal["auto", "bf16", "fp32"] = "auto",
             progress: Callable[[int], None] | None = None, on_total: Callable[[int], None] | None = None
             ) -> dict[str, Any]:
    """Evaluate the agent (None = fallbacks only) on the tasks of ``logs``; write the report into ``out``.

    ``on_total(n)`` is told how many tasks will run before the first one starts (for a progress bar).
    """
    if agent_dir is not None and not Path(agent_dir).is_dir():
        raise EvalSetupError(f"{agent_dir}: no such agent directory")
    tasks = load_tasks(logs)
    tasks = tasks[: cfg.limit] if cfg.limit >= 0 else tasks
    names: list[str] = sorted({t.app for t in tasks})
    world_dirs = find_worlds(logs, names, worlds, agent_dir)
    apps = {name: eval_app(world_dirs[name], name) for name in names}
    if cfg.form:  # a form frontend sends the task's constraints as fields, not only the text
        apps = {name: with_form(env, name) for name, env in apps.items()}
    if cfg.model_only:  # the model alone: no rule answers before it
        apps = {name: model_only(env) for name, env in apps.items()}
    ranked = {t.app for t in tasks if t.target is not None}  # apps whose tasks name target items
    rankers, note = baseline_rankers(baselines, {a: w for a, w in world_dirs.items() if a in ranked}, tasks)
    fallback = "fallback" in baselines and agent_dir is not None
    if "fallback" in baselines and agent_dir is None:
        left_out = "fallback left out: without an agent the fallback is what is evaluated"
        note = f"{note}; {left_out}" if note else left_out
    meta = {"agent": str(agent_dir) if agent_dir is not None else None, "logs": str(logs), "form": cfg.form,
            "model_only": cfg.model_only, "worlds": {k: str(v) for k, v in world_dirs.items()},
            "baselines_requested": list(baselines)}
    if on_total is not None:
        on_total(len(tasks) * (2 if fallback else 1))  # the fallback replays every task too
    with ExitStack() as stack:
        model = load_eval_model(Path(agent_dir), apps, cfg, stack, dtype) if agent_dir is not None else None
        return run_evaluation(tasks, apps, model, cfg, Path(out), meta=meta, rankers=rankers, fallback=fallback,
                              baselines_note=note, progress=progress, inputs=[tasks_file(logs), *world_dirs.values()])


def compare_runs(run_a: Path, run_b: Path, out: Path, labels: tuple[str, str] | None = None, *,
                 n_boot: int = 2000, seed: int = 0, alpha: float = 0.05) -> dict[str, Any]:
    """Compare two evaluation outputs (directories or ``report.json`` files); write compare.json/.html in ``out``.

    With both runs' per-task values (``per_task.jsonl``, else the traces) the comparison holds paired bootstrap
    intervals (``n_boot`` resamples, ``seed``, level ``1 - alpha``) of B − A over the tasks both runs have."""
    try:
        (a, sa), (b, sb) = load_run(run_a), load_run(run_b)
        rows = [read_per_task(p if p.is_dir() else p.parent) for p in (Path(run_a), Path(run_b))]
    except (FileNotFoundError, ValueError) as e:
        raise EvalSetupError(str(e)) from e
    names = labels or (Path(run_a).name or "A", Path(run_b).name or "B")
    if names[0] == names[1]:
        names = (f"A: {names[0]}", f"B: {names[1]}")
    successes = (sa, sb) if sa is not None and sb is not None else None
    per_task = (rows[0], rows[1]) if rows[0] is not None and rows[1] is not None else None
    cmp = compare_reports(a, b, labels=names, successes=successes, per_task=per_task, n_boot=n_boot, seed=seed,
                          alpha=alpha)
    write_compare(cmp, Path(out))
    return cmp
