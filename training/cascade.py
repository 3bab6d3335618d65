"""The cascaded recipe (STAgent + LiveThinking): seed SFT -> probe -> select -> SFT-2 (RFT) -> RL, then a report.

    sidekick train cascade apps/shopping/cascade.yaml [--quick] [--stage probe] [--out DIR]

Each stage writes ``OUT/<stage>/`` and, last, its ``manifest.json`` (with a digest of the stage's
settings and of the previous stage's manifest); a stage whose manifest matches is done and is
skipped, so a rerun resumes where the last one stopped (the SFT and RL stages also resume from their
own checkpoints mid-stage), and a changed setting or a rerun upstream runs it afresh. ``--stage``
runs one stage alone; it needs the earlier stages' artefacts.

1. **seed_sft** — SFT of the base (:mod:`training.sft`: alignment and intent examples), then a short
   protocol warm-up (``warmup``): RFT on the app's retrieval teacher's passing episodes over the
   training tasks, in the served format. The SFT's intent examples carry no system prompt or tools,
   so without it the probe would measure the format, not the task.
2. **probe** — ``samples`` episodes per task in the harness environment with the seed agent;
   ``certainty`` = the share that pass (reward >= ``pass_reward``). Written as ``certainty.jsonl``
   (``{task_id, certainty}``: the score file ``sidekick curate --certainty`` reads), plus the passing
   trajectories (RFT material).
3. **select** — ``high`` (certainty >= threshold) and ``low`` task sets (``tasks.jsonl`` each).
4. **sft2** — rejection-sampling fine-tuning on the high-certainty tasks: the seed's own passing
   samples plus, with ``teacher``, the app's retrieval teacher's passing episodes on the same tasks
   (LiveThinking's RFT from a teacher), all in the exact served token format.
5. **rl** — the RL runtime (:mod:`training.rl.controller`) on the low-certainty tasks from SFT-2's agent.
6. **report** — seed, SFT-2 and RL agents on held-out tasks in the harness: success rate, Recall@10,
   reward (``OUT/report.json``); ``OUT/final`` is RL's agent unless an earlier stage did better beyond doubt
   (:func:`choose_final`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.agent import call_seed
from harness.tasks import Task
from infra.manifest import write_manifest
from infra.memory import release_memory, rss_bytes
from infra.recordio import format_validation_error
from training.mixture import MODEL_APPS_FILE, interleave, mix_by_weight
from training.rl.controller import RLConfig, train_rl
from training.rl.pool import EnvWorkerPool
from training.rl.rollout import EpisodeJob, RolloutSettings
from training.rl.trainer import OPENING, TrainerSettings
from training.rl.trajectory import Trajectory
from training.rl.workers import EnvFactory, SidFactory, TrainWorker
from training.sft import SFTConfig, SftSource, train_sft
from training.sft_data import TrajectorySpec

log = logging.getLogger(__name__)
Stage = Literal["seed_sft", "probe", "select", "sft2", "rl", "report"]
STAGES: tuple[Stage, ...] = ("seed_sft", "probe", "select", "sft2", "rl", "report")
Evaluator = Callable[[Path | None, Sequence[Task], Path], dict[str, float]]
"""``evaluator(agent_dir, tasks, out_dir) -> metrics`` (at least ``success``, ``recall@10``, ``reward``); an
``agent_dir`` of None replays the apps' fallbacks (no model), as a server without the agent would answer."""

Progress = Callable[[str, int, int | None], None]
"""``progress(what, advance, total)``: a stage reports work done (total None = unknown)."""


class CascadeError(RuntimeError):
    """A stage cannot run (missing artefacts of an earlier stage, no tasks)."""


