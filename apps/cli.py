"""The ``sidekick`` command line: parses, loads config, calls one library function, reports.

    sidekick world shopping --out runs/w --items 20000
    sidekick world summary runs/w
    sidekick validate runs/w --skip-bad
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from data_curation.errors import CurationError
from infra.config import ConfigError, load_config
from infra.logging import configure_logging
from infra.recordio import RecordError
from infra.settings import get_settings

app = typer.Typer(help="Sidekick: turn a catalog and its logs into domain agents.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
world_app = typer.Typer(help="Generate or import a world (catalog + logs + tasks).", no_args_is_help=True)
app.add_typer(world_app, name="world")
console = Console(stderr=True)
out_console = Console()

C = TypeVar("C", bound=BaseModel)

OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Directory to write the world into.")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML file with the generator's config.")]
SeedOpt = Annotated[int | None, typer.Option(help="Seed (default 0); same seed, same world.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace the contents of a non-empty --out.")]


class UsageError(Exception):
    """A problem with what the user asked for; printed as one line."""


@app.callback()
def _main(
    log_level: Annotated[str | None, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")] = None,
) -> None:
    settings = get_settings()
    configure_logging(log_level or settings.log_level, settings.log_format)


@contextmanager
def _progress(total: int | None, what: str) -> Iterator[Callable[[int], None]]:
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)


def _prepare_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise UsageError(f"--out {out} is not empty; pass --force to replace it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def _config(model: type[C], path: Path | None, overrides: dict[str, Any]) -> C:
    return load_config(model, path, overrides)


def _report(out: Path, counts: dict[str, Any]) -> None:
    flat = {k: v for k, v in counts.items() if not isinstance(v, dict)}
    out_console.print(f"[green]wrote[/green] {out}  " + "  ".join(f"{k}={v:,}" for k, v in flat.items()))


@world_app.command("shopping")
def world_shopping(
    out: OutOpt,
    items: Annotated[int | None, typer.Option(help="Catalog listings (default 20000; up to millions).")] = None,
    tasks: Annotated[int | None, typer.Option(help="Fulfilment tasks (default 2000).")] = None,
    sessions: Annotated[int | None, typer.Option(help="Raw log sessions (default 5000).")] = None,
    seed: SeedOpt = None,
    config: ConfigOpt = None,
    force: ForceOpt = False,
) -> None:
    """A shopping catalog, fulfilment tasks and raw logs with PII (answer key under private/)."""
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world

    cfg = _config(ShoppingWorldConfig, config, {"items": items, "tasks": tasks, "sessions": sessions, "seed": seed})
    _prepare_out(out, force)
    with _progress(cfg.items + cfg.tasks + cfg.sessions, "shopping world") as advance:
        counts = generate_shopping_world(cfg, out, advance)
    _report(out, counts)


@world_app.command("livestream")
def world_livestream(
    out: OutOpt,
    items: Annotated[int | None, typer.Option(help="Streams (default 50); each shows several products.")] = None,
    questions: Annotated[int | None, typer.Option(help="Viewer questions (default 2000).")] = None,
    seed: SeedOpt = None,
    config: ConfigOpt = None,
    force: ForceOpt = False,
) -> None:
    """Live streams with their products' fact sheets, viewer questions with ground-truth answers."""
    from apps.livestream.world import LivestreamWorldConfig, generate_livestream_world

    cfg = _config(LivestreamWorldConfig, config, {"streams": items, "questions": questions, "seed": seed})
    _prepare_out(out, force)
    with _progress(None, "livestream world") as advance:
        counts = generate_livestream_world(cfg, out, advance)
    _report(out, counts)


@world_app.command("travel")
def world_travel(
    out: OutOpt,
    items: Annotated[int | None, typer.Option(help="Points of interest in the city (default 400).")] = None,
    requests: Annotated[int | None, typer.Option(help="Planning requests (default 1000).")] = None,
    seed: SeedOpt = None,
    config: ConfigOpt = None,
    force: ForceOpt = False,
) -> None:
    """A city of POIs, a travel-time model and planning requests (every one feasible)."""
    from apps.travel.world import TravelWorldConfig, generate_travel_world

    cfg = _config(TravelWorldConfig, config, {"pois": items, "requests": requests, "seed": seed})
    _prepare_out(out, force)
    with _progress(None, "travel world") as advance:
        counts = generate_travel_world(cfg, out, advance)
    _report(out, counts)


