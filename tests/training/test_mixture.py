"""Mixing apps by weight: counts, orders, the SFT source over several apps, RFT batches and RL micro-batches by
opening, and the multi-app cascade config. Every count below is worked out by hand in the comments.

Run: .venv/bin/python -m pytest tests/training/test_mixture.py -q
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from training.cascade import CascadeConfig, RFTSettings, rft, rft_batches
from training.mixture import (
    APPS_FILE,
    MixtureError,
    MixturePart,
    MixtureSft,
    apportion,
    interleave,
    mix_by_weight,
    read_apps,
)
from training.rl.trainer import OPENING, micro_batches
from training.rl.trajectory import Trajectory
from training.sft import SFTConfig
from training.sft_data import ChatExample, SftData, TrajectorySpec


# ------------------------------------------------------------------------------------------------ counts and orders
def test_apportion_splits_by_largest_remainder() -> None:
    # quotas 5, 2.5, 2.5: floors 5, 2, 2 and the one unit left goes to the first of the tied remainders
    assert apportion(10, {"a": 2, "b": 1, "c": 1}) == {"a": 5, "b": 3, "c": 2}
    # quotas 7/3 each: floors 2, 2, 2, one left -> a
    assert apportion(7, {"a": 1, "b": 1, "c": 1}) == {"a": 3, "b": 2, "c": 2}
    # quotas 0.6 * 9 = 5.4, 0.3 * 9 = 2.7, 0.1 * 9 = 0.9: floors 5, 2, 0, two left -> c (0.9), b (0.7)
    assert apportion(9, {"a": 0.6, "b": 0.3, "c": 0.1}) == {"a": 5, "b": 3, "c": 1}
    assert apportion(0, {"a": 1, "b": 3}) == {"a": 0, "b": 0}
    assert apportion(5, {"a": 1, "b": 0}) == {"a": 5, "b": 0}


@pytest.mark.parametrize(("weights", "match"), [({}, "at least one"), ({"a": -1, "b": 2}, "'a' is -1"),
                                                ({"a": 0, "b": 0}, "every weight is 0")])
def test_bad_weights_are_named(weights: dict[str, float], match: str) -> None:
    with pytest.raises(MixtureError, match=match):
        apportion(4, weights)


def test_mix_by_weight_subsamples_the_large_group_and_repeats_the_small_ones() -> None:
    groups = {"a": [f"a{i}" for i in range(10)], "b": ["b0", "b1", "b2", "b3"], "c": ["c0", "c1"]}
    mixed = mix_by_weight(groups, {"a": 2, "b": 1, "c": 1}, seed=3)
    # 16 items in all; 2:1:1 -> 8, 4, 4
    assert {k: len(v) for k, v in mixed.items()} == {"a": 8, "b": 4, "c": 4}
    assert len(set(mixed["a"])) == 8 and set(mixed["a"]) <= set(groups["a"])  # 8 of the 10, none twice
    assert sorted(mixed["b"]) == groups["b"]  # exactly its share: every item once
    assert Counter(mixed["c"]) == {"c0": 2, "c1": 2}  # twice its size: every item twice
    # 5 of a 2-item group: two whole passes and one more; seeded
    five = mix_by_weight({"x": ["p", "q"], "y": ["r"] * 5}, {"x": 5, "y": 2}, seed=0, total=7)
    assert len(five["x"]) == 5 and sorted(Counter(five["x"]).values()) == [2, 3]
    assert five == mix_by_weight({"x": ["p", "q"], "y": ["r"] * 5}, {"x": 5, "y": 2}, seed=0, total=7)


def test_mix_by_weight_refuses_a_weighted_group_with_nothing_in_it() -> None:
    with pytest.raises(MixtureError, match="'b' has weight 1 but nothing to mix"):
        mix_by_weight({"a": [1, 2], "b": []}, {"a": 1, "b": 1})
    with pytest.raises(MixtureError, match="'z' has no weight"):
        mix_by_weight({"a": [1], "z": [2]}, {"a": 1})


def test_interleave_follows_the_weights_in_every_prefix_then_the_rest() -> None:
    groups = {"a": [f"a{i}" for i in range(6)], "b": ["b0", "b1"], "c": ["c0", "c1", "c2", "c3"]}
    order = interleave(groups, {"a": 2, "b": 1, "c": 1})
    # smooth weighted round robin 2:1:1 -> a b c a | a b c a; then b is empty and a:c go on 2:1 -> a a c, a c
    assert order[:8] == ["a0", "b0", "c0", "a1", "a2", "b1", "c1", "a3"]
    assert order[8:] == ["a4", "c2", "a5", "c3"]
    assert sorted(order) == sorted(x for g in groups.values() for x in g)  # every item once


# ------------------------------------------------------------------------------------------------ the SFT source
class FakeSource:
    """An SftSource of ``n`` examples named ``<app><i>``; writes one app file if asked."""

    def __init__(self, app: str, n: int, files: dict[str, str] | None = None) -> None:
        self.app, self.n, self.files = app, n, files
        self.seen: list[SFTConfig] = []

    def trajectory_spec(self) -> TrajectorySpec:
        return TrajectorySpec.of(f"{self.app} prompt", [])

    def corpus(self, cfg: SFTConfig) -> list[str]:
        return [f"{self.app} text from {cfg.world.name}"]

    def build(self, cfg: SFTConfig) -> SftData:
        self.seen.append(cfg)
        train = [ChatExample([{"role": "user", "content": "q"}], "teacher_x", f"{self.app}{i}") for i in range(self.n)]
        held = [ChatExample([{"role": "user", "content": "q"}], "teacher_x", f"{self.app}-eval")]
        return SftData(train=train, eval=held, eval_tasks=[], counts={"train": self.n, "teacher_x": self.n})

    def app_files(self, cfg: SFTConfig) -> dict[str, str]:
        return dict(self.files or {})


def _parts(tmp_path: Path, weights: tuple[float, float, float] = (2, 1, 1)) -> list[MixturePart]:
    sources = (FakeSource("s", 30, {"vocabulary.json": "{}"}), FakeSource("l", 6), FakeSource("t", 4))
    return [MixturePart(src.app, src, tmp_path / f"w_{src.app}", tmp_path / f"t_{src.app}", w)
            for src, w in zip(sources, weights, strict=True)]


def test_mixture_sft_mixes_the_apps_examples_by_weight(tmp_path: Path) -> None:
    parts = _parts(tmp_path)
    source = MixtureSft(parts)
    cfg = SFTConfig.model_validate({"world": tmp_path / "w0", "sid": tmp_path / "sid", "out": tmp_path / "o",
                                    "seed": 1})
    data = source.build(cfg)
    # 40 examples, 2:1:1 -> 20 of s's 30, 10 of l's 6 (one pass + 4), 10 of t's 4 (two passes + 2)
    assert data.counts["mix/s"] == 20 and data.counts["mix/l"] == 10 and data.counts["mix/t"] == 10
    assert Counter(e.source[0] for e in data.train) == {"s": 20, "l": 10, "t": 10}
    assert data.counts["s/train"] == 30 and data.counts["train"] == 40
    assert [e.source for e in data.eval] == ["s-eval", "l-eval", "t-eval"]  # held-out: all of them, unmixed
    # each part built from its own world and tasks
    assert [(p.source.seen[0].world, p.source.seen[0].tasks) for p in parts] == [(p.world, p.tasks) for p in parts]
    assert source.corpus(cfg) == ["s text from w_s", "l text from w_l", "t text from w_t"]
    files = source.app_files(cfg)
    assert files["vocabulary.json"] == "{}"
    assert json.loads(files[APPS_FILE]) == {"apps": {p.name: str(p.world.resolve()) for p in parts}}


def test_an_sft_weight_of_zero_leaves_the_app_out_of_the_examples_only(tmp_path: Path) -> None:
    source = MixtureSft(_parts(tmp_path, (1, 0, 0)))
    cfg = SFTConfig.model_validate({"world": tmp_path / "w0", "sid": tmp_path / "sid", "out": tmp_path / "o"})
    data = source.build(cfg)
    assert {e.source[0] for e in data.train} == {"s"} and len(data.train) == 30
    assert len(source.corpus(cfg)) == 3  # its texts still train the tokenizer
    assert set(json.loads(source.app_files(cfg)[APPS_FILE])["apps"]) == {"s", "l", "t"}  # and it is served


def test_two_apps_writing_one_file_and_one_app_twice_are_errors(tmp_path: Path) -> None:
    a, b = FakeSource("a", 2, {"same.json": "1"}), FakeSource("b", 2, {"same.json": "2"})
    cfg = SFTConfig.model_validate({"world": tmp_path, "sid": tmp_path, "out": tmp_path / "o"})
    mix = MixtureSft([MixturePart("a", a, tmp_path, tmp_path, 1), MixturePart("b", b, tmp_path, tmp_path, 1)])
    with pytest.raises(MixtureError, match=r"'same\.json'"):
        mix.app_files(cfg)
    with pytest.raises(MixtureError, match=r"'a' is in the mixture twice"):
        MixtureSft([MixturePart("a", a, tmp_path, tmp_path, 1), MixturePart("a", b, tmp_path, tmp_path, 1)])


def test_read_apps_reads_the_record_and_names_a_broken_one(tmp_path: Path) -> None:
    assert read_apps(tmp_path) == {}
    (tmp_path / APPS_FILE).write_text(json.dumps({"apps": {"shopping": "/w/s", "travel": "/w/t"}}))
    assert read_apps(tmp_path) == {"shopping": Path("/w/s"), "travel": Path("/w/t")}
    (tmp_path / APPS_FILE).write_text("[1, 2]")
    with pytest.raises(MixtureError, match="not an apps record"):
        read_apps(tmp_path)


# ------------------------------------------------------------------------------------------------ batches by opening
def _traj(opening: int, i: int, reward: float = 0.0) -> Trajectory:
    tokens = [opening] * OPENING + [i, i]
    return Trajectory(task_id=f"{opening}-{i}", group=i, sample=0, tokens=tokens, mask=[0] * OPENING + [1, 1],
                      logprobs=[0.0] * len(tokens), chunks=[0] * len(tokens), reward=reward, success=False)


def test_rft_leaves_out_trajectories_without_a_policy_token(tiny_agent: Path, tmp_path: Path) -> None:
    """An episode the app answered before any model call (livestream's reader when sure) is one inert token: RFT
    on only such trajectories takes no step and copies the agent (it used to fail: "no policy tokens")."""
    inert = [Trajectory(task_id=f"t{i}", group=i, sample=0, tokens=[3], mask=[0], logprobs=[0.0], chunks=[-1],
                        reward=1.0, success=True) for i in range(3)]
    assert rft(tiny_agent, inert, RFTSettings(steps=2, batch_size=2), tmp_path / "out", seed=0) == 0
    assert (tmp_path / "out").is_dir()


def test_micro_batches_never_mix_openings_and_keep_one_opening_in_order() -> None:
    trajs = [_traj(7, 0), _traj(9, 1), _traj(7, 2), _traj(7, 3), _traj(9, 4)]
    assert micro_batches(trajs, 2) == [[0, 2], [3], [1, 4]]
    same = [_traj(7, i) for i in range(5)]
    assert micro_batches(same, 2) == [[0, 1], [2, 3], [4]]


def test_rft_batches_take_openings_in_turn_by_size_each_batch_one_opening() -> None:
    a = [_traj(1, i) for i in range(6)]
    b = [_traj(2, i) for i in range(2)]
    batches = rft_batches(a + b, batch_size=2, steps=4, seed=0)
    # sizes 6:2 -> smooth weighted round robin turns a, a, b, a
    assert [{t.tokens[0] for t in batch} for batch in batches] == [{1}, {1}, {2}, {1}]
    assert sorted(t.task_id for t in batches[2]) == ["2-0", "2-1"]
    assert len({t.task_id for batch in (batches[0], batches[1], batches[3]) for t in batch}) == 6  # one epoch of a


def test_rft_batches_of_one_opening_are_the_seeded_epochs_of_before() -> None:
    data = [_traj(1, i) for i in range(5)]
    rng, order, expected = random.Random(4), [], []  # the algorithm rft used before openings
    for _ in range(6):
        if len(order) < 3:
            extra = list(data)
            rng.shuffle(extra)
            order += extra
        expected.append(order[:3])
        order = order[3:]
    assert rft_batches(data, 3, 6, seed=4) == expected
    assert rft_batches([], 3, 0, seed=4) == []


# ------------------------------------------------------------------------------------------------ the config
def _mixture(tmp_path: Path, **over: Any) -> dict[str, Any]:
    apps = [{"app": "shopping", "world": tmp_path / "s", "tasks": tmp_path / "s", "heldout": [tmp_path / "sh"],
             "weight": 2},
            {"app": "livestream", "world": tmp_path / "l", "tasks": tmp_path / "l", "heldout": [tmp_path / "lh"],
             "weight": 1, "sft_weight": 0, "reward": {"brevity": 0.3, "correctness": 0.5}}]
    return {"out": tmp_path / "out", "apps": apps, "seed_sft": {"base": "tiny", "sid": tmp_path / "sid"}, **over}


def test_a_mixture_config_validates_and_fills_the_seed_sft_world(tmp_path: Path) -> None:
    cfg = CascadeConfig.model_validate(_mixture(tmp_path))
    assert cfg.weights == {"shopping": 2, "livestream": 1} and cfg.label == "shopping+livestream"
    assert cfg.heldout_paths == [tmp_path / "sh", tmp_path / "lh"]
    assert [a.sft_share for a in cfg.apps or []] == [2, 0]
    assert cfg.sft_config().world == tmp_path / "s"  # the first app's, where the seed SFT section names none


@pytest.mark.parametrize(("change", "match"), [
    ({"app": "shopping"}, "app: with apps, each app names its own"),
    ({"world": "w"}, "world: with apps"),
    ({"apps": []}, "apps: at least one app"),
    ({"rl": {"lenders": ["http://x"]}}, "rl.lenders"),
])
def test_bad_mixture_configs_name_the_field(tmp_path: Path, change: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        CascadeConfig.model_validate(_mixture(tmp_path, **change))


def test_bad_app_entries_name_the_field(tmp_path: Path) -> None:
    data = _mixture(tmp_path)
    data["apps"][1]["weight"] = 0
    with pytest.raises(ValidationError, match=r"apps\.1\.weight"):
        CascadeConfig.model_validate(data)
    data = _mixture(tmp_path)
    data["apps"].append(dict(data["apps"][1]))
    with pytest.raises(ValidationError, match="'livestream' is listed twice"):
        CascadeConfig.model_validate(data)
    data = _mixture(tmp_path)
    data["apps"][0]["sft_weight"] = 0
    with pytest.raises(ValidationError, match="every sft_weight is 0"):
        CascadeConfig.model_validate(data)
    data = _mixture(tmp_path)
    data["apps"][0]["wieght"] = 1
    with pytest.raises(ValidationError, match=r"apps\.0\.wieght"):
        CascadeConfig.model_validate(data)


def test_a_one_app_config_still_needs_its_four_fields(tmp_path: Path) -> None:
    one = {"out": tmp_path, "app": "shopping", "world": tmp_path, "tasks": tmp_path, "heldout": [tmp_path],
           "seed_sft": {"base": "tiny", "world": tmp_path, "sid": tmp_path}}
    cfg = CascadeConfig.model_validate(one)
    assert cfg.weights == {"shopping": 1.0} and cfg.heldout_paths == [tmp_path] and cfg.label == "shopping"
    with pytest.raises(ValidationError, match="tasks: required"):
        CascadeConfig.model_validate({k: v for k, v in one.items() if k != "tasks"})


def test_each_app_passes_at_its_own_mark(tmp_path: Path) -> None:
    """Travel's best reward is 0.5 + 0.5 * score < 1: with ``pass_reward: 0.5`` its feasible plans pass, while
    the other app keeps probe.pass_reward (1.0)."""
    from harness.tasks import Task
    from training.cascade import Cascade

    data = _mixture(tmp_path)
    data["apps"][1] = {**data["apps"][1], "app": "travel", "reward": {}, "pass_reward": 0.5}
    cfg = CascadeConfig.model_validate(data)
    tasks = [Task(task_id=f"{app}-0", app=app, kind="k", messages=[{"role": "user", "content": "x"}])
             for app in ("shopping", "travel")]
    cascade = Cascade(cfg, tasks, tasks, lambda: None, None, lambda a, t, o: {},  # type: ignore[arg-type,return-value]
                      sft=FakeSource("s", 1))

    def traj(task_id: str, reward: float, success: bool = True) -> Trajectory:
        t = _traj(1, 0, reward)
        return Trajectory(**{**t.__dict__, "task_id": task_id, "success": success})

    assert cascade._passes(traj("travel-0", 0.7)) and not cascade._passes(traj("shopping-0", 0.7))
    assert cascade._passes(traj("shopping-0", 1.0)) and not cascade._passes(traj("travel-0", 0.7, success=False))
    assert not cascade._passes(traj("travel-0", 0.45))


def test_a_several_app_report_from_before_its_model_apps_record_runs_again(tmp_path: Path) -> None:
    """The report stage of several apps writes final/model_apps.json (where the model serves): a report whose
    settings were recorded before it did (no ``writes`` key) is stale, so a rerun of the cascade redoes it."""
    import json as _json

    from harness.tasks import Task
    from training.cascade import Cascade, _digest

    cfg = CascadeConfig.model_validate(_mixture(tmp_path))
    tasks = [Task(task_id="shopping-0", app="shopping", kind="k", messages=[{"role": "user", "content": "x"}])]
    cascade = Cascade(cfg, tasks, tasks, lambda: None, None, lambda a, t, o: {},  # type: ignore[arg-type,return-value]
                      sft=FakeSource("s", 1))
    settings = cascade._settings("report")
    assert settings["writes"] == "model_apps.json"
    report = cfg.stage_dir("report")
    report.mkdir(parents=True)
    old = {k: v for k, v in settings.items() if k != "writes"}
    for recorded, done in ((old, False), (settings, True)):
        (report / "manifest.json").write_text(_json.dumps({"after": cascade._upstream("report"),
                                                           "settings": _digest(recorded)}))
        assert cascade.done("report") is done