class WarmupSettings(BaseModel):
    """The seed stage's protocol warm-up: RFT on the retrieval teacher's passing episodes over the training
    tasks, in the served format (system prompt, tools, SIDs written as the policy writes them). The SFT
    trainer's intent examples carry no system prompt, so without it the seed answers in a format it never
    saw and the probe would measure the format, not the task."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(100, ge=0, description="RFT steps after the SFT; 0 = none (the SFT agent is the seed).")
    max_tasks: int = Field(-1, ge=-1, description="Training tasks the teacher acts on; -1 = all.")
    batch_size: int = Field(16, ge=1, description="Trajectories per step.")
    lr: float = Field(5e-4, gt=0, description="AdamW learning rate.")


class ProbeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_tasks: int = Field(256, ge=1, description="Tasks probed (the first N of the task file).")
    samples: int = Field(4, ge=1, description="Episodes per task (k); certainty = passes / k.")
    pass_reward: float = Field(1.0, ge=0, le=1, description="An episode passes at reward >= this (and success).")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature of the probe.")


class SelectSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(0.25, ge=0, le=1, description="certainty >= threshold is high (SFT-2's set).")
    low_below: float | None = Field(None, ge=0, le=1, description="certainty < low_below is low (RL's set); None = "
                                    "threshold (disjoint sets). Above threshold the sets overlap: a task passed "
                                    "sometimes is in both, SFT-2 rejection-samples its passes and RL works on it.")


class RFTSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    teacher: bool = Field(True, description="Add the app's retrieval teacher's passing episodes on the high set.")
    teacher_samples: int = Field(1, ge=1, description="Teacher episodes per task (it is deterministic: 1).")
    per_task: int = Field(2, ge=1, description="Most kept trajectories per task (balances easy tasks).")
    steps: int = Field(60, ge=0, description="Optimizer steps; 0 = skip SFT-2 (the seed goes on to RL).")
    batch_size: int = Field(16, ge=1, description="Trajectories per step.")
    lr: float = Field(5e-4, gt=0, description="AdamW learning rate.")


class ReportSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_tasks: int = Field(200, ge=1, description="Held-out tasks evaluated per agent (the first N).")
    rl_samples: int = Field(8, ge=0, description="Episodes per task of SFT-2's and the final agent on the RL "
                            "stage's own tasks, sampled as RL samples (0 = skip that comparison).")


class CascadeRL(BaseModel):
    """The RL stage's settings (RLConfig without its agent and out, which the cascade sets)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = 20
    groups_per_step: int = 8
    group_size: int = 4
    mode: Literal["sync", "async"] = "async"
    async_ratio: int = 1
    tail_fraction: float = 0.0
    save_every: int = 10
    lenders: list[str] = Field(default_factory=list, description="Serving replicas lending idle capacity to the RL "
                               "stage's rollout (RLConfig.lenders).")
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    trainer: TrainerSettings = Field(default_factory=TrainerSettings)


class MixtureApp(BaseModel):
    """One app of a multi-app cascade (``apps:``): where its tasks and world are, and its weights."""

    model_config = ConfigDict(extra="forbid")

    app: str = Field(description="A name in the app table.")
    world: Path = Field(description="The world its environment runs over (catalog and the app's own files).")
    tasks: Path = Field(description="Its training tasks: a tasks.jsonl or a directory holding one.")
    heldout: list[Path] = Field(min_length=1, description="Its held-out tasks for the report (tasks.jsonl files or "
                                "directories holding one).")
    weight: float = Field(gt=0, description="Its share of the tasks: the warm-up's and the probe's (the mixture's "
                          "tasks interleaved by weight, then the first max_tasks), RL's draws (the low set resampled "
                          "to the weights) and the report's held-out tasks. Relative: 2, 1, 1 = half, a quarter each.")
    sft_weight: float | None = Field(None, ge=0, description="Its share of the seed SFT's examples (mixed by "
                                     "weight); None (default) = weight; 0 = none of its examples (its texts still "
                                     "train the tiny tokenizer, and the warm-up teaches its served format).")
    pass_reward: float | None = Field(None, ge=0, le=1, description="Its episodes pass (warm-up, probe, SFT-2's "
                                      "kept samples) at reward >= this and success; None (default) = "
                                      "probe.pass_reward. For an app whose best reward is below 1 (a quality "
                                      "score under it), the reward a success earns at least.")
    reward: dict[str, float] = Field(default_factory=dict, description="Weights of its reward's parts by name (the "
                                     "names its kit's reward_weights takes); {} (default) = the app's defaults. An "
                                     "app whose reward has no weights takes none.")

    @property
    def sft_share(self) -> float:
        return self.weight if self.sft_weight is None else self.sft_weight


