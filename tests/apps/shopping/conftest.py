"""Shared fixtures of the shopping agent tests: a hand-made catalog and a scripted engine.

Run: .venv/bin/python -m pytest tests/apps/shopping -q
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from harness.catalog import Catalog, Item
from infra.engines.base import Completion, GenerationRequest
from training.chat_template import chat_template

BOOTS = ["Outdoor", "Footwear", "Hiking boots"]
TENTS = ["Outdoor", "Camping", "Tents"]
BAGS = ["Outdoor", "Camping", "Sleeping bags"]
KNIVES = ["Home", "Kitchen", "Knives"]


def _item(item_id: str, title: str, path: list[str], price: float | None, stock: int | None,
          rating: float | None, **attrs: str | list[str]) -> Item:
    return Item(item_id=item_id, title=title, category_path=path, attributes=dict(attrs), price=price, stock=stock,
                rating=rating)


def make_catalog() -> Catalog:
    """Eight items: three boots (one sold out), two tents, two sleeping bags, a knife with untracked stock."""
    return Catalog([
        _item("b1", "Northpeak waterproof hiking boots - Black", BOOTS, 89.99, 5, 4.6, brand="Northpeak",
              colour="black", material="leather", size="42", features=["waterproof"]),
        _item("b2", "Trailco hiking boots, brown", BOOTS, 59.99, 2, 4.1, brand="Trailco", colour="brown",
              material="suede", size="43", features=[]),
        _item("b3", "Summit hiking boots red", BOOTS, 120.0, 0, 4.9, brand="Summit", colour="red",
              material="leather", size="42", features=["waterproof"]),
        _item("t1", "Camp tent 2 person green", TENTS, 150.0, 3, 4.5, brand="Campo", colour="green"),
        _item("t2", "Budget tent 1 person", TENTS, 60.0, 1, 3.9, brand="Campo", colour="grey"),
        _item("s1", "Down sleeping bag", BAGS, 120.0, 4, 4.8, brand="Dreamy", colour="blue"),
        _item("s2", "Synthetic sleeping bag", BAGS, 40.0, 9, 4.0, brand="Dreamy", colour="red"),
        _item("k1", "Chef knife steel", KNIVES, 35.0, None, None, brand="Edge"),
    ])


@pytest.fixture
def catalog() -> Catalog:
    return make_catalog()


def word_tokenizer() -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer (unknown words -> <unk>) with Sidekick's ChatML + tools template."""
    vocab = {w: i for i, w in enumerate(["<unk>", "<pad>", "<|im_start|>", "<|im_end|>", "user", "assistant"])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                  eos_token="<|im_end|>")
    tok.chat_template = chat_template(None)
    return tok


class ScriptedEngine:
    """The Engine protocol with scripted output: each request gets the next reply, either a text or a list
    of token-id rows (one completion per row, as beam search returns)."""

    def __init__(self, replies: Sequence[str | list[list[int]]]) -> None:
        self.replies = list(replies)
        self.calls: list[GenerationRequest] = []
        self._tok = word_tokenizer()

    @property
    def tokenizer(self) -> PreTrainedTokenizerFast:
        return self._tok

    @property
    def weights_version(self) -> int:
        return 0

    @property
    def tokens_per_second(self) -> float | None:
        return None

    @property
    def asleep(self) -> bool:
        return False

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            self.calls.append(req)
            reply = self.replies.pop(0) if self.replies else "I am out of script."
            rows = [(r, "") for r in reply] if isinstance(reply, list) else [([4, 5], reply)]
            out.append([Completion(request_id=req.request_id, index=k, token_ids=ids, text=text,
                                   logprobs=[-1.0] * len(ids), finish_reason="eos", prompt_tokens=1,
                                   latency_ms=1.0, weights_version=0) for k, (ids, text) in enumerate(rows)])
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
