"""A scripted engine (fixed replies, real tokenizer with the real chat template) for harness loop tests.

It stands in for a model only where a test needs exact model output (a grounding attack, a parse
error); the serving integration tests use real tiny transformers models.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from infra.engines.base import Completion, GenerationRequest
from training.chat_template import chat_template


def word_tokenizer() -> PreTrainedTokenizerFast:
    """Whitespace word-level tokenizer (unknown words -> <unk>) carrying Sidekick's ChatML + tools template."""
    vocab = {w: i for i, w in enumerate(["<unk>", "<pad>", "<|im_start|>", "<|im_end|>", "user", "assistant"])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                  eos_token="<|im_end|>")
    tok.chat_template = chat_template(None)
    return tok


class ScriptedEngine:
    """Implements the Engine protocol; each generate() call returns the next scripted reply text."""

    def __init__(self, replies: Sequence[str], tokens_per_second: float | None = None, delay_s: float = 0.0) -> None:
        self.replies = list(replies)
        self.calls: list[GenerationRequest] = []
        self._tps = tokens_per_second
        self.delay_s = delay_s
        self._tok = word_tokenizer()

    @property
    def tokenizer(self) -> PreTrainedTokenizerFast:
        return self._tok

    @property
    def weights_version(self) -> int:
        return 0

    @property
    def tokens_per_second(self) -> float | None:
        return self._tps

    @property
    def asleep(self) -> bool:
        return False

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            self.calls.append(req)
            if self.delay_s:
                time.sleep(self.delay_s)
            text = self.replies.pop(0) if self.replies else "I am out of script."
            ids = list(range(4, 4 + max(1, len(text.split()))))
            out.append([Completion(request_id=req.request_id, index=0, token_ids=ids, text=text,
                                   logprobs=[-1.0] * len(ids), finish_reason="eos", prompt_tokens=1,
                                   latency_ms=1.0, weights_version=0)])
        return out

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        return None

    def sleep(self, level: int = 1) -> None:
        return None

    def wake(self) -> None:
        return None


@pytest.fixture
def scripted() -> type[ScriptedEngine]:
    return ScriptedEngine


@pytest.fixture
def chat_tokenizer() -> PreTrainedTokenizerFast:
    return word_tokenizer()
