"""``run_curation``: a world directory in, a curated directory out — anonymise, filter, dedup, select, split.

    sidekick curate runs/w --out runs/c --key-file ~/.sidekick/anonymise.key

Input (``IN``): ``logs.jsonl`` (``Session`` records, required), ``tasks.jsonl`` and ``catalog.jsonl``
(optional), ``private/pii_key.jsonl`` (optional answer key: when present, PII scrubbing is scored).
Inputs are only read, never written.

Output (``OUT``)::

    OUT/train/logs.jsonl  OUT/val/logs.jsonl  OUT/test/logs.jsonl   anonymised sessions per split
    OUT/<split>/tasks.jsonl          tasks referenced by that split's sessions (messages scrubbed)
    OUT/<split>/difficulty.jsonl     per task: certainty and set (only with a certainty file)
    OUT/catalog.jsonl                the input catalog, copied (so OUT reads like a world directory)
    OUT/quarantine.jsonl             malformed input records: file, line, byte offset, reason (no content)
    OUT/report.json  OUT/report.html funnel, PII counts and scores, dedup, coverage, splits, timings
    OUT/manifest.json                inputs, config, code version, counts, checksums
    OUT/stages/<nn_name>/            each stage's output + manifest.json (see data_curation.stages)

Resumable: rerunning on the same ``OUT`` skips finished stages (and finished shards of an interrupted
records stage) and produces the same bytes as an uninterrupted run. The output is a function of the
inputs, the config, the seed and the key — not of the number of workers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_curation.config import CurateConfig
from data_curation.errors import CurationError
from data_curation.pii_score import score_files
from data_curation.pseudonym import Pseudonymiser, create_key_file, resolve_key
from data_curation.report import examples, funnel, write_html
from data_curation.stagedir import fingerprint
from data_curation.stages import (
    Context,
    DedupStage,
    PrepareStage,
    RecordsStage,
    SelectStage,
    SplitStage,
    WriteStage,
)
from infra.layout import CATALOG_FILE, LOGS_FILE, PRIVATE_DIR, TASKS_FILE
from infra.manifest import sha256_file, write_manifest
from infra.settings import get_settings

Progress = Callable[[int], None]


@dataclass
class CurationReport:
    """What a run produced: ``report`` is the content of ``OUT/report.json``."""

    out_dir: Path
    report: dict[str, Any]

    @property
    def funnel(self) -> dict[str, Any]:
        funnel_: dict[str, Any] = self.report["funnel"]
        return funnel_

    @property
    def resumed(self) -> list[str]:
        """Stages that were already finished and skipped in this run."""
        return [name for name, s in self.report["stages"].items() if not s["ran"]]


def _no_progress(_: int) -> None:
    return None


def _check_dirs(in_dir: Path, out_dir: Path) -> None:
    if not (in_dir / LOGS_FILE).is_file():
        raise CurationError(f"{in_dir}: no {LOGS_FILE} (expected a world directory from `sidekick world …`)")
    src, dst = in_dir.resolve(), out_dir.resolve()
    if src == dst or dst in src.parents or src in dst.parents:
        raise CurationError(f"--out {out_dir} must be outside the input {in_dir} (and not contain it)")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / "stages").is_dir():
        raise CurationError(f"--out {out_dir} is not empty and is not a curation output; pass --force to replace it")


def _inputs(in_dir: Path, cfg: CurateConfig) -> dict[str, str]:
    """sha256 of every input the output depends on (the root of the stage fingerprints)."""
    paths = {"logs": in_dir / LOGS_FILE, "tasks": in_dir / TASKS_FILE, "catalog": in_dir / CATALOG_FILE}
    if cfg.select.certainty_file is not None:
        if not cfg.select.certainty_file.is_file():
            raise CurationError(f"--certainty {cfg.select.certainty_file}: file not found")
        paths["certainty"] = cfg.select.certainty_file
    return {name: sha256_file(p) for name, p in paths.items() if p.is_file()}


def _context(cfg: CurateConfig, in_dir: Path, out_dir: Path, progress: Progress) -> tuple[Context, dict[str, str]]:
    settings = get_settings()
    if cfg.anonymise.create_key:
        if cfg.anonymise.key_file is None:
            raise CurationError("create_key needs key_file: where to write the new key (--new-key FILE)")
        create_key_file(cfg.anonymise.key_file, out_dir)
    pseudo = Pseudonymiser(resolve_key(cfg.anonymise.key_file, settings.anonymise_key_file))
    seed = cfg.seed if cfg.seed is not None else settings.seed
    inputs = _inputs(in_dir, cfg)
    root = fingerprint("root", {"inputs": inputs, "key_id": pseudo.key_id(), "seed": seed}, "")
    ctx = Context(cfg=cfg, in_dir=in_dir, out_dir=out_dir, seed=seed,
                  workers=cfg.workers or settings.resolved_workers(),
                  cache_dir=cfg.select.cache_dir or settings.cache_dir, pseudonymiser=pseudo,
                  progress=progress, root_fp=root)
    return ctx, inputs


def run_curation(
    config: CurateConfig, in_dir: Path, out_dir: Path, progress: Progress | None = None
) -> CurationReport:
    """Curate the world in ``in_dir`` into ``out_dir`` (created, or resumed if it holds an earlier run)."""
    _check_dirs(in_dir, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx, inputs = _context(config, in_dir, out_dir, progress or _no_progress)
    if config.anonymise.tagger:  # trained here, once, before the workers start (they load it)
        from data_curation.tagger import PiiTagger, TaggerError

        try:
            PiiTagger(model_dir=config.anonymise.tagger_dir).ensure()
        except TaggerError as err:
            raise CurationError(f"anonymise.tagger: {err}") from err
    prepare = PrepareStage(ctx)
    records = RecordsStage(ctx, prepare)
    dedup = DedupStage(ctx, records)
    select = SelectStage(ctx, records, dedup)
    split = SplitStage(ctx, prepare, records, select)
    write = WriteStage(ctx, prepare, records, select, split)
    ran = {stage.name: stage.run() for stage in (prepare, records, dedup, select, split, write)}
    report = _build_report(ctx, inputs, ran, (prepare, records, dedup, select, split, write))
    (out_dir / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    write_html(report, out_dir / "report.html")
    write_manifest(out_dir, stage="curate", config=config.model_dump(mode="json"),
                   counts={"input_lines": report["funnel"]["input_lines"], **report["funnel"]["kept"]},
                   inputs=[in_dir / LOGS_FILE], extra={"key_id": report["key_id"], "seed": ctx.seed,
                                                       "input_sha256": inputs})
    return CurationReport(out_dir, report)


def _build_report(
    ctx: Context, inputs: dict[str, str], ran: dict[str, bool], stages: tuple[Any, ...]
) -> dict[str, Any]:
    prepare, records, dedup, select, split, write = stages
    rc, sc, spc, wc = records.dir.counts(), select.dir.counts(), split.dir.counts(), write.dir.counts()
    key_file = ctx.in_dir / PRIVATE_DIR / "pii_key.jsonl"
    score = None
    if key_file.is_file():
        score = score_files(key_file, [d / "scored.jsonl" for d in records.shard_dirs()])
    splits = {s: {**spc[s], "tasks": wc[s]["tasks"], "task_kinds": wc[s].get("kinds", {})}
              for s in ("train", "val", "test")}
    return {
        "funnel": funnel(rc, dedup.dir.counts(), sc, spc),
        "pii": {"placeholders": rc["placeholders"], "sessions_with_pii": rc["sessions_with_pii"],
                "task_placeholders": prepare.dir.counts().get("task_placeholders", {}), "score": score},
        "dedup": dedup.dir.counts(),
        "selection": sc,
        "splits": splits,
        "tasks_in_several_splits": wc["tasks_in_several_splits"],
        "task_groups": spc.get("task_groups"),  # task mode: tasks, wording groups, largest group
        "quarantine_entries": wc["quarantine_entries"],
        "examples": examples(ctx.out_dir),
        "stages": {s.name: {"ran": ran[s.name], "seconds": s.dir.seconds()} for s in stages},
        "key_id": ctx.pseudonymiser.key_id(),
        "seed": ctx.seed,
        "workers": ctx.workers,
        "inputs": {"dir": str(ctx.in_dir), "sha256": inputs},
        "config": ctx.cfg.model_dump(mode="json"),
    }
