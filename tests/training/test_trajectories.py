"""SFT tool-call trajectories: the messages, the calls, the results, the loss mask, and that serving renders the same.

Run: .venv/bin/python -m pytest tests/training/test_trajectories.py -q
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from apps.shopping.agent import SYSTEM_PROMPT, item_card, shopping_app, shopping_tools, sid_resources
from apps.shopping.constraints import hidden_constraints_text, item_matches
from apps.shopping.sft import (
    breaks_constraints,
    build_shopping_sft,
    check_spec,
    clarifying_question,
    load_tasks,
    trajectory_examples,
    world_corpus,
)
from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
from harness.agent import AgentLoop, LoopConfig, ModelAccess
from harness.agent_dir import SID_END, SID_START
from harness.catalog import Catalog
from harness.protocol import ToolCall, ToolResult, parse_reply, render_call
from harness.session import SessionState
from harness.tasks import Task
from infra.engines.base import Completion, GenerationRequest
from sid.build import SIDS_FILE
from sid.codebook import SidMap
from sid.tokens import SidTokenMap
from training.models import load_base, make_sid_aware
from training.sft_data import (
    IGNORE,
    TRAJ_PREFIX,
    ChatExample,
    SftDataError,
    TrajectorySpec,
    encode_example,
    is_held_out,
)

SPEC = TrajectorySpec(system_prompt=SYSTEM_PROMPT, tools=shopping_tools().schemas())


@dataclass
class World:
    root: Path
    sid_dir: Path
    catalog: Catalog
    sid_map: SidMap
    tasks: list[Task]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, make_sid_dir: Callable[[Path, Path], Path]) -> World:
    root = tmp_path_factory.mktemp("traj")
    generate_shopping_world(ShoppingWorldConfig(items=300, tasks=80, sessions=0, customers=1), root / "world")
    sid_dir = make_sid_dir(root / "world", root / "sid")
    catalog, _ = Catalog.load(root / "world" / "catalog.jsonl")
    return World(root / "world", sid_dir, catalog, SidMap.load(sid_dir / SIDS_FILE), load_tasks(root / "world"))


@pytest.fixture(scope="module")
def tiny(world: World, tmp_path_factory: pytest.TempPathFactory) -> tuple[PreTrainedTokenizerBase, SidTokenMap]:
    model, tok = load_base("tiny", dtype="fp32", corpus=world_corpus(world.root, SPEC),
                           cache_dir=tmp_path_factory.mktemp("cache"))
    return tok, make_sid_aware(model, tok, world.sid_dir)


def _first(world: World, kind: str) -> Task:
    return next(t for t in world.tasks if t.kind == kind)


def _one(world: World, task: Task, **kw: Any) -> ChatExample:
    [example] = trajectory_examples([task], world.catalog, world.sid_map, SPEC, **kw)
    return example


def _calls(example: ChatExample) -> list[tuple[str, dict[str, Any]]]:
    """Each trained assistant turn, as the model writes it, read back by the harness parser."""
    out = []
    for m in example.messages:
        if m["role"] == "assistant" and m.get("weight", 1):
            text = "".join(render_call(c["function"]["name"], json.loads(c["function"]["arguments"]))
                           for c in m["tool_calls"])
            parsed = parse_reply(text)
            assert not parsed.problems and not parsed.content
            out += [(c.name, c.arguments) for c in parsed.calls]
    return out


def _result(message: dict[str, Any]) -> dict[str, Any]:
    body = json.loads(message["content"])
    assert body["ok"] is True
    result: dict[str, Any] = body["result"]
    return result


# ------------------------------------------------------------------------------------------------ shapes
def test_spec_must_declare_the_tools_trajectories_call() -> None:
    with pytest.raises(SftDataError, match="respond"):
        check_spec(TrajectorySpec(system_prompt="hi",
                                  tools=shopping_tools().schemas(only=["sid_retrieve", "ask_user", "bundle"])))
    assert SPEC.corpus()[0] == SYSTEM_PROMPT and len(SPEC.corpus()) == 1 + len(SPEC.tools)


def test_single_turn_trajectory(world: World) -> None:
    task = _first(world, "attribute")
    assert task.target is not None
    ex = _one(world, task)
    assert ex.kind == "traj_attribute" and ex.source == task.task_id and ex.tools == SPEC.tools
    assert [m["role"] for m in ex.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert ex.messages[0]["content"] == SYSTEM_PROMPT and ex.messages[1]["content"] == task.messages[0].content
    [(retrieve, args), (respond, reply)] = _calls(ex)
    assert (retrieve, args) == ("sid_retrieve", {"price_max": task.constraints["price_max"]})
    shown = [c["item_id"] for c in _result(ex.messages[3])["items"]]
    assert respond == "respond" and reply["text"] and reply["item_ids"]
    assert set(reply["item_ids"]) <= set(shown) and set(reply["item_ids"]) <= set(task.target.slots[0])
    assert reply["item_ids"] == sorted(reply["item_ids"], key=task.target.slots[0].index)  # best first
    distractors = [world.catalog[i] for i in shown if i not in reply["item_ids"]]
    assert len(distractors) == 3 and len(shown) == len(set(shown))
    for item in distractors:  # what a filtered retrieval returns, but not what the shopper asked for
        assert item.in_stock and item.price is not None and item.price <= task.constraints["price_max"]
        assert not item_matches(item, task.constraints) and item.item_id not in task.target.item_ids
    assert _result(ex.messages[3])["items"] == [item_card(world.catalog[i]) for i in shown]


def test_multi_turn_trajectory_asks_first(world: World) -> None:
    task = _first(world, "multi_turn")
    ex = _one(world, task)
    assert [m["role"] for m in ex.messages] == ["system", "user", "assistant", "tool", "assistant", "user",
                                                "assistant", "tool", "assistant"]
    [ask, retrieve, respond] = _calls(ex)
    assert ask == ("ask_user", {"question": clarifying_question(task)})
    assert _result(ex.messages[3]) == {"sent": True}
    assert ex.messages[4] == {"role": "assistant", "content": clarifying_question(task), "weight": 0}
    assert ex.messages[5]["content"] == hidden_constraints_text(task.hidden)
    assert retrieve == ("sid_retrieve", {"price_max": task.hidden["price_max"]})
    assert respond[0] == "respond" and task.target is not None
    assert set(respond[1]["item_ids"]) <= set(task.target.slots[0])


def test_bundle_trajectory_one_item_per_slot(world: World) -> None:
    task = _first(world, "bundle")
    assert task.target is not None
    ex = _one(world, task)
    assert [m["role"] for m in ex.messages] == ["system", "user", "assistant", "tool", "assistant"]
    [(name, args), (respond, reply)] = _calls(ex)
    assert (name, args) == ("bundle", {"slots": task.constraints["slots"], "budget": task.constraints["budget"]})
    result = _result(ex.messages[3])
    [chosen] = reply["bundles"]
    assert respond == "respond" and chosen == [c["item_id"] for c in result["items"]]
    assert all(i in slot for i, slot in zip(chosen, task.target.slots, strict=True))
    assert result["total"] == round(sum(world.catalog[i].price or 0.0 for i in chosen), 2) <= task.constraints["budget"]
    assert [c["slot"] for c in result["items"]] == [" > ".join(s) for s in task.constraints["slots"]]


def test_every_call_is_valid_for_the_shopping_tools(world: World) -> None:
    examples = trajectory_examples(world.tasks, world.catalog, world.sid_map, SPEC, per_task=2)
    assert {e.kind for e in examples} == {TRAJ_PREFIX + k for k in ("explicit", "attribute", "vague", "bundle",
                                                                    "multi_turn")}
    tools = shopping_tools()
    for e in examples:
        for name, args in _calls(e):
            assert not isinstance(tools.validate(ToolCall(name=name, arguments=args)), ToolResult), (name, args)
        task = next(t for t in world.tasks if t.task_id == e.source)
        assert task.target is not None
        final = _calls(e)[-1][1]
        named = final.get("item_ids") or [i for b in final.get("bundles", []) for i in b]
        assert named and set(named) <= set(task.target.item_ids)


def test_trajectories_are_deterministic_given_the_seed(world: World) -> None:
    def build(seed: int) -> list[ChatExample]:
        return trajectory_examples(world.tasks, world.catalog, world.sid_map, SPEC, per_task=2, seed=seed)

    assert build(0) == build(0)
    assert build(0) != build(1)
    shown = [[c["item_id"] for c in _result(e.messages[3])["items"]] for e in build(0) if e.kind == "traj_vague"]
    assert any(a != b for a, b in zip(shown[::2], shown[1::2], strict=True))  # trajectories of a task differ


def test_breaks_constraints_is_the_negation_of_item_matches(world: World) -> None:
    for task in world.tasks:
        for item in list(world.catalog)[:60]:
            assert breaks_constraints(item, task.constraints) == (not item_matches(item, task.constraints))


# ------------------------------------------------------------------------------------------------ the loss mask
def test_mask_covers_only_the_assistant_calls(world: World, tiny: tuple[PreTrainedTokenizerBase, SidTokenMap]
                                              ) -> None:
    tok, _ = tiny
    ex = _one(world, _first(world, "multi_turn"))
    enc = encode_example(tok, ex, max_seq_len=4096)
    assert enc is not None
    trained = [i for i, lab in zip(enc.input_ids, enc.labels, strict=True) if lab != IGNORE]
    want = "".join(render_call(name, args) + "<|im_end|>" for name, args in _calls(ex))
    assert tok.decode(trained) == want  # no system, user, tool or weight-0 token
    with pytest.raises(SftDataError, match="raise max_seq_len"):
        encode_example(tok, ex, max_seq_len=256)


def test_weight_zero_only_unmasks_that_message(tiny: tuple[PreTrainedTokenizerBase, SidTokenMap]) -> None:
    tok, _ = tiny
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Which size?", "weight": 0},
                {"role": "user", "content": "42"}, {"role": "assistant", "content": "ok"}]
    enc = encode_example(tok, ChatExample(messages, "t", "t"), 512)
    assert enc is not None
    assert tok.decode([i for i, lab in zip(enc.input_ids, enc.labels, strict=True) if lab != IGNORE]) == "ok<|im_end|>"


def test_build_shopping_sft_adds_trajectories_behind_the_knob(world: World) -> None:
    off = build_shopping_sft(world.root, world.sid_dir, eval_fraction=0.25, align_items=5)
    on = build_shopping_sft(world.root, world.sid_dir, eval_fraction=0.25, align_items=5, trajectories_per_task=2,
                            spec=SPEC)
    assert not any(e.kind.startswith(TRAJ_PREFIX) for e in off.train + off.eval)
    assert [e for e in on.train if not e.kind.startswith(TRAJ_PREFIX)] == off.train
    held = {t.task_id for t in world.tasks if is_held_out(t.task_id, 0.25)}
    traj_train = [e for e in on.train if e.kind.startswith(TRAJ_PREFIX)]
    traj_eval = [e for e in on.eval if e.kind.startswith(TRAJ_PREFIX)]
    assert traj_train and not held & {e.source for e in traj_train}
    assert {e.source for e in traj_eval} == held and len(traj_eval) == len(held)  # one per held-out task
    sources = [e.source for e in on.eval]
    assert sources == sorted(sources, key=[t.task_id for t in on.eval_tasks].index)  # grouped by task
    with pytest.raises(SftDataError, match="spec"):
        build_shopping_sft(world.root, world.sid_dir, trajectories_per_task=1)


def test_theme_bundles_join_the_compact_protocols_training_examples_only(world: World) -> None:
    from apps.shopping.sft import app_spec

    base = build_shopping_sft(world.root, world.sid_dir, eval_fraction=0.25, align_items=0, trajectories_per_task=1,
                              spec=app_spec())
    more = build_shopping_sft(world.root, world.sid_dir, eval_fraction=0.25, align_items=0, trajectories_per_task=1,
                              spec=app_spec(), theme_bundles=7)
    themed = [e for e in more.train if e.kind == TRAJ_PREFIX + "theme_bundle"]
    assert len(themed) == 7 and [e for e in more.train if e not in themed] == base.train
    assert more.eval == base.eval and more.counts["traj_theme_bundle"] == 7
    assert all(e.messages[-1]["tool_calls"][0]["function"]["name"] == "find_bundle" for e in themed)
    # the tokenizer's corpus carries their requests and calls
    corpus = world_corpus(world.root, app_spec(), theme_bundles=7)
    assert len(corpus) > len(world_corpus(world.root, app_spec()))
    assert themed[0].messages[1]["content"] in corpus
    with pytest.raises(SftDataError, match="theme_bundles=3 needs the compact protocol"):  # schemas in the prompt
        build_shopping_sft(world.root, world.sid_dir, trajectories_per_task=1, spec=SPEC, theme_bundles=3)


# ---------------------------------------------------------------------------------------- serving renders the same
class ReplayEngine:
    """The Engine protocol replaying a trajectory: each tool-call turn as text; SID searches as the beams of
    the items the trajectory's result shows. Records every prompt."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, replies: Sequence[str | list[list[int]]]) -> None:
        self.replies, self.prompts, self._tok = list(replies), [], tokenizer

    tokenizer = property(lambda self: self._tok)
    weights_version = property(lambda self: 0)
    tokens_per_second = property(lambda self: None)
    asleep = property(lambda self: False)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            self.prompts.append(list(req.prompt))  # type: ignore[arg-type]  # the loop sends token ids
            reply = self.replies.pop(0)
            # a text reply comes back as the tokens that spell it, closed by eos: the loop feeds them back token
            # for token into the next prompt
            rows = [(r, "") for r in reply] if isinstance(reply, list) else [(self._ids(reply), reply)]
            out.append([Completion(request_id=req.request_id, index=k, token_ids=ids, text=text,
                                   logprobs=[0.0] * len(ids), finish_reason="eos", prompt_tokens=1, latency_ms=1.0,
                                   weights_version=0) for k, (ids, text) in enumerate(rows)])
        return out

    def _ids(self, text: str) -> list[int]:
        return [int(i) for i in self._tok(text + self._tok.eos_token, add_special_tokens=False)["input_ids"]]

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None: ...

    def sleep(self, level: int = 1) -> None: ...

    def wake(self) -> None: ...


