"""Top layer: the app table, one folder per domain app, and the `sidekick` CLI.

The table below is the one place that knows which apps exist. Each entry names the module whose
``kit()`` builds that app's :class:`~harness.kit.AppKit` (imported on first use). Serving, eval, the
cascade and RL are handed kits and never branch on an app's name: a new app is one folder
(``agent.py``, ``kit.py``, ``world.py``, ``world.yaml``) and one line here.
"""

from __future__ import annotations

import importlib
import json
from functools import cache
from pathlib import Path

from harness.env import AppEnv
from harness.kit import AppKit
from infra.layout import CATALOG_FILE, TASKS_FILE

APPS: dict[str, str] = {
    "shopping": "apps.shopping.kit",
    "livestream": "apps.livestream.kit",
    "travel": "apps.travel.kit",
}
"""App name -> the module whose ``kit()`` builds its kit."""


class AppError(ValueError):
    """An unknown app, or a world directory that cannot be used for one; says what to change."""


def names() -> list[str]:
    return list(APPS)


def kit(name: str) -> AppKit:
    """The kit of app ``name`` (built once per process)."""
    if name not in APPS:
        raise AppError(f"unknown app {name!r}; expected one of {', '.join(APPS)}")
    return _kit(name, APPS[name])


@cache
def _kit(name: str, module: str) -> AppKit:
    built: AppKit = importlib.import_module(module).kit()
    if built.name != name:
        raise AppError(f"{module}.kit() builds app {built.name!r}, but the table lists it as {name!r}")
    return built


def world_app_name(world: Path) -> str:
    """The app a world directory belongs to: its manifest's ``app``, else the ``app`` of its first task."""
    world = Path(world)
    manifest = world / "manifest.json"
    if manifest.is_file():
        try:
            name = json.loads(manifest.read_text()).get("app")
        except (json.JSONDecodeError, AttributeError) as e:
            raise AppError(f"{manifest}: not a JSON object ({e})") from e
        if isinstance(name, str) and name in APPS:
            return name
    for tasks in (world / TASKS_FILE, world / "train" / TASKS_FILE):
        if tasks.is_file():
            name = _first_task_app(tasks)
            if name in APPS:
                return str(name)
    raise AppError(f"{world}: cannot tell which app this world is for (no 'app' in manifest.json or in its first "
                   f"task); expected one of {', '.join(APPS)}")


def _first_task_app(tasks: Path) -> object:
    with tasks.open() as f:
        for line in f:
            if line.strip():
                try:
                    return json.loads(line).get("app")
                except (json.JSONDecodeError, AttributeError):
                    return None
    return None


def load_env(world: Path, name: str | None = None) -> AppEnv:
    """App ``name`` (default: the world's own) over ``world``: its spec, reward, simulated user and request."""
    world = Path(world)
    if not (world / CATALOG_FILE).is_file():
        raise AppError(f"{world}: no {CATALOG_FILE} (is this a world directory?)")
    app = kit(name or world_app_name(world))
    try:
        return app.env(world)
    except (ValueError, OSError) as e:
        raise AppError(f"{world}: cannot set up the {app.name} app: {e}") from e
