"""SFT step time: the LM head on every position (the model's own logits) vs on target positions only (what
``training/sft.py`` does for Llama-like heads), same batch, same loss. Prints a table; writes JSON.

    .venv/bin/python bench/sft_step.py --quick     # tiny model + SmolLM2-135M LoRA, 3 timed steps each
    .venv/bin/python bench/sft_step.py             # 8 timed steps each

The batch is 8 rows x 320 tokens with a quarter of the positions as targets (about the share of the cascade's
served-format plan examples). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn.functional as F

import training.sft as sft
from infra.text_encoder import bf16_supported
from training.models import load_base
from training.tiny import build_tiny

ROWS, WIDTH, TARGET_SHARE = 8, 320, 0.25


def _step_s(model: Any, opt: torch.optim.Optimizer, ids: torch.Tensor, targets: torch.Tensor, fast: bool,
            steps: int) -> tuple[float, float]:
    """Median seconds of a forward + backward + optimizer step, and the loss (equal for both ways)."""
    pos = torch.arange(ids.shape[1]).expand_as(ids)
    times, loss_value = [], 0.0
    for i in range(steps + 1):  # the first step warms up
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16_supported()):
            parts = sft._plain_head(model) if fast else None
            if parts is not None:
                decoder, head = parts
                keep = targets != sft.IGNORE
                logits = head(decoder(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state[keep])
                loss = F.cross_entropy(logits.float(), targets[keep], reduction="sum")
            else:
                logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
                loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=sft.IGNORE,
                                       reduction="sum")
        loss.backward()
        opt.step()
        if i:
            times.append(time.perf_counter() - t0)
        if i == 0:
            loss_value = float(loss.detach())
    return statistics.median(times), loss_value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/results/sft_step.json"))
    args = ap.parse_args()
    steps = 3 if args.quick else 8
    torch.manual_seed(0)
    rows = []
    rng = __import__("random").Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(3000)]
    corpus = [" ".join(rng.choice(words) for _ in range(20)) for _ in range(2000)]
    tiny, _ = build_tiny(corpus, vocab_size=1024)
    smol, _ = load_base("smollm2-135m")
    for name, model, lora in (("tiny (full fine-tune)", tiny, False), ("SmolLM2-135M (LoRA r16)", smol, True)):
        if lora:
            model = sft.apply_lora(model, sft.LoraSettings(r=16, alpha=32, dropout=0.0), [0])
        model.train()
        vocab = model.get_output_embeddings().weight.shape[0]
        ids = torch.randint(1, vocab, (ROWS, WIDTH))
        targets = torch.full((ROWS, WIDTH), sft.IGNORE)
        mask = torch.rand(ROWS, WIDTH) < TARGET_SHARE
        targets[mask] = torch.randint(1, vocab, (int(mask.sum()),))
        result: dict[str, Any] = {"model": name, "rows": ROWS, "width": WIDTH, "targets": int(mask.sum())}
        state = {k: v.clone() for k, v in model.state_dict().items()}
        for way, fast in (("all_positions", False), ("targets_only", True)):
            model.load_state_dict(state)
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
            result[f"{way}_s"], result[f"{way}_loss"] = _step_s(model, opt, ids, targets, fast, steps)
        result["speedup"] = round(result["all_positions_s"] / result["targets_only_s"], 2)
        rows.append(result)
    print(f"\n{'model':<26}{'all positions s':>17}{'targets only s':>16}{'x':>6}{'loss equal':>12}")
    for r in rows:
        same = abs(r["all_positions_loss"] - r["targets_only_loss"]) <= 1e-3 * abs(r["all_positions_loss"])
        print(f"{r['model']:<26}{r['all_positions_s']:>17.3f}{r['targets_only_s']:>16.3f}{r['speedup']:>6.2f}"
              f"{same!s:>12}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"rows": rows, "quick": args.quick, "threads": torch.get_num_threads()}
    args.out.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
