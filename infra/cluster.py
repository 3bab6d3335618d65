"""The Ray cluster and role placement for the RL runtime (ROLL-style single controller).

One driver process (the controller) connects to Ray with :func:`connect`, reserves every role's
resources up front in one placement group with :func:`place`, and starts each worker group's
actors with ``ActorClass.options(**placement.options(role, i))``. The roles are ROLL's worker
groups: ``actor_train`` (the policy being optimised), ``rollout`` (generation), ``reference``
(frozen policy for KL), ``reward`` (a reward model) and ``environment`` (harness + simulated user).

A :class:`DeviceMapping` says, per role, how many workers it has, what each needs, and whether it
is **colocated** or **disaggregated**:

- *disaggregated* (the default): the role gets bundles of its own — separate devices, so rollout
  and training can run at the same time (async rollout with bounded staleness).
- *colocated* (``colocate_with="actor_train"``): the role reuses its host's bundles and the two
  **time-share** them: one runs while the other has offloaded its weights / KV cache
  (``Engine.sleep()`` / ``wake()``). Each bundle is sized to the max of both requirements, and each
  role that asks for a resource gets an equal share of it (half each when two share), so both
  actors fit in the bundle at once.

On one CPU machine :func:`cpu_mapping` colocates everything on a single CPU and gives the light
environment workers half a CPU each. On a GPU cluster you would give ``rollout`` ``gpus=1`` per
worker (a vLLM engine) and ``actor_train`` ``gpus=1`` per worker, either disaggregated (separate
GPUs) or with rollout colocated on the trainer's GPUs (sleep/wake between phases).

>>> DeviceMapping(roles={"actor_train": RolePlacement(), "environment": RolePlacement(workers=2, cpus=0.5)}).bundles()
[{'CPU': 1.0}, {'CPU': 0.5}, {'CPU': 0.5}]
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infra.settings import get_settings

ROLES = ("actor_train", "rollout", "reference", "reward", "environment")

# Ray keeps resource quantities in fixed point with 4 decimals; shares are floored to that grid so
# that the shares of one bundle never add up to more than the bundle.
_RESOLUTION = 10_000


class ClusterError(RuntimeError):
    """The Ray cluster cannot be reached, or the device mapping does not fit or is used wrongly."""


class ClusterConfig(BaseModel):
    """Where the Ray cluster is, and how big a local one should be."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        default=None,
        description="Ray address to join ('host:port', 'ray://host:port', 'auto'). None = reuse the Ray already "
        "initialised in this process, else settings.ray_address if set, else start a local cluster. "
        "'local' = always start a local cluster.",
    )
    num_cpus: int | None = Field(default=None, ge=1, description="CPUs of a local cluster; None = os.cpu_count().")
    num_gpus: int | None = Field(default=None, ge=0, description="GPUs of a local cluster; None = detect.")
    object_store_mb: int = Field(
        default=1024, ge=75, description="Object store of a local cluster, in MiB (Ray needs at least 75)."
    )
    namespace: str = Field(default="sidekick", description="Ray namespace for named actors of this job.")


@dataclass(frozen=True)
class ClusterInfo:
    """What :func:`connect` found: pass it to :func:`shutdown` and :func:`place`."""

    started: bool  # True if connect() started a local Ray, so shutdown() must stop it
    address: str | None  # GCS address of the cluster (None if Ray does not say)
    cpus: float  # total CPUs of the cluster
    gpus: float  # total GPUs of the cluster


def connect(cfg: ClusterConfig | None = None) -> ClusterInfo:
    """Join or start Ray (see :class:`ClusterConfig` for the order) and report the cluster's size."""
    import ray

    cfg = cfg or ClusterConfig()
    if ray.is_initialized():
        return _info(started=False, address=None)
    address = cfg.address or get_settings().ray_address
    common: dict[str, Any] = {
        "namespace": cfg.namespace,
        "include_dashboard": False,
        "log_to_driver": False,
        "configure_logging": False,
    }
    if address and address != "local":
        _check_reachable(address)
        try:
            ray.init(address=address, **common)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ClusterError(f"cannot join the Ray cluster at {address!r}: {err}") from err
        return _info(started=False, address=address)
    ray.init(
        num_cpus=cfg.num_cpus or os.cpu_count() or 1,
        num_gpus=cfg.num_gpus,
        object_store_memory=cfg.object_store_mb * 1024 * 1024,
        **common,
    )
    return _info(started=True, address=None)