@world_app.command("import-movielens")
def world_import_movielens(
    out: OutOpt,
    source: Annotated[Path | None, typer.Option(help="RecBole-format ml-100k folder (default: the recbole wheel's).")]
    = None,
    force: ForceOpt = False,
) -> None:
    """MovieLens-100k (shipped in the recbole wheel) as items, per-user logs and next-item tasks."""
    from apps.movielens.importer import MovieLensImportConfig, import_movielens

    cfg = _config(MovieLensImportConfig, None, {"source": source})
    _prepare_out(out, force)
    with _progress(None, "movielens") as advance:
        counts = import_movielens(cfg, out, advance)
    _report(out, counts)


@world_app.command("summary")
def world_summary(
    world: Annotated[Path, typer.Argument(help="A world directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """What a world directory holds: counts, task kinds, and a few example records."""
    from apps.summary import summarise_world

    summary = summarise_world(world)
    if as_json:
        out_console.print_json(json.dumps(summary, default=str))
        return
    table = Table(title=f"{summary['app']} world: {world}", show_header=True)
    table.add_column("what")
    table.add_column("value", justify="right")
    for key, value in summary["counts"].items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v:,}" for k, v in value.items())
        table.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))
    for name, size in summary["files"].items():
        table.add_row(f"file {name}", f"{size / 1e6:.1f} MB")
    out_console.print(table)
    if summary["examples"]:
        ex = Table(title="examples", show_header=True)
        ex.add_column("kind")
        ex.add_column("record")
        for kind, text in summary["examples"].items():
            ex.add_row(kind, text)
        out_console.print(ex)


sid_app = typer.Typer(help="Semantic IDs: build, report, explain, update.", no_args_is_help=True)
app.add_typer(sid_app, name="sid")


@sid_app.command("build")
def sid_build(
    world: Annotated[Path, typer.Argument(help="World or curated directory with catalog.jsonl.")],
    out: OutOpt,
    config: ConfigOpt = None,
    quantiser: Annotated[str | None, typer.Option(help="rq-kmeans (default) or rq-vae.")] = None,
    levels: Annotated[int | None, typer.Option(help="Quantiser levels (default 3).")] = None,
    codebook_size: Annotated[int | None, typer.Option(help="Codes per level (default 256).")] = None,
    align_level1: Annotated[str | None, typer.Option(help="none (default) or category.")] = None,
    force: ForceOpt = False,
) -> None:
    """Embed the catalog, quantise, add the collision suffix; write SIDs, labels and a report."""
    from sid.build import SidBuildConfig, build_sids

    cfg = _config(SidBuildConfig, config, {"quantiser": quantiser, "levels": levels,
                                           "codebook_size": codebook_size, "align_level1": align_level1})
    _prepare_out(out, force)
    settings = get_settings()
    with _progress(None, "embedding items") as advance:
        report = build_sids(cfg, world, out, settings.cache_dir, advance)
    _print_sid_report(report)
    out_console.print(f"[green]wrote[/green] {out}")


def _print_sid_report(report: dict[str, Any]) -> None:
    table = Table(title=f"SIDs: {report['items']:,} items, collision rate before suffix "
                        f"{report['collision_rate']:.2%}, max suffix {report['max_suffix']}")
    for col in ("level", "size", "used", "util", "H/Hmax", "max share", "prefixes", "top pur", "leaf pur"):
        table.add_column(col, justify="right")
    for stats, pur in zip(report["per_level"], report["purity"], strict=True):
        table.add_row(str(pur["level"]), str(stats.get("size", "")), str(stats["used"]),
                      f"{stats['utilisation']:.1%}", f"{stats['normalised_entropy']:.3f}",
                      f"{stats['max_share']:.2%}", f"{pur['prefixes']:,}", f"{pur['top_category_purity']:.1%}",
                      f"{pur['leaf_category_purity']:.1%}")
    out_console.print(table)


@sid_app.command("report")
def sid_report_cmd(sid_dir: Annotated[Path, typer.Argument(help="A SID directory.")]) -> None:
    """Recompute and print report.json: collisions, utilisation, entropy, prefix purity vs category."""
    from sid.build import report_sid_dir

    _print_sid_report(report_sid_dir(sid_dir))
    out_console.print(f"[green]wrote[/green] {sid_dir / 'report.json'}")


@sid_app.command("explain")
def sid_explain(
    sid_dir: Annotated[Path, typer.Argument(help="A SID directory.")],
    sid: Annotated[str, typer.Argument(help="A SID or prefix, e.g. '<s1_12><s2_200>', or an item id.")],
) -> None:
    """What a SID means, level by level."""
    from sid.build import explain, load_sid_dir
    from sid.codebook import SidError

    if not sid.lstrip().startswith("<s"):
        sid_map = load_sid_dir(sid_dir)[0]
        if sid not in sid_map:
            raise UsageError(f"{sid!r} is neither a SID nor an item id in {sid_dir}")
        sid = sid_map.sid_of(sid)
    try:
        result = explain(sid_dir, sid)
    except (SidError, ValueError) as err:
        raise UsageError(str(err)) from err
    out_console.print(f"[bold]{result['sid']}[/bold]" + (f" = item {result['item_id']}" if result["item_id"] else ""))
    for lv in result["levels"]:
        out_console.print(f"  level {lv['level']} {lv['token']}: {lv['items']:,} items; mostly {lv['category']} "
                          f"({lv['category_share']:.0%}); words: {', '.join(lv['words'])}; "
                          f"e.g. {' | '.join(lv['examples'][:2])}", highlight=False)


@sid_app.command("update")
def sid_update(
    sid_dir: Annotated[Path, typer.Argument(help="A SID directory built with rq-kmeans.")],
    catalog: Annotated[Path, typer.Option(help="The catalog as it is now (JSONL or Parquet).")],
) -> None:
    """Give new items SIDs from the fitted codebooks (no retraining); drop removed items."""
    from sid.build import update_sids

    counts = update_sids(sid_dir, catalog, get_settings().cache_dir)
    _report(sid_dir, counts)


train_app = typer.Typer(help="Train agents: supervised fine-tuning (SFT).", no_args_is_help=True)
app.add_typer(train_app, name="train")


@contextmanager
def _train_progress() -> Iterator[Callable[[Any], None]]:
    """A step bar showing loss and tokens/s; the callback takes a ``training.sft.TrainProgress``."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[stats]}"))
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as bar:
        task = bar.add_task("sft", total=None, stats="")

        def update(p: Any) -> None:
            stats = f"loss {p.loss:.3f}  {p.tokens_per_s:,.0f} tok/s" + (
                f"  eval {p.eval_loss:.3f}" if p.eval_loss is not None else "")
            bar.update(task, total=p.total_steps, completed=p.step, stats=stats)

        yield update


@train_app.command("sft")
def train_sft_cmd(
    config: Annotated[Path, typer.Argument(help="YAML SFTConfig, e.g. apps/shopping/sft.yaml.")],
    base: Annotated[str | None, typer.Option(help="Base model: tiny, smollm2-135m or an HF checkpoint dir.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Optimizer steps; -1 = from epochs.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Run directory (checkpoints, logs, final/).")]
    = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the latest checkpoint in --out.")] = False,
    workers: Annotated[int | None, typer.Option(help="Data-parallel Ray workers (default 1 = this process).")]
    = None,
) -> None:
    """Supervised fine-tuning of a SID-aware agent on a world's alignment and intent examples."""
    from training.models import ModelError
    from training.sft import SFTConfig, SFTError, train_sft
    from training.sft_data import SftDataError

    cfg = _config(SFTConfig, config, {"base": base, "max_steps": max_steps, "out": out,
                                      "resume": resume or None, "workers": workers})
    try:
        with _train_progress() as update:
            result = train_sft(cfg, update)
    except (SFTError, SftDataError, ModelError) as err:
        raise UsageError(str(err)) from err
    eval_loss = "-" if result.eval_loss is None else f"{result.eval_loss:.4f}"
    out_console.print(f"[green]wrote[/green] {result.final_dir}  steps={result.step:,}  eval_loss={eval_loss}  "
                      f"tokens/s={result.tokens_per_s:,.0f}", highlight=False)


@app.command("validate")
def validate(
    path: Annotated[Path, typer.Argument(help="A world directory, or one .jsonl/.parquet record file.")],
    record_type: Annotated[str | None, typer.Option("--as", help="item, session or task (default: from the name).")]
    = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Quarantine bad records instead of stopping.")] = False,
    quarantine: Annotated[Path | None, typer.Option(help="Quarantine file (default: quarantine.jsonl beside).")]
    = None,
) -> None:
    """Check record files against the data contracts; bad records stop it, or go to quarantine."""
    from apps.summary import validate_path

    results = validate_path(path, record_type, skip_bad=skip_bad, quarantine=quarantine)
    table = Table(title=f"validate {path}")
    for col in ("file", "type", "good", "bad", "blank lines", "quarantine"):
        table.add_column(col)
    for r in results:
        table.add_row(str(r.path), r.record_type, f"{r.good:,}", f"{r.bad:,}", str(r.blank_lines),
                      str(r.quarantine or "-"))
    out_console.print(table)
    if any(r.bad for r in results):
        raise typer.Exit(code=3)


@app.command("curate")
def curate(
    world: Annotated[Path, typer.Argument(help="A world directory (logs.jsonl; tasks and catalog optional).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Curated directory (an earlier run there is resumed).")],
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML CurateConfig (see apps/shopping).")]
    = None,
    key_file: Annotated[Path | None, typer.Option(help="File with the HMAC key for pseudonyms (default: settings, "
                                                  "then $SIDEKICK_ANONYMISE_KEY).")] = None,
    new_key: Annotated[Path | None, typer.Option(help="Create a fresh key in this file (outside --out) and use it.")]
    = None,
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: settings; 0 = CPU count).")] = None,
    certainty: Annotated[Path | None, typer.Option(help="JSONL {task_id, certainty} from the probe: difficulty sets.")]
    = None,
    keep_fraction: Annotated[float | None, typer.Option(help="Share of deduplicated sessions to keep (0-1].")] = None,
    force: ForceOpt = False,
) -> None:
    """Anonymise, filter, deduplicate, select and split a world's logs (resumable; report.html in --out)."""
    from data_curation.config import CurateConfig
    from data_curation.pipeline import run_curation

    cfg = _config(CurateConfig, config, {}).with_overrides(
        key_file=key_file, new_key=new_key, certainty_file=certainty, keep_fraction=keep_fraction, workers=workers)
    if force:
        _prepare_out(out, force)
    with _progress(None, "curate") as advance:
        result = run_curation(cfg, world, out, advance)
    _report(out, {"input_lines": result.funnel["input_lines"], **result.funnel["kept"]})


