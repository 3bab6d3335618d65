"""The offline MiniLM encoder: loads from the wheel, normalised vectors, semantic order, cache.

    pytest -m integration tests/infra/test_text_encoder.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infra.text_encoder import DIM, TextEncoder, encode_cached, model_dir

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
