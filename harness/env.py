"""The agent loop as an RL environment: ``reset(task) -> obs``, ``step(action) -> (obs, reward, done, info)``.

An action is one assistant message as the model wrote it (free text and ``<tool_call>`` blocks). The
environment runs it through the same :meth:`AgentLoop.execute` serving uses — tool execution,
grounding, error observations — so a policy trained here meets exactly the harness it is served in.
A final answer that asks the user something (an ``ask_user`` action) is answered by the app's
simulated user from the task's hidden constraints and the episode goes on; any other final answer
ends the episode with the app's reward. The episode also ends, with reward 0, at ``max_steps``
model actions or ``max_turns`` user turns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.agent import AgentLoop, AppSpec, Final, ModelAccess, TurnContext, TurnResult
from harness.budget import Budget
from harness.protocol import assistant_message, parse_reply
from harness.session import SessionState
from harness.tasks import Task


@dataclass(frozen=True)
class Reward:
    """An episode's reward: the scalar trained on, whether the task was fully met, and its parts."""

    value: float
    success: bool
    parts: dict[str, float] = field(default_factory=dict)


RewardFn = Callable[[Task, Final], Reward]
UserFn = Callable[[Task, str], str]


@dataclass
class Observation:
    """What the policy conditions on: the chat so far (system prompt first) and the tool schemas."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


@dataclass
class StepInfo:
    steps: int
    turns: int
    tool_calls: int
    parse_errors: int
    grounding_failures: int
    final: Final | None = None
    reward: Reward | None = None
    reason: str | None = None


class AgentEnv:
    """One episode at a time over one app. Not thread-safe: make one per worker thread."""

    def __init__(self, app: AppSpec, reward_fn: RewardFn, user_fn: UserFn, *, model: ModelAccess | None = None,
                 max_steps: int = 6, max_turns: int = 3) -> None:
        if max_steps < 1 or max_turns < 1:
            raise ValueError("max_steps and max_turns must be >= 1")
        self.app, self.reward_fn, self.user_fn = app, reward_fn, user_fn
        self.loop = AgentLoop(app, model)
        self.max_steps, self.max_turns = max_steps, max_turns
        self._task: Task | None = None
        self._session = SessionState(app=app.name)
        self._result = TurnResult(final=Final(reply=""))
        self._turns = 0
        self._done = True

    @property
    def task(self) -> Task:
        if self._task is None:
            raise RuntimeError("call reset(task) first")
        return self._task

    def reset(self, task: Task) -> Observation:
        if task.app != self.app.name:
            raise ValueError(f"task {task.task_id} is for app {task.app!r}, this environment is {self.app.name!r}")
        self._task, self._turns, self._done = task, 1, False
        self._session = SessionState(app=self.app.name, constraints=dict(task.constraints.get("request", {})))
        self._session.messages = [{"role": m.role, "content": m.content} for m in task.messages if m.role != "system"]
        self._result = TurnResult(final=Final(reply=""))
        return self.observation()

    def observation(self) -> Observation:
        system = {"role": "system", "content": self.app.system_prompt}
        return Observation(messages=[system, *self._session.messages], tools=self.app.tools.schemas())

    def sid_constraint(self) -> Callable[[], Any] | None:
        """The decode-time SID constraint the loop would put on the next generation (None without SID retrieval)."""
        return self.loop.sid_constraint(self.context())

    def context(self) -> TurnContext:
        """The turn context a tool or a scripted policy (a teacher) would see now."""
        return TurnContext(app=self.app, session=self._session, constraints=dict(self._session.constraints),
                           budget=Budget(1e9, max_steps=self.max_steps), model=self.loop.model)

    def step(self, action: str) -> tuple[Observation, float, bool, StepInfo]:
        """Apply one assistant message; returns the next observation, reward (0 until the end), done, info."""
        if self._done:
            raise RuntimeError("the episode is over: call reset(task)")
        task, result = self.task, self._result
        result.steps += 1
        parsed = parse_reply(action)
        final: Final | None
        ctx = self.context()
        if not parsed.calls and not parsed.problems:  # plain text (SIDs in it are grounded items) ends the turn
            self._session.messages.append({"role": "assistant", "content": parsed.content})
            final = self.loop.text_final(ctx, parsed.content, result) or Final(reply="")
        else:
            self._session.messages.append(assistant_message(parsed.content, parsed.calls))
            final = self.loop.execute(ctx, parsed, result)
        if final is not None and any(a.get("type") == "ask_user" for a in final.actions):
            if self._turns < self.max_turns:
                self._turns += 1
                self._session.messages.append({"role": "user", "content": self.user_fn(task, final.reply)})
                final = None
            else:
                return self._end(None, "turn_limit")
        if final is not None:
            return self._end(final, None)
        if result.steps >= self.max_steps:
            return self._end(None, "step_limit")
        return self.observation(), 0.0, False, self._info(None, None, None)

    def _end(self, final: Final | None, reason: str | None) -> tuple[Observation, float, bool, StepInfo]:
        self._done = True
        reward = self.reward_fn(self.task, final) if final is not None else Reward(0.0, False, {})
        return self.observation(), reward.value, True, self._info(final, reward, reason)

    def _info(self, final: Final | None, reward: Reward | None, reason: str | None) -> StepInfo:
        r = self._result
        return StepInfo(steps=r.steps, turns=self._turns, tool_calls=r.tool_calls, parse_errors=r.parse_errors,
                        grounding_failures=r.grounding_failures, final=final, reward=reward, reason=reason)
