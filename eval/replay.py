"""Replay: an agent runs through the serving harness on logged tasks, one episode per task, scored per task.

Each task is a :class:`~harness.env.Episode` — the one multi-turn loop RL rollout also runs: a session
opened with what a frontend would send for the task, turns of the agent loop that serves users, the
app's simulated user answering clarifying questions up to ``max_turns`` user turns, and the app's
reward on the last answer (0 for an episode still asking at the turn cap).

Tasks run on a thread pool (``workers``) against one shared engine, which must be thread-safe — the
apps layer passes serving's batching front, so concurrent tasks' model calls share engine batches.
Results come back in task order, whatever order they finish in.

Determinism: with ``enforce_budget=False`` (the default) each turn's deadline is effectively infinite,
so what the agent does depends on the model, the tasks and the seed only (each task's sampling seed is
derived from ``seed`` and its id, not from its place in the schedule); latencies are still measured
and compared with the app's budget afterwards. ``enforce_budget=True`` replays under the served
budgets (degrading to the fallback when time runs out), which depends on machine load.

    .venv/bin/python -m pytest tests/eval/test_replay.py -q
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from eval.metrics import ranking_metrics
from harness.agent import SURE, AgentLoop, Final, Grounder, LoopConfig, ModelAccess, TurnResult
from harness.env import UNBOUNDED_MS, AppEnv, Episode
from harness.tasks import Task

OUTPUT_CHARS = 1000
"""Each raw model output kept in a trace is cut at this many characters."""
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)


class ReplayError(RuntimeError):
    """Replay cannot run as asked (no app for a task's kind of app, every task failed, ...)."""


class ReplayConfig(BaseModel):
    """How tasks are replayed. Sampling is greedy by default; seeds make sampled replays reproducible."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(4, ge=1, description="Tasks in flight at once (threads sharing the engine's batches). "
                                              "Default 4 (the fastest of 1/4/16 with the tiny model on 2 cores).")
    max_turns: int = Field(3, ge=1, description="Most user turns per task (the first message included). Default 3.")
    seed: int = Field(0, description="Base seed; each task samples with a seed derived from it and its id.")
    temperature: float = Field(0.0, ge=0.0, description="Sampling temperature; 0 = greedy (default).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus mass; 1 = off (default).")
    max_new_tokens: int = Field(256, ge=1, description="Most tokens per model call. Default 256.")
    max_prompt_tokens: int | None = Field(None, ge=16, description="Longest prompt the loop sends (older messages "
                                                                   "are dropped first); None = the loop's default.")
    enforce_budget: bool = Field(False, description="Run turns under the app's latency budget (served behaviour, "
                                                    "load-dependent); default off: measured, not enforced.")
    budget_ms: float | None = Field(None, gt=0, description="Budget per turn in ms; None = each app's default.")
    ks: tuple[int, ...] = Field((1, 5, 10), min_length=1, description="Cut-offs of Recall/NDCG/Hit@k.")


@dataclass
class TurnStat:
    """What one turn cost: the counters of its :class:`TurnResult` and its wall time."""

    latency_ms: float
    degraded: bool
    reason: str | None
    steps: int
    tool_calls: int
    parse_errors: int
    grounding_failures: int
    output_tokens: int
    thinking_tokens: int
    outputs: list[str] = field(default_factory=list)  # the model's raw texts, each cut at OUTPUT_CHARS


@dataclass
class TaskResult:
    """One replayed task: how it ended, the final answer, its reward, metrics, timing and the trace.

    ``end``: ``answered`` (a final answer), ``turn_limit`` (still asking at ``max_turns``) or ``error``.
    ``metrics`` depend only on what the agent did (deterministic given the seed); ``timing`` does not.
    """

    task_id: str
    app: str
    kind: str
    end: str
    budget_ms: float
    turns: list[TurnStat] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    reward: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    user_replies: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def success(self) -> bool:
        return bool(self.reward.get("success"))

    @property
    def latency_ms(self) -> float:
        return sum(t.latency_ms for t in self.turns)

    def timing(self) -> dict[str, Any]:
        return {"latency_ms": round(self.latency_ms, 3),
                "turn_latency_ms": [round(t.latency_ms, 3) for t in self.turns],
                "within_budget": [t.latency_ms <= self.budget_ms for t in self.turns]}

    def to_json(self) -> dict[str, Any]:
        """The trace line: task, ending, final answer, reward parts, metrics, timing, the whole conversation."""
        return {"task_id": self.task_id, "app": self.app, "kind": self.kind, "end": self.end, "error": self.error,
                "final": self.final, "reward": self.reward, "metrics": self.metrics,
                "turns": [{k: v for k, v in t.__dict__.items() if k != "latency_ms"} for t in self.turns],
                "user_replies": self.user_replies, "timing": self.timing(), "messages": self.messages}


# ------------------------------------------------------------------------------------------------ one task
def task_seed(seed: int, task_id: str) -> int:
    """A per-task sampling seed from the base seed and the task id (independent of scheduling)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{task_id}".encode()).digest()[:4], "little") & 0x7FFFFFFF


def thinking_tokens(result: TurnResult, tokenizer: Any) -> int:
    """Tokens the model spent inside ``<think>…</think>`` in this turn (0 for a model that does not think)."""
    spans = [m.group(1) for call in result.model_calls for m in _THINK.finditer(call.completion.text)]
    if not spans or tokenizer is None:
        return 0
    return sum(len(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in spans if s)


def _turn_stat(result: TurnResult, tokenizer: Any) -> TurnStat:
    return TurnStat(latency_ms=result.latency_ms, degraded=result.degraded, reason=result.reason, steps=result.steps,
                    tool_calls=result.tool_calls, parse_errors=result.parse_errors,
                    grounding_failures=result.grounding_failures, output_tokens=result.output_tokens,
                    thinking_tokens=thinking_tokens(result, tokenizer),
                    outputs=[c.completion.text[:OUTPUT_CHARS] for c in result.model_calls])


def replay_task(task: Task, app: AppEnv, model: ModelAccess | None, cfg: ReplayConfig) -> TaskResult:
    """Run ``task`` to its end (answer or turn cap) and score it; never raises for the task's own failures."""
    budget_ms = cfg.budget_ms or app.spec.default_budget_ms
    out = TaskResult(task_id=task.task_id, app=task.app, kind=task.kind, end="error", budget_ms=budget_ms)
    try:
        _run(task, app, model, cfg, out)
    except Exception as e:  # one broken task must not end the evaluation; it is counted and shown
        out.end, out.error = "error", f"{type(e).__name__}: {e}"
        out.reward = {"value": 0.0, "success": False, "parts": {}}
        out.metrics = base_metrics(out, 0)
    return out


def loop_config(cfg: ReplayConfig, task: Task) -> LoopConfig:
    """The agent loop's decoding knobs for ``task`` (its sampling seed derived from the base seed and its id)."""
    loop_cfg = LoopConfig(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                          seed=task_seed(cfg.seed, task.task_id))
    if cfg.max_prompt_tokens is not None:
        loop_cfg.max_prompt_tokens = cfg.max_prompt_tokens
    return loop_cfg


def _run(task: Task, app: AppEnv, model: ModelAccess | None, cfg: ReplayConfig, out: TaskResult) -> None:
    spec = app.spec
    loop = AgentLoop(spec, model, config=loop_config(cfg, task))
    deadline = out.budget_ms if cfg.enforce_budget else UNBOUNDED_MS
    result = Episode(app, loop, task, max_turns=cfg.max_turns, budget_ms=deadline).run()
    tokenizer = model.tokenizer if model is not None else None
    out.turns = [_turn_stat(t, tokenizer) for t in result.turns]
    out.user_replies = list(result.user_replies)
    out.end = result.end
    final, reward = result.final, result.reward
    out.final = {"reply": final.reply, "item_ids": list(final.item_ids), "bundles": [list(b) for b in final.bundles],
                 "actions": list(final.actions), "data": _jsonable(final.data)}
    out.reward = {"value": float(reward.value), "success": bool(reward.success),
                  "parts": {k: float(v) for k, v in reward.parts.items()}}
    out.messages = _stable_call_ids(_jsonable(result.session.messages))
    served = Grounder(spec.catalog, None, spec.item_check, require_stock=spec.require_stock)
    _, problems = served.check(final.named_items(), dict(app.request_fn(task)))
    out.metrics = task_metrics(task, final, out, len(problems), cfg.ks)


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON (tool results may hold pydantic models or tuples)."""
    return json.loads(json.dumps(value, default=lambda o: o.model_dump(mode="json") if hasattr(o, "model_dump")
                                 else str(o)))


def _stable_call_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool-call ids renamed ``call_1``, ``call_2``… in order of appearance (the harness draws them at random;
    the chat template does not show them to the model), so traces of two runs with one seed are equal."""
    names: dict[str, str] = {}

    def rename(call_id: Any) -> Any:
        if not isinstance(call_id, str):
            return call_id
        return names.setdefault(call_id, f"call_{len(names) + 1}")

    for m in messages:
        for call in m.get("tool_calls") or []:
            if isinstance(call, dict) and "id" in call:
                call["id"] = rename(call["id"])
        if "tool_call_id" in m:
            m["tool_call_id"] = rename(m["tool_call_id"])
    return messages


# ------------------------------------------------------------------------------------------------ per-task metrics
def base_metrics(out: TaskResult, ungrounded_served: int) -> dict[str, float]:
    """Counters every task has: success, reward, turns, steps, tool calls, tokens, grounding, degradation."""
    turns = out.turns
    return {
        "success": float(out.success), "reward": float(out.reward.get("value", 0.0)),
        "answered": float(out.end == "answered"), "error": float(out.end == "error"),
        "turns": float(len(turns)), "steps": float(sum(t.steps for t in turns)),
        "tool_calls": float(sum(t.tool_calls for t in turns)),
        "parse_errors": float(sum(t.parse_errors for t in turns)),
        "grounding_rejections": float(sum(t.grounding_failures for t in turns)),
        "ungrounded_served": float(ungrounded_served),
        "output_tokens": float(sum(t.output_tokens for t in turns)),
        "thinking_tokens": float(sum(t.thinking_tokens for t in turns)),
        "degraded": float(any(t.degraded for t in turns)),
        "sure": float(any(t.reason == SURE for t in turns)),  # the app's first_answer, before any model call
        "asked_user": float(bool(out.user_replies) or out.end == "turn_limit"),
    }


def bundle_coverage(task: Task, final: Final) -> float | None:
    """Share of a bundle task's target slots that the answer fills with one of that slot's ids (None: no bundle)."""
    if task.target is None or task.target.kind != "bundle":
        return None
    named = set(final.bundles[0]) if final.bundles else set(final.item_ids)
    return sum(bool(named & set(slot)) for slot in task.target.slots) / len(task.target.slots)


def task_metrics(task: Task, final: Final, out: TaskResult, ungrounded_served: int,
                 ks: Sequence[int]) -> dict[str, float]:
    """Every metric of one task: :func:`base_metrics`, ranking metrics of the named items against the target
    (Recall/NDCG/Hit@k, MRR; bundles: against the union of the slots, plus ``bundle_coverage``), and the
    reward's parts (shopping ``r_type``/``r_attributes``/…, livestream ``correctness``/``words``/…, travel
    ``feasible``/``score``/…)."""
    metrics = base_metrics(out, ungrounded_served)
    if task.target is not None:
        metrics.update(ranking_metrics(final.named_items(), task.target.item_ids, ks))
        coverage = bundle_coverage(task, final)
        if coverage is not None:
            metrics["bundle_coverage"] = coverage
    metrics["answer_words"] = float(len(final.reply.split()))
    metrics.update({f"r.{k}": float(v) for k, v in out.reward.get("parts", {}).items()})
    return metrics


# ------------------------------------------------------------------------------------------------ many tasks
def replay(tasks: Sequence[Task], apps: Mapping[str, AppEnv], model: ModelAccess | None, cfg: ReplayConfig, *,
           progress: Callable[[int], None] | None = None, traces: Path | None = None) -> list[TaskResult]:
    """Replay ``tasks`` on ``cfg.workers`` threads; results in task order, one trace line each in ``traces``.

    ``model.engine`` is called from every worker thread, so it must be thread-safe (a batching front).
    Raises :class:`ReplayError` before starting when a task's app is missing, and after the run when
    every task failed (the first error says why); single failures are results with ``end == "error"``.
    """
    missing = sorted({t.app for t in tasks} - set(apps))
    if missing:
        raise ReplayError(f"no app set up for tasks of app(s) {', '.join(missing)}")
    results: list[TaskResult] = []
    with _trace_writer(traces) as write:
        for result in _in_order(tasks, apps, model, cfg, progress):
            write(result)
            results.append(result)
    if results and all(r.end == "error" for r in results):
        raise ReplayError(f"every task failed; the first: {results[0].task_id}: {results[0].error}")
    return results


def _in_order(tasks: Sequence[Task], apps: Mapping[str, AppEnv], model: ModelAccess | None, cfg: ReplayConfig,
              progress: Callable[[int], None] | None) -> Iterator[TaskResult]:
    lock = threading.Lock()

    def tick(_: Future[TaskResult]) -> None:
        if progress is not None:
            with lock:
                progress(1)

    if cfg.workers == 1:
        for task in tasks:
            result = replay_task(task, apps[task.app], model, cfg)
            if progress is not None:
                progress(1)
            yield result
        return
    with ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="replay") as pool:
        futures = []
        for task in tasks:
            future = pool.submit(replay_task, task, apps[task.app], model, cfg)
            future.add_done_callback(tick)
            futures.append(future)
        try:
            for future in futures:
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


@contextmanager
def _trace_writer(path: Path | None) -> Iterator[Callable[[TaskResult], None]]:
    """Yields a function writing one JSON line per result to ``path`` (a ``.tmp`` renamed when all went well)."""
    if path is None:
        yield lambda _: None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:

        def write(result: TaskResult) -> None:
            fh.write(json.dumps(result.to_json(), ensure_ascii=False, sort_keys=True) + "\n")

        try:
            yield write
        except BaseException:
            fh.close()
            tmp.unlink(missing_ok=True)
            raise
    tmp.replace(path)
