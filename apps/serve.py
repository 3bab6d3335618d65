"""Assemble one serving process from an agent directory and world directories (what ``sidekick serve`` runs).

    sidekick serve runs/demo/sft/final --world runs/demo/world --port 8000

Each world directory names its app in ``manifest.json`` (``"app"``; a curated directory inherits it
from its tasks), and becomes that app's catalog and resources. Without ``--world`` the worlds the
agent was trained on are used: every app a multi-app cascade recorded in its ``apps.json``, else its
manifest's ``config.world``. Without an agent directory the server
answers from each app's fallback only (every reply ``degraded``, reason ``no_model``): a frontend can
be built against the API before any model is trained.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

import apps
from harness.agent import ModelAccess, SidResources
from harness.agent_dir import Agent, ModelError
from harness.env import AppEnv
from infra.layout import CATALOG_FILE
from serving.model import load_model, reload_weights
from serving.server import AgentServer, ModelAppsError, ServeConfig
from training.mixture import MODEL_APPS_FILE, MixtureError, read_apps
from training.rl.lending import JoinSpec
from training.rl.workers import EnvWorker

log = logging.getLogger(__name__)

class ServeSetupError(ValueError):
    """An agent or world directory that cannot be served, with what to change."""


def load_app(world: Path, *, name: str | None = None) -> AppEnv:
    """The app ``world`` belongs to (or ``name``), over that world, through the app table."""
    try:
        return apps.load_env(world, name)
    except apps.AppError as e:
        raise ServeSetupError(str(e)) from e


def trained_world(agent_dir: Path) -> Path | None:
    """The world the agent was trained on, from its manifest (None if not recorded or gone)."""
    manifest = Path(agent_dir) / "manifest.json"
    if not manifest.is_file():
        return None
    world = json.loads(manifest.read_text()).get("config", {}).get("world")
    return Path(world) if isinstance(world, str) and (Path(world) / CATALOG_FILE).is_file() else None


def trained_worlds(agent_dir: Path) -> list[Path]:
    """The worlds the agent was trained on: those of every app it records (``apps.json``, written by a multi-app
    cascade; the ones still there), else its manifest's world (:func:`trained_world`), else none."""
    try:
        recorded = read_apps(Path(agent_dir))
    except MixtureError as e:
        raise ServeSetupError(str(e)) from e
    if recorded:
        return [w for w in recorded.values() if (w / CATALOG_FILE).is_file()]
    found = trained_world(agent_dir)
    return [found] if found is not None else []


def load_apps(worlds: Sequence[Path]) -> dict[str, AppEnv]:
    """One app per world directory; two worlds of the same app are an error."""
    envs: dict[str, AppEnv] = {}
    for world in worlds:
        env = load_app(Path(world))
        if env.spec.name in envs:
            raise ServeSetupError(f"two worlds for app {env.spec.name!r}: pass one --world per app")
        envs[env.spec.name] = env
    return envs


def build_server(agent_dir: Path | None, worlds: Sequence[Path], config: ServeConfig | None = None) -> AgentServer:
    """An :class:`AgentServer` for ``worlds`` with the agent's model (or fallback-only when ``agent_dir`` is None).

    The model runs on the engine ``config.engine`` names. SID retrieval runs over the catalog of every
    served app whose kit has it (one, at most: the engine's trie constraint is per model).
    """
    config = config or ServeConfig()
    worlds = list(worlds)
    if not worlds and agent_dir is not None:
        worlds = trained_worlds(agent_dir)
        if not worlds:
            raise ServeSetupError(f"{agent_dir}: no world recorded in its apps.json or manifest (or gone); pass "
                                  "--world DIR")
    if not worlds:
        raise ServeSetupError("nothing to serve: pass an agent directory and/or --world DIR")
    envs = load_apps(worlds)
    set_threads(config)
    model = _load_model(Path(agent_dir), envs, config) if agent_dir is not None else None
    if model is not None and agent_dir is not None and config.model_apps is None and config.follow_measurement:
        measured = measured_model_apps(Path(agent_dir))
        if measured is not None:
            config = config.model_copy(update={"model_apps": [a for a in measured if a in envs]})
            log.info("%s/%s: the model answers %s; %s answer from their fallback", agent_dir, MODEL_APPS_FILE,
                     ", ".join(config.model_apps or []) or "no app",
                     ", ".join(a for a in envs if a not in (config.model_apps or [])) or "no app")
    try:
        server = AgentServer({name: env.spec for name, env in envs.items()}, model, config)
    except ModelAppsError as e:
        raise ServeSetupError(str(e)) from e
    if agent_dir is not None and server.front is not None:
        front = server.front
        server.reload = lambda: reload_weights(Path(agent_dir), front)
    if config.api_key is not None:  # the admin routes exist: the replica can lend (off until turned on)
        server.start_lending(lending_slot)
    log.info("serving %s with %s", ", ".join(envs), agent_dir or "no model (fallback only)")
    gc.collect()
    gc.freeze()  # the catalogs, model and indexes are long-lived: a full collection never walks them again
    return server


