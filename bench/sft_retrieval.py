"""Benchmark SFT'd SID generation against dense and BM25 retrieval on held-out shopping intents, per kind.

    python bench/sft_retrieval.py --quick                             # tiny base, 1,200 steps (~8 min on 2 cores)
    python bench/sft_retrieval.py                                     # tiny base, 3,000 steps (~18 min)
    python bench/sft_retrieval.py --base smollm2-135m --max-steps 60  # SmolLM2 + LoRA in bf16 (~2.5 s/step idle)

Inputs: the demo world and SID dir (``make demo``; generated here if missing). The SFT run goes
to ``runs/bench/sft_retrieval`` (replaced on every run).

Table printed, JSON written to bench/results/sft_retrieval.json. What is measured:

1. SFT (``training.sft``) on the world's alignment + intent examples (tasks held out by task-id
   hash never train); training tokens/s (row tokens, padding excluded, per second of optimizer steps).
2. On the held-out tasks, three retrievers, each returning ``k = 10`` in-stock items per target slot:
   - **SID**: the SFT'd agent, chat prompt + ``<|sid_start|>``, constrained beam search
     (``sid.decoding.constrained_beam_search``, beam 10, in-stock ``ItemFilter``). Bundles: one search
     per slot; the prompt of slot j carries the agent's own top-1 SIDs of slots < j (never the answer).
   - **dense**: MiniLM query embedding (the user turns joined) + faiss inner-product search over the
     MiniLM embeddings of the in-stock items' texts (``sid.build.item_text``).
   - **BM25**: Okapi BM25 (k1 = 1.2, b = 0.75) over the same item texts, numpy + scipy sparse.
   Dense and BM25 have no notion of slots: for a bundle with S slots they return their top ``k * S``
   items, the same budget the SID retriever spends.
3. Per intent kind: ``hit@10`` = share of target slots with at least one returned id in the slot's
   ids; ``recall@10`` = |returned ∩ slot| / min(10, |slot|), averaged over slots; for bundles also
   ``all_slots`` = share of bundles with every slot hit. Target slots list up to 50 ids (best rated
   first, see ``apps.shopping.world``), so a vague intent counts only its top-rated items as hits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.bm25 import BM25  # noqa: E402
from harness.catalog import Catalog, Item  # noqa: E402
from harness.tasks import Task  # noqa: E402
from sid.build import find_catalog, item_text  # noqa: E402

K = 10


# ------------------------------------------------------------------------------------------------ baselines
class Dense:
    """MiniLM embeddings + faiss flat inner-product index (the vectors are L2-normalised: cosine)."""

    def __init__(self, texts: Sequence[str], cache_dir: Path | None) -> None:
        import faiss

        from infra.text_encoder import TextEncoder, encode_cached

        self.encoder = TextEncoder()
        vectors = encode_cached(list(texts), cache_dir, self.encoder)  # (N, 384)
        self.index = faiss.IndexFlatIP(vectors.shape[1])
        self.index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def search(self, query: str, k: int) -> np.ndarray:
        q = self.encoder.encode([query])  # (1, 384)
        _, rows = self.index.search(q, k)
        return rows[0][rows[0] >= 0]


# ------------------------------------------------------------------------------------------------ SID retrieval
class SidRetriever:
    """The SFT'd agent generating SIDs under the trie constraint, one beam search per target slot."""

    def __init__(self, agent_dir: Path, catalog: Catalog, dtype: str) -> None:
        from harness.agent_dir import load_agent
        from sid.trie import ItemFilter, SidTrie

        self.agent = load_agent(agent_dir, dtype=dtype)  # type: ignore[arg-type]
        self.agent.model.eval()
        ids = self.agent.sid_map.item_ids
        stock = np.array([np.nan if catalog[i].stock is None else catalog[i].stock for i in ids], float)
        self.trie = SidTrie.from_sid_map(self.agent.sid_map, stock=stock)
        self.flt = ItemFilter(in_stock=True)
        tok = self.agent.tokenizer
        self.newline = [int(i) for i in tok("\n", add_special_tokens=False)["input_ids"]]

    def search(self, task: Task, k: int) -> list[list[str]]:
        """Top ``k`` item ids per target slot."""
        from apps.shopping.sft import intent_prompt
        from sid.decoding import constrained_beam_search

        assert task.target is not None
        tok, agent = self.agent.tokenizer, self.agent
        rendered: Any = tok.apply_chat_template(intent_prompt(task), tokenize=True, return_dict=True,
                                                add_generation_prompt=True)
        prompt = [int(i) for i in rendered["input_ids"]]
        per_slot: list[list[str]] = []
        for _ in task.target.slots:
            hits = constrained_beam_search(agent.model, tok, [*prompt, agent.sid_start_id], self.trie,
                                           agent.token_map, num_beams=k, flt=self.flt)
            per_slot.append([h.item_id for h in hits])
            if not hits:
                continue
            best = agent.token_map.ids_from_codes(hits[0].codes)
            prompt = [*prompt, agent.sid_start_id, *best, agent.sid_end_id, *self.newline]
        return per_slot


