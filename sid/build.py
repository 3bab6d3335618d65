"""Build, report, explain and update the semantic IDs of a catalog.

    sidekick sid build runs/w --out runs/sid        # embeddings -> RQ-KMeans -> SIDs (+ report)
    sidekick sid report runs/sid                    # collision rate, utilisation, entropy, purity
    sidekick sid explain runs/sid "<s1_12><s2_200>" # what a SID means, level by level
    sidekick sid update runs/sid --catalog new.jsonl

A SID directory holds ``sids.jsonl`` (item id <-> codes <-> tokens), ``quantiser.npz`` (or
``quantiser.pt``), ``labels.json`` (words per (level, code), used to initialise token embeddings),
``report.json`` and ``manifest.json`` (which names the catalog it was built from).

The only contract this module reads is the catalog's ``Item``; SID logic itself stays array-in,
array-out (``sid.quantize``, ``sid.trie``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.catalog import Catalog, Item
from infra.manifest import read_manifest, write_manifest
from infra.text_encoder import encode_cached
from sid.codebook import SidMap, parse_sid, sid_string, sid_token
from sid.labels import TermIndex

SIDS_FILE = "sids.jsonl"
LABELS_FILE = "labels.json"
REPORT_FILE = "report.json"


class SidBuildConfig(BaseModel):
    """How item SIDs are built."""

    model_config = ConfigDict(extra="forbid")

    quantiser: Literal["rq-kmeans", "rq-vae"] = Field(
        default="rq-kmeans", description="rq-kmeans (faiss residual k-means, default) or rq-vae (torch)."
    )
    levels: int = Field(default=3, ge=1, le=8, description="Quantiser levels (a suffix level is added on top).")
    codebook_size: int = Field(default=256, ge=2, le=65_536, description="Codes per level.")
    align_level1: Literal["none", "category"] = Field(
        default="none", description="'category': level 1 = the item's top category (readable prefixes)."
    )
    balanced: bool = Field(default=False, description="Capacity-constrained assignment (rq-kmeans only).")
    collaborative_weight: float = Field(
        default=0.0, ge=0, description="Weight of the co-occurrence embedding from logs; 0 = text only."
    )
    collaborative_dim: int = Field(default=32, ge=2, description="Dimensions of the co-occurrence embedding.")
    exclude_attributes: list[str] = Field(
        default_factory=lambda: ["seller"], description="Attributes left out of the item text (noise)."
    )
    seed: int = Field(default=0, ge=0)
    cache_embeddings: bool = Field(default=True, description="Cache text embeddings under settings.cache_dir.")


def item_text(item: Item, exclude: frozenset[str] = frozenset({"seller"})) -> str:
    """What the text encoder sees: title, category path and key attributes."""
    parts = [item.title.strip(), " > ".join(item.category_path)]
    attrs = []
    for key, value in item.attributes.items():
        if key in exclude:
            continue
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        if value not in ("", None):
            attrs.append(f"{key}: {value}")
    if attrs:
        parts.append("; ".join(attrs))
    return ". ".join(p for p in parts if p)


def collaborative_embeddings(logs: Path, item_ids: list[str], dim: int, seed: int) -> np.ndarray:
    """Item vectors from session co-occurrence (truncated SVD of the item x session matrix).

    Items never seen in a session get zeros. Lines that are not valid JSON objects are skipped
    (the logs were validated upstream; this stage only needs their item ids).
    """
    import scipy.sparse as sp
    from sklearn.decomposition import TruncatedSVD

    index = {iid: i for i, iid in enumerate(item_ids)}
    rows: list[int] = []
    cols: list[int] = []
    n_sessions = 0
    with logs.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                session = json.loads(line)
            except json.JSONDecodeError:
                continue
            seen = {index[e["item_id"]] for e in session.get("events", []) if e.get("item_id") in index}
            if len(seen) >= 2:
                rows.extend(seen)
                cols.extend([n_sessions] * len(seen))
                n_sessions += 1
    out = np.zeros((len(item_ids), dim), np.float32)
    if n_sessions <= dim:
        return out
    m = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(item_ids), n_sessions))
    vecs = TruncatedSVD(n_components=dim, random_state=seed).fit_transform(m).astype(np.float32)  # (N, dim)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    np.divide(vecs, norms, out=out, where=norms > 0)
    return out


def _features(cfg: SidBuildConfig, items: list[Item], logs: Path | None, cache_dir: Path | None,
              progress: Any) -> np.ndarray:
    exclude = frozenset(cfg.exclude_attributes)
    texts = [item_text(i, exclude) for i in items]
    x = encode_cached(texts, cache_dir if cfg.cache_embeddings else None, progress=progress)  # (N, 384)
    if cfg.collaborative_weight > 0 and logs is not None and logs.is_file():
        collab = collaborative_embeddings(logs, [i.item_id for i in items], cfg.collaborative_dim, cfg.seed)
        x = np.concatenate([x, cfg.collaborative_weight * collab], axis=1)  # (N, 384 + dim)
    return np.ascontiguousarray(x, dtype=np.float32)


def _top_category_codes(
    items: list[Item], codebook_size: int, tops: list[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """Level-1 codes from top categories (sorted names, or the list fixed at build time)."""
    if tops is None:
        tops = sorted({i.category_path[0] for i in items})
    unknown = sorted({i.category_path[0] for i in items} - set(tops))
    if unknown:
        raise ValueError(f"top categories {unknown} did not exist when the SIDs were built; rebuild them")
    if len(tops) > codebook_size:
        raise ValueError(f"align_level1=category needs <= {codebook_size} top categories, found {len(tops)}; "
                         "raise codebook_size or use align_level1=none")
    index = {t: k for k, t in enumerate(tops)}
    return np.array([index[i.category_path[0]] for i in items], np.int64), tops


def _make_quantiser(cfg: SidBuildConfig) -> Any:
    if cfg.quantiser == "rq-vae":
        from sid.rqvae import RQVAE, RQVAEConfig

        return RQVAE(RQVAEConfig(levels=cfg.levels, codebook_size=cfg.codebook_size, seed=cfg.seed))
    from sid.quantize import ResidualKMeans, RQKMeansConfig

    return ResidualKMeans(RQKMeansConfig(levels=cfg.levels, codebook_size=cfg.codebook_size,
                                         balanced=cfg.balanced, seed=cfg.seed))


def find_catalog(world: Path) -> tuple[Path, Path | None]:
    """The catalog of a world or curated directory, and the logs to learn co-occurrence from."""
    catalog = world / "catalog.jsonl"
    if not catalog.is_file():
        catalog = world / "catalog.parquet"
    if not catalog.is_file():
        raise FileNotFoundError(f"{world}: no catalog.jsonl or catalog.parquet")
    for logs in (world / "train" / "logs.jsonl", world / "logs.jsonl"):
        if logs.is_file():
            return catalog, logs
    return catalog, None


def build_sids(cfg: SidBuildConfig, world: Path, out: Path, cache_dir: Path | None = None,
               progress: Any = None) -> dict[str, Any]:
    """Embed, quantise, add the collision suffix, label and report; write a SID directory."""
    catalog_path, logs = find_catalog(world)
    catalog, _ = Catalog.load(catalog_path)
    items = list(catalog)
    t0 = time.perf_counter()
    x = _features(cfg, items, logs, cache_dir, progress)
    t_embed = time.perf_counter() - t0
    level1 = None
    tops: list[str] = []
    if cfg.align_level1 == "category":
        level1, tops = _top_category_codes(items, cfg.codebook_size)
    quantiser = _make_quantiser(cfg)
    t0 = time.perf_counter()
    quantiser.fit(x, level1=level1) if cfg.quantiser == "rq-kmeans" else quantiser.fit(x)
    codes = quantiser.encode(x, level1=level1) if cfg.quantiser == "rq-kmeans" else quantiser.encode(x)
    t_fit = time.perf_counter() - t0
    from sid.quantize import add_collision_suffix

    full = add_collision_suffix(codes)  # (N, L+1)
    sid_map = SidMap([i.item_id for i in items], full)
    out.mkdir(parents=True, exist_ok=True)
    sid_map.save(out / SIDS_FILE)
    quantiser.save(out / ("quantiser.pt" if cfg.quantiser == "rq-vae" else "quantiser.npz"))
    terms = TermIndex([item_text(i) for i in items])
    (out / LABELS_FILE).write_text(json.dumps(token_labels(full, terms), indent=0))
    report = sid_report(sid_map, items, list(quantiser.sizes))
    report["timing_s"] = {"embed": round(t_embed, 2), "quantise": round(t_fit, 2)}
    (out / REPORT_FILE).write_text(json.dumps(report, indent=2))
    write_manifest(out, stage="sid.build", config=cfg.model_dump(mode="json"),
                   counts={"items": len(items), "collision_rate": report["collision_rate"]},
                   inputs=[catalog_path] + ([logs] if logs and cfg.collaborative_weight > 0 else []),
                   extra={"catalog": str(catalog_path.resolve()), "level1_categories": tops})
    return report


def category_sids(world: Path, out: Path, leaf_codes: int = 8) -> Path:
    """A readable SID dir in a second, without embeddings: level 1 = top category, level 2 = the leaf's index
    mod ``leaf_codes``, then the collision suffix; labels name the top categories. For tests, benchmarks and
    demos that need an agent fast, not for retrieval quality (``build_sids`` is that)."""
    from sid.quantize import add_collision_suffix

    items = list(Catalog.load(find_catalog(Path(world))[0])[0])
    tops = sorted({i.category_path[0] for i in items})
    leaves = sorted({tuple(i.category_path) for i in items})
    codes = np.array([[tops.index(i.category_path[0]), leaves.index(tuple(i.category_path)) % leaf_codes]
                      for i in items])
    out.mkdir(parents=True, exist_ok=True)
    SidMap([i.item_id for i in items], add_collision_suffix(codes)).save(out / SIDS_FILE)
    (out / LABELS_FILE).write_text(json.dumps({f"<s1_{k}>": t.lower() for k, t in enumerate(tops)}))
    return out


def token_labels(codes: np.ndarray, terms: TermIndex, top: int = 3) -> dict[str, str]:
    """Label words for every SID token in use: ``{"<s1_12>": "boots hiking waterproof", …}``."""
    labels: dict[str, str] = {}
    for level in range(codes.shape[1] - 1):  # the suffix level carries no meaning
        col = codes[:, level]
        n_groups = int(col.max()) + 1
        for code, words in enumerate(terms.group_labels(col, n_groups, top)):
            if words:
                labels[sid_token(level + 1, code)] = " ".join(words)
    return labels


def _purity(prefix_ids: np.ndarray, labels: np.ndarray) -> float:
    """Share of items whose label equals the majority label of their prefix group."""
    pairs = prefix_ids.astype(np.int64) * (int(labels.max()) + 1) + labels
    uniq, counts = np.unique(pairs, return_counts=True)
    group = uniq // (int(labels.max()) + 1)
    best: dict[int, int] = {}
    for g, c in zip(group.tolist(), counts.tolist(), strict=True):
        best[g] = max(best.get(g, 0), c)
    return float(sum(best.values()) / len(labels))


def sid_report(sid_map: SidMap, items: list[Item], sizes: list[int]) -> dict[str, Any]:
    """Collision rate before the suffix, per-level utilisation and entropy, prefix purity vs category."""
    from sid.quantize import collision_rate, level_stats

    codes = sid_map.codes[:, :-1]  # (N, L) without the suffix
    tops = {t: k for k, t in enumerate(sorted({i.category_path[0] for i in items}))}
    leaves = {p: k for k, p in enumerate(sorted({tuple(i.category_path) for i in items}))}
    top_ids = np.array([tops[i.category_path[0]] for i in items])
    leaf_ids = np.array([leaves[tuple(i.category_path)] for i in items])
    purity = []
    for level in range(codes.shape[1]):
        _, prefix = np.unique(codes[:, : level + 1], axis=0, return_inverse=True)
        prefix = prefix.ravel()
        purity.append({"level": level + 1, "prefixes": int(prefix.max()) + 1,
                       "top_category_purity": round(_purity(prefix, top_ids), 4),
                       "leaf_category_purity": round(_purity(prefix, leaf_ids), 4)})
    return {
        "items": len(sid_map), "levels": codes.shape[1], "sizes": sizes,
        "collision_rate": round(collision_rate(codes), 6),
        "max_suffix": int(sid_map.codes[:, -1].max()),
        "per_level": level_stats(codes, sizes),
        "purity": purity,
        "example": {items[0].item_id: sid_map.sid_of(items[0].item_id)} if items else {},
    }


def load_sid_dir(sid_dir: Path) -> tuple[SidMap, Catalog, dict[str, Any]]:
    manifest = read_manifest(sid_dir)
    catalog_path = Path(manifest["catalog"])
    if not catalog_path.is_file():
        raise FileNotFoundError(f"{sid_dir} was built from {catalog_path}, which is gone")
    catalog, _ = Catalog.load(catalog_path)
    return SidMap.load(sid_dir / SIDS_FILE), catalog, manifest


def report_sid_dir(sid_dir: Path) -> dict[str, Any]:
    """Recompute ``report.json`` of a SID directory."""
    sid_map, catalog, _ = load_sid_dir(sid_dir)
    items = [catalog[i] for i in sid_map.item_ids]
    previous = json.loads((sid_dir / REPORT_FILE).read_text()) if (sid_dir / REPORT_FILE).is_file() else {}
    sizes = previous.get("sizes") or [int(sid_map.codes[:, k].max()) + 1 for k in range(sid_map.depth - 1)]
    report = sid_report(sid_map, items, sizes)
    if "timing_s" in previous:
        report["timing_s"] = previous["timing_s"]
    (sid_dir / REPORT_FILE).write_text(json.dumps(report, indent=2))
    return report


def explain(sid_dir: Path, sid: str) -> dict[str, Any]:
    """What a SID (or SID prefix) means, level by level: items under it, categories, top words."""
    sid_map, catalog, _ = load_sid_dir(sid_dir)
    codes = parse_sid(sid)
    if len(codes) > sid_map.depth:
        raise ValueError(f"{sid} has {len(codes)} levels; SIDs here have {sid_map.depth}")
    items = [catalog[i] for i in sid_map.item_ids]
    terms = TermIndex([item_text(i) for i in items])
    levels = []
    mask = np.ones(len(sid_map), bool)
    for level, code in enumerate(codes):
        mask &= sid_map.codes[:, level] == code
        rows = np.flatnonzero(mask)
        if len(rows) == 0:
            raise ValueError(f"no item has the prefix {sid_string(codes[: level + 1])}")
        cats: dict[str, int] = {}
        for r in rows[:5000]:
            key = " > ".join(items[r].category_path)
            cats[key] = cats.get(key, 0) + 1
        top_cat, top_n = max(cats.items(), key=lambda kv: kv[1])
        levels.append({
            "level": level + 1, "token": sid_token(level + 1, code), "items": len(rows),
            "words": terms.rows_labels(rows[:5000]),
            "category": top_cat, "category_share": round(top_n / min(len(rows), 5000), 3),
            "examples": [items[r].title for r in rows[:3]],
        })
    item = sid_map.item_of(codes) if len(codes) == sid_map.depth else None
    return {"sid": sid_string(codes), "item_id": item, "levels": levels}


def update_sids(sid_dir: Path, new_catalog: Path, cache_dir: Path | None = None) -> dict[str, int]:
    """New items get SIDs from the fitted codebooks (no retraining); removed items leave the map."""
    from sid.quantize import ResidualKMeans, assign_incremental

    manifest = read_manifest(sid_dir)
    cfg = SidBuildConfig.model_validate(manifest["config"])
    if cfg.quantiser != "rq-kmeans" or cfg.collaborative_weight > 0:
        raise ValueError("incremental update supports rq-kmeans on text embeddings; rebuild for other settings")
    old = SidMap.load(sid_dir / SIDS_FILE)
    catalog, _ = Catalog.load(new_catalog)
    keep = [i for i, iid in enumerate(old.item_ids) if iid in catalog]
    new_items = [item for item in catalog if item.item_id not in old]
    codes = old.codes[keep]
    ids = [old.item_ids[i] for i in keep]
    if new_items:
        model = ResidualKMeans.load(sid_dir / "quantiser.npz")
        x = _features(cfg, new_items, None, cache_dir, None)
        level1 = None
        if cfg.align_level1 == "category":
            level1 = _top_category_codes(new_items, cfg.codebook_size, manifest["level1_categories"])[0]
        added = assign_incremental(model, x, codes, level1_new=level1)
        codes = np.concatenate([codes, added])
        ids += [i.item_id for i in new_items]
    SidMap(ids, codes).save(sid_dir / SIDS_FILE)
    counts = {"items": len(ids), "added": len(new_items), "removed": len(old) - len(keep)}
    write_manifest(sid_dir, stage="sid.update", config=cfg.model_dump(mode="json"), counts=counts,
                   inputs=[new_catalog], extra={"catalog": str(new_catalog.resolve()),
                                                "level1_categories": manifest.get("level1_categories", [])})
    return counts
