"""Benchmark semantic IDs: build cost, trie lookups, constrained beam search vs dense faiss retrieval.

    python bench/sid.py --quick     # 20k real items + 200k synthetic (a few minutes)
    python bench/sid.py             # 20k real items + 1M synthetic

Tables printed, JSON written to bench/results/sid.json. What is measured:

1. Build, each in a fresh process (peak RSS is its own):
   - real 20k-item shopping catalog: MiniLM embeddings + RQ-KMeans (3 x 256) + suffix + labels;
   - 200k / 1M vectors resampled from the 20k real item embeddings plus small noise (embedding 1M
     titles with MiniLM on 2 cores costs N / (texts/s of the 20k run), far more than the rest):
     Sidekick's guarded RQ-KMeans (k-means++, dead-code re-seeding; optionally balanced) vs plain
     faiss k-means per level (random init, no re-seeding), the baseline GRID/MiniOneRec-style
     scripts use; utilisation and largest-code share side by side (the collision rate of resampled
     data is high by construction: each real vector appears ~N/20k times).
2. Trie ``children()`` cost vs catalog size, against a naive per-step scan of the code array.
3. Constrained beam search per query (beam 10 and 20) with a tiny 2-layer Llama over the 20k
   catalog's SIDs, side by side with dense retrieval (MiniLM query encoding + faiss flat search).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import numpy as np
mode, n, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
res = {}
if mode == "real":
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
    from sid.build import SidBuildConfig, build_sids
    generate_shopping_world(ShoppingWorldConfig(items=n, tasks=0, sessions=0), out / "world")
    t = time.perf_counter()
    report = build_sids(SidBuildConfig(), out / "world", out / "sid", cache_dir=out / "cache")
    res = {"seconds": time.perf_counter() - t, "embed_s": report["timing_s"]["embed"],
           "quantise_s": report["timing_s"]["quantise"], "collision_rate": report["collision_rate"],
           "utilisation": [lv["utilisation"] for lv in report["per_level"]],
           "max_share": [lv["max_share"] for lv in report["per_level"]],
           "leaf_purity_l2": report["purity"][1]["leaf_category_purity"]}
else:
    from sid.quantize import ResidualKMeans, RQKMeansConfig, add_collision_suffix, collision_rate, level_stats
    from sid.trie import SidTrie
    rng = np.random.default_rng(0)
    real = np.load(next((out.parent / "cache" / "embeddings").glob("*.npy")))  # (20k, 384) real item vectors
    x = real[rng.integers(0, len(real), n)]  # (n, 384) float32
    for s in range(0, n, 65_536):  # noise in float32 chunks: the data itself must not dominate peak RSS
        x[s : s + 65_536] += 0.02 * rng.standard_normal((min(65_536, n - s), 384), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    t = time.perf_counter()
    if mode in ("guarded", "balanced"):
        model = ResidualKMeans(RQKMeansConfig(balanced=mode == "balanced")).fit(x)
        codes = model.encode(x)
        sizes = model.sizes
    else:  # plain faiss k-means per level: random init, no re-seeding, the common baseline
        import faiss
        r, cols, sizes = x.copy(), [], []
        for level in range(3):
            km = faiss.Kmeans(384, 256, niter=25, seed=level, max_points_per_centroid=10_000)
            km.train(r[: min(n, 200_000)])
            _, a = km.index.search(r, 1)
            a = a.ravel()
            cols.append(a)
            sizes.append(256)
            r -= km.centroids[a]
        codes = np.stack(cols, 1)
    quantise_s = time.perf_counter() - t
    full = add_collision_suffix(codes)
    t2 = time.perf_counter()
    trie = SidTrie([f"i{i}" for i in range(n)], full)
    res = {"seconds": time.perf_counter() - t, "quantise_s": quantise_s, "trie_build_s": time.perf_counter() - t2,
           "collision_rate": collision_rate(codes),
           "utilisation": [s["utilisation"] for s in level_stats(codes, list(sizes))],
           "max_share": [s["max_share"] for s in level_stats(codes, list(sizes))]}
res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(res))
"""