class CascadeConfig(BaseModel):
    """One YAML for the whole cascade (``apps/shopping/cascade.yaml``; ``apps/cascade.yaml`` for several apps);
    ``quick`` holds the ``--quick`` profile's overrides, merged over the rest before validation.

    One app: ``app``, ``world``, ``tasks`` and ``heldout``. Several (one agent serving all of them): ``apps``, a
    list of :class:`MixtureApp`, and none of those four."""

    model_config = ConfigDict(extra="forbid")

    out: Path = Field(description="Cascade directory: one sub-directory per stage, final/, report.json.")
    world: Path | None = Field(None, description="One app: the world the environment runs over (its catalog).")
    tasks: Path | None = Field(None, description="One app: training tasks to probe, a tasks.jsonl or a directory "
                               "holding one.")
    heldout: list[Path] | None = Field(None, description="One app: held-out tasks for the report, tasks.jsonl files "
                                       "or directories holding one (e.g. the curated test and val splits).")
    app: str | None = Field(None, description="One app: the app (a name in the app table) whose environment, reward "
                            "and SFT data are used.")
    apps: list[MixtureApp] | None = Field(None, description="Several apps, one agent: each app's world, tasks, "
                                          "held-out tasks and weights (MixtureApp); None (default) = one app.")
    workers: int = Field(2, ge=1, description="Environment workers (Ray actors) for probe, RFT and RL.")
    seed: int = 0
    seed_sft: dict[str, Any] = Field(description="SFTConfig of the seed SFT (its out is set to OUT/seed_sft/sft; "
                                     "with apps, world and tasks are each app's own and may be left out).")
    warmup: WarmupSettings = Field(default_factory=WarmupSettings)
    probe: ProbeSettings = Field(default_factory=ProbeSettings)
    select: SelectSettings = Field(default_factory=SelectSettings)
    sft2: RFTSettings = Field(default_factory=RFTSettings)
    rl: CascadeRL = Field(default_factory=CascadeRL)
    report: ReportSettings = Field(default_factory=ReportSettings)
    rollout: RolloutSettings = Field(default_factory=RolloutSettings, description="Probe and teacher episodes.")
    quick: dict[str, Any] = Field(default_factory=dict, description="Overrides of the --quick profile.")

    @model_validator(mode="after")
    def _sections_validate(self) -> CascadeConfig:
        """One app or several, not both; the seed SFT and RL sections are whole configs of their own: check them
        now, not stages later."""
        single = {"app": self.app, "world": self.world, "tasks": self.tasks, "heldout": self.heldout}
        if self.apps is None:
            missing = [k for k, v in single.items() if v is None]
            if missing:
                raise ValueError(f"{missing[0]}: required (or list several apps under apps)")
            if not self.heldout:
                raise ValueError("heldout: at least one tasks file or directory")
        else:
            given = [k for k, v in single.items() if v is not None]
            if given:
                raise ValueError(f"{given[0]}: with apps, each app names its own app, world, tasks and heldout; "
                                 f"remove the top-level {given[0]}")
            if not self.apps:
                raise ValueError("apps: at least one app")
            names = [a.app for a in self.apps]
            twice = [n for n in names if names.count(n) > 1]
            if twice:
                raise ValueError(f"apps: {twice[0]!r} is listed twice")
            if not any(a.sft_share > 0 for a in self.apps):
                raise ValueError("apps: every sft_weight is 0; at least one app must give the seed SFT examples")
            if self.rl.lenders:
                raise ValueError("rl.lenders: a lending replica runs one app; a multi-app cascade cannot use lenders")
        for section, check in (("seed_sft", self.sft_config), ("rl", lambda: self.rl_config(Path("agent")))):
            try:
                check()
            except ValidationError as err:
                raise ValueError(f"section {section}: {format_validation_error(err)}") from None
        return self

    @property
    def label(self) -> str:
        """The app, or the mixture's apps joined by '+' (for messages)."""
        return "+".join(a.app for a in self.apps) if self.apps else str(self.app)

    @property
    def heldout_paths(self) -> list[Path]:
        """Every held-out tasks path (each app's, in order, with apps)."""
        return [h for a in self.apps for h in a.heldout] if self.apps else list(self.heldout or [])

    @property
    def weights(self) -> dict[str, float]:
        """App -> task weight ({app: 1} for one app)."""
        return {a.app: a.weight for a in self.apps} if self.apps else {str(self.app): 1.0}

    def rl_config(self, agent: Path) -> RLConfig:
        """The RL stage's RLConfig, starting from ``agent``."""
        rl = self.rl
        return RLConfig(agent=agent, out=self.stage_dir("rl"), world=self.world, tasks=self.tasks, app=self.app,
                        steps=rl.steps, groups_per_step=rl.groups_per_step, group_size=rl.group_size, mode=rl.mode,
                        async_ratio=rl.async_ratio, tail_fraction=rl.tail_fraction, env_workers=self.workers,
                        save_every=rl.save_every, seed=self.seed, lenders=rl.lenders, rollout=rl.rollout,
                        trainer=rl.trainer)

    def stage_dir(self, stage: Stage) -> Path:
        return self.out / stage

    def sft_config(self, spec: TrajectorySpec | None = None) -> SFTConfig:
        """The seed SFT's config; ``spec`` (the app's system prompt and tools) also shapes the tiny tokenizer. With
        apps, a world and tasks left out are the first app's (each app's examples are built from its own)."""
        first = {"world": self.apps[0].world, "tasks": self.apps[0].tasks} if self.apps else {}
        return SFTConfig.model_validate({**first, **self.seed_sft, "out": self.stage_dir("seed_sft") / "sft",
                                         "resume": True, "trajectory_spec": spec})


