"""Multi-turn rollouts through the harness environment: episodes run in lockstep, one batched engine call a step.

Each episode is an :class:`~harness.env.AgentEnv` over the app (the same loop serving runs: tools,
grounding, SID-constrained decoding, the simulated user, the reward). Every step, the prompts of the
episodes still running go to the engine in one ``generate`` call; each completion is applied with
``env.step`` and its tokens recorded token in, token out (:mod:`training.rl.trajectory`). An episode
ends on a final answer, at ``max_steps`` actions, or when its sequence would pass ``max_seq_len``
(reward 0, reason ``"seq_limit"``).

Used by the environment workers of the RL runtime and, without Ray, by the cascade's probe.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.agent import AppSpec, ModelAccess, render_ids
from harness.env import AgentEnv, Observation, RewardFn, StepInfo, UserFn
from harness.tasks import Task
from infra.engines.base import Completion, GenerationRequest, SamplingParams
from training.rl.trajectory import SequenceBuilder, Trajectory, context_delta


class RolloutSettings(BaseModel):
    """How episodes are sampled. Validated on construction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature of the policy; 0 = greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus mass; 1 = off.")
    max_new_tokens: int = Field(64, ge=1, description="Token cap of one model action.")
    max_steps: int = Field(3, ge=1, description="Model actions per episode.")
    max_turns: int = Field(2, ge=1, description="User turns per episode (the simulated user answers questions).")
    max_seq_len: int = Field(6144, ge=64, description="Longest trajectory in tokens; longer episodes end with "
                                                      "reward 0 (reason 'seq_limit').")


@dataclass(frozen=True)
class EnvApp:
    """One app as an RL environment needs it: its spec, reward and simulated user."""

    spec: AppSpec
    reward_fn: RewardFn
    user_fn: UserFn


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to run: the task, its group (G samples of a task share one) and a seed."""

    task: Task
    group: int
    sample: int
    seed: int


def episode_seed(seed: int, *parts: Any) -> int:
    """A stable 31-bit seed from a base seed and any labels (task id, round, sample, step)."""
    key = ":".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "little") & 0x7FFFFFFF


class _Episode:
    def __init__(self, job: EpisodeJob, app: EnvApp, model: ModelAccess, settings: RolloutSettings) -> None:
        self.job, self.model, self.settings = job, model, settings
        self.env = AgentEnv(app.spec, app.reward_fn, app.user_fn, model=model, max_steps=settings.max_steps,
                            max_turns=settings.max_turns)
        self.obs: Observation = self.env.reset(job.task)
        self.seq = SequenceBuilder(render_ids(model.tokenizer, self.obs.messages, self.obs.tools))
        self.info: StepInfo | None = None
        self.reward = 0.0
        self.done = False
        self.reason: str | None = None

    def request(self) -> GenerationRequest:
        s = self.settings
        room = s.max_seq_len - len(self.seq.tokens)
        params = SamplingParams(max_new_tokens=max(1, min(s.max_new_tokens, room)), temperature=s.temperature,
                                top_p=s.top_p, seed=episode_seed(self.job.seed, len(self.seq.versions)))
        return GenerationRequest(prompt=list(self.seq.tokens), params=params, constraint=self.env.sid_constraint())

    def apply(self, completion: Completion, eos_id: int) -> None:
        self.seq.add_completion(completion.token_ids, completion.logprobs, completion.weights_version)
        n_before = len(self.obs.messages)
        self.obs, reward, done, info = self.env.step(completion.text)
        self.info = info
        if done:
            self.done, self.reward, self.reason = True, reward, info.reason
            return
        if completion.finish_reason != "eos":  # cut at the cap: close the turn as the template would
            self.seq.add_context([eos_id])
        delta = context_delta(self.model.tokenizer, self.obs.messages, n_before, self.obs.tools)
        ids = self.model.tokenizer(delta, add_special_tokens=False)["input_ids"]
        if len(self.seq.tokens) + len(ids) >= self.settings.max_seq_len:
            self.done, self.reward, self.reason = True, 0.0, "seq_limit"
            return
        self.seq.add_context(ids)

    def trajectory(self) -> Trajectory:
        info, r = self.info, self.info.reward if self.info is not None else None
        final = info.final if info is not None else None
        success = r is not None and r.success and self.reason != "seq_limit"
        return Trajectory(
            task_id=self.job.task.task_id, group=self.job.group, sample=self.job.sample, tokens=self.seq.tokens,
            mask=self.seq.mask, logprobs=self.seq.logprobs, chunks=self.seq.chunks, versions=self.seq.versions,
            reward=float(self.reward), success=bool(success),
            parts=dict(r.parts) if r is not None else {}, steps=len(self.seq.versions), reason=self.reason,
            item_ids=list(final.item_ids) if final is not None else [], reply=final.reply if final is not None else "",
            messages=[dict(m) for m in self.obs.messages[1:]])


class EpisodePool:
    """Episodes in flight in one process, stepped in lockstep: one batched ``generate`` per :meth:`step`.

    Episodes may be added between steps and finished ones popped, so a caller can return early and
    carry the unfinished long tail into its next round (tail handling) without losing any state.
    """

    def __init__(self, app: EnvApp, model: ModelAccess, settings: RolloutSettings) -> None:
        eos = model.tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos token: cannot close a turn cut at its token cap")
        self.app, self.model, self.settings, self.eos = app, model, settings, int(eos)
        self._episodes: list[_Episode] = []

    @property
    def running(self) -> int:
        return sum(not ep.done for ep in self._episodes)

    @property
    def finished(self) -> int:
        return sum(ep.done for ep in self._episodes)

    def add(self, jobs: Sequence[EpisodeJob]) -> None:
        for job in jobs:
            ep = _Episode(job, self.app, self.model, self.settings)
            if len(ep.seq.tokens) >= self.settings.max_seq_len:
                ep.done, ep.reason = True, "seq_limit"
            self._episodes.append(ep)

    def step(self) -> int:
        """Advance every running episode by one model action; returns how many ran."""
        active = [ep for ep in self._episodes if not ep.done]
        if not active:
            return 0
        completions = self.model.engine.generate([ep.request() for ep in active])
        for ep, outs in zip(active, completions, strict=True):
            ep.apply(outs[0], self.eos)
        return len(active)

    def pop_finished(self) -> list[Trajectory]:
        done = [ep for ep in self._episodes if ep.done]
        self._episodes = [ep for ep in self._episodes if not ep.done]
        return [ep.trajectory() for ep in done]

    def pending_jobs(self) -> list[EpisodeJob]:
        return [ep.job for ep in self._episodes if not ep.done]


Teacher = Callable[[AgentEnv, ModelAccess], str]
"""A scripted policy: the assistant message to send in the environment's current state."""


