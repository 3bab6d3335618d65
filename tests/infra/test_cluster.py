"""Device mapping validation and bundle layout (no Ray), plus one real local Ray placement.

Run: .venv/bin/python -m pytest tests/infra/test_cluster.py -q          (fast tier)
     .venv/bin/python -m pytest tests/infra/test_cluster.py -q -m integration
"""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from infra.cluster import (
    ClusterConfig,
    ClusterError,
    ClusterInfo,
    DeviceMapping,
    Placement,
    RolePlacement,
    connect,
    cpu_mapping,
    place,
    shutdown,
)


def _mapping(**roles: RolePlacement) -> DeviceMapping:
    return DeviceMapping(roles=roles)


def test_unknown_role_is_named() -> None:
    with pytest.raises(ValidationError, match="unknown role 'critic'"):
        _mapping(actor_train=RolePlacement(), critic=RolePlacement())


def test_unknown_field_is_rejected() -> None:
    with pytest.raises(ValidationError, match="gpu"):
        RolePlacement.model_validate({"workers": 1, "gpu": 1})


def test_self_colocation_is_rejected() -> None:
    with pytest.raises(ValidationError, match="'rollout' cannot be colocated with itself"):
        _mapping(rollout=RolePlacement(colocate_with="rollout"))


def test_colocation_chain_is_rejected() -> None:
    with pytest.raises(ValidationError, match="'reference' is colocated with 'rollout', which is itself colocated"):
        _mapping(
            actor_train=RolePlacement(),
            rollout=RolePlacement(colocate_with="actor_train"),
            reference=RolePlacement(colocate_with="rollout"),
        )


def test_colocation_with_missing_role_is_rejected() -> None:
    with pytest.raises(ValidationError, match="'rollout' is colocated with 'actor_train', which is not in the mapping"):
        _mapping(rollout=RolePlacement(colocate_with="actor_train"))


def test_guest_cannot_have_more_workers_than_host() -> None:
    with pytest.raises(ValidationError, match="'rollout' has 3 workers but its host 'actor_train' has only 2"):
        _mapping(actor_train=RolePlacement(workers=2), rollout=RolePlacement(workers=3, colocate_with="actor_train"))


def test_own_bundles_need_resources() -> None:
    with pytest.raises(ValidationError, match="'reward' has bundles of its own"):
        _mapping(reward=RolePlacement(cpus=0))


def test_bundles_by_hand() -> None:
    # Listed out of order on purpose: bundles follow ROLES order (actor_train, rollout, ..., environment).
    mapping = _mapping(
        environment=RolePlacement(workers=2, cpus=0.5),
        rollout=RolePlacement(workers=1, cpus=2, gpus=1, colocate_with="actor_train"),
        actor_train=RolePlacement(workers=2, cpus=1, gpus=1),
        reward=RolePlacement(workers=1, cpus=1),
    )
    assert mapping.bundles() == [
        {"CPU": 2, "GPU": 1},  # actor_train 0, shared with rollout 0: max of both
        {"CPU": 1, "GPU": 1},  # actor_train 1 alone (rollout has one worker)
        {"CPU": 1},  # reward: no zero GPU entry
        {"CPU": 0.5},
        {"CPU": 0.5},
    ]


def test_cpu_mapping() -> None:
    assert cpu_mapping(2).bundles() == [{"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}]
    assert cpu_mapping(2, colocate=False).bundles() == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}]
    assert cpu_mapping(0).bundles() == [{"CPU": 1.0}]


def test_check_fits_names_roles() -> None:
    info = ClusterInfo(started=False, address=None, cpus=2, gpus=0)
    cpu_mapping(2).check_fits(info)
    own = r"needs 3 CPU but the cluster has 2: actor_train 1 \(shared with reference\), rollout 1, environment 1;"
    with pytest.raises(ClusterError, match=own):
        cpu_mapping(2, colocate=False).check_fits(info)
    gpu = _mapping(actor_train=RolePlacement(gpus=1), rollout=RolePlacement(gpus=1, colocate_with="actor_train"))
    with pytest.raises(ClusterError, match=r"needs 1 GPU but the cluster has 0: actor_train 1 \(shared with rollout\)"):
        gpu.check_fits(info)


def test_options_share_colocated_bundles() -> None:
    mapping = _mapping(
        actor_train=RolePlacement(workers=2, cpus=1, gpus=1),
        rollout=RolePlacement(workers=2, cpus=1, gpus=1, colocate_with="actor_train"),
        reference=RolePlacement(workers=1, cpus=1, colocate_with="actor_train"),
        environment=RolePlacement(workers=3, cpus=0.5),
    )
    placement = Placement(group=None, mapping=mapping)  # options() only reads the group
    train0, rollout1, ref0, env2 = (placement.options(r, i) for r, i in
                                    [("actor_train", 0), ("rollout", 1), ("reference", 0), ("environment", 2)])
    assert train0["scheduling_strategy"].placement_group_bundle_index == 0
    assert (train0["num_cpus"], train0["num_gpus"]) == (0.3333, 0.5)  # bundle 0: train, rollout, reference
    assert rollout1["scheduling_strategy"].placement_group_bundle_index == 1
    assert (rollout1["num_cpus"], rollout1["num_gpus"]) == (0.5, 0.5)  # bundle 1: train, rollout
    assert (ref0["num_cpus"], ref0["num_gpus"]) == (0.3333, 0.0)  # asks no GPU, gets none
    assert env2["scheduling_strategy"].placement_group_bundle_index == 4
    assert (env2["num_cpus"], env2["num_gpus"]) == (0.5, 0.0)


def test_options_reject_bad_role_and_index() -> None:
    placement = Placement(group=None, mapping=cpu_mapping(0))
    with pytest.raises(ClusterError, match="'environment' has no workers"):
        placement.options("environment", 0)
    with pytest.raises(ClusterError, match="'reward' has no workers"):
        placement.options("reward", 0)
    with pytest.raises(ClusterError, match="'rollout' has 1 workers; index 1 is out of range"):
        placement.options("rollout", 1)


def test_joining_a_dead_address_names_it() -> None:
    import ray

    if ray.is_initialized():
        pytest.skip("Ray already initialised in this process: connect() would reuse it")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nobody listens there
    with pytest.raises(ClusterError, match=f"cannot reach the Ray cluster at '127.0.0.1:{port}'"):
        connect(ClusterConfig(address=f"127.0.0.1:{port}"))


@pytest.mark.integration
def test_place_actors_on_local_ray() -> None:
    import ray

    info = connect(ClusterConfig(num_cpus=2, object_store_mb=100))
    try:
        if info.cpus < 2:
            pytest.skip(f"reused Ray cluster has {info.cpus:g} CPUs; this test needs 2")

        @ray.remote
        class Echo:
            def where(self, role: str) -> tuple[str, str | None]:
                return role, ray.get_runtime_context().get_placement_group_id()

        placement = place(cpu_mapping(2), info, timeout_s=60)
        try:
            env = Echo.options(**placement.options("environment", 1)).remote()  # type: ignore[attr-defined]
            rollout = Echo.options(**placement.options("rollout", 0)).remote()  # type: ignore[attr-defined]
            got = ray.get([env.where.remote("environment"), rollout.where.remote("rollout")], timeout=60)
            group_id = placement.group.id.hex()
            assert got == [("environment", group_id), ("rollout", group_id)]
        finally:
            placement.close()
            placement.close()  # idempotent
    finally:
        shutdown(info)
    assert ray.is_initialized() != info.started  # a reused cluster is left running, a started one is stopped
