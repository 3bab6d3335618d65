"""Replay through the real harness with a scripted model: metrics equal hand-computed values, multi-turn
clarification goes through the simulated user, failures and turn caps are counted, runs are deterministic.

The scripted model reads its prompt back (a byte-level tokenizer round-trips the chat template) and answers
from a per-task script indexed by how many assistant messages the prompt already holds, so its answers do
not depend on which worker thread asks first.

Run: .venv/bin/python -m pytest tests/eval/test_replay.py -q
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import mean
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast

from apps.shopping.agent import shopping_app
from apps.shopping.constraints import hidden_constraints_text
from apps.shopping.env import reward_fn, simulated_user
from eval.paired import PER_TASK_FILE, task_values
from eval.replay import ReplayConfig, ReplayError, TaskResult, replay, replay_task, task_seed
from eval.report import REPORT_JSON, TRACES_FILE, deterministic_part
from eval.run import EvalConfig, run_evaluation, score_rankers
from harness.agent import ModelAccess
from harness.catalog import Catalog, Item
from harness.env import AppEnv
from harness.protocol import render_call
from harness.tasks import Task
from infra.engines.base import Completion, GenerationRequest
from training.chat_template import chat_template

BOOTS = ["Outdoor", "Footwear", "Hiking boots"]
TENTS = ["Outdoor", "Camping", "Tents"]
STOVES = ["Outdoor", "Camping", "Stoves"]
BIG = 100_000  # one token per byte: the prompts are long, and the loop must not drop any message


# ------------------------------------------------------------------------------------------------ the scripted model
def byte_tokenizer() -> PreTrainedTokenizerFast:
    """One token per byte (no merges) with Sidekick's chat template: ``decode(encode(text)) == text``."""
    specials = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate([*specials, *sorted(ByteLevel.alphabet())])}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                  eos_token="<|im_end|>", additional_special_tokens=["<|im_start|>"])
    tok.chat_template = chat_template(None)
    return tok


_BLOCK = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|$)", re.DOTALL)


