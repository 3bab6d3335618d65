"""Rollout on lent serving capacity: the RL side of lending (the server side is :mod:`serving.lending`).

A serving replica started with lending on (``sidekick serve --lend``, admin API key set) holds a second
weight slot, the *rollout policy*, beside the agent it serves, and runs RL episodes with it only while its
own traffic leaves it idle. The RL controller names such replicas in its config (``RLConfig.lenders``) and
reaches each through a :class:`LendingWorker`, a Ray actor with the environment worker's interface
(``run`` / ``update_weights``), so the controller schedules dedicated workers and lenders in one loop:

* **join** — the worker sends the replica the run's app, world, starting agent and rollout settings;
  the replica builds the app's environment and a policy engine of its own (the served agent is untouched).
* **weights** — every policy update is pushed as safetensors over HTTP (``PUT /admin/lending/weights``),
  versioned like the dedicated workers' (tokens carry the version that generated them).
* **capacity** — before giving a lender work the controller reads its advertised spare capacity
  (episodes it will take now: 0 while serving is busy or lending is off).
* **episodes** — ``POST /admin/lending/episodes`` hands it jobs; ``GET`` collects the finished
  trajectories and the jobs it *handed back* (lending turned off, or serving kept it paused too long).
  Handed-back jobs and the jobs of a replica that stops answering are run again by the dedicated workers:
  no episode is lost.

The JSON wire format of jobs and trajectories is here too (:func:`job_to_json` ...), so both ends agree.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.tasks import Task
from training.rl.rollout import EpisodeJob, RolloutSettings
from training.rl.trajectory import Trajectory

LEND_PATH = "/admin/lending"
SLOW_S = 300.0  # joining (the replica loads the world and the model) and weight pushes of a large model


class LendingError(RuntimeError):
    """A lending replica refused a call or could not be reached (the message says which and why)."""


class JoinSpec(BaseModel):
    """What a replica needs to run a run's episodes: sent once when the run starts using it."""

    model_config = ConfigDict(extra="forbid")

    run: str = Field(description="The RL run's id (its output directory); a new id replaces the old slot.")
    app: str = Field(description="The app whose environment and reward the episodes use.")
    world: str = Field(description="The world directory, readable at this path on the replica's host.")
    agent: str = Field(description="The starting agent directory (tokenizer, SIDs, weights of version 0), "
                                   "readable at this path on the replica's host.")
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)


# ------------------------------------------------------------------------------------------------ wire format
def job_to_json(job: EpisodeJob) -> dict[str, Any]:
    return {"task": job.task.model_dump(mode="json"), "group": job.group, "sample": job.sample, "seed": job.seed}


def job_from_json(data: Mapping[str, Any]) -> EpisodeJob:
    return EpisodeJob(task=Task.model_validate(data["task"]), group=int(data["group"]), sample=int(data["sample"]),
                      seed=int(data["seed"]))


def trajectory_to_json(t: Trajectory) -> dict[str, Any]:
    return dataclasses.asdict(t)


def trajectory_from_json(data: Mapping[str, Any]) -> Trajectory:
    return Trajectory(**{f.name: data[f.name] for f in dataclasses.fields(Trajectory) if f.name in data})


def weights_to_bytes(state: Mapping[str, np.ndarray]) -> bytes:
    """A state dict as safetensors bytes (no pickle crosses the wire)."""
    from safetensors.numpy import save

    return save({k: np.ascontiguousarray(v) for k, v in state.items()})


def weights_from_bytes(data: bytes) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    return load(data)