def _strip(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages without call ids (random at serving) and weights (a training-only key)."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if k not in ("weight", "tool_call_id")}
        if "tool_calls" in m:
            m["tool_calls"] = [{**c, "id": None} for c in m["tool_calls"]]
        out.append(m)
    return out


@pytest.mark.parametrize("kind", ["explicit", "vague", "multi_turn"])
def test_the_agent_loop_renders_and_writes_the_same_conversation(
        world: World, tiny: tuple[PreTrainedTokenizerBase, SidTokenMap], kind: str) -> None:
    """Replaying a trajectory through the real AgentLoop + shopping tools gives the same messages, the same
    tool results, and prompts that are exactly the trajectory's prefixes."""
    tok, token_map = tiny
    task = _first(world, kind)
    ex = _one(world, task)
    vocab = tok.get_vocab()
    sid = sid_resources(world.catalog, world.sid_map, token_map, vocab[SID_START], vocab[SID_END])
    replies: list[str | list[list[int]]] = []
    for m in ex.messages:
        if m["role"] == "assistant" and m.get("weight", 1):
            [call] = m["tool_calls"]
            replies.append(render_call(call["function"]["name"], json.loads(call["function"]["arguments"])))
        if m["role"] == "tool" and m["name"] == "sid_retrieve":
            replies.append([[*token_map.ids_from_codes(world.sid_map.codes_of(c["item_id"])), vocab[SID_END]]
                            for c in _result(m)["items"]])
    engine = ReplayEngine(tok, replies)
    # the default max_prompt_tokens (2048) cuts the left of these prompts: the tools alone are ~1.8k tiny tokens
    # the tool protocol (system prompt + schemas in every prompt), which these trajectories teach
    tool_app = dataclasses.replace(shopping_app(world.catalog), system_prompt=SYSTEM_PROMPT, prompt_tools=True)
    loop = AgentLoop(tool_app, ModelAccess(engine=engine, tokenizer=tok, sid=sid),
                     config=LoopConfig(max_prompt_tokens=8192))
    session = SessionState(app="shopping")
    users = [m["content"] for m in ex.messages if m["role"] == "user"]
    for text in users:
        result = loop.run_turn(session, text, constraints=task.constraints)
        assert not result.degraded and not result.grounding_failures, result.trace
    # the loop ends a turn with the grounded result and the reply; the example ends at the final call
    assert _strip(session.messages[:len(ex.messages) - 1]) == _strip(ex.messages[1:])
    assert result.final.item_ids == _calls(ex)[-1][1]["item_ids"]
    generation_prompts = [p for p in engine.prompts if p[-1] != vocab[SID_START]]
    trained_at = [k for k, m in enumerate(ex.messages) if m["role"] == "assistant" and m.get("weight", 1)]
    for prompt, k in zip(generation_prompts, trained_at, strict=True):
        prefix = tok.apply_chat_template(ex.messages[:k], tools=SPEC.tools, add_generation_prompt=True, tokenize=False)
        assert prompt == tok(prefix, add_special_tokens=False)["input_ids"]


def test_respond_names_only_items_of_the_tool_result(world: World) -> None:
    """The final call names only items a tool result showed, all of them in the catalog."""
    for ex in trajectory_examples(world.tasks, world.catalog, world.sid_map, SPEC):
        shown = {c["item_id"] for m in ex.messages if m["role"] == "tool" for c in _result(m).get("items", [])}
        final = _calls(ex)[-1][1]
        named = final.get("item_ids") or [i for b in final.get("bundles", []) for i in b]
        assert named and set(named) <= shown and all(i in world.catalog for i in named)