class ScriptedModel:
    """The Engine protocol answering from ``scripts[first user message][n]``, n = assistant messages so far.

    Thread-safe and a pure function of the prompt. Unknown conversations get a plain-text reply.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerFast, scripts: Mapping[str, Sequence[str]]) -> None:
        self._tok, self.scripts = tokenizer, dict(scripts)
        self.calls = 0
        self._lock = threading.Lock()

    tokenizer = property(lambda self: self._tok)
    weights_version = property(lambda self: 0)
    tokens_per_second = property(lambda self: None)
    asleep = property(lambda self: False)

    def reply(self, prompt: str) -> str:
        blocks = _BLOCK.findall(prompt)
        users = [c.strip() for r, c in blocks if r == "user" and not c.startswith("<tool_response>")]
        script = self.scripts.get(users[0] if users else "", ["I have no script for this."])
        n = sum(r == "assistant" and c.strip() != "" for r, c in blocks)
        return script[min(n, len(script) - 1)]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            assert isinstance(req.prompt, list) and isinstance(req.prompt[0], int)
            text = self.reply(self._tok.decode(req.prompt))
            with self._lock:
                self.calls += 1
            ids = self._tok(text, add_special_tokens=False)["input_ids"]
            out.append([Completion(request_id=req.request_id, index=0, token_ids=ids, text=text,
                                   logprobs=[-1.0] * len(ids), finish_reason="eos", prompt_tokens=len(req.prompt),
                                   latency_ms=0.0, weights_version=0)])
        return out

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        return None

    def sleep(self, level: int = 1) -> None:
        return None

    def wake(self) -> None:
        return None


# ------------------------------------------------------------------------------------------------ a tiny world
def make_catalog() -> Catalog:
    def item(i: str, title: str, path: list[str], price: float, stock: int, **attrs: Any) -> Item:
        return Item(item_id=i, title=title, category_path=path, attributes=attrs, price=price, stock=stock, rating=4.0)

    return Catalog([
        item("b1", "Northpeak red hiking boots", BOOTS, 70.0, 5, brand="Northpeak", colour="red"),
        item("b2", "Northpeak blue hiking boots", BOOTS, 90.0, 5, brand="Northpeak", colour="blue"),
        item("b3", "Trailco red hiking boots", BOOTS, 60.0, 0, brand="Trailco", colour="red"),
        item("t1", "Two-person tent", TENTS, 120.0, 2, brand="Campo"),
        item("s1", "Camping stove", STOVES, 30.0, 3, brand="Campo"),
    ])


def _task(task_id: str, kind: str, text: str, constraints: dict[str, Any], target: dict[str, Any],
          hidden: dict[str, Any] | None = None) -> Task:
    return Task.model_validate({"task_id": task_id, "app": "shopping", "kind": kind,
                                "messages": [{"role": "user", "content": text}], "constraints": constraints,
                                "hidden": hidden or {}, "target": target})


SINGLE = _task("t-single", "attribute", "red Northpeak hiking boots under 80",
               {"category": BOOTS, "attributes": {"brand": "Northpeak", "colour": "red"}, "price_max": 80.0},
               {"kind": "set", "slots": [["b1"]]})
MULTI = _task("t-multi", "multi_turn", "I need hiking boots", {"category": BOOTS, "attributes": {"colour": "red"}},
              {"kind": "single", "slots": [["b1"]]}, hidden={"attributes": {"colour": "red"}})
BUNDLE = _task("t-bundle", "bundle", "a tent and a stove, 200 in total", {"slots": [TENTS, STOVES], "budget": 200.0},
               {"kind": "bundle", "slots": [["t1"], ["s1"]]})
ASKER = _task("t-asker", "multi_turn", "something nice", {"category": BOOTS}, {"kind": "set", "slots": [["b1", "b2"]]},
              hidden={"attributes": {"colour": "blue"}})

ASK = render_call("ask_user", {"question": "Which colour would you like?"})
SCRIPTS = {
    # names an item that does not exist (rejected by grounding), then b2 (wrong colour, over budget) before b1
    SINGLE.messages[0].content: [render_call("respond", {"text": "Try this", "item_ids": ["sku-nope"]}),
                                 render_call("respond", {"text": "These two", "item_ids": ["b2", "b1"]})],
    # asks first, then answers with the right item
    MULTI.messages[0].content: [ASK, render_call("respond", {"text": "Red ones", "item_ids": ["b1"]})],
    # a bundle with the tent and a boot where the stove should be
    BUNDLE.messages[0].content: [render_call("respond", {"text": "A kit", "bundles": [["t1", "b1"]]})],
    # never stops asking
    ASKER.messages[0].content: [ASK],
}


@pytest.fixture(scope="module")
def world() -> tuple[dict[str, AppEnv], ModelAccess, list[str]]:
    catalog = make_catalog()
    asked: list[str] = []
    lock = threading.Lock()

    def user(task: Task, text: str) -> str:
        with lock:
            asked.append(f"{task.task_id}: {text}")
        return simulated_user(task, text)

    app = AppEnv(shopping_app(catalog), reward_fn(catalog), user, lambda t: {})
    tok = byte_tokenizer()
    model = ModelAccess(engine=ScriptedModel(tok, SCRIPTS), tokenizer=tok)
    return {"shopping": app}, model, asked


def _run(world: tuple[dict[str, AppEnv], ModelAccess, list[str]], task: Task, **cfg: Any) -> TaskResult:
    apps, model, _ = world
    return replay_task(task, apps["shopping"], model, ReplayConfig(max_prompt_tokens=BIG, **cfg))


# ------------------------------------------------------------------------------------------------ tests
def test_single_turn_metrics_by_hand(world: tuple[dict[str, AppEnv], ModelAccess, list[str]]) -> None:
    r = _run(world, SINGLE)
    m = r.metrics
    assert r.end == "answered" and r.final["item_ids"] == ["b2", "b1"]
    # step 1 named sku-nope (rejected by the grounder, never served), step 2 answered
    assert (m["turns"], m["steps"], m["tool_calls"]) == (1.0, 2.0, 2.0)
    assert m["grounding_rejections"] == 1.0 and m["ungrounded_served"] == 0.0
    # WebShop reward of b2 (the first named): type 1, brand yes, colour no, price 90 > 80 -> 1 * (1 + 0 + 0) / 3
    assert m["reward"] == pytest.approx(1 / 3) and m["success"] == 0.0
    assert m["r.r_attributes"] == pytest.approx(0.5) and m["r.r_price"] == 0.0 and m["r.target_hit"] == 0.0
    # ranked [b2, b1] against {b1}: first hit at rank 2
    assert m["recall@1"] == 0.0 and m["recall@5"] == 1.0 and m["mrr"] == 0.5
    assert m["ndcg@5"] == pytest.approx(1 / math.log2(3))
    assert m["output_tokens"] > 0 and m["thinking_tokens"] == 0.0


def test_multi_turn_asks_the_simulated_user(world: tuple[dict[str, AppEnv], ModelAccess, list[str]]) -> None:
    _, _, asked = world
    r = _run(world, MULTI)
    assert r.end == "answered" and r.metrics["turns"] == 2.0 and r.metrics["asked_user"] == 1.0
    assert "t-multi: Which colour would you like?" in asked
    assert r.user_replies == [hidden_constraints_text(MULTI.hidden)]
    user_msgs = [m["content"] for m in r.messages if m["role"] == "user"]
    assert user_msgs == ["I need hiking boots", hidden_constraints_text(MULTI.hidden)]
    assert r.metrics["success"] == 1.0 and r.metrics["reward"] == 1.0 and r.metrics["recall@1"] == 1.0


def test_bundle_coverage_and_reward_by_hand(world: tuple[dict[str, AppEnv], ModelAccess, list[str]]) -> None:
    m = _run(world, BUNDLE).metrics
    assert m["bundle_coverage"] == 0.5
    # slots: tent <- t1 (type 1), stove <- b1 (same top category only: 0.5); 120 + 70 <= 200 -> (1 + .5 + 1) / 3
    assert m["reward"] == pytest.approx(2.5 / 3) and m["success"] == 0.0
    # named [t1, b1] against {t1, s1}: recall@1 = 1/min(2, 1), recall@5 = 1/2, NDCG@5 = 1 / (1 + 1/log2 3)
    assert m["recall@1"] == 1.0 and m["recall@5"] == 0.5 and m["mrr"] == 1.0
    assert m["ndcg@5"] == pytest.approx(1 / (1 + 1 / math.log2(3)))


@pytest.fixture
def ungrounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted asker asks twice about a product it never named: grounding would answer instead."""
    import apps.shopping.agent as agent

    monkeypatch.setattr(agent, "GROUND_WORDS", False)