def quick_profile(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``quick`` overrides deep-merged in (dicts merge, anything else replaces)."""
    def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        return out

    return merge({k: v for k, v in data.items() if k != "quick"}, dict(data.get("quick") or {}))


class Cascade:
    """Runs the stages in order; each skipped when its manifest says it is done."""

    def __init__(self, cfg: CascadeConfig, tasks: Sequence[Task], heldout: Sequence[Task], env_factory: EnvFactory,
                 sid_factory: SidFactory | None, evaluator: Evaluator, progress: Progress | None = None, *,
                 sft: SftSource) -> None:
        if not tasks:
            raise CascadeError(f"{cfg.tasks or 'apps'}: no {cfg.label} tasks to train on")
        self.cfg, self.tasks, self.heldout = cfg, list(tasks), list(heldout)
        self.env_factory, self.sid_factory, self.evaluator = env_factory, sid_factory, evaluator
        self.progress = progress or (lambda what, n, total: None)
        self.by_id = {t.task_id: t for t in self.tasks}
        self.sft = sft
        self.pass_marks = {a.app: a.pass_reward for a in cfg.apps or [] if a.pass_reward is not None}

    def done(self, stage: Stage) -> bool:
        """The stage finished after the stage before it last finished (a rerun upstream invalidates it)."""
        path = self.cfg.stage_dir(stage) / "manifest.json"
        if not path.is_file():
            return False
        manifest = json.loads(path.read_text())
        return bool(manifest.get("after") == self._upstream(stage)
                    and manifest.get("settings") == _digest(self._settings(stage)))

    def _settings(self, stage: Stage) -> dict[str, Any]:
        """The config a stage's result depends on (a change makes the stage run again)."""
        c = self.cfg
        table: dict[str, dict[str, Any]] = {
                "seed_sft": {"sft": c.seed_sft, "warmup": c.warmup.model_dump(), "tasks": str(c.tasks),
                             "data": [_data_digest(Path(c.seed_sft.get(k, ""))) for k in ("world", "sid")],
                             **({"apps": [a.model_dump(mode="json") for a in c.apps],
                                 "worlds": [_data_digest(a.world) for a in c.apps]} if c.apps else {})},
                "probe": {"probe": c.probe.model_dump(), "rollout": c.rollout.model_dump()},
                "select": c.select.model_dump(), "sft2": c.sft2.model_dump(),
                "rl": c.rl.model_dump(mode="json"),
                "report": {"report": c.report.model_dump(), "heldout": [str(p) for p in c.heldout_paths],
                           # several apps: the report also chooses where the model serves (a report from before
                           # it did is stale, so a rerun redoes it)
                           **({"writes": MODEL_APPS_FILE} if c.apps else {})}}
        return table[stage]

    def _upstream(self, stage: Stage) -> str | None:
        """Fingerprint of the previous stage's manifest (None for the first stage)."""
        k = STAGES.index(stage)
        if k == 0:
            return None
        prev = self.cfg.stage_dir(STAGES[k - 1]) / "manifest.json"
        return hashlib.sha256(prev.read_bytes()).hexdigest()[:16] if prev.is_file() else "missing"

    def _manifest(self, stage: Stage, config: dict[str, Any], counts: dict[str, Any], inputs: list[Path]) -> None:
        self.cfg.stage_dir(stage).mkdir(parents=True, exist_ok=True)
        write_manifest(self.cfg.stage_dir(stage), stage=f"cascade.{stage}", config=config, counts=counts,
                       inputs=inputs, extra={"after": self._upstream(stage),
                                             "settings": _digest(self._settings(stage))})

    def run(self, stages: Sequence[Stage] = STAGES) -> dict[str, Any]:
        for stage in stages:
            if self.done(stage):
                log.info("stage %s: done already (%s)", stage, self.cfg.stage_dir(stage))
                continue
            if (self.cfg.stage_dir(stage) / "manifest.json").is_file():  # stale: upstream or settings changed
                log.info("stage %s: an earlier stage or this stage's settings changed; starting it afresh", stage)
                shutil.rmtree(self.cfg.stage_dir(stage))
            start = time.perf_counter()
            self._stage_fn(stage)()
            release_memory()  # what the stage freed goes back to the system, not kept for the next stage's workers
            log.info("stage %s: %.0f s (main process %.1f GB after it)", stage, time.perf_counter() - start,
                     rss_bytes() / 2**30)
        report = self.cfg.stage_dir("report") / "report.json"
        return json.loads(report.read_text()) if report.is_file() else {}

    def _stage_fn(self, stage: Stage) -> Callable[[], None]:
        runs: dict[str, Callable[[], None]] = {
            "seed_sft": self.stage_seed_sft, "probe": self.stage_probe, "select": self.stage_select,
            "sft2": self.stage_sft2, "rl": self.stage_rl, "report": self.stage_report}
        return runs[stage]

    def _agent(self, stage: Stage) -> Path:
        path = self.cfg.stage_dir(stage) / "final"
        if not (path / "agent.json").is_file():
            raise CascadeError(f"stage {stage} has no agent at {path}: run that stage first")
        return path

    def _pool(self, agent: Path, settings: RolloutSettings) -> EnvWorkerPool:
        return EnvWorkerPool(agent, self.env_factory, self.sid_factory, settings, workers=self.cfg.workers)

    # ---- stages --------------------------------------------------------------------------------
    def stage_seed_sft(self) -> None:
        sft, w = self.cfg.sft_config(self.sft.trajectory_spec()), self.cfg.warmup
        result = train_sft(sft, self.sft, lambda p: self.progress("seed_sft", 0, None))
        if result.final_dir is None:
            raise CascadeError("seed SFT ended without a final agent")
        tasks = self.tasks if w.max_tasks < 0 else self.tasks[:w.max_tasks]
        data: list[Trajectory] = []
        if w.steps > 0:
            data = [t for t in self._teach(result.final_dir, tasks, "warmup") if self._passes(t)]
        rft_cfg = RFTSettings(steps=w.steps, batch_size=w.batch_size, lr=w.lr)
        steps = rft(result.final_dir, data, rft_cfg, self.cfg.stage_dir("seed_sft") / "final", self.cfg.seed,
                    progress=lambda n: self.progress("warmup", n, w.steps))
        self._manifest("seed_sft", {"sft": dict(self.cfg.seed_sft), "warmup": w.model_dump()},
                       {"sft_steps": result.step, "warmup_tasks": len(tasks), "warmup_passing": len(data),
                        "warmup_steps": steps}, [sft.world, sft.sid])

    def _teach(self, agent: Path, tasks: Sequence[Task], what: str, samples: int = 1) -> list[Trajectory]:
        """The retrieval teacher's episodes on ``tasks`` (recorded in the policy's token format)."""
        jobs = [EpisodeJob(task, g, s, call_seed(self.cfg.seed, what, task.task_id, s))
                for g, task in enumerate(tasks) for s in range(samples)]
        with self._pool(agent, self.cfg.rollout) as pool:
            return pool.map(jobs, "run_teacher", progress=lambda n: self.progress(what, n, len(jobs)))

    def stage_probe(self) -> None:
        p, out = self.cfg.probe, self.cfg.stage_dir("probe")
        tasks = self.tasks[:p.max_tasks]
        settings = self.cfg.rollout.model_copy(update={"temperature": p.temperature})
        jobs = [EpisodeJob(t, g, s, call_seed(self.cfg.seed, "probe", t.task_id, s))
                for g, t in enumerate(tasks) for s in range(p.samples)]
        with self._pool(self._agent("seed_sft"), settings) as pool:
            trajs = pool.map(jobs, progress=lambda n: self.progress("probe", n, len(jobs)))
        passed: dict[str, int] = defaultdict(int)
        for t in trajs:
            passed[t.task_id] += self._passes(t)
        out.mkdir(parents=True, exist_ok=True)
        with (out / "certainty.jsonl").open("w") as f:
            for task in tasks:
                f.write(json.dumps({"task_id": task.task_id, "certainty": passed[task.task_id] / p.samples}) + "\n")
        write_trajectories(out / "passing.jsonl", [t for t in trajs if self._passes(t)])
        n = max(1, len(trajs))
        self._manifest("probe", p.model_dump(), {
            "tasks": len(tasks), "episodes": len(trajs), "pass_rate": round(sum(passed.values()) / n, 4),
            "mean_reward": round(sum(t.reward for t in trajs) / n, 4)}, [self._agent("seed_sft")])

    def _passes(self, t: Trajectory) -> bool:
        """Success, at a reward of at least the pass mark of the trajectory's app (``apps[].pass_reward``, else
        ``probe.pass_reward``)."""
        task = self.by_id.get(t.task_id)
        mark = self.pass_marks.get(task.app, self.cfg.probe.pass_reward) if task is not None else \
            self.cfg.probe.pass_reward
        return t.success and t.reward >= mark

    def stage_select(self) -> None:
        from data_curation.select import load_certainty

        out = self.cfg.stage_dir("select")
        scores = load_certainty(self.cfg.stage_dir("probe") / "certainty.jsonl")
        high = [self.by_id[i] for i, c in scores.items() if c >= self.cfg.select.threshold and i in self.by_id]
        below = self.cfg.select.threshold if self.cfg.select.low_below is None else self.cfg.select.low_below
        low = [self.by_id[i] for i, c in scores.items() if c < below and i in self.by_id]
        for name, subset in (("high", high), ("low", low)):
            (out / name).mkdir(parents=True, exist_ok=True)
            with (out / name / "tasks.jsonl").open("w") as f:
                for t in subset:
                    f.write(t.model_dump_json() + "\n")
        self._manifest("select", self.cfg.select.model_dump(), {"high": len(high), "low": len(low)},
                       [self.cfg.stage_dir("probe")])

    def _subset(self, name: str) -> list[Task]:
        path = self.cfg.stage_dir("select") / name / "tasks.jsonl"
        if not path.is_file():
            raise CascadeError(f"{path} is missing: run the select stage first")
        return [Task.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]

    def stage_sft2(self) -> None:
        r, out = self.cfg.sft2, self.cfg.stage_dir("sft2")
        high = self._subset("high")
        ids = {t.task_id for t in high}
        data = [t for t in read_trajectories(self.cfg.stage_dir("probe") / "passing.jsonl") if t.task_id in ids]
        own = len(data)
        if r.teacher and high:
            taught = self._teach(self._agent("seed_sft"), high, "teacher", r.teacher_samples)
            data += [t for t in taught if self._passes(t)]
        data = cap_per_task(data, r.per_task, self.cfg.seed)
        final = out / "final"
        steps = rft(self._agent("seed_sft"), data, r, final, self.cfg.seed,
                    progress=lambda n: self.progress("sft2", n, r.steps))
        self._manifest("sft2", r.model_dump(), {"high_tasks": len(high), "own_passing": own, "kept": len(data),
                                               "steps": steps}, [self._agent("seed_sft")])

    def rl_tasks(self) -> list[Task]:
        """RL's tasks: the low set (else the high set); with apps, resampled to the apps' weights among the apps
        it holds (:func:`training.mixture.mix_by_weight`: RL draws tasks uniformly from this list)."""
        low = self._subset("low") or self._subset("high")
        if not self.cfg.apps:
            return low
        by_app: dict[str, list[Task]] = defaultdict(list)
        for t in low:
            by_app[t.app].append(t)
        weights = {k: w for k, w in self.cfg.weights.items() if by_app.get(k)}
        mixed = mix_by_weight(by_app, weights, self.cfg.seed)
        return [t for k in weights for t in mixed[k]]

    def stage_rl(self) -> None:
        low = self.rl_tasks()
        rl = self.cfg.rl
        cfg = self.cfg.rl_config(self._agent("sft2"))
        result = train_rl(cfg, low, self.env_factory, self.sid_factory, resume=True,
                          progress=lambda s: self.progress("rl", 1, rl.steps))
        by_app: dict[str, int] = defaultdict(int)
        for t in low:
            by_app[t.app] += 1
        self._manifest("rl", rl.model_dump(mode="json"), {
            "tasks": len(low), "tasks_by_app": dict(by_app), "steps": result.steps,
            "reward_first": result.history[0].collected_reward if result.history else None,
            "reward_last": result.history[-1].collected_reward if result.history else None}, [self._agent("sft2")])

    def _rl_reward(self) -> dict[str, Any]:
        """The RL stage's mean collected reward on its own (low-certainty) tasks: first and last update."""
        manifest = self.cfg.stage_dir("rl") / "manifest.json"
        counts = json.loads(manifest.read_text()).get("counts", {}) if manifest.is_file() else {}
        return {k: counts.get(k) for k in ("tasks", "steps", "reward_first", "reward_last")}

    def _on_rl_tasks(self, final: Path) -> dict[str, Any]:
        """Did RL improve on what it trained on? SFT-2's agent (RL's start) and the final agent each run
        ``report.rl_samples`` episodes of every RL task, sampled as RL samples them (its rollout settings) with
        the same seeds for both; per task the pass rate and mean reward, paired by task: ``{tasks, samples,
        temperature, success: {a, b, delta, lo, hi, excludes_zero, n}, reward: {...}}`` (a = SFT-2, b = final);
        the per-task rows go to ``report/rl_set/{sft2,final}.jsonl``."""
        from eval.paired import paired_compare

        k, settings = self.cfg.report.rl_samples, self.cfg.rl.rollout
        tasks = self._subset("low") or self._subset("high")
        if k == 0 or not tasks:
            return {}
        jobs = [EpisodeJob(t, g, s, call_seed(self.cfg.seed, "rl-set", t.task_id, s))
                for g, t in enumerate(tasks) for s in range(k)]
        rows: dict[str, list[dict[str, Any]]] = {}
        for name, agent in (("sft2", self._agent("sft2")), ("final", final)):
            with self._pool(agent, settings) as pool:
                trajs = pool.map(jobs, progress=lambda n: self.progress("report: RL's tasks", n, 2 * len(jobs)))
            rows[name] = per_task_rates(tasks, trajs, self._passes)
            where = self.cfg.stage_dir("report") / "rl_set"
            where.mkdir(parents=True, exist_ok=True)
            (where / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[name]))
        cmp = paired_compare(rows["sft2"], rows["final"], ("success", "reward"), seed=self.cfg.seed)
        cells = {m: v for m, v in cmp["groups"]["all"].items() if m != "tasks"}
        return {"tasks": len(tasks), "samples": k, "temperature": settings.temperature, **cells}

    def stage_report(self) -> None:
        out = self.cfg.stage_dir("report")
        tasks = self.heldout[:self.cfg.report.max_tasks]
        if not tasks:
            where = ", ".join(map(str, self.cfg.heldout_paths))
            raise CascadeError(f"{where}: no held-out {self.cfg.label} tasks to report on")
        agents: dict[str, Path] = {stage: self._agent(stage) for stage in FINAL_CANDIDATES}
        rows: dict[str, dict[str, float]] = {}
        for name, agent in agents.items():
            rows[name] = self.evaluator(agent, tasks, out / name)
            self.progress("report", 1, 3)
        choice = choose_final(out, self.cfg.seed)
        final = self.cfg.out / "final"
        for src, dst in ((agents[choice["stage"]], final), (out / choice["stage"], out / "final")):
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)  # the chosen agent, and its per-task rows for the gate
        rows["final"] = rows[choice["stage"]]
        gate = None
        if self.cfg.apps:  # several apps: where does the agent beat the server without it?
            rows["fallback"] = self.evaluator(None, tasks, out / "fallback")
            gate = model_apps_gate(out / "fallback", out / "final", self.cfg.seed)
            (final / MODEL_APPS_FILE).write_text(json.dumps(gate, indent=1))
        report = {"heldout": [str(p) for p in self.cfg.heldout_paths], "tasks": len(tasks), "agents": rows,
                  "final_stage": choice, **({"model_apps": gate} if gate is not None else {}),
                  "final_beats_seed": {k: rows["final"].get(k, 0.0) > rows["seed_sft"].get(k, 0.0)
                                       for k in ("success", "recall@10")},
                  "paired": stage_deltas(out, self.cfg.seed), "rl_reward": self._rl_reward(),
                  "rl_set": self._on_rl_tasks(agents["rl"])}
        (out / "report.json").write_text(json.dumps(report, indent=1))
        self._manifest("report", self.cfg.report.model_dump(), {"tasks": len(tasks)}, [final])


