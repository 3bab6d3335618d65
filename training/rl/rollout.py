"""Multi-turn rollouts through the one episode loop: episodes run in lockstep, one batched engine call a step.

Each episode is a :class:`~harness.env.Episode` over the app — the loop serving runs and offline
evaluation replays: tools, grounding, SID-constrained decoding, the step cap per turn, prompt
trimming, the fallback on an empty reply, the simulated user, the reward. Every step, the requests of
the episodes still running go to the engine in one ``generate`` call and each completion is applied
to its episode. The trajectory is built afterwards from the episode's model calls, token in, token out
(:func:`trajectory_of`): the prompts the harness sent are the context, the sampled tokens the actions.

An episode whose answer came from the app's fallback (the model wrote nothing usable, ran out of
steps or of room) keeps the served reward and success for reporting, but is trained on with
``degraded_reward`` (default 0): the model must not learn that emptiness pays because the fallback's
answer was good.

Used by the environment workers of the RL runtime and, without Ray, by the cascade's probe.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.agent import AgentLoop, LoopConfig, ModelAccess, ModelCall
from harness.env import AppEnv, Episode
from harness.tasks import Task
from infra.engines import EngineSettings
from infra.engines.base import Completion
from training.rl.trajectory import SequenceBuilder, Trajectory


class RolloutSettings(BaseModel):
    """How episodes are sampled. Validated on construction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature of the policy; 0 = greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus mass; 1 = off.")
    max_new_tokens: int = Field(64, ge=1, description="Token cap of one model action.")
    max_steps: int | None = Field(None, ge=1, description="Model actions per user turn (then the fallback "
                                  "answers, as served); None = the app's own step cap (what serving uses).")
    max_turns: int = Field(2, ge=1, description="User turns per episode (the simulated user answers questions).")
    max_seq_len: int = Field(6144, ge=64, description="Longest prompt + action in tokens: prompts longer than "
                             "max_seq_len - max_new_tokens are trimmed as serving trims them (oldest messages "
                             "first), or the turn falls back (reason 'prompt_too_long').")
    degraded_reward: float = Field(0.0, ge=0.0, le=1.0, description="Share of the reward an episode answered by "
                                   "the app's fallback is trained on (0 = none; success is still reported).")
    engine: EngineSettings = Field(default_factory=lambda: EngineSettings(dtype="fp32"),
                                   description="The rollout engine (backend hf | vllm), built by the one factory.")


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to run: the task, its group (G samples of a task share one) and a seed."""

    task: Task
    group: int
    sample: int
    seed: int


def loop_config(settings: RolloutSettings, seed: int) -> LoopConfig:
    """The agent loop's knobs for one rollout episode (sampling seeded per episode; each call derives its own)."""
    return LoopConfig(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature, top_p=settings.top_p,
                      seed=seed, min_new_tokens=1, salvage_calls=False,
                      max_prompt_tokens=max(16, settings.max_seq_len - settings.max_new_tokens))


Apps = AppEnv | Mapping[str, AppEnv]
"""What episodes run in: one app, or several by name (a multi-app cascade), each job in its task's app."""


def app_of(apps: Apps, task: Task) -> AppEnv:
    """The app ``task`` runs in: ``apps`` itself, or ``apps[task.app]``."""
    if isinstance(apps, AppEnv):
        return apps
    if task.app not in apps:
        raise KeyError(f"task {task.task_id} is for app {task.app!r}; this worker runs {', '.join(apps)}")
    return apps[task.app]


def start_episode(job: EpisodeJob, apps: Apps, model: ModelAccess, settings: RolloutSettings) -> Episode:
    app = app_of(apps, job.task)
    spec = app.spec if settings.max_steps is None else dataclasses.replace(app.spec, max_steps=settings.max_steps)
    env = dataclasses.replace(app, spec=spec) if spec is not app.spec else app
    loop = AgentLoop(spec, model, config=loop_config(settings, job.seed))
    return Episode(env, loop, job.task, max_turns=settings.max_turns)


def trajectory_of(job: EpisodeJob, episode: Episode, settings: RolloutSettings) -> Trajectory:
    """The finished episode as one training sample: the last prompt the harness built extends every earlier one
    (token in, token out); when the harness re-rendered a prompt (trimmed), the sample restarts there."""
    calls: list[ModelCall] = episode.model_calls()
    result = episode.result
    assert result is not None, "the episode is still running"
    seq: SequenceBuilder | None = None
    for call in calls:
        if seq is None or call.prompt_ids[:len(seq.tokens)] != seq.tokens:
            seq = SequenceBuilder(call.prompt_ids)
        else:
            seq.add_context(call.prompt_ids[len(seq.tokens):])
        c = call.completion
        seq.add_completion(c.token_ids, c.logprobs, c.weights_version)
    if seq is None:  # the episode ended before any model call (the fallback answered): one inert token
        eos = getattr(episode.loop.model.tokenizer, "eos_token_id", 0) if episode.loop.model else 0
        seq = SequenceBuilder([int(eos or 0)])
    degraded = result.degraded
    reward = result.reward.value * (settings.degraded_reward if degraded else 1.0)
    final, turns = result.final, result.turns
    return Trajectory(
        task_id=job.task.task_id, group=job.group, sample=job.sample, tokens=seq.tokens,
        mask=seq.mask, logprobs=seq.logprobs, chunks=seq.chunks, versions=seq.versions, reward=float(reward),
        success=bool(result.reward.success),
        parts=dict(result.reward.parts), steps=len(calls),
        reason=turns[-1].reason if degraded else (None if result.end == "answered" else result.end),
        item_ids=list(final.item_ids), reply=final.reply, degraded=degraded,
        messages=[dict(m) for m in result.session.messages])