def _check_reachable(address: str) -> None:
    """Fail fast on a 'host:port' nobody listens on (ray.init would retry for minutes)."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # 'auto' and the like: let Ray resolve them
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as err:
        raise ClusterError(f"cannot reach the Ray cluster at {address!r}: {err}") from err


def _info(started: bool, address: str | None) -> ClusterInfo:
    import ray

    with contextlib.suppress(Exception):  # Ray Client contexts do not expose the GCS address
        address = ray.get_runtime_context().gcs_address or address
    resources = ray.cluster_resources()
    return ClusterInfo(started, address, float(resources.get("CPU", 0.0)), float(resources.get("GPU", 0.0)))


def shutdown(info: ClusterInfo) -> None:
    """Stop Ray if :func:`connect` started it; a joined or reused cluster is left running."""
    import ray

    if info.started:
        ray.shutdown()


class RolePlacement(BaseModel):
    """How many workers one role has, what each needs, and whose bundles it shares."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(default=1, ge=0, description="Actors in this role's worker group; 0 = role unused.")
    cpus: float = Field(default=1.0, ge=0, description="CPUs per worker; fractions are fine (e.g. 0.5).")
    gpus: float = Field(default=0.0, ge=0, description="GPUs per worker; 0 = CPU only.")
    colocate_with: str | None = Field(
        default=None,
        description="Another role whose bundles this one time-shares (sleep/wake offload); its workers must be "
        "<= that role's. None = bundles of its own (disaggregated).",
    )


class DeviceMapping(BaseModel):
    """Per-role placement for one RL job. Bundles are laid out in ``ROLES`` order."""

    model_config = ConfigDict(extra="forbid")

    roles: dict[str, RolePlacement] = Field(description=f"Placement per role; keys from {ROLES}.")
    strategy: Literal["PACK", "SPREAD"] = Field(
        default="PACK", description="Ray placement strategy: PACK = few nodes, SPREAD = across nodes."
    )

    @model_validator(mode="after")
    def _check_roles(self) -> DeviceMapping:
        for role, p in self.roles.items():
            if role not in ROLES:
                raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
            host = p.colocate_with
            if host is None:
                if p.workers > 0 and p.cpus == 0 and p.gpus == 0:
                    raise ValueError(f"role {role!r} has bundles of its own, so it needs cpus > 0 or gpus > 0")
                continue
            if host == role:
                raise ValueError(f"role {role!r} cannot be colocated with itself")
            if host not in self.roles:
                raise ValueError(f"role {role!r} is colocated with {host!r}, which is not in the mapping")
            if self.roles[host].colocate_with is not None:
                raise ValueError(
                    f"role {role!r} is colocated with {host!r}, which is itself colocated with "
                    f"{self.roles[host].colocate_with!r}; colocate with {self.roles[host].colocate_with!r} directly"
                )
            if p.workers > self.roles[host].workers:
                raise ValueError(
                    f"role {role!r} has {p.workers} workers but its host {host!r} has only "
                    f"{self.roles[host].workers} bundles to share"
                )
        return self

    def _ordered(self) -> list[tuple[str, RolePlacement]]:
        return [(role, self.roles[role]) for role in ROLES if role in self.roles]

    def _slots(self) -> list[dict[str, RolePlacement]]:
        """Per bundle, the roles that share it (host first): the layout behind bundles() and options()."""
        out: list[dict[str, RolePlacement]] = []
        for host, p in self._ordered():
            if p.colocate_with is not None:
                continue
            guests = [(role, g) for role, g in self._ordered() if g.colocate_with == host]
            for k in range(p.workers):
                out.append({host: p} | {role: g for role, g in guests if k < g.workers})
        return out

    def bundles(self) -> list[dict[str, float]]:
        """One Ray bundle per slot: ``{"CPU": c, "GPU": g}`` with the max over the roles sharing it (no zero GPU)."""
        return [_bundle(slot) for slot in self._slots()]

    def check_fits(self, info: ClusterInfo) -> None:
        """Raise ClusterError if the bundles need more CPUs or GPUs than the cluster has, saying who asks for what."""
        slots = self._slots()
        bundles = [_bundle(slot) for slot in slots]
        for resource, have in (("CPU", info.cpus), ("GPU", info.gpus)):
            need = sum(b.get(resource, 0.0) for b in bundles)
            if need <= have + 1e-9:
                continue
            per_host: dict[str, float] = {}
            sharers: dict[str, set[str]] = {}
            for slot, b in zip(slots, bundles, strict=True):
                host = next(iter(slot))
                per_host[host] = per_host.get(host, 0.0) + b.get(resource, 0.0)
                sharers.setdefault(host, set()).update(r for r in slot if r != host)
            asks = ", ".join(
                f"{host} {amount:g}" + (f" (shared with {', '.join(sorted(sharers[host]))})" if sharers[host] else "")
                for host, amount in per_host.items()
                if amount > 0
            )
            raise ClusterError(
                f"the device mapping needs {need:g} {resource} but the cluster has {have:g}: {asks}; "
                "lower workers/cpus/gpus, colocate roles, or join a bigger cluster"
            )


