"""SFT data: alignment and intent examples, the held-out split, assistant-only labels and leak-free packing.

Run: .venv/bin/python -m pytest tests/training/test_sft_data.py -q
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from apps.shopping.sft import (
    ALIGN_KINDS,
    alignment_examples,
    build_shopping_sft,
    intent_examples,
    intent_prompt,
    load_tasks,
    prefix_examples,
    world_corpus,
)
from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
from harness.agent_dir import SID_END, SID_START
from harness.catalog import Catalog
from harness.tasks import Task
from sid.build import SIDS_FILE
from sid.codebook import SidMap
from training.models import load_base, make_sid_aware
from training.sft_data import IGNORE, ChatExample, collate, encode_example, is_held_out, pack_examples, sid_span


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, make_sid_dir: Callable[[Path, Path], Path]) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sft_data")
    generate_shopping_world(ShoppingWorldConfig(items=300, tasks=80, sessions=0, customers=1), root / "world")
    return root / "world", make_sid_dir(root / "world", root / "sid")


@pytest.fixture(scope="module")
def tiny(world: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    model, tok = load_base("tiny", dtype="fp32", corpus=world_corpus(world[0]),
                           cache_dir=tmp_path_factory.mktemp("cache"))
    make_sid_aware(model, tok, world[1])
    return model, tok  # type: ignore[return-value]


def test_held_out_split_is_a_stable_hash_of_the_task_id() -> None:
    ids = [f"shop-t{i:06d}" for i in range(4000)]
    held = [i for i in ids if is_held_out(i, 0.1)]
    assert 0.08 < len(held) / len(ids) < 0.12
    assert held == [i for i in reversed(ids) if is_held_out(i, 0.1)][::-1]  # order does not matter
    assert set(held) <= {i for i in ids if is_held_out(i, 0.2)}  # a larger fraction only adds tasks
    assert not any(is_held_out(i, 0.0) for i in ids)


def test_alignment_examples_map_titles_sids_and_categories(world: tuple[Path, Path]) -> None:
    items = list(Catalog.load(world[0] / "catalog.jsonl")[0])
    sid_map = SidMap.load(world[1] / SIDS_FILE)
    examples = alignment_examples(items, sid_map, max_items=20)
    kinds = Counter(e.kind for e in examples)
    assert set(kinds) == set(ALIGN_KINDS)
    assert kinds["align_title_sid"] == kinds["align_sid_title"] == kinds["align_sid_category"] == 20
    by_item = {i.item_id: i for i in items}
    for e in examples:
        user, answer = e.messages[0]["content"], e.messages[1]["content"]
        if e.kind == "align_title_sid":
            assert by_item[e.source].title in user and answer == sid_span(sid_map.sid_of(e.source))
        elif e.kind == "align_sid_title":
            assert sid_span(sid_map.sid_of(e.source)) in user and answer == by_item[e.source].title
        elif e.kind == "align_sid_category":
            assert answer == " > ".join(by_item[e.source].category_path)
    assert alignment_examples(items, sid_map, max_items=20) == examples  # deterministic


def test_prefix_examples_answer_the_majority_prefix(world: tuple[Path, Path]) -> None:
    items = list(Catalog.load(world[0] / "catalog.jsonl")[0])
    sid_map = SidMap.load(world[1] / SIDS_FILE)
    examples = {e.source: e for e in prefix_examples(items, sid_map)}
    item = items[0]
    path = " > ".join(item.category_path)
    same_leaf = [i for i in items if i.category_path == item.category_path]
    level1 = Counter(sid_map.codes_of(i.item_id)[0] for i in same_leaf).most_common(1)[0][0]
    assert examples[f"category|{path}"].messages[1]["content"] == f"{SID_START}<s1_{level1}>{SID_END}"
    brand = examples[f"brand|{path}|{item.attributes['brand']}"]
    assert len(re.findall(r"<s\d+_\d+>", brand.messages[1]["content"])) == 2  # a 2-level prefix
    assert str(item.attributes["brand"]) in brand.messages[0]["content"]


def _task(kind: str, slots: list[list[str]], **extra: object) -> Task:
    target = {"kind": "bundle" if len(slots) > 1 else ("single" if len(slots[0]) == 1 else "set"), "slots": slots}
    return Task.model_validate({"task_id": f"t-{kind}", "app": "shopping", "kind": kind, "target": target,
                                "messages": [{"role": "user", "content": "hello"}], **extra})


def test_intent_examples_per_target_kind(world: tuple[Path, Path]) -> None:
    sid_map = SidMap.load(world[1] / SIDS_FILE)
    ids = sid_map.item_ids
    sets = intent_examples([_task("vague", [ids[:5]])], sid_map, targets_per_task=3)
    assert [e.messages[-1]["content"] for e in sets] == [sid_span(sid_map.sid_of(i)) for i in ids[:3]]
    assert {e.kind for e in sets} == {"vague"} and all(e.source == "t-vague" for e in sets)
    [bundle] = intent_examples([_task("bundle", [ids[:1], ids[5:7]])], sid_map, targets_per_task=1)
    assert bundle.messages[-1]["content"].split("\n") == [sid_span(sid_map.sid_of(ids[0])),
                                                           sid_span(sid_map.sid_of(ids[5]))]
    multi = _task("multi_turn", [ids[:1]], hidden={"attributes": {"colour": "red", "brand": "Acme"}, "price_max": 45},
                  meta={"clarify": ["colour", "brand", "price_max"]})
    [ex] = intent_examples([multi], sid_map)
    assert [m["role"] for m in ex.messages] == ["user", "assistant", "user", "assistant"]
    assert "colour and brand" in ex.messages[1]["content"] and "budget" in ex.messages[1]["content"]
    assert ex.messages[2]["content"] == "I'd like it in red, from Acme, under $45."
    assert intent_prompt(multi) == ex.messages[:3]
    assert intent_examples([_task("explicit", [["sku-not-in-catalog"]])], sid_map) == []


def test_build_shopping_sft_holds_out_whole_tasks(world: tuple[Path, Path]) -> None:
    data = build_shopping_sft(world[0], world[1], eval_fraction=0.25, align_items=10)
    tasks = load_tasks(world[0])
    held = {t.task_id for t in tasks if is_held_out(t.task_id, 0.25)}
    assert {t.task_id for t in data.eval_tasks} == held and held
    assert {e.source for e in data.eval} == held
    assert not held & {e.source for e in data.train}
    assert data.counts["align_title_sid"] == 10 and data.counts["eval"] == len(data.eval)


def test_encode_labels_only_assistant_tokens(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerBase],
                                             world: tuple[Path, Path]) -> None:
    _, tok = tiny
    sid = SidMap.load(world[1] / SIDS_FILE).sid_of("sku-0000000")
    example = ChatExample([{"role": "user", "content": "red boots please"},
                           {"role": "assistant", "content": "Which size?"},
                           {"role": "user", "content": "42"},
                           {"role": "assistant", "content": sid_span(sid)}], "multi_turn", "t")
    enc = encode_example(tok, example, max_seq_len=512)
    assert enc is not None and len(enc.input_ids) == len(enc.labels)
    trained = [i for i, lab in zip(enc.input_ids, enc.labels, strict=True) if lab != IGNORE]
    assert all(lab in (IGNORE, i) for i, lab in zip(enc.input_ids, enc.labels, strict=True))
    assert tok.decode(trained) == f"Which size?<|im_end|>{SID_START}{sid}{SID_END}<|im_end|>"
    prompt = tok.apply_chat_template(example.messages[:1], tokenize=False, add_generation_prompt=True)
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert enc.labels[:n_prompt] == [IGNORE] * n_prompt  # the user turn and the assistant header
    assert encode_example(tok, example, max_seq_len=n_prompt) is None  # truncated: nothing left to learn


def test_packing_keeps_examples_apart(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerBase],
                                      world: tuple[Path, Path]) -> None:
    model, tok = tiny
    data = build_shopping_sft(world[0], world[1], align_items=5)
    encoded = [e for e in (encode_example(tok, x, 128) for x in data.train[:12]) if e is not None]
    rows = pack_examples(encoded, max_seq_len=128)
    assert len(rows) < len(encoded) and all(len(r.input_ids) <= 128 for r in rows)
    assert sum(r.n_targets for r in rows) == sum(sum(lab != IGNORE for lab in e.labels[1:]) for e in encoded)
    batch = collate(rows[:2], pad_id=int(tok.pad_token_id))
    with torch.no_grad():
        packed = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False).logits
        starts = [i for i, p in enumerate(rows[0].position_ids) if p == 0]
        assert len(starts) >= 2, "the first row should pack several examples"
        alone_rows = pack_examples(encoded[:len(starts)], 128, packing=False)
        for start, row in zip(starts, alone_rows, strict=True):
            n = len(row.input_ids)
            alone = model(input_ids=torch.tensor([row.input_ids])).logits[0]  # (n, V)
            torch.testing.assert_close(packed[0, start:start + n], alone, atol=1e-4, rtol=1e-4)
            assert rows[0].targets[start + n - 1] == IGNORE  # never predict the next example's first token
            assert rows[0].targets[start:start + n] == row.targets
