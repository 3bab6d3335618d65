"""Inputs the benchmarks share, built once and cached under a work directory: a world, quick SIDs, a tiny agent."""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n (95 % with the default z)."""
    if n == 0:
        return 0.0, 0.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def ensure_world(work: Path, items: int) -> Path:
    """A seeded shopping world of ``items`` listings (tasks are the request texts replayed)."""
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world

    world = work / f"world-{items}"
    if not (world / "manifest.json").is_file():
        print(f"generating a {items:,}-item shopping world in {world}", flush=True)
        generate_shopping_world(ShoppingWorldConfig(items=items, tasks=400, sessions=0, customers=1), world)
    return world


def ensure_sid_dir(world: Path, out: Path) -> Path:
    """A readable SID dir without embeddings: level 1 = top category, level 2 = leaf (mod 8), then the suffix."""
    from sid.build import LABELS_FILE, SIDS_FILE, category_sids

    if (out / SIDS_FILE).is_file() and (out / LABELS_FILE).is_file():
        return out
    return category_sids(world, out)


def ensure_tiny_agent(work: Path, world: Path, sid: Path, steps: int, threads: int) -> Path:
    """The tiny base after ``steps`` SFT steps on the world (0 = only made SID-aware); cached by step count."""
    out = work / f"tiny-sft{steps}"
    final = out / "final"
    if (final / "agent.json").is_file():
        return final
    if steps == 0:
        from apps.shopping.sft import world_corpus
        from harness.agent_dir import save_agent
        from training.models import load_base, make_sid_aware

        model, tok = load_base("tiny", dtype="fp32", corpus=world_corpus(world))
        return save_agent(model, tok, make_sid_aware(model, tok, sid), sid, final)
    from training.sft import SFTConfig, train_sft

    shutil.rmtree(out, ignore_errors=True)
    cfg = SFTConfig.model_validate({
        "base": "tiny", "world": world, "sid": sid, "out": out, "max_steps": steps, "batch_size": 8,
        "max_seq_len": 128, "lr": 2e-3, "warmup_steps": min(10, steps // 10), "eval_every": 0, "eval_max": 32,
        "save_every": 0, "precision": "auto", "threads": threads, "log_every": 50})
    print(f"SFT of the tiny agent: {steps} steps -> {final}", flush=True)
    t0 = time.perf_counter()
    from apps.shopping.sft import SOURCE

    result = train_sft(cfg, SOURCE)
    assert result.final_dir is not None, "train_sft finished without a final agent"
    print(f"  done in {time.perf_counter() - t0:.0f} s, train loss {result.train_loss}", flush=True)
    return result.final_dir