@pytest.mark.usefixtures("ungrounded")
def test_turn_cap_scores_zero(world: tuple[dict[str, AppEnv], ModelAccess, list[str]]) -> None:
    r = _run(world, ASKER, max_turns=2)
    assert r.end == "turn_limit" and r.metrics["turns"] == 2.0 and len(r.user_replies) == 1
    assert r.reward == {"value": 0.0, "success": False, "parts": {}} and r.metrics["success"] == 0.0


def test_a_broken_task_is_an_error_row_not_a_crash(world: tuple[dict[str, AppEnv], ModelAccess, list[str]]
                                                    ) -> None:
    apps, model, _ = world
    app = apps["shopping"]

    def broken(task: Task, final: object) -> Any:
        raise RuntimeError("reward exploded")

    bad = AppEnv(app.spec, broken, app.user_fn, app.request_fn)
    r = replay_task(SINGLE, bad, model, ReplayConfig(max_prompt_tokens=BIG))
    assert r.end == "error" and r.error == "RuntimeError: reward exploded" and r.metrics["error"] == 1.0
    with pytest.raises(ReplayError, match="every task failed"):
        replay([SINGLE], {"shopping": bad}, model, ReplayConfig(workers=1))
    with pytest.raises(ReplayError, match="travel"):
        replay([SINGLE.model_copy(update={"app": "travel"})], apps, model, ReplayConfig())


def test_parallel_replay_keeps_task_order_and_writes_traces(
        world: tuple[dict[str, AppEnv], ModelAccess, list[str]], tmp_path: Path) -> None:
    apps, model, _ = world
    tasks = [SINGLE, MULTI, BUNDLE, ASKER] * 5
    tasks = [t.model_copy(update={"task_id": f"{t.task_id}-{k}"}) for k, t in enumerate(tasks)]
    ticks: list[int] = []
    results = replay(tasks, apps, model, ReplayConfig(workers=4, max_prompt_tokens=BIG), progress=ticks.append,
                     traces=tmp_path / "t.jsonl")
    assert [r.task_id for r in results] == [t.task_id for t in tasks] and sum(ticks) == len(tasks)
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [x["task_id"] for x in lines] == [t.task_id for t in tasks]
    first = lines[0]
    assert set(first) >= {"task_id", "kind", "end", "final", "reward", "metrics", "messages", "timing", "turns"}
    assert first["final"]["item_ids"] == ["b2", "b1"] and first["metrics"]["mrr"] == 0.5
    serial = replay(tasks, apps, model, ReplayConfig(workers=1, max_prompt_tokens=BIG))
    assert [r.metrics for r in serial] == [r.metrics for r in results]


