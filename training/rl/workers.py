"""The RL runtime's Ray actors: environment workers (harness envs + their rollout engine) and the trainer.

* :class:`EnvWorker` — many harness environments in one process, stepped in lockstep
  (:class:`training.rl.rollout.EpisodePool`), with the rollout :class:`~infra.engines.base.Engine` they
  generate with. On CPU the engine is an HF replica inside the worker ("rollout colocated with the
  environments": no prompt or trie crosses a process boundary, and W workers generate in parallel);
  its weights arrive versioned from the trainer after every update. A worker that dies loses only
  the episodes it was running; the controller runs them again elsewhere.
* :class:`TrainWorker` — the actor-train role: the :class:`~training.rl.trainer.PolicyTrainer`, the
  frozen reference when KL is on, checkpoints and the exported agent directory.

Both are plain classes: the controller wraps them with ``ray.remote`` and the placement's options; the
cascade's probe uses :class:`EnvWorker` in-process.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.agent import ModelAccess, SidResources
from harness.agent_dir import Agent, agent_app_files, agent_engine, load_agent, save_agent
from harness.env import AppEnv
from training.rl.rollout import (
    Apps,
    EpisodeJob,
    EpisodePool,
    RolloutSettings,
    run_episodes,
    teacher_episodes,
)
from training.rl.trainer import PolicyTrainer, TrainerSettings, state_from_numpy
from training.rl.trajectory import Trajectory

EnvFactory = Callable[[], "AppEnv | Mapping[str, AppEnv]"]
"""Builds the app's environment parts in the worker process (picklable: a module function or a partial); a
multi-app cascade's builds several, by app name (each task runs in its own app)."""
SidFactory = Callable[[AppEnv, Agent], SidResources | None]
"""SID retrieval for the policy over the app's catalog (None = the app has none)."""
CKPT_FORMAT = "sidekick.rl-checkpoint/1"


def error_cause(err: BaseException) -> str:
    """The last line of a (Ray-wrapped) error's message, or its type: what a log line or an RLError cites."""
    text = str(err).strip()
    return text.splitlines()[-1] if text else type(err).__name__


class EnvWorker:
    """Runs episodes for the controller with its own engine replica; weights are pushed to it."""

    def __init__(self, agent_dir: Path, env_factory: EnvFactory, sid_factory: SidFactory | None,
                 settings: RolloutSettings, *, threads: int = 1, max_batch_size: int = 32) -> None:
        if threads > 0:
            torch.set_num_threads(threads)
        made = env_factory()
        self.app: Apps = made if isinstance(made, AppEnv) else dict(made)
        agent = load_agent(Path(agent_dir))
        engine = agent_engine(agent, settings.engine.model_copy(update={"max_batch_size": max_batch_size}))
        # as served: one model access for every app, with the SID retrieval of the app that has it (at most one)
        envs = [self.app] if isinstance(self.app, AppEnv) else list(self.app.values())
        sids = [s for env in envs if sid_factory is not None and (s := sid_factory(env, agent)) is not None]
        sid = sids[0] if sids else None
        self.model = ModelAccess(engine=engine, tokenizer=agent.tokenizer, sid=sid)
        self.settings = settings
        self.pool = EpisodePool(self.app, self.model, settings)
        self.episodes = 0

    def pid(self) -> int:
        return os.getpid()

    def version(self) -> int:
        return self.model.engine.weights_version

    def run(self, jobs: Sequence[EpisodeJob], finish_fraction: float = 1.0) -> list[Trajectory]:
        """Add ``jobs`` and step every episode in flight until ``finish_fraction`` of them are done; returns the
        finished ones. The rest (the long tail) stay here and go on at the next call (1.0 = run all to the end)."""
        self.pool.add(jobs)
        total = self.pool.running + self.pool.finished
        need = max(1, int(np.ceil(finish_fraction * total)))
        while self.pool.running and self.pool.finished < need:
            self.pool.step()
        out = self.pool.pop_finished()
        self.episodes += len(out)
        return out

    def run_teacher(self, jobs: Sequence[EpisodeJob]) -> list[Trajectory]:
        """The same episodes acted by each job's app's teacher (``AppEnv.teacher``, else
        :func:`~training.rl.rollout.fallback_teacher`)."""
        return teacher_episodes(jobs, self.app, self.model, self.settings)

    def run_all(self, jobs: Sequence[EpisodeJob]) -> list[Trajectory]:
        """Run ``jobs`` to the end in a pool of their own (the probe and evaluations; RL uses :meth:`run`)."""
        return run_episodes(jobs, self.app, self.model, self.settings)

    def update_weights(self, state: dict[str, np.ndarray], version: int) -> int:
        self.model.engine.update_weights(state_from_numpy(state), version)
        return version


