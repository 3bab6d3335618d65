"""SID tokens: vocabulary, adding them to a tiny tokenizer + Llama (tied and untied), round-trip, token map.

Run: .venv/bin/python -m pytest tests/sid/test_tokens.py -q
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerFast

from sid.codebook import SidError
from sid.tokens import SidTokenMap, add_sid_tokens, sid_vocabulary

MakeLlama = Callable[..., LlamaForCausalLM]
LABELS = {"<s1_0>": "hiking boots waterproof", "<s1_1>": "tent", "<s1_2>": "", "<s2_0>": "red blue",
          "<s2_1>": "qwerty zzz"}  # all unknown words -> like an empty label
SPECIAL = ["<|sid_start|>", "<|sid_end|>"]


def _ids(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_sid_vocabulary() -> None:
    assert sid_vocabulary([3, 2]) == ["<s1_0>", "<s1_1>", "<s1_2>", "<s2_0>", "<s2_1>"]
    assert len(sid_vocabulary([256, 256, 256, 8])) == 776


@pytest.mark.parametrize("tie", [True, False])
def test_add_tokens_inits_from_labels_and_round_trips(tokenizer: PreTrainedTokenizerFast, llama: MakeLlama,
                                                      tie: bool, tmp_path: Path) -> None:
    model = llama(len(tokenizer), tie=tie)
    n_old = len(tokenizer)
    old_in = model.get_input_embeddings().weight.detach().clone()  # (n_old, H)
    old_out = model.get_output_embeddings().weight.detach().clone()
    label_ids = {t: [i for i in _ids(tokenizer, lab) if i != tokenizer.unk_token_id] for t, lab in LABELS.items()}

    ids = add_sid_tokens(tokenizer, model, LABELS, special_tokens=SPECIAL)

    assert sorted(ids.values()) == list(range(n_old, n_old + 7))
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert emb.shape[0] == head.shape[0] == len(tokenizer) == n_old + 7
    assert (emb.data_ptr() == head.data_ptr()) == tie
    torch.testing.assert_close(emb[:n_old], old_in)  # old rows unchanged
    torch.testing.assert_close(head[:n_old], old_out)
    for tok, src in label_ids.items():
        want_in = old_in[src].mean(0) if src else old_in.mean(0)
        want_out = old_out[src].mean(0) if src else old_out.mean(0)
        torch.testing.assert_close(emb[ids[tok]], want_in)
        torch.testing.assert_close(head[ids[tok]], want_out)
    for tok in SPECIAL:
        torch.testing.assert_close(emb[ids[tok]], old_in.mean(0))
    assert len(label_ids["<s1_0>"]) == 3 and label_ids["<s2_1>"] == []

    # each SID token is one id, glued to text, to each other and to special tokens
    text = "find boots<|sid_start|><s1_0><s2_1><|sid_end|> tent<s1_2>"
    assert _ids(tokenizer, text)[2:] == [ids[t] for t in ["<|sid_start|>", "<s1_0>", "<s2_1>", "<|sid_end|>"]] + [
        tokenizer.get_vocab()["tent"], ids["<s1_2>"]]
    assert tokenizer.decode([ids["<|sid_start|>"], ids["<s1_0>"]], skip_special_tokens=True).strip() == "<s1_0>"

    tokenizer.save_pretrained(tmp_path)
    model.save_pretrained(tmp_path)
    tok2 = AutoTokenizer.from_pretrained(tmp_path)
    model2 = LlamaForCausalLM.from_pretrained(tmp_path)
    assert {t: tok2.get_vocab()[t] for t in ids} == ids
    assert _ids(tok2, text) == _ids(tokenizer, text)
    torch.testing.assert_close(model2.get_input_embeddings().weight, emb)
    torch.testing.assert_close(model2.get_output_embeddings().weight, head)
    w2, h2 = model2.get_input_embeddings().weight, model2.get_output_embeddings().weight
    assert (w2.data_ptr() == h2.data_ptr()) == tie


def test_adding_again_is_a_no_op(tokenizer: PreTrainedTokenizerFast, llama: MakeLlama) -> None:
    model = llama(len(tokenizer), tie=False)
    first = add_sid_tokens(tokenizer, model, LABELS, special_tokens=SPECIAL)
    before = model.get_input_embeddings().weight.detach().clone()
    assert add_sid_tokens(tokenizer, model, LABELS, special_tokens=SPECIAL) == first
    torch.testing.assert_close(model.get_input_embeddings().weight, before)
    with pytest.raises(ValueError, match="both"):
        add_sid_tokens(tokenizer, model, {"<s1_0>": ""}, special_tokens=["<s1_0>"])


def test_padding_rows_are_used_without_resize(tokenizer: PreTrainedTokenizerFast, llama: MakeLlama) -> None:
    """Models often carry more embedding rows than tokens; new tokens take those rows, the mean skips them."""
    n_old = len(tokenizer)
    model = llama(n_old + 8, tie=True)
    old = model.get_input_embeddings().weight.detach().clone()  # (n_old + 8, H)
    ids = add_sid_tokens(tokenizer, model, {"<s1_0>": "", "<s1_1>": "tent"})
    assert model.get_input_embeddings().weight.shape[0] == n_old + 8
    torch.testing.assert_close(model.get_input_embeddings().weight[ids["<s1_0>"]], old[:n_old].mean(0))
    torch.testing.assert_close(model.get_input_embeddings().weight[ids["<s1_1>"]], old[_ids(tokenizer, "tent")[0]])


def test_token_map_both_ways_and_save_load(tokenizer: PreTrainedTokenizerFast, llama: MakeLlama,
                                           tmp_path: Path) -> None:
    model = llama(len(tokenizer), tie=True)
    vocab = sid_vocabulary([3, 2])
    ids = add_sid_tokens(tokenizer, model, dict.fromkeys(vocab, ""))
    tmap = SidTokenMap.from_tokenizer(tokenizer, vocab)
    assert tmap.depth == 2 and tmap.sizes == [3, 2]
    assert tmap.level_code(ids["<s2_1>"]) == (2, 1) and tmap.level_code(0) is None
    assert tmap.ids_from_codes((2, 1)) == [ids["<s1_2>"], ids["<s2_1>"]]
    assert tmap.codes_from_ids(tmap.ids_from_codes((2, 1))) == (2, 1)
    assert tmap.codes_from_ids([ids["<s1_1>"]]) == (1,)
    assert tmap.ids_for_level(1, np.array([2, 0])).tolist() == [ids["<s1_2>"], ids["<s1_0>"]]
    with pytest.raises(SidError):
        tmap.codes_from_ids([ids["<s2_1>"]])  # level 2 first
    with pytest.raises(SidError):
        tmap.codes_from_ids([ids["<s1_1>"], 0])
    with pytest.raises(SidError):
        tmap.ids_from_codes((5, 0))
    tmap.save(tmp_path)
    loaded = SidTokenMap.load(tmp_path)
    assert loaded.token_ids == tmap.token_ids and loaded.sizes == tmap.sizes
    with pytest.raises(SidError, match="not in the tokenizer"):
        SidTokenMap.from_tokenizer(tokenizer, sid_vocabulary([4]))
