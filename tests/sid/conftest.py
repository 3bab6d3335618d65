"""Tiny in-process tokenizer and Llama for the sid tests (no hub, no network)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<unk>", "<pad>", "<s>", "</s>"]
WORDS = ["hiking", "boots", "waterproof", "trail", "running", "shoes", "camp", "stove", "tent", "sleeping", "bag",
         "rain", "jacket", "wool", "socks", "red", "blue", "green", "black", "small", "large", "light", "heavy",
         "kitchen", "knife", "pan", "pot", "mug", "lamp", "desk", "chair", "garden", "hose", "find", "me", "a",
         "cheap", "pair", "of", "for", "the", "under", "euro"]


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level fast tokenizer over ~50 words, with unk/pad/bos/eos."""
    vocab = {w: i for i, w in enumerate(dict.fromkeys([*SPECIALS, *WORDS]))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")


def make_llama(vocab_size: int, *, tie: bool, seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer, 32-wide Llama with random (seeded) weights."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=tie,
                         bos_token_id=2, eos_token_id=3, pad_token_id=1)
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def tokenizer() -> PreTrainedTokenizerFast:
    return make_tokenizer()


@pytest.fixture
def llama() -> Callable[..., LlamaForCausalLM]:
    """The :func:`make_llama` factory, as a fixture (test modules cannot import conftest)."""
    return make_llama