@app.command("serve")
def serve(
    agent: Annotated[Path | None, typer.Argument(help="Agent directory (e.g. runs/demo/sft/final); omit to serve "
                                                      "fallback-only answers.")] = None,
    world: Annotated[list[Path] | None, typer.Option("--world", "-w", help="World directory of an app (repeat "
                                                     "for several apps); default: the agent's training world.")]
    = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML ServeConfig (serving/server.py).")]
    = None,
    api_key: Annotated[str | None, typer.Option(envvar="SIDEKICK_API_KEY", help="Key for the admin routes "
                                                "(X-API-Key); unset = admin routes off.")] = None,
    redis_url: Annotated[str | None, typer.Option(help="redis://host:port/db: share sessions between replicas.")]
    = None,
    dtype: Annotated[str, typer.Option(help="auto (bf16 where the CPU has it), bf16 or fp32.")] = "auto",
) -> None:
    """Serve the REST API (shopping, livestream, travel, OpenAI-compatible chat); OpenAPI docs at /docs."""
    import uvicorn

    from apps.serve import ServeSetupError, build_server
    from serving.app import create_app
    from serving.server import ServeConfig

    if dtype not in ("auto", "bf16", "fp32"):
        raise UsageError(f"--dtype {dtype!r}: expected auto, bf16 or fp32")
    if not 0 < port < 65536:
        raise UsageError(f"--port {port}: expected 1-65535")
    cfg = _config(ServeConfig, config, {"api_key": api_key, "redis_url": redis_url})
    try:
        server = build_server(agent, world or [], cfg, dtype=dtype)  # type: ignore[arg-type]
    except ServeSetupError as err:
        raise UsageError(str(err)) from err
    base = f"http://{host}:{port}"
    console.print(f"serving {', '.join(server.apps)} on {base}  (docs: {base}/docs, metrics: {base}/metrics)",
                  highlight=False)
    uvicorn.run(create_app(server), host=host, port=port, log_level="warning")


def main() -> None:
    """Entry point: known errors become one line on stderr and a non-zero exit, never a traceback."""
    try:
        app()
    except (RecordError, ConfigError, UsageError, CurationError, FileNotFoundError, NotADirectoryError) as err:
        console.print(f"[red]error:[/red] {err}", highlight=False, soft_wrap=True)  # one line, whatever the width
        sys.exit(2 if isinstance(err, UsageError | ConfigError | CurationError) else 1)


if __name__ == "__main__":
    main()