# ------------------------------------------------------------------------------------------------ the client
class LenderClient:
    """HTTP client of one lending replica's admin routes (``X-API-Key``)."""

    def __init__(self, url: str, api_key: str | None, *, timeout_s: float = 30.0) -> None:
        import httpx

        self.url = url.rstrip("/")
        headers = {"X-API-Key": api_key} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def _call(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        import httpx

        try:
            r = self._http.request(method, LEND_PATH + path, **kw)
        except httpx.HTTPError as err:
            raise LendingError(f"lender {self.url}: {type(err).__name__}: {err}") from err
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text[:200]
            raise LendingError(f"lender {self.url}: {method} {LEND_PATH + path} -> {r.status_code}: {detail}")
        out: dict[str, Any] = r.json()
        return out

    def status(self) -> dict[str, Any]:
        return self._call("GET", "")

    def set_enabled(self, enabled: bool) -> dict[str, Any]:
        return self._call("POST", "", json={"enabled": enabled})

    def join(self, spec: JoinSpec) -> dict[str, Any]:
        """(The replica builds the run's environment and policy engine meanwhile: up to ``SLOW_S``.)"""
        return self._call("POST", "/join", json=spec.model_dump(mode="json"), timeout=SLOW_S)

    def push_weights(self, state: Mapping[str, np.ndarray], version: int, run: str) -> dict[str, Any]:
        body = weights_to_bytes(state)
        return self._call("PUT", "/weights", params={"version": version, "run": run}, content=body,
                          headers={"Content-Type": "application/octet-stream"}, timeout=SLOW_S)

    def submit(self, jobs: Sequence[EpisodeJob], run: str) -> dict[str, Any]:
        return self._call("POST", "/episodes", json={"run": run, "jobs": [job_to_json(j) for j in jobs]})

    def reclaim(self, run: str) -> int:
        return int(self._call("POST", "/reclaim", json={"run": run})["handed_back"])

    def collect(self, run: str, wait_s: float = 0.0) -> tuple[list[Trajectory], list[EpisodeJob], dict[str, Any]]:
        """Finished trajectories, handed-back jobs and the replica's status (both lists are taken: a second
        call returns only what came since); ``wait_s``: the replica waits up to that long for the first."""
        got = self._call("GET", "/episodes", params={"run": run, "wait_s": wait_s})
        return ([trajectory_from_json(t) for t in got["finished"]], [job_from_json(j) for j in got["returned"]],
                got["status"])

    def close(self) -> None:
        self._http.close()


class LendingWorker:
    """The controller's handle on one lending replica, run as a Ray actor (no CPU of its own: it only waits
    on HTTP). Same calls as :class:`~training.rl.workers.EnvWorker`, plus :meth:`spare`.

    ``run`` returns ``(finished, handed_back)``: the controller runs handed-back jobs elsewhere. A call
    returns once every episode this worker sent is finished or handed back, or after ``call_s`` with what is
    finished by then (the rest stay on the replica; the next call goes on collecting them). It long-polls the
    replica (``poll_s`` at a time) rather than asking it again and again while its rollout runs."""

    def __init__(self, url: str, api_key: str | None, spec: JoinSpec, *, call_s: float = 2.0,
                 poll_s: float = 0.5, timeout_s: float = 30.0) -> None:
        self.client = LenderClient(url, api_key, timeout_s=timeout_s)
        self.spec, self.call_s, self.poll_s = spec, call_s, poll_s
        self.held: set[tuple[int, int]] = set()
        self.client.join(spec)

    def url(self) -> str:
        return self.client.url

    def spare(self) -> int:
        """Episodes the replica takes now (0 while its serving is busy, lending is off or it cannot be reached)."""
        try:
            return int(self.client.status().get("spare", 0))
        except LendingError:
            return 0

    def update_weights(self, state: dict[str, np.ndarray], version: int) -> int:
        self.client.push_weights(state, version, self.spec.run)
        return version

    def run(self, jobs: Sequence[EpisodeJob], finish_fraction: float = 1.0
            ) -> tuple[list[Trajectory], list[EpisodeJob]]:
        if jobs:
            self.client.submit(jobs, self.spec.run)
            self.held |= {(j.group, j.sample) for j in jobs}
        finished: list[Trajectory] = []
        returned: list[EpisodeJob] = []
        end = time.monotonic() + self.call_s
        while True:
            wait = max(0.0, min(self.poll_s, end - time.monotonic()))
            done, back, _ = self.client.collect(self.spec.run, wait_s=wait)
            finished += done
            returned += back
            self.held -= {(t.group, t.sample) for t in done} | {(j.group, j.sample) for j in back}
            if not self.held or time.monotonic() >= end:
                return finished, returned

