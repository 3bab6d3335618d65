"""Data parallelism for the SFT trainer: torch.distributed process groups inside Ray actors.

``workers > 1`` in :class:`training.sft.SFTConfig` makes :func:`run_data_parallel` start (or join) a
Ray cluster, place one actor per worker, join them in a ``torch.distributed`` group (gloo on CPU,
nccl on GPU) and drive them in chunks of steps from this process (a single controller, as in ROLL).
Every worker builds the same model and the same row stream, takes its contiguous share of every
micro-batch (``batch_size / workers`` rows), and all-reduces (sums) gradients before each optimizer
step. The loss of a step is normalised by the number of target tokens in the whole global batch,
which every worker can count from the shared row stream, so the summed gradient equals the
gradient a single process computes on the same global batch (up to float summation order).

Rank 0 alone writes logs, checkpoints (each rank adds its own RNG state) and the final agent.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from infra.cluster import ClusterConfig, connect, shutdown

if TYPE_CHECKING:
    from training.sft import SFTConfig, SFTResult, TrainProgress

RAY_CHUNK_STEPS = 10
"""Optimizer steps per call from the driver to the workers (progress is reported between calls)."""


class DistributedError(RuntimeError):
    """Workers that could not be started or joined into a process group."""


@dataclass(frozen=True)
class DistContext:
    """This process's place in the data-parallel group; ``world_size == 1`` makes every collective a no-op."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
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
        if self.world_size > 1:
            dist.barrier()


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


class SFTWorker:
    """One data-parallel worker (a Ray actor): an :class:`~training.sft.SFTTrainer` in a process group."""

    def __init__(self) -> None:
        self._trainer: Any = None
        self._events: list[TrainProgress] = []

    def address(self) -> tuple[str, int]:
        import ray

        return ray.util.get_node_ip_address(), free_port()

    def setup(self, cfg: SFTConfig, rank: int, world_size: int, address: str, port: int) -> int:
        """Join the group, build the trainer; returns the total number of optimizer steps."""
        from training.sft import SFTTrainer, resolve_device

        backend = "nccl" if resolve_device(cfg.device).type == "cuda" else "gloo"
        threads = cfg.threads or max(1, (os.cpu_count() or 1) // world_size)
        torch.set_num_threads(threads)
        ctx = init_process_group(rank, world_size, address, port, backend)
        self._trainer = SFTTrainer(cfg, dist_ctx=ctx)
        self._trainer.setup()
        return int(self._trainer.total_steps)

    def step(self) -> int:
        return int(self._trainer.step)

    def train(self, stop_at: int) -> tuple[SFTResult, list[TrainProgress]]:
        """Train up to step ``stop_at``; returns the result and the progress events since the last call."""
        self._events = []
        result = self._trainer.train(progress=self._events.append, stop_at=stop_at)
        return result, self._events

    def close(self) -> None:
        if self._trainer is not None:
            self._trainer.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def run_data_parallel(cfg: SFTConfig, progress: Callable[[TrainProgress], None] | None = None) -> SFTResult:
    """Train ``cfg`` on ``cfg.workers`` Ray actors; the result is rank 0's."""
    import ray

    from training.sft import resolve_device

    cluster = connect(ClusterConfig(num_cpus=max(os.cpu_count() or 1, cfg.workers)))
    gpus = 1 if resolve_device(cfg.device).type == "cuda" else 0
    actor_cls: Any = ray.remote(num_cpus=1, num_gpus=gpus)(SFTWorker)
    actors: list[Any] = [actor_cls.remote() for _ in range(cfg.workers)]
    try:
        address, port = ray.get(actors[0].address.remote())
        totals = ray.get([a.setup.remote(cfg, r, cfg.workers, address, port) for r, a in enumerate(actors)])
        total, step = int(totals[0]), int(ray.get(actors[0].step.remote()))
        result: SFTResult | None = None
        while result is None or not result.finished:
            step = min(total, step + RAY_CHUNK_STEPS)
            outputs = ray.get([a.train.remote(step) for a in actors])
            result, events = outputs[0]
            if progress is not None:
                for event in events:
                    progress(event)
        ray.get([a.close.remote() for a in actors])
        return result
    except ray.exceptions.RayError as err:
        raise DistributedError(f"data-parallel SFT on {cfg.workers} Ray workers failed: {err}") from err
    finally:
        for actor in actors:
            ray.kill(actor)
        shutdown(cluster)
