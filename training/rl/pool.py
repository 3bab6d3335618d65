"""A pool of environment workers on Ray for one-off rollouts (the cascade's probe and its teacher runs).

    with EnvWorkerPool(agent_dir, env_factory, sid_factory, settings, workers=2) as pool:
        trajectories = pool.map(jobs, progress=bar.advance)

Jobs go out in chunks, one chunk per idle worker; a chunk whose worker dies is run again on another
worker (a fresh one replaces the dead), so a crash costs time, not episodes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from infra.cluster import ClusterInfo, Placement, connect_for, cpu_mapping, place, shutdown
from training.rl.rollout import EpisodeJob, RolloutSettings
from training.rl.trajectory import Trajectory
from training.rl.workers import EnvFactory, EnvWorker, SidFactory, error_cause

log = logging.getLogger(__name__)
Method = Literal["run_all", "run_teacher"]


class EnvWorkerPool:
    """``workers`` :class:`~training.rl.workers.EnvWorker` actors over one agent directory."""

    def __init__(self, agent_dir: Path, env_factory: EnvFactory, sid_factory: SidFactory | None,
                 settings: RolloutSettings, *, workers: int = 2, threads: int = 1, chunk: int = 8,
                 ray_address: str | None = None, max_restarts: int = 4) -> None:
        if workers < 1 or chunk < 1:
            raise ValueError("workers and chunk must be >= 1")
        self.agent_dir, self.env_factory, self.sid_factory = Path(agent_dir), env_factory, sid_factory
        self.settings, self.n, self.threads, self.chunk = settings, workers, threads, chunk
        self.ray_address, self.max_restarts = ray_address, max_restarts
        self.cluster: ClusterInfo | None = None
        self.placement: Placement | None = None
        self.handles: list[Any] = []
        self.restarts = 0

    def __enter__(self) -> EnvWorkerPool:
        mapping = cpu_mapping(self.n, colocate=True)
        self.cluster = connect_for(mapping, self.ray_address)
        self.placement = place(mapping, self.cluster)
        self.handles = [self._spawn(i) for i in range(self.n)]
        return self

    def _spawn(self, index: int) -> Any:
        import ray

        assert self.placement is not None
        cls: Any = ray.remote(max_restarts=0)(EnvWorker)
        return cls.options(**self.placement.options("environment", index)).remote(
            self.agent_dir, self.env_factory, self.sid_factory, self.settings, threads=self.threads)

    def map(self, jobs: Sequence[EpisodeJob], method: Method = "run_all",
            progress: Callable[[int], None] | None = None) -> list[Trajectory]:
        """Run every job (``run_all``: the policy; ``run_teacher``: the app's retrieval teacher); results in
        job order."""
        import ray

        todo = [list(jobs[i:i + self.chunk]) for i in range(0, len(jobs), self.chunk)]
        inflight: dict[Any, tuple[int, list[EpisodeJob]]] = {}
        out: list[Trajectory] = []
        while todo or inflight:
            busy = {w for w, _ in inflight.values()}
            for w in range(self.n):
                if w not in busy and todo:
                    part = todo.pop(0)
                    inflight[getattr(self.handles[w], method).remote(part)] = (w, part)
            done, _ = ray.wait(list(inflight), num_returns=1)
            w, part = inflight.pop(done[0])
            try:
                got: list[Trajectory] = ray.get(done[0])
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as err:
                self._replace(w, err)
                todo.insert(0, part)
                continue
            out += got
            if progress is not None:
                progress(len(got))
        order = {(j.group, j.sample): k for k, j in enumerate(jobs)}
        return sorted(out, key=lambda t: order[(t.group, t.sample)])

    def _replace(self, worker: int, err: BaseException) -> None:
        if self.restarts >= self.max_restarts:
            cause = error_cause(err)
            raise RuntimeError(f"environment workers died {self.restarts + 1} times; giving up. The last: {cause}")
        self.restarts += 1
        log.warning("environment worker %d died; starting a replacement and running its chunk again", worker)
        self.handles[worker] = self._spawn(worker)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        import ray

        for h in self.handles:
            ray.kill(h)
        self.handles = []
        if self.placement is not None:
            self.placement.close()
        if self.cluster is not None:
            shutdown(self.cluster)