def model_apps_gate(fallback_dir: Path, final_dir: Path, seed: int = 0, n_boot: int = 2000) -> dict[str, Any]:
    """Per app, the final agent's success against the fallback's on the same held-out tasks (the runs'
    ``per_task.jsonl``; paired bootstrap 95 % interval of the mean difference): the model serves the apps where it
    does better beyond doubt (the interval above 0). A tie, or a lead the interval does not confirm, goes to the
    fallback: it answers at no model cost, in milliseconds (a +0.05 on 40 travel tasks, [+0.00, +0.13], once put a
    model in front that dropped the wishes the travel fallback reads)."""
    from eval.paired import paired_compare, read_per_task

    fallback, final = read_per_task(fallback_dir) or [], read_per_task(final_dir) or []
    evidence: dict[str, Any] = {}
    for app in sorted({r.get("app", "") for r in final} - {""}):
        mine = [r for r in final if r.get("app") == app]
        theirs = [r for r in fallback if r.get("app") == app]
        cell = paired_compare(theirs, mine, ("success",), n_boot=n_boot, seed=seed)["groups"].get("all", {})
        if "success" in cell:
            evidence[app] = cell["success"]
    return {"model_apps": [app for app, c in evidence.items() if c["delta"] > 0 and c["lo"] > 0],
            "evidence": evidence,
            "rule": "success on the report's held-out tasks: a = the app's fallback (no model), b = the final agent; "
                    "the model serves an app where b - a > 0 and its paired bootstrap 95 % interval is above 0"}


