"""HFEngine's in-place KV cache (`_BufferedLayer`): the same tokens and log-probs as transformers' DynamicCache, with
and without a shared prefix, greedy and sampled; one buffer per layer for the whole call; the layer's own operations.

Run: .venv/bin/python -m pytest tests/infra/engines/test_hf_kv.py -q
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
import torch
from transformers import DynamicCache, LlamaForCausalLM, PreTrainedTokenizerFast

from infra.engines import hf
from infra.engines.base import Completion, GenerationRequest, SamplingParams
from infra.engines.hf import KV, HFEngine, _BufferedLayer


def random_ids(n: int, seed: int, vocab: int = 50) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(4, vocab) for _ in range(n)]  # 0-3 are unk/pad/bos/eos


SHARED = [random_ids(300, 0) + random_ids(k, 100 + k) for k in (3, 17, 9)]  # a 300-token prefix: the prefix path
APART = [random_ids(n, 200 + n) for n in (5, 12, 8)]  # nothing shared: the left-padded path


def dynamic_cache(layers: int, capacity: int, kv: KV | None, rows: int) -> DynamicCache | None:
    """What the engine used before: a DynamicCache holding the prefix, or None (generate builds a DynamicCache)."""
    if kv is None:
        return None
    return DynamicCache(ddp_cache_data=[(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in kv])


def generate(engine: HFEngine, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[Completion]]:
    seeded = [params if params.greedy else params.model_copy(update={"seed": i}) for i in range(len(prompts))]
    return engine.generate([GenerationRequest(prompt=p, params=s) for p, s in zip(prompts, seeded, strict=True)])


@pytest.mark.parametrize("prompts", [SHARED, APART], ids=["shared-prefix", "no-prefix"])
@pytest.mark.parametrize("params", [SamplingParams(temperature=0, max_new_tokens=8),
                                    SamplingParams(temperature=1.0, n=2, max_new_tokens=8),
                                    SamplingParams(temperature=0.8, top_k=8, repetition_penalty=1.2, max_new_tokens=8)],
                         ids=["greedy", "sampled-n2", "sampled-penalty"])
def test_buffered_cache_gives_the_dynamic_cache_results(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast,
                                                        monkeypatch: pytest.MonkeyPatch, prompts: list[list[int]],
                                                        params: SamplingParams) -> None:
    built: list[DynamicCache] = []
    real = hf._buffered_cache

    def recording(layers: int, capacity: int, kv: KV | None, rows: int) -> DynamicCache:
        built.append(real(layers, capacity, kv, rows))
        return built[-1]

    monkeypatch.setattr(hf, "_buffered_cache", recording)
    new = generate(HFEngine(model, tokenizer, dtype="fp32"), prompts, params)
    [cache] = built
    assert all(type(layer) is _BufferedLayer for layer in cache.layers) and len(cache.layers) == 2
    width = max(len(p) for p in prompts)
    rows = len(prompts) * params.n
    for layer in cache.layers:
        assert isinstance(layer, _BufferedLayer) and layer.keys is not None and layer._key_buf is not None
        assert tuple(layer._key_buf.shape) == (rows, 4, width + 8, 8), "one buffer for the whole call, never grown"
        assert layer.length == width + 8 - 1  # the last token is chosen, not fed back
        assert layer.keys.data_ptr() == layer._key_buf.data_ptr()

    monkeypatch.setattr(hf, "_buffered_cache", dynamic_cache)
    old = generate(HFEngine(model, tokenizer, dtype="fp32"), prompts, params)
    for n_list, o_list in zip(new, old, strict=True):
        for n, o in zip(n_list, o_list, strict=True):
            assert n.token_ids == o.token_ids and n.finish_reason == o.finish_reason
            torch.testing.assert_close(torch.tensor(n.logprobs), torch.tensor(o.logprobs), atol=1e-5, rtol=1e-5)


def test_beam_search_keeps_transformers_cache(engine: HFEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    real = engine._model.generate

    def spy(**kwargs: object) -> object:
        seen.append(kwargs["cache"])
        return real(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine._model, "generate", spy)
    engine.generate([GenerationRequest(prompt=APART[0], params=SamplingParams(temperature=0, num_beams=2,
                                                                              max_new_tokens=3))])
    assert seen == [None]


def kv(batch: int, t: int, start: float) -> torch.Tensor:
    """(batch, 1 head, t, 2) holding start, start + 1, ... so every slot can be checked by eye."""
    return torch.arange(start, start + batch * t * 2).reshape(batch, 1, t, 2)


def test_layer_appends_in_place_and_doubles_when_full() -> None:
    layer = _BufferedLayer(capacity=3)
    a, b, c = kv(2, 2, 0), kv(2, 1, 100), kv(2, 2, 200)
    keys, values = layer.update(a, -a)
    buf = layer._key_buf
    assert buf is not None and buf.shape[-2] == 3 and keys.data_ptr() == buf.data_ptr()
    keys, values = layer.update(b, -b)
    assert layer._key_buf is buf, "no reallocation while there is room"
    torch.testing.assert_close(keys, torch.cat([a, b], dim=-2))
    keys, values = layer.update(c, -c)  # 5 tokens > 3: the buffers double to 6
    assert layer._key_buf is not None and layer._key_buf.shape[-2] == 6 and layer.get_seq_length() == 5
    torch.testing.assert_close(keys, torch.cat([a, b, c], dim=-2))
    torch.testing.assert_close(values, -torch.cat([a, b, c], dim=-2))


def test_layer_crop_select_and_reorder_stay_consistent() -> None:
    layer = _BufferedLayer(capacity=8)
    a = kv(2, 3, 0)
    layer.update(a, a)
    layer.crop(-1)
    assert layer.get_seq_length() == 2
    keys, _ = layer.update(kv(2, 1, 50), kv(2, 1, 50))  # written where the cropped token was
    torch.testing.assert_close(keys, torch.cat([a[:, :, :2], kv(2, 1, 50)], dim=-2))
    layer.reorder_cache(torch.tensor([1, 0]))  # type: ignore[arg-type]
    keys, _ = layer.update(kv(2, 1, 70), kv(2, 1, 70))
    want = torch.cat([a[:, :, :2], kv(2, 1, 50)], dim=-2)[[1, 0]]
    torch.testing.assert_close(keys, torch.cat([want, kv(2, 1, 70)], dim=-2))
    assert layer._key_buf is not None and keys.data_ptr() == layer._key_buf.data_ptr()
    layer.batch_select_indices(torch.tensor([1]))
    assert layer.keys is not None and layer.keys.shape == (1, 1, 4, 2) and layer.get_seq_length() == 4
    layer.reset()
    assert layer.get_seq_length() == 0 and layer._key_buf is None
