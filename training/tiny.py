"""The ``tiny`` base model: a 2–4 layer Llama with a small sentencepiece vocabulary trained on the world's text.

Used by fast tests and the quick demo. With SmolLM2's 49k vocabulary a model this small would spend
most of its time in the embedding and the LM head; a ~2k BPE vocabulary trained in well under a
second on the catalog titles and task messages keeps it cheap.

The tokenizer is a sentencepiece BPE model (byte fallback, so any text — emoji, typos, other
scripts — encodes without ``<unk>``; identity normalisation and no dummy prefix, so
``decode(encode(text)) == text``), wrapped as a HF fast tokenizer through transformers' own
sentencepiece converter. Its special tokens mirror SmolLM2-Instruct: ``<|im_start|>`` is bos,
``<|im_end|>`` is eos (a generation ends there), plus ``<pad>`` and ``<unk>``; the tool-call markers
of :mod:`training.chat_template` are single pieces. Nothing adds bos/eos automatically: the chat
template writes them.
"""

from __future__ import annotations

import io
import string
from collections.abc import Iterator, Sequence

import sentencepiece as spm
import torch
from sentencepiece import sentencepiece_model_pb2
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import SpmConverter

from training.chat_template import IM_END, IM_START, TOOL_MARKERS, chat_template

UNK, PAD = "<unk>", "<pad>"
UNK_ID, PAD_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
TINY_BUILDER = "sidekick.tiny/1"
"""Version of what :func:`build_tiny` makes; part of the tiny-model cache key (bump on any change)."""
MIN_VOCAB = 384
"""256 byte pieces + specials + the printable ASCII characters need about this many."""

# Always in the vocabulary as pieces (not bytes), whatever the corpus: what tool calls and JSON are made of.
_REQUIRED_CHARS = string.ascii_letters + string.digits + string.punctuation
_PROTOCOL_TEXT = (
    '{"name": "search", "arguments": {"query": "red boots", "price_max": 50, "in_stock": true}}',
    '{"type": "function", "function": {"name": "get_item", "parameters": {"type": "object", "properties": {}}}}',
    '{"items": [{"item_id": "sku-0000001", "title": "Trail boots", "price": 79.99}], "error": null}',
)


class TinyTokenizerError(ValueError):
    """The corpus or the vocabulary size cannot make a tiny tokenizer."""


def _sentences(corpus: Sequence[str]) -> Iterator[str]:
    """Non-empty lines of every text, then the protocol snippets (sentencepiece trains on lines)."""
    for text in corpus:
        for line in text.splitlines():
            if line.strip():
                yield line
    yield from _PROTOCOL_TEXT


def train_sentencepiece(corpus: Sequence[str], vocab_size: int = 2048) -> bytes:
    """A serialised sentencepiece BPE model trained in-process on ``corpus`` (deterministic: one
    thread, input order kept). ``vocab_size`` is an upper bound: a small corpus yields fewer pieces."""
    if vocab_size < MIN_VOCAB:
        raise TinyTokenizerError(f"vocab_size {vocab_size} is too small: byte fallback alone needs 256 pieces; "
                                 f"use at least {MIN_VOCAB}")
    if not any(t.strip() for t in corpus):
        raise TinyTokenizerError("the corpus is empty: pass texts (e.g. catalog titles and task messages)")
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=_sentences(corpus), model_writer=out, vocab_size=vocab_size, model_type="bpe",
        byte_fallback=True, character_coverage=0.9995, required_chars=_REQUIRED_CHARS,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=False,
        split_digits=True, allow_whitespace_only_pieces=True, hard_vocab_limit=False,
        unk_id=UNK_ID, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        unk_piece=UNK, pad_piece=PAD, bos_piece=IM_START, eos_piece=IM_END,
        user_defined_symbols=list(TOOL_MARKERS),
        num_threads=1, shuffle_input_sentence=False, input_sentence_size=0, minloglevel=2,
    )
    return out.getvalue()


def tokenizer_from_sentencepiece(model_proto: bytes) -> PreTrainedTokenizerFast:
    """Wrap a sentencepiece BPE model as a HF fast tokenizer with the Sidekick chat template."""
    proto = sentencepiece_model_pb2.ModelProto()  # type: ignore[attr-defined]  # generated at import
    proto.ParseFromString(model_proto)
    vocab = {piece.piece: i for i, piece in enumerate(proto.pieces)}
    backend = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab, legacy=False)
    if backend is None:
        raise TinyTokenizerError("transformers could not convert the sentencepiece model")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=UNK, pad_token=PAD, bos_token=IM_START,
                                        eos_token=IM_END, clean_up_tokenization_spaces=False)
    tokenizer.chat_template = chat_template(default_system=None)
    got = [tokenizer.unk_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id]
    assert got == [UNK_ID, PAD_ID, BOS_ID, EOS_ID], f"special token ids {got} moved"
    return tokenizer


def tiny_config(vocab_size: int, *, layers: int = 2, hidden: int = 128, heads: int = 4) -> LlamaConfig:
    """A small Llama: tied embeddings (as in SmolLM2), full multi-head attention, 4x MLP."""
    if not 1 <= layers <= 8:
        raise ValueError(f"layers={layers}: the tiny model has 1..8 layers (2-4 is the intended range)")
    if hidden % heads or (hidden // heads) % 2:
        raise ValueError(f"hidden={hidden} must split into {heads} heads of an even size (RoPE)")
    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=4096,
        tie_word_embeddings=True, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
    )


def build_tiny(corpus: Sequence[str], *, vocab_size: int = 2048, layers: int = 2, hidden: int = 128, heads: int = 4,
               seed: int = 0) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """Train the tokenizer on ``corpus`` and initialise a tiny Llama (fp32, eval mode) for it.

    Deterministic: the same corpus, sizes and seed give the same vocabulary and the same weights.
    The global torch RNG is left as it was.
    """
    tokenizer = tokenizer_from_sentencepiece(train_sentencepiece(corpus, vocab_size))
    config = tiny_config(len(tokenizer), layers=layers, hidden=hidden, heads=heads)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.pad_token_id = PAD_ID
    return model.eval(), tokenizer
