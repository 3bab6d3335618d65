"""The one multi-turn episode loop: a task run through the agent loop until it is answered, scored by the app.

An :class:`Episode` opens a session with what a frontend would send for the task (the app's
``request_fn``), runs turns of the one :class:`~harness.agent.AgentLoop` step machine, and when a
turn's answer asks the user something (an ``ask_user`` action) lets the app's simulated user answer
from the task, up to ``max_turns`` user turns. The last answer is scored with the app's reward; an
episode still asking at the turn cap scores 0 (the user never got an answer). Offline evaluation
(:mod:`eval.replay`) and RL rollout (:mod:`training.rl.rollout`) both run episodes, and a served turn
is an episode's turn: the same steps, the same handling of empty replies (the fallback answers,
``degraded``), step caps (per turn), prompt trimming and budgets — so the RL reward and the served
success measure the same behaviour.

    episode = Episode(env, loop, task, max_turns=3)
    result = episode.run()                             # one engine call per step
    while (req := episode.request()) is not None:     # or: batch many episodes' requests yourself
        episode.apply(engine.generate([req])[0][0])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.agent import AgentLoop, AppSpec, Final, TurnContext, TurnResult, TurnRun
from harness.budget import Budget
from harness.session import SessionState
from harness.tasks import Task
from infra.engines.base import Completion, GenerationRequest

UNBOUNDED_MS = 1e9
"""A turn deadline that is never reached (about 11 days): offline evaluation and RL measure, not enforce."""


@dataclass(frozen=True)
class Reward:
    """An episode's reward: the scalar trained on, whether the task was fully met, and its parts."""

    value: float
    success: bool
    parts: dict[str, float] = field(default_factory=dict)


RewardFn = Callable[[Task, Final], Reward]
UserFn = Callable[[Task, str], str]
RequestFn = Callable[[Task], dict[str, Any]]


@dataclass(frozen=True)
class AppEnv:
    """One app over one world as episodes need it: the agent's spec, the reward, the simulated user, and the
    request a frontend sends with a task's first message (livestream: stream and time; travel: the stated
    constraints; shopping: nothing beyond the text)."""

    spec: AppSpec
    reward_fn: RewardFn
    user_fn: UserFn
    request_fn: RequestFn
    teacher: Callable[[Episode, Any], str] | None = None
    """A scripted policy for the cascade's warm-up and RFT: the assistant text to send in an episode's state
    (``teacher(episode, model_access)``); None = the fallback's retrieval (``training.rl.rollout``)."""


def asks_user(final: Final) -> bool:
    """True when the answer is a clarifying question (an ``ask_user`` action)."""
    return any(a.get("type") == "ask_user" for a in final.actions)


@dataclass
class EpisodeResult:
    """How an episode ended (``answered`` or ``turn_limit``), its last answer, reward, turns and session."""

    task: Task
    end: str
    final: Final
    reward: Reward
    turns: list[TurnResult]
    user_replies: list[str]
    session: SessionState

    @property
    def degraded(self) -> bool:
        """The answer the user got came from the app's fallback, not the model."""
        return bool(self.turns) and self.turns[-1].degraded


class Episode:
    """One task run to its end through the agent loop's step machine. Not thread-safe: one per thread."""

    def __init__(self, env: AppEnv, loop: AgentLoop, task: Task, *, max_turns: int = 3,
                 budget_ms: float = UNBOUNDED_MS) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        if task.app != env.spec.name:
            raise ValueError(f"task {task.task_id} is for app {task.app!r}, this environment is {env.spec.name!r}")
        self.env, self.loop, self.task = env, loop, task
        self.max_turns, self.budget_ms = max_turns, budget_ms
        self.session = SessionState(app=env.spec.name, constraints=dict(env.request_fn(task)))
        self.session.messages = [{"role": m.role, "content": m.content} for m in task.messages if m.role != "system"]
        self.turns: list[TurnResult] = []
        self.user_replies: list[str] = []
        self.result: EpisodeResult | None = None
        self.turn: TurnRun = self._begin(None)

    @property
    def done(self) -> bool:
        return self.result is not None

    def context(self) -> TurnContext:
        """What a tool or a scripted policy (a teacher) sees now."""
        return self.turn.ctx

    def request(self) -> GenerationRequest | None:
        """The next model call, or None once the episode is over (turns the model cannot take are closed
        with the fallback on the way, as serving closes them)."""
        while self.result is None:
            request = self.turn.request()
            if request is not None:
                return request
            self._end_turn()
        return None

    def apply(self, completion: Completion) -> None:
        """Apply the completion of the request :meth:`request` gave."""
        if self.turn.apply(completion):
            self._end_turn()

    def run(self) -> EpisodeResult:
        """Run to the end with the loop's own engine, one call per step."""
        while (request := self.request()) is not None:
            assert self.loop.model is not None
            self.apply(self.loop.model.engine.generate([request])[0][0])
        assert self.result is not None
        return self.result

    def model_calls(self) -> list[Any]:
        """Every model call of the episode so far, in order (:class:`~harness.agent.ModelCall`)."""
        turns = [*self.turns, *([] if self.done else [self.turn.result])]
        return [call for t in turns for call in t.model_calls]

    def _begin(self, user_text: str | None) -> TurnRun:
        budget = Budget(self.budget_ms, max_steps=self.env.spec.max_steps)
        return self.loop.begin(self.session, user_text, budget=budget)

    def _end_turn(self) -> None:
        result = self.turn.finish()
        self.turns.append(result)
        final = result.final
        if asks_user(final) and len(self.turns) < self.max_turns:
            reply = self.env.user_fn(self.task, final.reply)
            self.user_replies.append(reply)
            self.turn = self._begin(reply)
            return
        end = "turn_limit" if asks_user(final) else "answered"
        reward = self.env.reward_fn(self.task, final) if end == "answered" else Reward(0.0, False, {})
        self.result = EpisodeResult(task=self.task, end=end, final=final, reward=reward, turns=self.turns,
                                    user_replies=self.user_replies, session=self.session)
