"""SFT data for apps without a builder of their own: the app's fallback as the teacher, in the served format.

For every training task the app's fallback (its rules and catalog search, no model) answers the task's
request as the serving loop would; answers the app's reward marks a success are kept (rejection
sampling, as LiveThinking's RFT keeps only the teacher's correct answers) and become chats rendered
exactly as a served prompt: the app's system prompt, its tool schemas, the user's message(s), and the
answer — as the app's final tool call (``as_call``: e.g. ``respond`` with the itinerary), its result
and the reply the loop then writes (context, ``weight`` 0), or as a plain-text final reply without one.
Held-out tasks (by task-id hash, :func:`training.sft_data.is_held_out`) give the eval examples. A kit
names it as its ``sft``:

    SOURCE = FallbackSft(SYSTEM_PROMPT, tool_schemas, env, respond_call)

:class:`AnswerKeySft` is the same for a compact protocol whose one call is read off each task's answer key
(apps/livestream/sft.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.agent import Final, TurnContext, add_note
from harness.budget import Budget
from harness.catalog import Item
from harness.env import AppEnv
from harness.protocol import ToolCall, ToolResult, assistant_message
from harness.session import SessionState
from harness.tasks import Task
from infra.layout import TASKS_FILE
from infra.recordio import RecordReader
from sid.build import find_catalog
from training.sft import SFTConfig
from training.sft_data import ChatExample, SftData, SftDataError, TrajectorySpec, is_held_out

TEACHER_PREFIX = "teacher_"
"""Kind prefix of the examples: ``teacher_<task kind>``."""
TWIN_PREFIX = "twin_"
"""Kind prefix of :class:`AnswerKeySft`'s counterfactual copies: ``twin_<task kind>``."""


def turn_context(env: AppEnv, task: Task) -> tuple[list[dict[str, Any]], TurnContext]:
    """The task's user messages and the context of its first turn as served (the request a frontend sends, no
    model, an unhurried budget): what a teacher answers in."""
    user = [{"role": m.role, "content": m.content} for m in task.messages if m.role != "system"]
    session = SessionState(app=env.spec.name, constraints=dict(env.request_fn(task)), messages=list(user))
    ctx = TurnContext(app=env.spec, session=session, constraints=session.constraints, budget=Budget(60_000.0),
                      model=None)
    add_note(ctx)  # the app's note on the last user message, as a served turn gets it
    return list(session.messages), ctx