FINAL_CANDIDATES: tuple[Stage, ...] = ("seed_sft", "sft2", "rl")
"""The stages whose agents the report measures; ``OUT/final`` is one of them (:func:`choose_final`)."""
STAGE_PAIRS = (("sft2", "seed_sft"), ("rl", "sft2"), ("rl", "seed_sft"))
PAIRED_METRICS = ("success", "ndcg@10", "reward")


def choose_final(report_dir: Path, seed: int = 0, n_boot: int = 2000) -> dict[str, Any]:
    """Which stage's agent becomes ``OUT/final``: RL's, unless an earlier stage did better on the report's tasks
    beyond doubt (the paired bootstrap 95 % interval of RL's success minus that stage's entirely below 0); then
    the best such stage by success (a tie: the later one). On the pretrained livestream student RFT and GRPO
    lowered success on dev3 (0.870 -> 0.827 -> 0.830): serving RL's agent there would serve the worse one. The
    report's tasks thereby choose an agent: they are a development set, and the figures a user quotes come from
    tasks that chose nothing (``sidekick eval run`` on the held-out ones)."""
    from eval.paired import paired_compare, read_per_task

    rl = read_per_task(report_dir / "rl") or []
    evidence: dict[str, Any] = {}
    for stage in FINAL_CANDIDATES[:-1]:
        earlier = read_per_task(report_dir / stage) or []
        if not (rl and earlier):
            continue
        cell = paired_compare(earlier, rl, ("success",), n_boot=n_boot, seed=seed)["groups"].get("all", {})
        if "success" in cell:
            evidence[f"rl - {stage}"] = cell["success"]
    better = [s for s in FINAL_CANDIDATES[:-1] if (c := evidence.get(f"rl - {s}")) is not None and c["hi"] < 0]
    stage = max(reversed(better), key=lambda s: evidence[f"rl - {s}"]["a"]) if better else "rl"
    return {"stage": stage, "evidence": evidence,
            "rule": "RL's agent unless an earlier stage's success is higher beyond doubt (paired bootstrap 95 % "
                    "interval of rl - stage below 0); then the best such stage"}


