"""The shopping app's kit: the agent over a catalog, the WebShop-style reward, the simulated shopper, SID retrieval."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apps.shopping.agent import ShoppingIndex, shopping_app, sid_resources
from apps.shopping.env import reward_fn, simulated_user
from apps.shopping.plan import plan_teacher
from apps.shopping.vocabulary import VOCABULARY_FILE, Vocabulary, VocabularyError
from harness.agent import SidResources
from harness.catalog import Catalog
from harness.env import AppEnv
from harness.kit import AppKit
from harness.tasks import Task
from infra.layout import CATALOG_FILE

HERE = Path(__file__).parent
LEARNT_VOCABULARY = True
"""Whether a loaded agent's ``vocabulary.json`` grounds the tools (off: the catalog's names only; bench/agent.py)."""


def env(world: Path) -> AppEnv:
    spec = shopping_app(Catalog.load(Path(world) / CATALOG_FILE)[0])
    return AppEnv(spec=spec, reward_fn=reward_fn(spec.catalog), user_fn=simulated_user, request_fn=request,
                  teacher=plan_teacher)


def request(task: Task) -> dict[str, Any]:
    """A shopper's request carries only the text (the agent finds the constraints) and any filters the
    frontend set (``constraints.request``)."""
    return dict(task.constraints.get("request", {}))


def sid(app: AppEnv, agent: Any) -> SidResources:
    """Model-native retrieval: the SID trie over the live catalog for the agent's SID map and tokens.

    Wherever an agent is loaded over the app (serve, eval, RL workers) this runs, so it also hands the
    catalog's index the shoppers' vocabulary the agent learnt in training (``vocabulary.json`` in its
    directory, :mod:`apps.shopping.vocabulary`; an agent without one grounds with the catalog's names)."""
    from harness.agent_dir import ModelError

    path = Path(getattr(agent, "path", "")) / VOCABULARY_FILE
    if isinstance(app.spec.resources, ShoppingIndex):
        try:
            app.spec.resources.adopt(Vocabulary.load(path) if LEARNT_VOCABULARY and path.is_file() else None)
        except VocabularyError as e:  # a bad agent directory, reported like one (serve and eval say which file)
            raise ModelError(str(e)) from e
    return sid_resources(app.spec.catalog, agent.sid_map, agent.token_map, agent.sid_start_id, agent.sid_end_id)


def check_task(task: Task) -> str | None:
    return None if task.target is not None else f"shopping task {task.task_id} has no target"


def kit() -> AppKit:
    from apps.shopping.sft import SOURCE

    return AppKit(name="shopping", env=env, sid=sid, sft=SOURCE, check_task=check_task,
                  configs={n: HERE / f"{n}.yaml" for n in ("world", "curate", "sft", "rl", "cascade")})
