"""The SFT trainer on the tiny model: trains, LoRA keeps the SID rows training, resumes exactly, scales out on Ray.

Run: .venv/bin/python -m pytest tests/training/test_sft.py -q -m "not integration"   # fast tier
     .venv/bin/python -m pytest tests/training/test_sft.py -q -m integration         # Ray DP + the CLI
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from transformers import LlamaConfig, LlamaForCausalLM

import training.sft as sft_module
from apps.shopping.agent import SYSTEM_PROMPT, shopping_tools
from apps.shopping.sft import SOURCE, world_corpus
from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
from harness.agent_dir import PROTOCOL_TOKENS, load_agent
from infra.config import ConfigError, load_config
from sid.tokens import SidTokenMap
from training.models import load_base, make_sid_aware
from training.sft import (
    CHECKPOINTS_DIR,
    METRICS_FILE,
    MetricsLog,
    ResumeError,
    SFTConfig,
    SFTError,
    SFTTrainer,
    cosine_with_warmup,
    train_sft,
)
from training.sft_data import SftDataError, TrajectorySpec

ROOT = Path(__file__).resolve().parents[2]




@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, make_sid_dir: Callable[[Path, Path], Path]) -> dict[str, Path]:
    """A 300-item world, its SID dir, a model cache (the tiny base is built once) and an untied tiny checkpoint."""
    root = tmp_path_factory.mktemp("sft")
    generate_shopping_world(ShoppingWorldConfig(items=300, tasks=80, sessions=0, customers=1), root / "world")
    make_sid_dir(root / "world", root / "sid")
    model, tok = load_base("tiny", dtype="fp32", corpus=world_corpus(root / "world"), cache_dir=root / "cache")
    untied = LlamaForCausalLM(LlamaConfig.from_dict({**model.config.to_dict(), "tie_word_embeddings": False}))
    untied.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        untied.lm_head.weight.copy_(model.lm_head.weight)
    untied.save_pretrained(root / "untied")
    tok.save_pretrained(root / "untied")
    return {"world": root / "world", "sid": root / "sid", "cache": root / "cache", "untied": root / "untied"}


def _cfg(env: dict[str, Path], out: Path, **overrides: Any) -> SFTConfig:
    settings: dict[str, Any] = {
        "world": env["world"], "sid": env["sid"], "out": out, "cache_dir": env["cache"], "max_steps": 6,
        "batch_size": 4, "max_seq_len": 128, "align_items": 40, "warmup_steps": 1, "lr": 3e-3, "eval_every": 0,
        "save_every": 0, "eval_max": 16, "precision": "fp32", "threads": 1, "log_every": 1,
    }
    return SFTConfig.model_validate({**settings, **overrides})


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _trained(cfg: SFTConfig, stop_at: int | None = None) -> SFTTrainer:
    trainer = SFTTrainer(cfg, SOURCE)
    trainer.setup()
    trainer.train(stop_at=stop_at)
    trainer.close()
    return trainer


def test_cosine_with_warmup_by_hand() -> None:
    assert [cosine_with_warmup(s, 4, 12) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert cosine_with_warmup(8, 4, 12) == pytest.approx(0.5)  # half-way through the decay: cos(pi/2)
    assert cosine_with_warmup(12, 4, 12) == pytest.approx(0.0)
    assert cosine_with_warmup(0, 0, 10) == 1.0


def test_full_finetune_trains_logs_checkpoints_and_exports(env: dict[str, Path], tmp_path: Path) -> None:
    trainer = SFTTrainer(_cfg(env, tmp_path / "run", max_steps=8, save_every=4, eval_every=4), SOURCE)
    trainer.setup()
    before, loss0 = _params(trainer.model), trainer.evaluate()
    result = trainer.train()
    trainer.close()
    assert result.finished and result.step == 8 and result.tokens > 0 and result.tokens_per_s > 0
    assert loss0 is not None and result.eval_loss is not None and result.eval_loss < loss0 - 0.5
    unchanged = [n for n, p in trainer.model.named_parameters() if torch.equal(p, before[n])]
    assert not unchanged, f"not trained: {unchanged}"
    steps = sorted(p.name for p in (tmp_path / "run" / CHECKPOINTS_DIR).iterdir())
    assert steps == ["step-000004", "step-000008"]
    for name in ("state.pt", "rng-rank0.pt", "meta.json"):
        assert (tmp_path / "run" / CHECKPOINTS_DIR / "step-000008" / name).is_file()
    lines = [json.loads(x) for x in (tmp_path / "run" / "logs" / METRICS_FILE).read_text().splitlines()]
    assert [x["step"] for x in lines if "loss" in x] == list(range(1, 9))
    assert [x["step"] for x in lines if "eval_loss" in x] == [0, 4, 8]  # 0: the call above
    assert any((tmp_path / "run" / "logs" / "tb").iterdir())
    agent = load_agent(tmp_path / "run" / "final")
    for name, tensor in agent.model.state_dict().items():
        torch.testing.assert_close(tensor, trainer.model.state_dict()[name], msg=name)
    assert (tmp_path / "run" / "final" / "manifest.json").is_file()


def test_grad_accumulation_matches_one_big_batch(env: dict[str, Path], tmp_path: Path) -> None:
    big = _trained(_cfg(env, tmp_path / "a", max_steps=2, batch_size=4, grad_accum=1))
    small = _trained(_cfg(env, tmp_path / "b", max_steps=2, batch_size=2, grad_accum=2))
    for (name, a), b in zip(big.model.named_parameters(), small.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize(("base", "embeddings"), [("tiny", "new_tokens"), ("untied", "new_tokens"),
                                                  ("untied", "full")])
def test_lora_trains_sid_rows_and_head_and_freezes_the_base(env: dict[str, Path], tmp_path: Path, base: str,
                                                            embeddings: str) -> None:
    base_name = "tiny" if base == "tiny" else str(env["untied"])
    cfg = _cfg(env, tmp_path / "run", base=base_name, lr=1e-2,
               lora={"r": 4, "alpha": 8, "dropout": 0.0, "embeddings": embeddings})
    trainer = SFTTrainer(cfg, SOURCE)
    trainer.setup()
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    trainable = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trainable) and any("lora_B" in n for n in trainable)
    trainer.train()
    trainer.close()
    params = dict(trainer.model.named_parameters())
    assert all(torch.equal(params[n], p) for n, p in frozen.items()), "a frozen base weight moved"
    assert all(not torch.equal(params[n], p) for n, p in trainable.items()), "a trainable weight did not move"

    ref, ref_tok = load_base(base_name, dtype="fp32", cache_dir=env["cache"], corpus=world_corpus(env["world"]))
    token_map: SidTokenMap = make_sid_aware(ref, ref_tok, env["sid"])
    new = torch.tensor(sorted(token_map.token_ids.values()))  # SID tokens
    old = torch.ones(len(ref_tok), dtype=torch.bool)
    old[new] = False
    old[[ref_tok.get_vocab()[t] for t in PROTOCOL_TOKENS]] = False  # <|sid_start|>, <|sid_end|> train too
    final = load_agent(tmp_path / "run" / "final").model
    for get in ("get_input_embeddings", "get_output_embeddings"):
        w, w0 = getattr(final, get)().weight.detach(), getattr(ref, get)().weight.detach()  # (V, H)
        moved = (w[new] != w0[new]).any(dim=1)
        assert moved.float().mean() > 0.5, f"{get}: only {int(moved.sum())}/{len(new)} SID rows trained"
        assert torch.equal(w[old], w0[old]) == (embeddings == "new_tokens"), f"{get}: base rows"
    tied = final.get_input_embeddings().weight.data_ptr() == final.get_output_embeddings().weight.data_ptr()
    assert tied == (base == "tiny")


@pytest.mark.parametrize("lora", [None, {"r": 4, "alpha": 8, "dropout": 0.0}])
def test_head_on_targets_only_gives_the_full_logits_loss_and_grads(env: dict[str, Path], tmp_path: Path,
                                                                   lora: dict[str, Any] | None) -> None:
    """The loss runs the LM head on target positions only; loss and gradients equal those of the model's own
    full (B, T, V) logits."""
    trainer = SFTTrainer(_cfg(env, tmp_path / "run", lora=lora), SOURCE)
    trainer.setup()
    assert sft_module._plain_head(trainer.model) is not None  # the tiny base is a Llama
    rows = trainer._step_rows(0)[0][0]
    assert trainer.tokenizer is not None
    batch = sft_module.collate(rows, int(trainer.tokenizer.pad_token_id))
    assert 0 < int((batch.targets != sft_module.IGNORE).sum()) < batch.targets.numel()  # prompt positions exist

    def loss_and_grads() -> tuple[float, int, list[torch.Tensor]]:
        trainer.model.zero_grad(set_to_none=True)
        loss, n = trainer._loss_sum(batch)
        loss.backward()
        grads = [torch.clone(p.grad) for p in trainer.trainable_parameters() if p.grad is not None]
        return float(loss.detach()), n, grads

    fast = loss_and_grads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sft_module, "_plain_head", lambda model: None)
        full = loss_and_grads()
    trainer.close()
    assert fast[1] == full[1]
    assert fast[0] == pytest.approx(full[0], rel=1e-5)
    for a, b in zip(fast[2], full[2], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_resume_after_kill_gives_identical_parameters(env: dict[str, Path], tmp_path: Path) -> None:
    lora = {"r": 4, "alpha": 8, "dropout": 0.1}  # dropout: the RNG state must come back too
    straight = _trained(_cfg(env, tmp_path / "straight", save_every=3, lora=lora))
    killed = _cfg(env, tmp_path / "killed", save_every=3, lora=lora)
    _trained(killed, stop_at=5)  # checkpoint at 3, steps 4-5 lost with the "killed" process
    with pytest.raises(SFTError, match="pass --resume"):
        SFTTrainer(killed, SOURCE).setup()
    with pytest.raises(ResumeError, match="lr"):
        SFTTrainer(killed.model_copy(update={"resume": True, "lr": 1e-4}), SOURCE).setup()
    resumed = SFTTrainer(killed.model_copy(update={"resume": True}), SOURCE)
    resumed.setup()
    assert resumed.step == 3
    result = resumed.train()
    resumed.close()
    assert result.finished and result.step == 6
    for (name, a), b in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    assert sorted(p.name for p in (tmp_path / "killed" / CHECKPOINTS_DIR).iterdir()) == ["step-000003",
                                                                                        "step-000006"]


def test_config_errors_name_the_field(env: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="batch_size 3 must be a multiple of workers 2"):
        _cfg(env, tmp_path, batch_size=3, workers=2)
    with pytest.raises(ValidationError, match="eval_fraction"):
        _cfg(env, tmp_path, eval_fraction=1.5)
    with pytest.raises(ValidationError, match=r"lora\.rank"):
        _cfg(env, tmp_path, lora={"rank": 4})
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"world: {env['world']}\nsid: {env['sid']}\nout: {tmp_path}\nlearning_rate: 0.1\n")
    with pytest.raises(ConfigError, match="field 'learning_rate'"):
        load_config(SFTConfig, bad)
    with pytest.raises(ConfigError, match="field 'lr'"):
        load_config(SFTConfig, None, {"world": env["world"], "sid": env["sid"], "out": tmp_path, "lr": -1})


def test_trajectories_train_behind_the_knob(env: dict[str, Path], tmp_path: Path) -> None:
    spec = TrajectorySpec(system_prompt=SYSTEM_PROMPT, tools=shopping_tools().schemas())
    with pytest.raises(SFTError, match="needs trajectory_spec"):  # checked when the data is built (the CLI fills it)
        SFTTrainer(_cfg(env, tmp_path / "nospec", trajectories_per_task=1), SOURCE).setup()
    assert _cfg(env, tmp_path, trajectory_spec=spec).trajectory_spec is None  # the knob is off by default
    with pytest.raises(SftDataError, match="raise max_seq_len"):  # 128 tokens cannot hold the tool schemas
        SFTTrainer(_cfg(env, tmp_path / "short", trajectories_per_task=1, trajectory_spec=spec), SOURCE).setup()
    cfg = _cfg(env, tmp_path / "run", trajectories_per_task=1, trajectory_spec=spec, max_seq_len=4096, max_steps=2,
               batch_size=2, eval_max=4, align_items=5)
    trainer = _trained(cfg)
    assert trainer.step == 2 and trainer.counts["traj_explicit"] > 0
    assert trainer.counts["dropped_no_target"] == 0
    tok = load_agent(tmp_path / "run" / "final").tokenizer  # its vocabulary learnt the tool schemas too
    plain = load_base("tiny", dtype="fp32", cache_dir=env["cache"], corpus=world_corpus(env["world"]))[1]
    tools_text = "\n".join(spec.corpus())
    assert len(tok(tools_text)["input_ids"]) < 0.8 * len(plain(tools_text)["input_ids"])
    manifest = json.loads((tmp_path / "run" / "final" / "manifest.json").read_text())
    assert SFTConfig.model_validate(manifest["config"]) == cfg  # the spec round-trips through the manifest


@pytest.mark.integration
def test_two_ray_workers_match_one_worker(env: dict[str, Path], tmp_path: Path) -> None:
    common = {"max_steps": 3, "batch_size": 4, "grad_accum": 2, "save_every": 0}
    one = train_sft(_cfg(env, tmp_path / "one", **common), SOURCE)
    two = train_sft(_cfg(env, tmp_path / "two", workers=2, **common), SOURCE)
    assert one.finished and two.finished and two.step == 3 and two.tokens == one.tokens
    a = load_agent(tmp_path / "one" / "final").model.state_dict()
    b = load_agent(tmp_path / "two" / "final").model.state_dict()
    for name, tensor in a.items():
        torch.testing.assert_close(b[name], tensor, atol=2e-5, rtol=1e-4, msg=name)
    assert two.eval_loss == pytest.approx(one.eval_loss, rel=1e-4)


@pytest.mark.integration
def test_cli_train_sft_end_to_end(env: dict[str, Path], tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(f"base: tiny\nworld: {env['world']}\nsid: {env['sid']}\nout: {tmp_path / 'ignored'}\n"
                      f"cache_dir: {env['cache']}\nbatch_size: 4\nmax_seq_len: 128\nalign_items: 20\n"
                      "warmup_steps: 1\nthreads: 1\n")
    cmd = [sys.executable, "-m", "apps.cli", "train", "sft", str(config), "--max-steps", "3",
           "--out", str(tmp_path / "run")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "final" in done.stdout and (tmp_path / "run" / "final" / "agent.json").is_file()
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "pass --resume" in again.stderr and "Traceback" not in again.stderr
    resumed = subprocess.run([*cmd, "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr


def test_bf16_autocast_trains(env: dict[str, Path], tmp_path: Path) -> None:
    trainer = SFTTrainer(_cfg(env, tmp_path / "run", precision="bf16", max_steps=3), SOURCE)
    trainer.setup()
    before = _params(trainer.model)
    result = trainer.train()
    trainer.close()
    assert result.train_loss is not None and np.isfinite(result.train_loss)
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())  # fp32 master weights
    assert all(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_metrics_log_without_tensorboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    metrics = MetricsLog(tmp_path)
    metrics.write(3, {"loss": 1.5})
    metrics.close()
    assert json.loads((tmp_path / METRICS_FILE).read_text())["loss"] == 1.5
    assert not (tmp_path / "tb").exists()
