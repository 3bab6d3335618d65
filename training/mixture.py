"""Mixtures of apps for one cascade: how many of each app's examples and tasks, in what order, and one SFT source.

A multi-app cascade (``apps:`` in its config, :class:`training.cascade.MixtureApp`) trains one agent on the
tasks of several apps. Each app has a weight; this module turns weights into counts and orders, app-agnostic
(it never names an app):

- :func:`apportion` — ``total`` split in proportion to the weights, by largest remainder (the counts sum to
  ``total`` exactly);
- :func:`mix_by_weight` — groups of items resampled to the weights' shares of their combined size: a group
  with more than its share is subsampled, one with fewer is repeated (whole passes, then a seeded sample);
- :func:`interleave` — every item once, in an order whose every prefix follows the weights (smooth weighted
  round robin), so "the first N tasks" of a mixture has each app's share of N;
- :class:`MixtureSft` — an :class:`~training.sft.SftSource` over the apps' own sources: its tokenizer corpus is
  all of theirs, its training examples theirs mixed by weight (:func:`mix_by_weight`), its held-out examples
  all of theirs; the agent it trains carries every app's files and ``apps.json`` (the apps it serves and the
  world each was trained on, :data:`APPS_FILE`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from training.sft import SFTConfig, SftSource
from training.sft_data import SftData, SftDataError, TrajectorySpec

T = TypeVar("T")
APPS_FILE = "apps.json"
"""The agent directory's record of the apps it was trained for: ``{"apps": {name: world directory}}``."""
MODEL_APPS_FILE = "model_apps.json"
"""In a several-app cascade's final agent: the apps whose held-out tasks the agent answered better than the app's
fallback (``{"model_apps": [...], "evidence": {app: {a, b, delta, lo, hi, n}}, "rule": ...}``); ``sidekick serve``
lets the model answer those apps and the fallbacks the rest, unless told otherwise."""


class MixtureError(ValueError):
    """Weights that cannot mix (none positive, a negative one, a group with weight but nothing in it)."""


def _check(weights: Mapping[str, float]) -> None:
    if not weights:
        raise MixtureError("a mixture needs at least one app")
    bad = [k for k, w in weights.items() if not w >= 0]
    if bad:
        raise MixtureError(f"weight of {bad[0]!r} is {weights[bad[0]]}: weights are >= 0")
    if not sum(weights.values()) > 0:
        raise MixtureError("every weight is 0: at least one app needs a positive weight")