def _bundle(slot: dict[str, RolePlacement]) -> dict[str, float]:
    bundle = {"CPU": max(p.cpus for p in slot.values())}
    gpus = max(p.gpus for p in slot.values())
    if gpus > 0:
        bundle["GPU"] = gpus
    return bundle


def _share(total: float, askers: int) -> float:
    """An equal share of ``total`` among ``askers``, floored to Ray's 1e-4 resource grid."""
    return math.floor(total * _RESOLUTION / askers) / _RESOLUTION


@dataclass
class Placement:
    """A ready placement group for a device mapping; hand out per-actor options, then close()."""

    group: Any  # ray.util.placement_group.PlacementGroup
    mapping: DeviceMapping
    _closed: bool = field(default=False, init=False, repr=False)

    def options(self, role: str, index: int) -> dict[str, Any]:
        """Keyword arguments for ``ActorClass.options(...)`` placing worker ``index`` of ``role`` in its bundle."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        p = self.mapping.roles.get(role)
        if p is None or p.workers == 0:
            raise ClusterError(f"role {role!r} has no workers in this device mapping")
        if not 0 <= index < p.workers:
            raise ClusterError(f"role {role!r} has {p.workers} workers; index {index} is out of range")
        slots = self.mapping._slots()
        k = [b for b, slot in enumerate(slots) if role in slot][index]
        sharers = list(slots[k].values())
        bundle = _bundle(slots[k])
        cpu_askers = sum(1 for q in sharers if q.cpus > 0)
        gpu_askers = sum(1 for q in sharers if q.gpus > 0)
        return {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=k),
            "num_cpus": _share(bundle["CPU"], cpu_askers) if p.cpus > 0 else 0.0,
            "num_gpus": _share(bundle["GPU"], gpu_askers) if p.gpus > 0 else 0.0,
        }

    def close(self) -> None:
        """Remove the placement group (kills actors still in it); safe to call twice."""
        import ray

        if not self._closed:
            ray.util.remove_placement_group(self.group)
            self._closed = True


def place(mapping: DeviceMapping, info: ClusterInfo, timeout_s: float = 30) -> Placement:
    """Check the mapping fits, reserve its bundles in one placement group, and wait until it is ready."""
    import ray

    if not ray.is_initialized():
        raise ClusterError("Ray is not initialised: call infra.cluster.connect() before place()")
    mapping.check_fits(info)
    bundles = mapping.bundles()
    if not bundles:
        raise ClusterError("the device mapping has no workers in any role, so there is nothing to place")
    group = ray.util.placement_group(bundles, strategy=mapping.strategy)
    if not group.wait(timeout_seconds=timeout_s):
        ray.util.remove_placement_group(group)
        raise ClusterError(
            f"placement group {bundles} ({mapping.strategy}) was not ready after {timeout_s:g} s; "
            "the cluster may be busy or no node can hold one of the bundles"
        )
    return Placement(group, mapping)


def cpu_mapping(env_workers: int, *, colocate: bool = True) -> DeviceMapping:
    """The default mapping for one CPU machine.

    - ``actor_train``: 1 worker, 1 CPU.
    - ``reference``: 1 worker colocated with ``actor_train`` (no extra CPU; its forward pass runs
      between training steps).
    - ``rollout``: 1 worker; colocated with ``actor_train`` if ``colocate`` (time-sharing, no extra
      CPU) else on a CPU of its own (disaggregated, can run while training does).
    - ``environment``: ``env_workers`` workers of 0.5 CPU each (harness + simulated user + reward,
      so no separate ``reward`` role).

    With ``colocate`` the total is ``1 + 0.5 * env_workers`` CPUs; without it, one more.
    """
    return DeviceMapping(
        roles={
            "actor_train": RolePlacement(workers=1, cpus=1.0),
            "rollout": RolePlacement(workers=1, cpus=1.0, colocate_with="actor_train" if colocate else None),
            "reference": RolePlacement(workers=1, cpus=1.0, colocate_with="actor_train"),
            "environment": RolePlacement(workers=env_workers, cpus=0.5),
        }
    )


def connect_for(mapping: DeviceMapping, address: str | None = None) -> ClusterInfo:
    """:func:`connect`, giving a local cluster enough logical CPUs for ``mapping``'s bundles (oversubscribing a
    small machine is the caller's choice: environment workers mostly wait while the trainer runs)."""
    needed = math.ceil(sum(b.get("CPU", 0.0) for b in mapping.bundles()))
    return connect(ClusterConfig(address=address, num_cpus=max(os.cpu_count() or 1, needed)))
