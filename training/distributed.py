"""Data parallelism for any step-wise trainer: torch.distributed process groups inside Ray actors.

:func:`run_data_parallel` starts (or joins) a Ray cluster, places one actor per worker, joins them
in a ``torch.distributed`` group (gloo on CPU, nccl on GPU) and drives them in chunks of steps from
this process (a single controller, as in ROLL). Each actor builds its trainer with a picklable
factory that receives the actor's :class:`DistContext`; the trainer only needs the verbs of
:class:`StepTrainer` (``setup``, ``train``, ``close``, ``step``, ``total_steps``). This module knows
nothing of what is trained: :mod:`training.sft` uses it, never the other way round.

The contract a trainer keeps: every rank builds the same model, takes its share of each batch, and
calls :meth:`DistContext.all_reduce_grads` before each optimizer step, normalising its loss so that
the summed gradient equals the gradient one process computes on the whole batch; rank 0
(``ctx.is_main``) alone writes shared files. The driver reports rank 0's progress events and
returns rank 0's result.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import torch
import torch.distributed as dist

from infra.cluster import ClusterConfig, connect, shutdown

RAY_CHUNK_STEPS = 10
"""Optimizer steps per call from the driver to the workers (progress is reported between calls)."""

Backend = Literal["gloo", "nccl"]
EventT = TypeVar("EventT")
ResultT = TypeVar("ResultT")
EventT_co = TypeVar("EventT_co", covariant=True)
ResultT_co = TypeVar("ResultT_co", covariant=True)


class DistributedError(RuntimeError):
    """Workers that could not be started or joined into a process group."""


@dataclass(frozen=True)
class DistContext:
    """This process's place in the data-parallel group; ``world_size == 1`` makes every collective a no-op."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes logs, checkpoints and outputs."""
        return self.rank == 0

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over all workers, in place; returns it."""
        if self.world_size > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def all_reduce_grads(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Sum the gradients of ``params`` over all workers (one flat buffer, one collective)."""
        if self.world_size == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])  # (sum of numel,)
        self.all_reduce_sum(flat)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).clone()
            offset += n

    def barrier(self) -> None:
        """Wait until every worker gets here (so rank 0's files exist before the others read them)."""
        if self.world_size > 1:
            dist.barrier()


class StepTrainer(Protocol[EventT_co, ResultT_co]):
    """What :func:`run_data_parallel` drives: ``setup()`` -> ``train(stop_at=...)`` in chunks -> ``close()``.

    ``train`` runs from ``step`` up to ``stop_at`` (capped at ``total_steps``), calling ``progress`` with
    one event per step, and returns where the run stands.
    """

    @property
    def step(self) -> int: ...

    @property
    def total_steps(self) -> int: ...

    def setup(self) -> None: ...

    def train(self, progress: Callable[[EventT_co], None] | None = None,
              stop_at: int | None = None) -> ResultT_co: ...

    def close(self) -> None: ...


TrainerFactory = Callable[[DistContext], StepTrainer[EventT, ResultT]]
"""Builds one rank's trainer from its :class:`DistContext`; pickled to every Ray worker."""


def init_process_group(rank: int, world_size: int, address: str, port: int, backend: str) -> DistContext:
    """Join the group at ``tcp://address:port``; ``backend`` is gloo (CPU) or nccl (GPU)."""
    if backend not in ("gloo", "nccl"):
        raise DistributedError(f"backend {backend!r}: use gloo (CPU) or nccl (GPU)")
    dist.init_process_group(backend, init_method=f"tcp://{address}:{port}", rank=rank, world_size=world_size)
    return DistContext(rank=rank, world_size=world_size)


def free_port() -> int:
    """A TCP port free on this host right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class DataParallelWorker:
    """One data-parallel worker (a Ray actor): a trainer built by a factory, inside a process group."""

    def __init__(self) -> None:
        self._trainer: StepTrainer[Any, Any] | None = None
        self._events: list[Any] = []

    def address(self) -> tuple[str, int]:
        """This node's IP and a free port there: where rank 0 hosts the process group's rendezvous."""
        import ray

        return ray.util.get_node_ip_address(), free_port()

    def setup(self, factory: TrainerFactory[Any, Any], rank: int, world_size: int, address: str, port: int,
              backend: Backend, threads: int) -> tuple[int, int]:
        """Join the group, build and set up the trainer; returns (total steps, current step).

        ``threads`` = torch threads of this worker; 0 = this node's CPUs shared evenly between the workers.
        """
        torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // world_size))
        ctx = init_process_group(rank, world_size, address, port, backend)
        self._trainer = factory(ctx)
        self._trainer.setup()
        return int(self._trainer.total_steps), int(self._trainer.step)

    def train(self, stop_at: int) -> tuple[Any, list[Any]]:
        """Train up to step ``stop_at``; returns the result and the progress events since the last call."""
        assert self._trainer is not None, "setup() first"
        self._events = []
        result = self._trainer.train(progress=self._events.append, stop_at=stop_at)
        return result, self._events

    def close(self) -> None:
        """Close the trainer and leave the process group."""
        if self._trainer is not None:
            self._trainer.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def _drive(actors: list[Any], total: int, step: int, chunk_steps: int,
           progress: Callable[[Any], None] | None) -> Any:
    """Train every actor to the end, ``chunk_steps`` at a time; report rank 0's events; return its result.

    At least one chunk runs (a run resumed at its last step still finishes: eval, checkpoint, export).
    """
    import ray

    while True:
        step = min(total, step + chunk_steps)
        outputs = ray.get([a.train.remote(step) for a in actors])
        result, events = outputs[0]
        if progress is not None:
            for event in events:
                progress(event)
        if step >= total:
            return result


def run_data_parallel(factory: TrainerFactory[EventT, ResultT], workers: int, *, gpus_per_worker: int = 0,
                      threads: int = 0, progress: Callable[[EventT], None] | None = None,
                      chunk_steps: int = RAY_CHUNK_STEPS) -> ResultT:
    """Run the trainer that ``factory`` builds on ``workers`` Ray actors; returns rank 0's result.

    ``gpus_per_worker`` > 0 reserves that many GPUs per actor and joins them with nccl, else gloo.
    ``threads`` = torch threads per worker; 0 = the node's CPUs / ``workers``.
    """
    import ray

    backend: Backend = "nccl" if gpus_per_worker > 0 else "gloo"
    cluster = connect(ClusterConfig(num_cpus=max(os.cpu_count() or 1, workers)))
    actor_cls: Any = ray.remote(num_cpus=1, num_gpus=gpus_per_worker)(DataParallelWorker)
    actors: list[Any] = [actor_cls.remote() for _ in range(workers)]
    try:
        address, port = ray.get(actors[0].address.remote())
        started = ray.get([a.setup.remote(factory, rank, workers, address, port, backend, threads)
                           for rank, a in enumerate(actors)])
        total, step = started[0]
        result: ResultT = _drive(actors, total, step, chunk_steps, progress)
        ray.get([a.close.remote() for a in actors])
        return result
    except ray.exceptions.RayError as err:
        raise DistributedError(f"data-parallel training on {workers} Ray workers failed: {err}") from err
    finally:
        for actor in actors:
            ray.kill(actor)
        shutdown(cluster)