@pytest.mark.usefixtures("ungrounded")
def test_same_seed_same_report(world: tuple[dict[str, AppEnv], ModelAccess, list[str]], tmp_path: Path) -> None:
    apps, model, _ = world
    tasks = [SINGLE, MULTI, BUNDLE, ASKER]

    def ranker(task: Task, k: int) -> list[str]:
        return ["b1", "t1", "s1", "b2"][:k]

    def run(out: Path) -> dict[str, Any]:
        run_evaluation(tasks, apps, model, EvalConfig(workers=3, seed=7, max_turns=2, max_prompt_tokens=BIG), out,
                       meta={"agent": "scripted", "logs": "tests"}, rankers={"fixed": ranker})
        return json.loads((out / REPORT_JSON).read_text())

    a, b = run(tmp_path / "a"), run(tmp_path / "b")
    assert deterministic_part(a) == deterministic_part(b)
    assert a["counts"]["tasks"] == 4 and a["overall"]["successes"] == 1 and a["checks"]["served_output_grounded"]
    assert a["overall"]["success"] == 0.25 and a["overall"]["turns_per_success"] == 2.0
    assert a["by_kind"]["shopping/bundle"]["bundle_coverage"] == 0.5
    assert a["baselines"]["fixed"]["by_kind"]["shopping/bundle"]["recall@5"] == 1.0
    traces_a = [json.loads(x) for x in (tmp_path / "a" / TRACES_FILE).read_text().splitlines()]
    traces_b = [json.loads(x) for x in (tmp_path / "b" / TRACES_FILE).read_text().splitlines()]
    assert [{k: v for k, v in t.items() if k != "timing"} for t in traces_a] == \
        [{k: v for k, v in t.items() if k != "timing"} for t in traces_b]


def test_task_seed_depends_on_seed_and_id_only() -> None:
    assert task_seed(0, "a") == task_seed(0, "a") != task_seed(1, "a")
    assert task_seed(0, "a") != task_seed(0, "b") and 0 <= task_seed(3, "x") < 2**31


def test_score_rankers_by_hand() -> None:
    scores = score_rankers([SINGLE, BUNDLE], {"r": lambda task, k: ["b2", "b1", "t1"][:k]}, (1, 5))
    single = scores["r"]["by_kind"]["shopping/attribute"]
    assert single["recall@1"] == 0.0 and single["mrr"] == 0.5
    bundle = scores["r"]["by_kind"]["shopping/bundle"]  # t1 at rank 3 of {t1, s1}
    assert bundle["recall@5"] == 0.5 and bundle["mrr"] == pytest.approx(1 / 3)
    assert scores["r"]["tasks"] == 2 and scores["r"]["all"]["mrr"] == pytest.approx((0.5 + 1 / 3) / 2)


def test_fallback_baseline_replays_without_the_model(world: tuple[dict[str, AppEnv], ModelAccess, list[str]],
                                                     tmp_path: Path) -> None:
    apps, model, _ = world
    tasks = [SINGLE, MULTI, BUNDLE, ASKER]
    cfg = EvalConfig(workers=2, max_turns=2, max_prompt_tokens=BIG, n_boot=300)
    ticks: list[int] = []
    report = run_evaluation(tasks, apps, model, cfg, tmp_path, meta={"agent": "scripted"}, fallback=True,
                            rankers={"fixed": lambda task, k: ["b1", "t1", "s1", "b2"][:k]}, progress=ticks.append)
    assert sum(ticks) == 8  # the agent's replay and the fallback's
    assert list(report["baselines"]) == ["fallback", "fixed"]
    rows = [json.loads(x) for x in (tmp_path / PER_TASK_FILE).read_text().splitlines()]
    assert [r["task_id"] for r in rows] == [t.task_id for t in tasks]
    for task, row in zip(tasks, rows, strict=True):
        alone = replay_task(task, apps["shopping"], None, cfg)  # `eval run` without an agent, task by task
        assert row["values"]["fallback"] == task_values(alone.metrics, cfg.ks)
        assert set(row["values"]) == {"agent", "fallback", "fixed"} and "success" not in row["values"]["fixed"]
    fb = report["baselines"]["fallback"]
    assert fb["tasks"] == 4 and fb["all"]["success"] == mean([r["values"]["fallback"]["success"] for r in rows])
    paired = report["paired"]
    assert paired["baselines"] == ["fallback", "fixed"] and paired["n_boot"] == 300
    assert paired["metrics"] == ["success", "reward", "ndcg@10", "hit@10", "recall@10"]
    cell = paired["groups"]["all"]["vs"]["fallback"]["success"]
    agent_success = [r["values"]["agent"]["success"] for r in rows]
    assert cell["n"] == 4 and cell["agent"] == mean(agent_success) == report["overall"]["success"]
    assert "success" not in paired["groups"]["all"]["vs"]["fixed"]
    assert set(paired["groups"]) == {"all", *report["by_kind"]}
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert PER_TASK_FILE in manifest["outputs"]
