"""Constrained SID decoding: exhaustive beam search vs brute force, filters, start tokens, vLLM parity, fuzzing.

Run: .venv/bin/python -m pytest tests/sid/test_decoding.py -q
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from sid.codebook import SidError, sid_string, sid_token
from sid.decoding import SidLogitsProcessor, VllmSidLogitsProcessor, constrained_beam_search
from sid.tokens import SidTokenMap, add_sid_tokens, sid_vocabulary
from sid.trie import ItemFilter, SidTrie

MakeLlama = Callable[..., LlamaForCausalLM]
NAN = float("nan")
START, END = "<|sid_start|>", "<|sid_end|>"


@dataclass
class World:
    trie: SidTrie
    tmap: SidTokenMap
    tok: PreTrainedTokenizerFast
    model: LlamaForCausalLM
    codes: np.ndarray  # (N, D)
    ids: list[str]
    stock: np.ndarray  # (N,)
    cats: list[list[str]]


def make_world(tokenizer: PreTrainedTokenizerFast, llama: MakeLlama, codes: np.ndarray, stock: np.ndarray,
               cats: list[list[str]]) -> World:
    sizes = (codes.max(axis=0) + 1).tolist()
    ids = [f"item{i}" for i in range(len(codes))]
    trie = SidTrie(ids, codes, stock=stock, category=cats)
    model = llama(len(tokenizer), tie=False, seed=0)
    vocab = sid_vocabulary(sizes)
    add_sid_tokens(tokenizer, model, {t: "hiking boots" for t in vocab}, special_tokens=[START, END])
    torch.manual_seed(1)  # the labels make SID rows identical; jitter them so beams have something to rank
    with torch.no_grad():
        for w in (model.get_input_embeddings().weight, model.get_output_embeddings().weight):
            w[-len(vocab) - 2:] += 0.5 * torch.randn_like(w[-len(vocab) - 2:])
    return World(trie, SidTokenMap.from_tokenizer(tokenizer, vocab), tokenizer, model, codes, ids, stock, cats)


@pytest.fixture
def small(tokenizer: PreTrainedTokenizerFast, llama: MakeLlama) -> World:
    codes = np.array([[0, 1, 0], [0, 1, 1], [0, 2, 0], [1, 0, 0], [1, 0, 1], [2, 3, 0]])
    stock = np.array([3, 0, 5, NAN, 0, 1])
    cats = [["Outdoor"], ["Outdoor"], ["Outdoor"], ["Home"], ["Home"], ["Garden"]]
    return make_world(tokenizer, llama, codes, stock, cats)


@pytest.fixture
def large(tokenizer: PreTrainedTokenizerFast, llama: MakeLlama) -> World:
    rng = np.random.default_rng(0)
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in (6, 6, 4, 2)], indexing="ij"), -1).reshape(-1, 4)
    codes = grid[rng.choice(len(grid), 150, replace=False)]
    stock = rng.integers(0, 3, 150).astype(float)
    cats = [[["A", "B"][rng.integers(2)]] for _ in range(150)]
    return make_world(tokenizer, llama, codes, stock, cats)


def brute_scores(w: World, prompt: list[int], flt: ItemFilter | None) -> dict[str, float]:
    """log P(SID tokens | prompt) for every allowed item, from one batched forward pass."""
    items = [i for i in range(len(w.ids)) if w.trie.item_at(w.codes[i], flt) is not None]
    seqs = torch.tensor([prompt + w.tmap.ids_from_codes(w.codes[i]) for i in items])  # (n, P + D)
    with torch.no_grad():
        logp = w.model(seqs).logits.log_softmax(-1)  # (n, P + D, V)
    p, d = len(prompt), w.trie.depth
    tok = logp[:, p - 1:p - 1 + d].gather(-1, seqs[:, p:, None])[..., 0]  # (n, D)
    return {w.ids[i]: float(s) for i, s in zip(items, tok.sum(-1), strict=True)}


@pytest.mark.parametrize("flt", [None, ItemFilter(in_stock=True), ItemFilter(category_prefix=["Home"])])
def test_exhaustive_beam_search_equals_brute_force(small: World, flt: ItemFilter | None) -> None:
    """With more beams than nodes at any depth, beam search is exact: every allowed item, true log-probs."""
    prompt = small.tok("find me hiking boots", add_special_tokens=False)["input_ids"]
    hits = constrained_beam_search(small.model, small.tok, prompt, small.trie, small.tmap, num_beams=10, flt=flt)
    want = brute_scores(small, prompt, flt)
    assert {h.item_id for h in hits} == set(want)
    assert [h.item_id for h in hits] == sorted(want, key=lambda k: -want[k])
    torch.testing.assert_close(torch.tensor([h.score for h in hits]), torch.tensor([want[h.item_id] for h in hits]),
                               atol=1e-4, rtol=1e-4)
    for h in hits:
        assert h.sid == sid_string(h.codes) and small.trie.item_at(h.codes, flt) == h.item_id


@pytest.mark.parametrize(("num_beams", "num_return"), [(10, None), (20, 20), (20, 5)])
def test_beam_search_returns_valid_unique_sorted_hits(large: World, num_beams: int, num_return: int | None) -> None:
    flt = ItemFilter(in_stock=True, category_prefix=["B"])
    hits = constrained_beam_search(large.model, large.tok, "find me a cheap tent", large.trie, large.tmap,
                                   num_beams=num_beams, num_return=num_return, flt=flt)
    assert 0 < len(hits) <= (num_return or num_beams)
    assert len({h.item_id for h in hits}) == len(hits)
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    for h in hits:
        i = large.ids.index(h.item_id)
        assert large.stock[i] > 0 and large.cats[i] == ["B"] and tuple(large.codes[i]) == h.codes


def test_beam_search_with_a_filter_that_excludes_everything(small: World) -> None:
    flt = ItemFilter(category_prefix=["Nowhere"])
    assert constrained_beam_search(small.model, small.tok, "find me", small.trie, small.tmap, flt=flt) == []
    with pytest.raises(ValueError, match="num_return"):
        constrained_beam_search(small.model, small.tok, "find me", small.trie, small.tmap, num_beams=2, num_return=3)


def _kept(proc: SidLogitsProcessor, prompt: list[int], generated: list[int], vocab: int) -> set[int] | None:
    """Ids whose logit survives (None if nothing was masked)."""
    scores = torch.randn(1, vocab)
    out = proc(torch.tensor([prompt + generated]), scores.clone())
    kept = torch.isfinite(out[0])
    torch.testing.assert_close(out[0][kept], scores[0][kept])  # survivors are untouched
    return None if kept.all() else set(torch.nonzero(kept).flatten().tolist())


def test_processor_with_start_token_constrains_only_inside_the_span(small: World) -> None:
    v, tok = len(small.tok), small.tok.get_vocab()
    start, end, eos = tok[START], tok[END], small.tok.eos_token_id
    sid = {(lvl, c): tok[sid_token(lvl, c)] for lvl in (1, 2, 3) for c in range(4) if sid_token(lvl, c) in tok}
    prompt = small.tok("find me", add_special_tokens=False)["input_ids"]
    proc = SidLogitsProcessor(small.trie, small.tmap, prompt_length=len(prompt), start_token_id=start,
                              end_token_ids=[end, eos], flt=ItemFilter(in_stock=True))
    words = small.tok("hiking boots", add_special_tokens=False)["input_ids"]
    assert _kept(proc, prompt, [], v) is None
    assert _kept(proc, prompt, words, v) is None
    assert _kept(proc, prompt, [*words, start], v) == {sid[1, 0], sid[1, 1], sid[1, 2]}
    assert _kept(proc, prompt, [start, sid[1, 0]], v) == {sid[2, 1], sid[2, 2]}
    assert _kept(proc, prompt, [start, sid[1, 0], sid[2, 1]], v) == {sid[3, 0]}  # (0,1,1) is out of stock
    assert _kept(proc, prompt, [start, sid[1, 0], sid[2, 1], sid[3, 0]], v) == {end, eos}
    assert _kept(proc, prompt, [start, sid[1, 0], sid[2, 1], sid[3, 0], end], v) is None  # span closed
    assert _kept(proc, prompt, [start, sid[1, 0], sid[2, 1], sid[3, 0], end, *words, start], v) == {
        sid[1, 0], sid[1, 1], sid[1, 2]}
    assert _kept(proc, prompt, [start, sid[1, 1], sid[2, 3]], v) == {end, eos}  # impossible prefix: only end
    small.trie.remove("item0")  # the trie changed: the processor's per-prefix cache must not go stale
    assert _kept(proc, prompt, [start, sid[1, 0]], v) == {sid[2, 2]}

    plain = SidLogitsProcessor(small.trie, small.tmap, prompt_length=len(prompt), end_token_ids=[eos])
    assert _kept(plain, prompt, [], v) == {sid[1, 0], sid[1, 1], sid[1, 2]}
    assert _kept(plain, prompt, [sid[1, 2], sid[2, 3], sid[3, 0]], v) == {eos}
    assert _kept(plain, prompt, [sid[1, 2], sid[2, 3], sid[3, 0], eos], v) == {eos}


def test_processor_rejects_incompatible_setups(small: World, tokenizer: PreTrainedTokenizerFast) -> None:
    with pytest.raises(ValueError, match="end_token_ids"):
        SidLogitsProcessor(small.trie, small.tmap, prompt_length=0)
    narrow = SidTokenMap({t: i for i, t in enumerate(sid_vocabulary([3, 3, 2]))})  # level 2 needs 4 codes
    with pytest.raises(SidError, match="more tokens"):
        VllmSidLogitsProcessor(small.trie, narrow, end_token_ids=[0])


def _allowed_brute(w: World, flt: ItemFilter, prefix: tuple[int, ...]) -> set[int]:
    ok = [i for i in range(len(w.ids)) if w.ids[i] in w.trie and w.trie.item_at(w.codes[i], flt) is not None]
    return {int(w.codes[i, len(prefix)]) for i in ok if tuple(w.codes[i, :len(prefix)]) == prefix}


def test_processor_never_allows_an_invalid_continuation(large: World) -> None:
    """Fuzz: batches of rows walk the trie greedily under random logits; every step is checked by brute force."""
    rng = np.random.default_rng(0)
    eos, v, d = large.tok.eos_token_id, len(large.tok), large.trie.depth
    for trial in range(30):
        flt = [ItemFilter(), ItemFilter(in_stock=True), ItemFilter(category_prefix=["A"], in_stock=True)][trial % 3]
        prompt = rng.integers(4, 40, rng.integers(1, 6)).tolist()
        proc = SidLogitsProcessor(large.trie, large.tmap, prompt_length=len(prompt), flt=flt, end_token_ids=[eos])
        rows = [list(prompt) for _ in range(6)]  # (R, T) grows one column per step
        for step in range(d + 1):
            scores = torch.from_numpy(rng.normal(size=(len(rows), v)).astype(np.float32))  # (R, V)
            out = proc(torch.tensor(rows), scores.clone())
            for r, row in enumerate(rows):
                kept = set(torch.nonzero(torch.isfinite(out[r])).flatten().tolist())
                prefix = large.tmap.codes_from_ids(row[len(prompt):])
                want = ({eos} if step == d else
                        {large.tmap.ids_from_codes((*prefix, c))[-1] for c in _allowed_brute(large, flt, prefix)})
                assert kept == want, (trial, step, prefix)
                row.append(int(torch.multinomial(out[r].softmax(-1), 1)))
        for row in rows:
            codes = large.tmap.codes_from_ids(row[len(prompt):len(prompt) + d])
            assert large.trie.item_at(codes, flt) is not None and row[-1] == eos


def test_vllm_callable_masks_exactly_like_the_hf_processor(small: World) -> None:
    rng = np.random.default_rng(0)
    tok, v = small.tok.get_vocab(), len(small.tok)
    start, eos = tok[START], small.tok.eos_token_id
    ids = list(small.tmap.token_ids.values())
    for _ in range(200):
        prompt = rng.integers(4, 40, rng.integers(1, 5)).tolist()
        sid = small.tmap.ids_from_codes(small.codes[rng.integers(len(small.codes))])
        pool = [*rng.integers(4, 40, 3).tolist(), *[start] * 2, *ids, eos]
        output = [*rng.choice(pool, rng.integers(0, 3)).tolist(), start, *sid[: rng.integers(0, 4)]]
        output = output if rng.random() < 0.8 else rng.choice(pool, rng.integers(0, 6)).tolist()
        flt = ItemFilter(in_stock=bool(rng.random() < 0.5))
        hf = SidLogitsProcessor(small.trie, small.tmap, prompt_length=len(prompt), start_token_id=start,
                                end_token_ids=[eos], flt=flt)
        vl = VllmSidLogitsProcessor(small.trie, small.tmap, start_token_id=start, end_token_ids=[eos], flt=flt)
        logits = torch.randn(v)
        want = hf(torch.tensor([prompt + output]), logits[None].clone())[0]
        assert torch.equal(vl(prompt, output, logits.clone()), want)
