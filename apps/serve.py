"""Assemble one serving process from an agent directory and world directories (what ``sidekick serve`` runs).

    sidekick serve runs/demo/sft/final --world runs/demo/world --port 8000

Each world directory names its app in ``manifest.json`` (``"app"``; a curated directory inherits it
from its tasks), and becomes that app's catalog and resources. Without ``--world`` the world the
agent was trained on (its manifest's ``config.world``) is used. Without an agent directory the server
answers from each app's fallback only (every reply ``degraded``, reason ``no_model``): a frontend can
be built against the API before any model is trained.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from harness.agent import AppSpec, ModelAccess, SidResources
from harness.catalog import Catalog
from infra.layout import CATALOG_FILE, TASKS_FILE
from serving.model import load_model, reload_weights
from serving.server import AgentServer, ServeConfig
from training.models import Agent

log = logging.getLogger(__name__)

APPS = ("shopping", "livestream", "travel")


class ServeSetupError(ValueError):
    """An agent or world directory that cannot be served, with what to change."""


def world_app_name(world: Path) -> str:
    """The app a world directory belongs to: its manifest's ``app``, else the ``app`` of its first task."""
    manifest = world / "manifest.json"
    if manifest.is_file():
        try:
            name = json.loads(manifest.read_text()).get("app")
        except (json.JSONDecodeError, AttributeError) as e:
            raise ServeSetupError(f"{manifest}: not a JSON object ({e})") from e
        if isinstance(name, str) and name in APPS:
            return name
    for tasks in (world / TASKS_FILE, world / "train" / TASKS_FILE):
        if tasks.is_file():
            with tasks.open() as f:
                for line in f:
                    if line.strip():
                        try:
                            name = json.loads(line).get("app")
                        except (json.JSONDecodeError, AttributeError):
                            break
                        if name in APPS:
                            return str(name)
                        break
    raise ServeSetupError(f"{world}: cannot tell which app this world is for (no 'app' in manifest.json or "
                          f"in its first task); expected one of {', '.join(APPS)}")


def load_app(world: Path, *, name: str | None = None) -> AppSpec:
    """The :class:`AppSpec` of the app ``world`` belongs to, over that world's catalog (and streams)."""
    world = Path(world)
    if not (world / CATALOG_FILE).is_file():
        raise ServeSetupError(f"{world}: no {CATALOG_FILE} (is this a world directory?)")
    name = name or world_app_name(world)
    if name == "shopping":
        from apps.shopping.agent import shopping_app

        return shopping_app(Catalog.load(world / CATALOG_FILE)[0])
    if name == "livestream":
        from apps.livestream.agent import livestream_app

        return livestream_app(world)
    if name == "travel":
        from apps.travel.agent import travel_app

        return travel_app(world)
    raise ServeSetupError(f"unknown app {name!r}; expected one of {', '.join(APPS)}")


def trained_world(agent_dir: Path) -> Path | None:
    """The world the agent was trained on, from its manifest (None if not recorded or gone)."""
    manifest = Path(agent_dir) / "manifest.json"
    if not manifest.is_file():
        return None
    world = json.loads(manifest.read_text()).get("config", {}).get("world")
    return Path(world) if isinstance(world, str) and (Path(world) / CATALOG_FILE).is_file() else None


def load_apps(worlds: Sequence[Path]) -> dict[str, AppSpec]:
    """One app per world directory; two worlds of the same app are an error."""
    apps: dict[str, AppSpec] = {}
    for world in worlds:
        spec = load_app(Path(world))
        if spec.name in apps:
            raise ServeSetupError(f"two worlds for app {spec.name!r}: pass one --world per app")
        apps[spec.name] = spec
    return apps


def build_server(agent_dir: Path | None, worlds: Sequence[Path], config: ServeConfig | None = None, *,
                 dtype: Literal["auto", "bf16", "fp32"] = "auto") -> AgentServer:
    """An :class:`AgentServer` for ``worlds`` with the agent's model (or fallback-only when ``agent_dir`` is None).

    SID retrieval runs over the shopping catalog when the agent has SIDs and a shopping world is served.
    """
    config = config or ServeConfig()
    worlds = list(worlds)
    if not worlds and agent_dir is not None:
        found = trained_world(agent_dir)
        if found is None:
            raise ServeSetupError(f"{agent_dir}: no world recorded in its manifest; pass --world DIR")
        worlds = [found]
    if not worlds:
        raise ServeSetupError("nothing to serve: pass an agent directory and/or --world DIR")
    apps = load_apps(worlds)
    model = _load_model(Path(agent_dir), apps, config, dtype) if agent_dir is not None else None
    server = AgentServer(apps, model, config)
    if agent_dir is not None and server.front is not None:
        front = server.front
        server.reload = lambda: reload_weights(Path(agent_dir), front)
    log.info("serving %s with %s", ", ".join(apps), agent_dir or "no model (fallback only)")
    return server


def _load_model(agent_dir: Path, apps: dict[str, AppSpec], config: ServeConfig,
                dtype: Literal["auto", "bf16", "fp32"]) -> ModelAccess:
    from training.models import ModelError

    catalog = apps["shopping"].catalog if "shopping" in apps else None
    try:
        model, _ = load_model(agent_dir, shopping_sid(catalog), dtype=dtype, max_batch_size=config.max_batch)
    except (ModelError, OSError) as e:
        raise ServeSetupError(f"{agent_dir}: cannot load the agent: {e}") from e
    return model


def shopping_sid(catalog: Catalog | None) -> Callable[[Agent], SidResources] | None:
    """SID retrieval over the shopping catalog (None when no shopping world is served)."""
    if catalog is None:
        return None
    from apps.shopping.agent import sid_resources

    return lambda agent: sid_resources(catalog, agent.sid_map, agent.token_map, agent.sid_start_id,
                                       agent.sid_end_id)
