"""The offline MiniLM encoder: loads from the wheel, normalised vectors, semantic order, cache.

    pytest -m integration tests/infra/test_text_encoder.py
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from infra.text_encoder import DIM, GatheringEncoder, TextEncoder, encode_cached, model_dir

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def encoder() -> TextEncoder:
    return TextEncoder(batch_size=4)


def test_model_ships_in_the_wheel() -> None:
    assert (model_dir() / "model.safetensors").is_file()


def test_embeddings_are_normalised_and_semantic(encoder: TextEncoder) -> None:
    texts = ["waterproof hiking boots", "trail boots that keep feet dry", "dark chocolate bar", ""]
    v = encoder.encode(texts)
    assert v.shape == (4, DIM) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v[:3], axis=1), 1.0, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3
    # Order of inputs does not change any row (batches are length-sorted internally).
    w = encoder.encode(texts[::-1])[::-1]
    np.testing.assert_allclose(v, w, atol=2e-2)


def test_fp32_and_auto_agree(encoder: TextEncoder) -> None:
    fp32 = TextEncoder(precision="fp32").encode(["red wool socks", "usb-c fast charger"])
    auto = encoder.encode(["red wool socks", "usb-c fast charger"])
    assert float((fp32 * auto).sum(1).min()) > 0.999


def test_cache_hit_skips_the_model(tmp_path: Path, encoder: TextEncoder) -> None:
    first = encode_cached(["a tent", "a stove"], tmp_path, encoder)
    files = list((tmp_path / "embeddings").glob("*.npy"))
    assert len(files) == 1

    class Boom(TextEncoder):
        def __init__(self) -> None:
            self.name = encoder.name

        def encode(self, texts: object, progress: object = None) -> np.ndarray:
            raise AssertionError("cache miss")

    np.testing.assert_array_equal(encode_cached(["a tent", "a stove"], tmp_path, Boom()), first)
    assert encode_cached(["a tent", "a lamp"], tmp_path, encoder).shape == (2, DIM)
    assert len(list((tmp_path / "embeddings").glob("*.npy"))) == 2


class _Recorder:
    """An encoder whose row for a text is (len(text), number of calls so far); its first call waits for ``go``."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.go, self.started = threading.Event(), threading.Event()

    def encode(self, texts: list[str]) -> np.ndarray:
        self.started.set()
        if not self.calls:
            self.go.wait(5)
        self.calls.append(list(texts))
        if "bad" in texts:
            raise ValueError("bad text")
        return np.array([[len(t), len(self.calls)] for t in texts], dtype=np.float32)


def _queued(enc: GatheringEncoder, n: int) -> None:
    deadline = time.monotonic() + 5
    while len(enc._pending) < n and time.monotonic() < deadline:
        time.sleep(0.001)


def test_concurrent_queries_are_gathered_into_one_batch() -> None:
    rec = _Recorder()
    enc = GatheringEncoder(rec)
    out: dict[str, np.ndarray] = {}
    first = threading.Thread(target=lambda: out.update(a=enc.encode(["a"])))
    first.start()  # the leader: its own text in the first call, which waits
    assert rec.started.wait(5)
    others = [threading.Thread(target=lambda: out.update(b=enc.encode(["bb", "a"]))),
              threading.Thread(target=lambda: out.update(c=enc.encode(["ccc"])))]
    for t in others:
        t.start()
    _queued(enc, 2)  # both wait behind the running call
    rec.go.set()
    for t in [first, *others]:
        t.join(5)
    # two encoder calls: the leader's, then everything that queued meanwhile, each text once
    assert rec.calls == [["a"], ["bb", "a", "ccc"]] and enc.batches == 2
    assert out["a"].tolist() == [[1, 1]]
    assert out["b"].tolist() == [[2, 2], [1, 2]] and out["c"].tolist() == [[3, 2]]
    assert enc.encode([]).shape == (0, DIM) and not enc._busy


def test_a_failing_batch_fails_only_its_callers() -> None:
    rec = _Recorder()
    rec.go.set()
    enc = GatheringEncoder(rec)
    with pytest.raises(ValueError, match="bad text"):
        enc.encode(["bad"])
    assert enc.encode(["ok"]).tolist() == [[2, 2]] and not enc._busy