def stage_deltas(report_dir: Path, seed: int = 0, n_boot: int = 2000) -> dict[str, Any]:
    """Each later agent against an earlier one on the same held-out tasks (``<report_dir>/<agent>/per_task.jsonl``):
    ``"sft2 - seed_sft" -> metric -> {a, b, delta, lo, hi, excludes_zero, n}`` over all tasks (paired bootstrap
    95 % interval of the mean difference, :func:`eval.paired.paired_compare`)."""
    from eval.paired import read_per_task

    out: dict[str, Any] = {}
    for later, earlier in STAGE_PAIRS:
        rows_a, rows_b = read_per_task(report_dir / earlier), read_per_task(report_dir / later)
        if rows_a and rows_b:
            from eval.paired import paired_compare

            cmp = paired_compare(rows_a, rows_b, PAIRED_METRICS, n_boot=n_boot, seed=seed)
            out[f"{later} - {earlier}"] = {m: v for m, v in cmp["groups"].get("all", {}).items() if m != "tasks"}
    return out


def per_task_rates(tasks: Sequence[Task], trajs: Sequence[Trajectory],
                   passes: Callable[[Trajectory], bool]) -> list[dict[str, Any]]:
    """Per task (in ``tasks`` order) the share of its episodes that pass and their mean reward, as the rows
    :func:`eval.paired.paired_compare` pairs (a task with no episode counts 0 for both)."""
    from eval.paired import AGENT

    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_task[t.task_id].append(t)
    rows = []
    for task in tasks:
        episodes = by_task.get(task.task_id, [])
        n = max(1, len(episodes))
        rows.append({"task_id": task.task_id, "app": task.app, "kind": task.kind, "values": {AGENT: {
            "success": sum(passes(e) for e in episodes) / n, "reward": sum(e.reward for e in episodes) / n}}})
    return rows