class FallbackSft:
    """An :class:`~training.sft.SftSource` from an app's fallback. Picklable: module-level callables only."""

    def __init__(self, system_prompt: str, tools: Callable[[], list[dict[str, Any]]],
                 env: Callable[[Path], AppEnv], as_call: Callable[[Final], ToolCall] | None = None) -> None:
        self.system_prompt, self.tools, self.env, self.as_call = system_prompt, tools, env, as_call

    def trajectory_spec(self) -> TrajectorySpec:
        return TrajectorySpec.of(self.system_prompt, self.tools())

    def corpus(self, cfg: SFTConfig) -> list[str]:
        texts = [t for item in RecordReader(find_catalog(Path(cfg.world))[0], Item)
                 for t in (item.title, " > ".join(item.category_path))]
        tasks = self._tasks(cfg, None)
        texts += [m.content for task in tasks for m in task.messages]
        env = self.env(Path(cfg.world))
        if env.spec.turn_note is not None:  # the notes the model reads after its app's user messages
            texts += [str(user[-1].get("note", "")) for task in tasks if task.app == env.spec.name
                      for user in [turn_context(env, task)[0]] if user]
        return texts + self.trajectory_spec().corpus()

    def build(self, cfg: SFTConfig) -> SftData:
        env = self.env(Path(cfg.world))
        tasks = self._tasks(cfg, env.spec.name)
        held = [t for t in tasks if is_held_out(t.task_id, cfg.eval_fraction)]
        kept = [t for t in tasks if not is_held_out(t.task_id, cfg.eval_fraction)]
        train, evals = self.examples(env, kept), self.examples(env, held)
        if not train:
            raise SftDataError(f"{cfg.world}: the {env.spec.name} fallback answers none of {len(kept)} training "
                               "tasks correctly: no teacher examples")
        counts = dict(sorted(Counter(e.kind for e in train).items()))
        counts |= {"train": len(train), "eval": len(evals), "train_tasks": len(kept), "eval_tasks": len(held)}
        return SftData(train=train, eval=evals, eval_tasks=held, counts=counts)

    def examples(self, env: AppEnv, tasks: list[Task]) -> list[ChatExample]:
        """One served-format chat per task whose fallback answer the reward marks a success."""
        tools = self.tools()
        out = []
        for task in tasks:
            user, ctx = turn_context(env, task)
            final = env.spec.fallback(ctx, "teacher")
            if not final.reply or not env.reward_fn(task, final).success:
                continue
            answer = self._answer(env, final)
            if answer is None:
                continue
            messages = [{"role": "system", "content": self.system_prompt}, *user, *answer]
            out.append(ChatExample(messages, TEACHER_PREFIX + task.kind, task.task_id, tools=tools))
        return out

    def _answer(self, env: AppEnv, final: Final) -> list[dict[str, Any]] | None:
        """The teacher's answer as the loop records it; None when its tool call would not validate."""
        if self.as_call is None:
            return [{"role": "assistant", "content": final.reply}]
        call = self.as_call(final)
        if isinstance(env.spec.tools.validate(call), ToolResult):
            return None
        sent = ToolResult(name=call.name, call_id=call.id, ok=True, content={"sent": True})
        return [assistant_message("", [call]), sent.to_message(),
                {"role": "assistant", "content": final.reply, "weight": 0}]

    @staticmethod
    def _tasks(cfg: SFTConfig, app: str | None) -> list[Task]:
        path = Path(cfg.world) / TASKS_FILE if cfg.tasks is None else Path(cfg.tasks)
        path = path / TASKS_FILE if path.is_dir() else path
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such tasks file (SFT needs the world's tasks)")
        return [t for t in RecordReader(path, Task) if app is None or t.app == app]


def no_tools() -> list[dict[str, Any]]:
    """The tool schemas a compact protocol's prompt lists: none (the tools stay callable by name)."""
    return []


class AnswerKeySft(FallbackSft):
    """SFT data of a compact protocol: per training task the one call ``plan(env, task) -> (name, arguments)``
    reads off its answer key (``plan`` a module-level function), rendered as served (the app's compact system
    prompt, no tool schemas, the user's message, the call). A call is kept only when running it through the app's
    tools gives a final answer the reward marks a success (rejection sampling, as LiveThinking's RFT keeps only
    the teacher's correct answers): the labels are checked end to end. ``twins(task, user, arguments)`` (a
    module-level function, optional) gives counterfactual copies of a kept example: ``(user messages, arguments)``
    pairs with the note changed and the call changed to match (kind ``twin_<task kind>``), so that what decides the
    call is the note, not the wording alone. Picklable."""

    def __init__(self, system_prompt: str, env: Callable[[Path], AppEnv],
                 plan: Callable[[AppEnv, Task], tuple[str, dict[str, Any]]],
                 twins: Callable[[Task, list[dict[str, Any]], dict[str, Any]],
                                 list[tuple[list[dict[str, Any]], dict[str, Any]]]] | None = None) -> None:
        super().__init__(system_prompt, no_tools, env)
        self.plan, self.twins = plan, twins

    def examples(self, env: AppEnv, tasks: list[Task]) -> list[ChatExample]:
        out = []
        for task in tasks:
            user, ctx = turn_context(env, task)
            name, arguments = self.plan(env, task)
            call = ToolCall(name=name, arguments=arguments, id="call_1")
            result = env.spec.tools.execute(call, ctx)
            if not (result.ok and isinstance(result.content, Final) and env.reward_fn(task, result.content).success):
                continue
            messages = [{"role": "system", "content": self.system_prompt}, *user, assistant_message("", [call])]
            out.append(ChatExample(messages, TEACHER_PREFIX + task.kind, task.task_id, tools=[]))
            for k, (twin_user, twin_args) in enumerate(self.twins(task, user, arguments) if self.twins else []):
                twin = assistant_message("", [ToolCall(name=name, arguments=twin_args, id="call_1")])
                messages = [{"role": "system", "content": self.system_prompt}, *twin_user, twin]
                out.append(ChatExample(messages, TWIN_PREFIX + task.kind, f"{task.task_id}~{k}", tools=[]))
        return out