class TrainWorker:
    """The policy trainer over an agent directory; writes checkpoints and the final agent."""

    def __init__(self, agent_dir: Path, settings: TrainerSettings, *, threads: int = 0, seed: int = 0) -> None:
        if threads > 0:
            torch.set_num_threads(threads)
        torch.manual_seed(seed)
        self.agent = load_agent(Path(agent_dir), dtype="fp32")
        reference = copy.deepcopy(self.agent.model) if settings.kl_coef > 0 else None
        pad = self.agent.tokenizer.pad_token_id
        pad_id = int(pad) if pad is not None else int(self.agent.tokenizer.eos_token_id)
        self.trainer = PolicyTrainer(self.agent.model, pad_id, settings, reference=reference)
        self.train_seconds = 0.0

    def version(self) -> int:
        return self.trainer.version

    def weights(self) -> dict[str, np.ndarray]:
        return self.trainer.state_numpy()

    def rl_step(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        return self._timed(self.trainer.rl_step, trajs)

    def sft_step(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        return self._timed(self.trainer.sft_step, trajs)

    def _timed(self, fn: Callable[[Sequence[Trajectory]], dict[str, float]], trajs: Sequence[Trajectory]
               ) -> dict[str, float]:
        start = time.perf_counter()
        parts = fn(trajs)
        seconds = time.perf_counter() - start
        self.train_seconds += seconds
        return {**parts, "train_s": seconds}

    def export(self, out_dir: Path) -> Path:
        """The current policy as an agent directory (what serve, eval and the next stage load)."""
        sid_dir = Path(self.agent.info.get("sid_dir") or self.agent.path)
        if not (sid_dir / "sids.jsonl").is_file():
            sid_dir = self.agent.path
        save_agent(self.agent.model, self.agent.tokenizer, self.agent.token_map, sid_dir, Path(out_dir),
                   app_files=agent_app_files(self.agent))
        return Path(out_dir)

    def save(self, path: Path, controller: dict[str, Any]) -> Path:
        """A checkpoint at ``path``: agent dir + optimizer + the controller's state; written via a temp dir."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.export(tmp / "agent")
        torch.save({"optimizer": self.trainer.optimizer.state_dict(), "version": self.trainer.version,
                    "rng": torch.get_rng_state()}, tmp / "trainer.pt")
        (tmp / "state.json").write_text(json.dumps({"format": CKPT_FORMAT, **controller}, indent=1))
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        return path

    def load(self, path: Path) -> dict[str, Any]:
        """Restore weights, optimizer and version from a checkpoint; returns the controller's saved state."""
        path = Path(path)
        state = json.loads((path / "state.json").read_text())
        if state.get("format") != CKPT_FORMAT:
            raise ValueError(f"{path}: checkpoint format {state.get('format')!r}, expected {CKPT_FORMAT!r}")
        saved = load_agent(path / "agent", dtype="fp32")
        with torch.no_grad():
            for name, p in self.agent.model.state_dict().items():
                p.copy_(saved.model.state_dict()[name])
        extra = torch.load(path / "trainer.pt", map_location="cpu", weights_only=False)
        self.trainer.optimizer.load_state_dict(extra["optimizer"])
        self.trainer.version = int(extra["version"])
        torch.set_rng_state(extra["rng"])
        return state
