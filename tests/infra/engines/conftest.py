"""Tiny in-process tokenizer (with a chat template) and 2-layer Llama for the engine tests (no hub, no network)."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from infra.engines.hf import HFEngine

SPECIALS = ["<unk>", "<pad>", "<s>", "</s>"]
WORDS = ["user", "assistant", "system", "hiking", "boots", "waterproof", "trail", "running", "shoes", "camp",
         "stove", "tent", "sleeping", "bag", "rain", "jacket", "wool", "socks", "red", "blue", "green", "black",
         "small", "large", "light", "heavy", "kitchen", "knife", "pan", "pot", "mug", "lamp", "desk", "chair",
         "garden", "hose", "find", "me", "a", "cheap", "pair", "of", "for", "the", "under", "euro"]
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}assistant{% endif %}")
EOS = 3


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level fast tokenizer over ~50 words with unk/pad/bos/eos and a one-line chat template."""
    vocab = {w: i for i, w in enumerate(dict.fromkeys([*SPECIALS, *WORDS]))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                  eos_token="</s>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def make_llama(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer, 32-wide Llama with random (seeded) weights; eos = 3."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False,
                         bos_token_id=2, eos_token_id=EOS, pad_token_id=1)
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def tokenizer() -> PreTrainedTokenizerFast:
    return make_tokenizer()


@pytest.fixture
def model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    return make_llama(len(tokenizer))


@pytest.fixture
def engine(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> HFEngine:
    """An fp32 engine, so outputs can be compared exactly with a plain forward pass."""
    return HFEngine(model, tokenizer, dtype="fp32")