def fallback_teacher(env: AgentEnv, model: ModelAccess) -> str:
    """The app's own retrieval without the model (its fallback's catalog search under the request's filters:
    BM25 for shopping) as a teacher that answers natively in item space: its top item's SID, written as the
    policy writes one (``<|sid_start|><s1_..>..<|sid_end|>``), or its reply text when it has no item or no
    SIDs. Without the model, so the teacher does not inherit the student's mistakes."""
    final = env.app.fallback(dataclasses.replace(env.context(), model=None), "teacher")
    sid = model.sid
    if sid is None or not final.item_ids:
        return final.reply
    tok = model.tokenizer
    start, end = tok.convert_ids_to_tokens([sid.start_id, sid.end_id])
    return f"{start}{sid.sid_map.sid_of(final.item_ids[0])}{end}"


def teacher_episodes(jobs: Sequence[EpisodeJob], app: EnvApp, model: ModelAccess, settings: RolloutSettings,
                     teacher: Teacher = fallback_teacher) -> list[Trajectory]:
    """Episodes acted by ``teacher`` instead of the engine, recorded token in, token out like the policy's
    (its messages tokenised, mask 1, log-probs 0): rejection-sampling fine-tuning data in the exact served
    format."""
    eos = model.tokenizer.eos_token
    out = []
    for job in jobs:
        ep = _Episode(job, app, model, settings)
        while not ep.done:
            text = teacher(ep.env, model)
            ids = [int(i) for i in model.tokenizer(text + eos, add_special_tokens=False)["input_ids"]]
            ep.apply(Completion(request_id="teacher", index=0, token_ids=ids, text=text, logprobs=[0.0] * len(ids),
                                finish_reason="eos", prompt_tokens=len(ep.seq.tokens), latency_ms=0.0,
                                weights_version=-1), int(model.tokenizer.eos_token_id))
        out.append(ep.trajectory())
    return out


def run_episodes(jobs: Sequence[EpisodeJob], app: EnvApp, model: ModelAccess, settings: RolloutSettings,
                 on_step: Callable[[int], None] | None = None) -> list[Trajectory]:
    """Run ``jobs`` to the end in lockstep; one trajectory per job, in job order."""
    pool = EpisodePool(app, model, settings)
    pool.add(jobs)
    while pool.running:
        n = pool.step()
        if on_step is not None:
            on_step(n)
    order = {(j.group, j.sample): k for k, j in enumerate(jobs)}
    return sorted(pool.pop_finished(), key=lambda t: order[(t.group, t.sample)])