# ------------------------------------------------------------------------------------------------ scoring
def score_slots(per_slot: Sequence[Sequence[str]], task: Task, k: int) -> tuple[list[float], list[float]]:
    """Hit and recall per target slot of ``task`` for the returned ids of each slot."""
    assert task.target is not None
    hits, recalls = [], []
    for got, slot in zip(per_slot, task.target.slots, strict=True):
        found = len(set(got[:k]) & set(slot))
        hits.append(float(found > 0))
        recalls.append(found / min(k, len(slot)))
    return hits, recalls


def evaluate(name: str, tasks: Sequence[Task], search: Callable[[Task], list[list[str]]]) -> dict[str, Any]:
    """Per kind: tasks, hit@K, recall@K (means over slots), all-slots hit rate, ms per task."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    t0 = time.perf_counter()
    for i, task in enumerate(tasks):
        hits, recalls = score_slots(search(task), task, K)
        for kind in (task.kind, "all"):
            acc[kind]["hit"] += hits
            acc[kind]["recall"] += recalls
            acc[kind]["all_slots"].append(float(all(hits)))
        if (i + 1) % 50 == 0:
            print(f"  {name}: {i + 1}/{len(tasks)} tasks", flush=True)
    ms = 1000 * (time.perf_counter() - t0) / max(1, len(tasks))
    return {kind: {"tasks": len(v["all_slots"]), "hit": float(np.mean(v["hit"])),
                   "recall": float(np.mean(v["recall"])), "all_slots": float(np.mean(v["all_slots"])),
                   "ms_per_task": round(ms, 1)} for kind, v in acc.items()}


def flat_search(search: Callable[[str, int], np.ndarray], ids: list[str]) -> Callable[[Task], list[list[str]]]:
    """A slot-less retriever: its top ``K * slots`` items, offered to every slot."""
    from apps.shopping.sft import intent_query

    def run(task: Task) -> list[list[str]]:
        assert task.target is not None
        n = len(task.target.slots)
        top = [ids[int(r)] for r in search(intent_query(task), K * n)]
        return [top] * n

    return run


# ------------------------------------------------------------------------------------------------ the run
def ensure_inputs(world: Path, sid: Path) -> None:
    """Generate the demo world and build its SIDs if they are not there (what `make demo` does)."""
    if not (world / "tasks.jsonl").is_file():
        from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world

        print(f"generating the shopping world in {world}", flush=True)
        generate_shopping_world(ShoppingWorldConfig(), world)
    if not (sid / "sids.jsonl").is_file():
        from infra.settings import get_settings
        from sid.build import SidBuildConfig, build_sids

        print(f"building SIDs in {sid}", flush=True)
        build_sids(SidBuildConfig(), world, sid, get_settings().cache_dir)


def sft_config(args: argparse.Namespace) -> Any:
    from training.sft import SFTConfig

    smol = args.base != "tiny"
    steps = args.max_steps if args.max_steps else (60 if smol else (1200 if args.quick else 3000))
    return SFTConfig.model_validate({
        "base": args.base, "world": args.world, "sid": args.sid, "out": args.out, "max_steps": steps,
        "lora": {"r": 16, "alpha": 32, "dropout": 0.0} if smol else None,
        "lr": 2e-4 if smol else 2e-3, "warmup_steps": min(50, steps // 10), "batch_size": 4 if smol else 16,
        "max_seq_len": 256, "packing": True, "precision": "bf16" if smol else "auto",
        "eval_every": max(1, steps // 4), "save_every": 0, "eval_max": 256, "align_items": args.align_items,
        "targets_per_task": args.targets_per_task, "threads": args.threads, "log_every": 50, "resume": False,
    })


def run_sft(args: argparse.Namespace) -> dict[str, Any]:
    import shutil

    from training.sft import TrainProgress, train_sft

    cfg = sft_config(args)
    shutil.rmtree(cfg.out, ignore_errors=True)

    def report(p: TrainProgress) -> None:
        if p.step % 50 == 0 or p.step == p.total_steps or p.eval_loss is not None:
            extra = f"  eval {p.eval_loss:.3f}" if p.eval_loss is not None else ""
            print(f"  sft step {p.step}/{p.total_steps}  loss {p.loss:.3f}  {p.tokens_per_s:,.0f} tok/s{extra}",
                  flush=True)

    t0 = time.perf_counter()
    from apps.shopping.sft import SOURCE

    result = train_sft(cfg, SOURCE, report)
    return {"base": cfg.base, "lora": cfg.lora is not None, "precision": cfg.precision, "steps": result.step,
            "batch_size": cfg.batch_size, "max_seq_len": cfg.max_seq_len, "tokens": result.tokens,
            "train_seconds": round(result.train_seconds, 1), "tokens_per_s": round(result.tokens_per_s, 1),
            "wall_seconds": round(time.perf_counter() - t0, 1), "eval_loss": result.eval_loss,
            "train_loss": result.train_loss, "examples": result.counts, "agent": str(result.final_dir)}


def held_out_tasks(world: Path, eval_fraction: float, per_kind: int) -> list[Task]:
    from apps.shopping.sft import load_tasks
    from training.sft_data import is_held_out

    taken: dict[str, int] = defaultdict(int)
    out = []
    for task in load_tasks(world):
        if is_held_out(task.task_id, eval_fraction) and (per_kind <= 0 or taken[task.kind] < per_kind):
            taken[task.kind] += 1
            out.append(task)
    return out


def print_table(results: dict[str, dict[str, Any]]) -> None:
    kinds = [k for k in ("explicit", "attribute", "vague", "bundle", "multi_turn", "all") if k in results["sid"]]
    print(f"\n{'kind':<11} {'tasks':>5} | {'hit@10 SID':>10} {'dense':>6} {'BM25':>6} | "
          f"{'recall@10 SID':>13} {'dense':>6} {'BM25':>6}")
    for kind in kinds:
        row = [results[m][kind] for m in ("sid", "dense", "bm25")]
        print(f"{kind:<11} {row[0]['tasks']:>5} | {row[0]['hit']:>10.3f} {row[1]['hit']:>6.3f} {row[2]['hit']:>6.3f} | "
              f"{row[0]['recall']:>13.3f} {row[1]['recall']:>6.3f} {row[2]['recall']:>6.3f}")
    if "bundle" in results["sid"]:
        print("bundle all-slots hit: " + "  ".join(f"{m} {results[m]['bundle']['all_slots']:.3f}"
                                                     for m in ("sid", "dense", "bm25")))
    print("ms per task: " + "  ".join(f"{m} {results[m]['all']['ms_per_task']}" for m in ("sid", "dense", "bm25")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="Shorter SFT and at most 40 held-out tasks per kind.")
    parser.add_argument("--base", default="tiny", help="tiny (default) or smollm2-135m (LoRA, bf16).")
    parser.add_argument("--max-steps", type=int, default=0, help="SFT steps (default: by base and --quick).")
    parser.add_argument("--world", type=Path, default=ROOT / "runs/demo/world")
    parser.add_argument("--sid", type=Path, default=ROOT / "runs/demo/sid")
    parser.add_argument("--out", type=Path, default=ROOT / "runs/bench/sft_retrieval", help="SFT run directory.")
    parser.add_argument("--align-items", type=int, default=-1, help="Items with alignment examples (-1 = all).")
    parser.add_argument("--targets-per-task", type=int, default=10, help="Training examples per task.")
    parser.add_argument("--threads", type=int, default=0, help="Torch threads (0 = torch's default).")
    parser.add_argument("--per-kind", type=int, default=0, help="Held-out tasks per kind (0 = all; --quick: 40).")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/sft_retrieval.json", help="Results file.")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    ensure_inputs(args.world, args.sid)
    print(f"SFT ({args.base}) on {args.world}", flush=True)
    sft = run_sft(args)
    tasks = held_out_tasks(args.world, sft_config(args).eval_fraction, args.per_kind or (40 if args.quick else 0))
    catalog, _ = Catalog.load(find_catalog(args.world)[0])
    stocked: list[Item] = [i for i in catalog if i.in_stock]
    ids, texts = [i.item_id for i in stocked], [item_text(i) for i in stocked]
    from infra.settings import get_settings

    print(f"retrieval on {len(tasks)} held-out tasks over {len(ids):,} in-stock items", flush=True)
    sid = SidRetriever(Path(sft["agent"]), catalog, "fp32" if args.base == "tiny" else "auto")
    results = {"sid": evaluate("sid", tasks, lambda t: sid.search(t, K)),
               "dense": evaluate("dense", tasks, flat_search(Dense(texts, get_settings().cache_dir).search, ids)),
               "bm25": evaluate("bm25", tasks, flat_search(BM25(texts).search, ids))}
    print(f"\nSFT: {sft['steps']} steps, {sft['tokens_per_s']:,.0f} training tokens/s, eval loss {sft['eval_loss']}")
    print_table(results)
    out = args.json
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "k": K, "sft": sft,
                               "retrieval": results, "in_stock_items": len(ids), "load_avg": os.getloadavg(),
                               "cpus": os.cpu_count()}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