def apportion(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """``total`` split in proportion to ``weights`` by largest remainder (Hamilton): each gets the floor of its
    quota ``total * w / sum(w)``, and the units left go to the largest remainders (ties: the earlier key).

    >>> apportion(10, {"a": 2, "b": 1, "c": 1})     # quotas 5, 2.5, 2.5 -> 5, 3, 2
    {'a': 5, 'b': 3, 'c': 2}
    """
    _check(weights)
    if total < 0:
        raise MixtureError(f"total {total}: a count is >= 0")
    whole = sum(weights.values())
    quotas = {k: total * w / whole for k, w in weights.items()}
    counts = {k: int(q) for k, q in quotas.items()}
    order = sorted(weights, key=lambda k: (-(quotas[k] - counts[k]), list(weights).index(k)))
    for k in order[:total - sum(counts.values())]:
        counts[k] += 1
    return counts


def mix_by_weight(groups: Mapping[str, Sequence[T]], weights: Mapping[str, float], seed: int = 0,
                  total: int | None = None) -> dict[str, list[T]]:
    """Each group resampled to its weight's share of ``total`` (default: the groups' combined size), by
    :func:`apportion`. A group is taken whole as often as fits, then a seeded sample of the rest without
    repeats, so a count below the group's size subsamples it and one above repeats every item as evenly as
    it can. A group with a positive weight and no items is an error (it cannot have a share)."""
    _check(weights)
    extra = sorted(set(groups) - set(weights))
    if extra:
        raise MixtureError(f"group {extra[0]!r} has no weight")
    empty = [k for k, w in weights.items() if w > 0 and not groups.get(k)]
    if empty:
        raise MixtureError(f"{empty[0]!r} has weight {weights[empty[0]]} but nothing to mix")
    counts = apportion(sum(len(g) for g in groups.values()) if total is None else total, weights)
    out: dict[str, list[T]] = {}
    for k, n in counts.items():
        items = list(groups.get(k, ()))
        rng = random.Random(f"{seed}:{k}")
        whole, rest = divmod(n, len(items)) if items else (0, 0)
        out[k] = items * whole + rng.sample(items, rest)
    return out


def interleave(groups: Mapping[str, Sequence[T]], weights: Mapping[str, float]) -> list[T]:
    """Every item of every group once, groups in turn by smooth weighted round robin: at each pick every group
    still holding items gains its weight, the one with the most credit (ties: the earlier key) gives its next
    item and pays the sum of the weights in play. Weights 2:1:1 give a, b, c, a, a, b, c, a, ...; a group that
    runs out leaves the others to go on in their own ratio; a weight-0 group comes last."""
    _check(weights)
    queues = {k: list(groups.get(k, ())) for k in weights}
    credit = dict.fromkeys(weights, 0.0)
    taken = dict.fromkeys(weights, 0)
    out: list[T] = []
    while live := [k for k in weights if taken[k] < len(queues[k]) and weights[k] > 0]:
        for k in live:
            credit[k] += weights[k]
        pick = max(live, key=lambda k: (credit[k], -list(weights).index(k)))
        credit[pick] -= sum(weights[k] for k in live)
        out.append(queues[pick][taken[pick]])
        taken[pick] += 1
    for k in weights:  # weight 0: after everything else, in order
        out += queues[k][taken[k]:]
    return out


@dataclass(frozen=True)
class MixturePart:
    """One app's share of a :class:`MixtureSft`: its SFT source, the world and training tasks its examples are
    built from, and its weight in the training examples (0 = none of its examples; its texts still shape the
    tokenizer)."""

    name: str
    source: SftSource
    world: Path
    tasks: Path
    weight: float


class MixtureSft:
    """An :class:`~training.sft.SftSource` over several apps' sources (see the module docstring). Picklable when
    its parts' sources are. ``cfg.world`` / ``cfg.tasks`` are replaced by each part's own; ``cfg.trajectory_spec``
    is given each part as its own source's (its app's system prompt and tools)."""

    def __init__(self, parts: Sequence[MixturePart]) -> None:
        if not parts:
            raise MixtureError("a mixture needs at least one app")
        names = [p.name for p in parts]
        if len(set(names)) != len(names):
            raise MixtureError(f"app {next(n for n in names if names.count(n) > 1)!r} is in the mixture twice")
        _check({p.name: p.weight for p in parts})
        self.parts = list(parts)

    def part_config(self, cfg: SFTConfig, part: MixturePart) -> SFTConfig:
        spec = part.source.trajectory_spec() if cfg.trajectories_per_task > 0 else None
        return cfg.model_copy(update={"world": part.world, "tasks": part.tasks, "trajectory_spec": spec})

    def trajectory_spec(self) -> TrajectorySpec:
        """The first part's (each part renders its own trajectories with its own: :meth:`part_config`)."""
        return self.parts[0].source.trajectory_spec()

    def corpus(self, cfg: SFTConfig) -> list[str]:
        return [t for p in self.parts for t in p.source.corpus(self.part_config(cfg, p))]

    def build(self, cfg: SFTConfig) -> SftData:
        """Each weighted part's examples, mixed by weight (:func:`mix_by_weight`, seeded by ``cfg.seed``); held-out
        examples and tasks of every part as they are. Counts are the parts' own, prefixed ``<app>/``, plus
        ``mix/<app>``: that app's training examples after mixing."""
        built = {p.name: p.source.build(self.part_config(cfg, p)) for p in self.parts if p.weight > 0}
        weights = {p.name: p.weight for p in self.parts if p.weight > 0}
        mixed = mix_by_weight({k: d.train for k, d in built.items()}, weights, cfg.seed)
        train = [e for k in weights for e in mixed[k]]
        if not train:
            raise SftDataError("the mixture has no training examples")
        counts = {f"{k}/{c}": v for k, d in built.items() for c, v in d.counts.items()}
        counts |= {f"mix/{k}": len(v) for k, v in mixed.items()} | {"train": len(train)}
        evals = [e for d in built.values() for e in d.eval]
        return SftData(train=train, eval=evals, eval_tasks=[t for d in built.values() for t in d.eval_tasks],
                       counts=counts | {"eval": len(evals)})

    def app_files(self, cfg: SFTConfig) -> dict[str, str]:
        """Every part's own files (a name two parts both write is an error) and :data:`APPS_FILE`."""
        out: dict[str, str] = {}
        for p in self.parts:
            files = getattr(p.source, "app_files", None)
            for name, text in (files(self.part_config(cfg, p)) if callable(files) else {}).items():
                if name in out or name == APPS_FILE:
                    raise MixtureError(f"apps of the mixture both write {name!r} into the agent directory")
                out[name] = text
        out[APPS_FILE] = apps_record({p.name: p.world for p in self.parts})
        return out


def apps_record(worlds: Mapping[str, Path]) -> str:
    """The text of :data:`APPS_FILE` for ``worlds`` (app name -> the world it was trained on; absolute paths)."""
    return json.dumps({"apps": {k: str(Path(w).resolve()) for k, w in worlds.items()}}, indent=1)


def read_apps(agent_dir: Path) -> dict[str, Path]:
    """The apps an agent directory records (:data:`APPS_FILE`) with their worlds; {} when it records none."""
    path = Path(agent_dir) / APPS_FILE
    if not path.is_file():
        return {}
    try:
        record: Any = json.loads(path.read_text())
        return {str(k): Path(v) for k, v in record["apps"].items()}
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise MixtureError(f"{path}: not an apps record ({{\"apps\": {{name: world}}}}): {e}") from e