def _data_digest(directory: Path) -> str | None:
    """Digest of the file checksums in a directory's manifest (the data, not when it was written)."""
    manifest = directory / "manifest.json"
    if not manifest.is_file():
        return None
    return _digest(json.loads(manifest.read_text()).get("files"))


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cap_per_task(trajs: Sequence[Trajectory], per_task: int, seed: int) -> list[Trajectory]:
    """At most ``per_task`` trajectories of each task (a seeded choice), so easy tasks don't dominate."""
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_task[t.task_id].append(t)
    rng = random.Random(seed)
    out: list[Trajectory] = []
    for task_id in sorted(by_task):
        group = by_task[task_id]
        rng.shuffle(group)
        out += group[:per_task]
    return out


def rft(agent: Path, data: Sequence[Trajectory], r: RFTSettings, out: Path, seed: int,
        progress: Callable[[int], None] | None = None) -> int:
    """Supervised steps on ``data`` (the policy tokens of kept trajectories) from ``agent``; writes the agent to
    ``out`` and returns the steps taken (0 when there is no data: the agent is copied unchanged). Batches by
    :func:`rft_batches`. A trajectory without a policy token (the app answered before any model call, e.g.
    livestream's reader when it is sure, or the fallback) teaches nothing and is left out."""
    data = [t for t in data if t.response_tokens > 0]
    worker = TrainWorker(agent, TrainerSettings(lr=r.lr), threads=0, seed=seed)
    steps = r.steps if data else 0
    for batch in rft_batches(data, r.batch_size, steps, seed):
        worker.sft_step(batch)
        if progress is not None:
            progress(1)
    worker.export(out)
    return steps


def rft_batches(data: Sequence[Trajectory], batch_size: int, steps: int, seed: int) -> list[list[Trajectory]]:
    """``steps`` batches of at most ``batch_size`` trajectories, each of one opening (the first
    :data:`~training.rl.trainer.OPENING` tokens: one app's system prompt, so the trainer's shared-prefix forward
    runs the prompt once per batch). Openings take turns in proportion to their number of trajectories (smooth
    weighted round robin, :func:`training.mixture.interleave`); within one, epochs of a seeded shuffle. One
    opening (one app) = epochs of a seeded shuffle of ``data``."""
    groups: dict[tuple[int, ...], list[Trajectory]] = {}
    for t in data:
        groups.setdefault(tuple(t.tokens[:OPENING]), []).append(t)
    keys = list(groups)
    sizes = {str(k): len(groups[key]) for k, key in enumerate(keys)}
    turns = interleave({k: [int(k)] * steps for k in sizes}, sizes)[:steps] if groups else []
    rng = random.Random(seed)
    queues: dict[int, list[Trajectory]] = {k: [] for k in range(len(keys))}
    batches = []
    for k in turns:
        if len(queues[k]) < batch_size:
            extra = list(groups[keys[k]])
            rng.shuffle(extra)
            queues[k] += extra
        batches.append(queues[k][:batch_size])
        queues[k] = queues[k][batch_size:]
    return batches


def write_trajectories(path: Path, trajs: Sequence[Trajectory]) -> None:
    from dataclasses import asdict

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for t in trajs:
            f.write(json.dumps(asdict(t)) + "\n")


def read_trajectories(path: Path) -> list[Trajectory]:
    if not path.is_file():
        raise CascadeError(f"{path} is missing: run the probe stage first")
    return [Trajectory(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