class _Running:
    def __init__(self, job: EpisodeJob, episode: Episode) -> None:
        self.job, self.episode = job, episode
        self.pending: Any = None


class EpisodePool:
    """Episodes in flight in one process, stepped in lockstep: one batched ``generate`` per :meth:`step`.

    Episodes may be added between steps and finished ones popped, so a caller can return early and
    carry the unfinished long tail into its next round (tail handling) without losing any state.
    """

    def __init__(self, app: Apps, model: ModelAccess, settings: RolloutSettings) -> None:
        self.app, self.model, self.settings = app, model, settings
        self._episodes: list[_Running] = []
        self.tokens = 0  # completion tokens applied to episodes (cut calls not counted)

    @property
    def running(self) -> int:
        return sum(not r.episode.done for r in self._episodes)

    @property
    def finished(self) -> int:
        return sum(r.episode.done for r in self._episodes)

    def add(self, jobs: Sequence[EpisodeJob]) -> None:
        self._episodes += [_Running(job, start_episode(job, self.app, self.model, self.settings)) for job in jobs]

    def step(self, cancel: threading.Event | None = None, max_rows: int | None = None) -> int:
        """Advance running episodes by one model action (all, or the first ``max_rows``); returns how many ran.

        ``cancel``: set it (from another thread) to stop the engine call at its next decode step; then no
        episode moves, each keeps its pending request, and the next call sends the same requests again
        (preemption loses nothing but the cut call's compute). Returns 0 when cut."""
        active = []
        for r in self._episodes:
            if not r.episode.done:
                if r.pending is None:
                    r.pending = r.episode.request()  # None: the episode ended without the model (fallback)
                if r.pending is not None:
                    active.append(r)
            if max_rows is not None and len(active) >= max_rows:
                break
        if not active:
            return 0
        requests = [r.pending if cancel is None else r.pending.model_copy(update={"cancel": cancel}) for r in active]
        completions = self.model.engine.generate(requests)
        if cancel is not None and cancel.is_set():
            return 0
        for r, outs in zip(active, completions, strict=True):
            r.pending = None
            r.episode.apply(outs[0])
            self.tokens += len(outs[0].token_ids)
        return len(active)

    def pop_finished(self) -> list[Trajectory]:
        done = [r for r in self._episodes if r.episode.done]
        self._episodes = [r for r in self._episodes if not r.episode.done]
        return [trajectory_of(r.job, r.episode, self.settings) for r in done]

    def pending_jobs(self) -> list[EpisodeJob]:
        return [r.job for r in self._episodes if not r.episode.done]

    def pop_unfinished(self) -> list[EpisodeJob]:
        """Remove the episodes still running and return their jobs (to be run again elsewhere, from the start)."""
        jobs = self.pending_jobs()
        self._episodes = [r for r in self._episodes if r.episode.done]
        return jobs


Teacher = Callable[[Episode, ModelAccess], str]
"""A scripted policy: the assistant message to send in the episode's current state."""


def fallback_teacher(episode: Episode, model: ModelAccess) -> str:
    """The app's own retrieval without the model (its fallback's catalog search under the request's filters:
    e.g. BM25) as a teacher that answers natively in item space: its top item's SID, written as the
    policy writes one (``<|sid_start|><s1_..>..<|sid_end|>``), or its reply text when it has no item or no
    SIDs. Without the model, so the teacher does not inherit the student's mistakes."""
    final = episode.env.spec.fallback(dataclasses.replace(episode.context(), model=None), "teacher")
    sid = model.sid
    if sid is None or not final.item_ids:
        return final.reply
    tok = model.tokenizer
    start, end = tok.convert_ids_to_tokens([sid.start_id, sid.end_id])
    return f"{start}{sid.sid_map.sid_of(final.item_ids[0])}{end}"


def teacher_episodes(jobs: Sequence[EpisodeJob], app: Apps, model: ModelAccess, settings: RolloutSettings,
                     teacher: Teacher | None = None) -> list[Trajectory]:
    """Episodes acted by ``teacher`` instead of the engine, recorded token in, token out like the policy's
    (its messages tokenised, mask 1, log-probs 0): rejection-sampling fine-tuning data in the exact served
    format. ``teacher`` None = each job's app's own (``AppEnv.teacher``), else :func:`fallback_teacher`."""
    eos = model.tokenizer.eos_token
    out = []
    for job in jobs:
        episode = start_episode(job, app, model, settings)
        teach = teacher or app_of(app, job.task).teacher or fallback_teacher
        while (request := episode.request()) is not None:
            text = teach(episode, model)
            ids = [int(i) for i in model.tokenizer(text + eos, add_special_tokens=False)["input_ids"]]
            episode.apply(Completion(request_id="teacher", index=0, token_ids=ids, text=text,
                                     logprobs=[0.0] * len(ids), finish_reason="eos", prompt_tokens=len(request.prompt),
                                     latency_ms=0.0, weights_version=-1))
        out.append(trajectory_of(job, episode, settings))
    return out


def run_episodes(jobs: Sequence[EpisodeJob], app: Apps, model: ModelAccess, settings: RolloutSettings,
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