def measured_model_apps(agent_dir: Path) -> list[str] | None:
    """The apps the agent directory's ``model_apps.json`` says the model beat the fallback on (a several-app cascade's
    report writes it), or None when it has none; a file that does not parse is a :class:`ServeSetupError`."""
    path = agent_dir / MODEL_APPS_FILE
    if not path.is_file():
        return None
    try:
        apps = json.loads(path.read_text())["model_apps"]
        if not isinstance(apps, list) or not all(isinstance(a, str) for a in apps):
            raise TypeError("model_apps is not a list of app names")
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ServeSetupError(f"{path}: not a model_apps record ({{\"model_apps\": [app, ...]}}): {e}; remove it "
                              "or pass --model-app") from e
    return [str(a) for a in apps]


def lending_slot(spec: JoinSpec) -> EnvWorker:
    """An RL run's environment worker inside this serving process (the lender's rollout slot): the run's app
    over its world, with a policy engine of its own loaded from the run's starting agent (torch threads as
    the server set them)."""
    from apps.rl import env_factory

    world, agent = Path(spec.world), Path(spec.agent)
    if not (world / CATALOG_FILE).is_file():
        raise ServeSetupError(f"join: world {world} has no {CATALOG_FILE} on this host")
    if not (agent / "agent.json").is_file():
        raise ServeSetupError(f"join: agent {agent} is not an agent directory on this host (no agent.json)")
    try:
        kit = apps.kit(spec.app)
        own = apps.world_app_name(world)
    except apps.AppError as e:
        raise ServeSetupError(f"join: {e}") from e
    if own != spec.app:
        raise ServeSetupError(f"join: world {world} is a {own} world, not {spec.app}")
    try:
        return EnvWorker(agent, env_factory(kit, world), kit.sid, spec.rollout, threads=0)
    except Exception as e:  # what the caller sent cannot be run here (a world of another app, a broken agent)
        raise ServeSetupError(f"join: cannot build the rollout slot for {spec.app} over {world} with {agent}: "
                              f"{type(e).__name__}: {e}") from e


def set_threads(config: ServeConfig) -> None:
    """Torch's intra-op threads and Python's thread switch interval, for this process (see ServeConfig)."""
    threads = config.torch_threads or max(1, (os.cpu_count() or 1) - 1)
    torch.set_num_threads(threads)
    sys.setswitchinterval(config.switch_interval_ms / 1000.0)
    log.info("torch threads %d, thread switch interval %.1f ms", threads, config.switch_interval_ms)


def _load_model(agent_dir: Path, envs: dict[str, AppEnv], config: ServeConfig) -> ModelAccess:
    engine = config.engine.model_copy(update={"max_batch_size": config.max_batch})
    try:
        model, _ = load_model(agent_dir, sid_builder(envs), engine=engine)
    except (ModelError, OSError, ValueError) as e:
        raise ServeSetupError(f"{agent_dir}: cannot load the agent: {e}") from e
    return model


def sid_builder(envs: dict[str, AppEnv]) -> Callable[[Agent], SidResources | None] | None:
    """SID retrieval for the agent over the catalog of the served app whose kit has it (None: no such app)."""
    with_sid = [(env, apps.kit(name).sid) for name, env in envs.items() if apps.kit(name).sid is not None]
    if not with_sid:
        return None
    if len(with_sid) > 1:
        raise ServeSetupError(f"apps {', '.join(e.spec.name for e, _ in with_sid)} each have SID retrieval; one "
                              "model serves one SID catalog: serve them from separate processes")
    env, make = with_sid[0]
    assert make is not None
    return lambda agent: make(env, agent)