def _child(mode: str, n: int, out: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode, str(n), str(out)], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} {n}: {proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def bench_build(big: int, work: Path) -> list[dict[str, Any]]:
    rows = [{"what": "real catalog, MiniLM + guarded RQ-KMeans", "items": 20_000,
             **_child("real", 20_000, work)}]
    for mode, label in (("guarded", "resampled, guarded RQ-KMeans"), ("balanced", "resampled, guarded + balanced"),
                        ("plain", "resampled, plain faiss k-means")):
        rows.append({"what": label, "items": big, **_child(mode, big, work / mode)})
    return rows


def bench_trie(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    from sid.quantize import add_collision_suffix
    from sid.trie import ItemFilter, SidTrie

    rows = []
    rng = np.random.default_rng(1)
    for n in sizes:
        codes = add_collision_suffix(rng.integers(0, 256, size=(n, 3)))
        stock = rng.integers(0, 3, n).astype(float)
        trie = SidTrie([f"i{i}" for i in range(n)], codes, stock=stock)
        prefixes = [tuple(int(c) for c in codes[rng.integers(0, n), :k]) for k in rng.integers(0, 4, 2000)]
        flt = ItemFilter(in_stock=True)
        trie.children((), flt)  # the filter's prefix sums are built once, on first use
        timings = {}
        for name, f in (("trie", None), ("trie+in-stock filter", flt)):
            t = time.perf_counter()
            for p in prefixes:
                trie.children(p, f)
            timings[name] = (time.perf_counter() - t) / len(prefixes) * 1e6
        t = time.perf_counter()
        for p in prefixes[:200]:  # naive: scan the code array at every decoding step
            mask = np.ones(n, bool)
            for level, c in enumerate(p):
                mask &= codes[:, level] == c
            np.unique(codes[mask, len(p)])
        timings["naive scan"] = (time.perf_counter() - t) / 200 * 1e6
        rows.append({"items": n, **{f"{k} us": round(v, 1) for k, v in timings.items()}})
    return rows


def _tiny_model(sid_dir: Path) -> tuple[Any, Any, Any, Any]:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from sid.codebook import SidMap
    from sid.tokens import SidTokenMap, add_sid_tokens, sid_vocabulary
    from sid.trie import SidTrie

    words = ["<unk>", "<pad>", "<s>", "</s>", *"find me a waterproof pair of hiking boots under euro".split()]
    backend = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                  bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(words), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                         bos_token_id=2, eos_token_id=3, pad_token_id=1)).eval()
    sid_map = SidMap.load(sid_dir / "sids.jsonl")
    sizes = [int(sid_map.codes[:, k].max()) + 1 for k in range(sid_map.depth)]
    labels = json.loads((sid_dir / "labels.json").read_text())
    add_sid_tokens(tok, model, {t: labels.get(t, "") for t in sid_vocabulary(sizes)})
    token_map = SidTokenMap.from_tokenizer(tok, sid_vocabulary(sizes))
    return model, tok, SidTrie.from_sid_map(sid_map), token_map


def bench_retrieval(work: Path, dense_sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    import faiss

    from infra.text_encoder import TextEncoder
    from sid.decoding import constrained_beam_search

    model, tok, trie, token_map = _tiny_model(work / "sid")
    rows = []
    for beams in (10, 20):
        constrained_beam_search(model, tok, "find me a pair of hiking boots", trie, token_map, num_beams=beams)
        t = time.perf_counter()
        for _ in range(10):
            hits = constrained_beam_search(model, tok, "find me a pair of hiking boots", trie, token_map,
                                           num_beams=beams)
        ms = (time.perf_counter() - t) / 10 * 1e3
        rows.append({"method": f"SID constrained beam search, beam {beams} (tiny Llama)", "items": len(trie),
                     "ms/query": round(ms, 2), "valid": all(trie.item_at(h.codes) for h in hits)})
    encoder = TextEncoder(batch_size=1)
    queries = [f"waterproof hiking boots under {p} euro" for p in range(20, 40)]
    encoder.encode(queries[:2])
    t = time.perf_counter()
    q = encoder.encode(queries)
    encode_ms = (time.perf_counter() - t) / len(queries) * 1e3
    rng = np.random.default_rng(2)
    for n in dense_sizes:
        base = rng.normal(size=(n, 384)).astype(np.float32)
        base /= np.linalg.norm(base, axis=1, keepdims=True)
        index = faiss.IndexFlatIP(384)
        index.add(base)
        t = time.perf_counter()
        for row in q:
            index.search(row[None, :], 10)
        search_ms = (time.perf_counter() - t) / len(q) * 1e3
        rows.append({"method": "dense: MiniLM query encode + faiss flat top-10", "items": n,
                     "ms/query": round(encode_ms + search_ms, 2), "faiss ms": round(search_ms, 2),
                     "encode ms": round(encode_ms, 2)})
    return rows


def _print(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    keys = list(dict.fromkeys(k for r in rows for k in r))
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(_fmt(r.get(k, "")) for k in keys))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if v < 10 else f"{v:,.1f}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200k synthetic items instead of 1M")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sid.json")
    args = parser.parse_args()
    big = 200_000 if args.quick else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build = bench_build(big, work)
        _print("build", build)
        trie = bench_trie((10_000, 100_000, 1_000_000))
        _print("trie children() per call", trie)
        retrieval = bench_retrieval(work, (20_000, big))
        _print("retrieval latency per query", retrieval)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"build": build, "trie": trie, "retrieval": retrieval}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
