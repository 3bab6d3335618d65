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
from typer.core import TyperGroup

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


train_app = typer.Typer(help="Train agents: SFT, RL, and the cascade (seed SFT -> probe -> SFT-2 -> RL).",
                        no_args_is_help=True)
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
    """Supervised fine-tuning of a SID-aware agent on a world's examples (the world's app brings its SFT data)."""
    import apps as app_table
    from harness.agent_dir import ModelError
    from training.sft import SFTConfig, SFTError, train_sft
    from training.sft_data import SftDataError

    cfg = _config(SFTConfig, config, {"base": base, "max_steps": max_steps, "out": out, "resume": resume or None,
                                      "workers": workers})
    source = _sft_source(cfg.world)
    # tool-call trajectories are rendered with the app's prompt and tools, exactly as the serving loop renders them
    cfg = cfg.model_copy(update={"trajectory_spec": source.trajectory_spec()}) \
        if cfg.trajectories_per_task > 0 and cfg.trajectory_spec is None else cfg
    try:
        with _train_progress() as update:
            result = train_sft(cfg, source, update)
    except (SFTError, SftDataError, ModelError, app_table.AppError) as err:
        raise UsageError(str(err)) from err
    eval_loss = "-" if result.eval_loss is None else f"{result.eval_loss:.4f}"
    out_console.print(f"[green]wrote[/green] {result.final_dir}  steps={result.step:,}  eval_loss={eval_loss}  "
                      f"tokens/s={result.tokens_per_s:,.0f}", highlight=False)


def _sft_source(world: Path) -> Any:
    """The SFT data source of the app ``world`` belongs to (its kit's ``sft``)."""
    import apps as app_table

    try:
        kit = app_table.kit(app_table.world_app_name(world))
    except app_table.AppError as err:
        raise UsageError(str(err)) from err
    if kit.sft is None:
        raise UsageError(f"world {world}: the {kit.name} app has no SFT data of its own yet")
    return kit.sft


def _kit(name: str) -> Any:
    import apps as app_table

    try:
        return app_table.kit(name)
    except app_table.AppError as err:
        raise UsageError(str(err)) from err


def _check_dirs(*, agent: Path | None = None, world: Path | None = None) -> None:
    """Fail before Ray starts (an actor that cannot load its inputs dies with a far less readable error)."""
    if agent is not None and not (agent / "agent.json").is_file():
        raise UsageError(f"agent {agent}: not an agent directory (no agent.json); train one with sidekick train sft")
    if world is not None and not any((world / name).is_file() for name in ("catalog.jsonl", "catalog.parquet")):
        raise UsageError(f"world {world}: no catalog.jsonl (a world or curated directory is needed)")


def _app_tasks(path: Path, app_name: str, limit: int = -1) -> list[Any]:
    from apps.evaluate import EvalSetupError, load_tasks

    try:
        tasks = [t for t in load_tasks(path) if t.app == app_name]
    except EvalSetupError as err:
        raise UsageError(str(err)) from err
    if not tasks:
        raise UsageError(f"{path}: no {app_name} tasks")
    return tasks[:limit] if limit >= 0 else tasks


@train_app.command("rl")
def train_rl_cmd(
    config: Annotated[Path, typer.Argument(help="YAML RLConfig, e.g. apps/shopping/rl.yaml.")],
    agent: Annotated[Path | None, typer.Option(help="Starting agent directory (e.g. runs/demo/sft/final).")] = None,
    steps: Annotated[int | None, typer.Option(help="Policy updates.")] = None,
    mode: Annotated[str | None, typer.Option(help="sync or async.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Run directory (checkpoints, logs, final/).")]
    = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the newest checkpoint in --out.")] = False,
    ray_address: Annotated[str | None, typer.Option(help="Join this Ray cluster instead of starting one.")] = None,
    lender: Annotated[list[str] | None, typer.Option("--lender", help="Base URL of a serving replica started with "
                                                     "--lend to use its idle capacity for rollout (repeat for "
                                                     "several; its key from SIDEKICK_API_KEY).")] = None,
) -> None:
    """RL on the app's harness environment with the Ray runtime (GRPO-family, async rollout, checkpoints)."""
    from apps.rl import env_factory
    from infra.cluster import ClusterError
    from training.rl.controller import RLConfig, RLError, train_rl

    cfg = _config(RLConfig, config, {"agent": agent, "steps": steps, "mode": mode, "out": out,
                                     "ray_address": ray_address, "lenders": lender or None})
    if cfg.world is None:
        raise UsageError(f"{config}: set world (the directory whose catalog the environment runs over)")
    if cfg.app is None:
        raise UsageError(f"{config}: set app (the app whose environment and reward are used)")
    kit = _kit(cfg.app)
    _check_dirs(agent=cfg.agent, world=cfg.world)
    tasks = _app_tasks(cfg.tasks or cfg.world, cfg.app, cfg.max_tasks)
    columns = (TextColumn("[bold]rl"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[stats]}"))
    try:
        with Progress(*columns, console=console, disable=not console.is_terminal) as bar:
            task = bar.add_task("rl", total=cfg.steps, stats="")

            def update(s: Any) -> None:
                bar.update(task, completed=s.step, stats=f"reward {s.collected_reward:.3f}  "
                                                        f"{s.trajectories_per_s:.2f} traj/s")

            result = train_rl(cfg, tasks, env_factory(kit, cfg.world), kit.sid, resume=resume,
                              progress=update)
    except (RLError, ClusterError) as err:
        raise UsageError(str(err)) from err
    first, last = result.history[0], result.history[-1]
    out_console.print(f"[green]wrote[/green] {result.final_dir}  steps={result.steps}  "
                      f"reward {first.collected_reward:.3f} -> {last.collected_reward:.3f}  "
                      f"trajectories={last.generated:,}  "
                      f"{last.trajectories_per_s:.2f} traj/s  worker_deaths={last.worker_deaths}"
                      + (f"  lent={last.lent:,} handed_back={last.handed_back:,}" if cfg.lenders else ""),
                      highlight=False)


@train_app.command("cascade")
def train_cascade_cmd(
    config: Annotated[Path, typer.Argument(help="YAML CascadeConfig, e.g. apps/shopping/cascade.yaml.")],
    quick: Annotated[bool, typer.Option("--quick", help="Apply the config's quick profile (under an hour here).")]
    = False,
    stage: Annotated[list[str] | None, typer.Option(help="Run only this stage (repeatable): seed_sft, probe, "
                                                         "select, sft2, rl, report.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Cascade directory.")] = None,
    workers: Annotated[int | None, typer.Option(help="Environment workers.")] = None,
) -> None:
    """Seed SFT -> probe -> select -> SFT-2 (RFT) -> RL, then seed vs final on held-out tasks. Resumable."""
    from eval.run import EvalConfig
    from infra.cluster import ClusterError
    from training.cascade import STAGES, Cascade, CascadeConfig, CascadeError, quick_profile
    from training.rl.controller import RLError
    from training.sft import SFTError

    cfg = load_config(CascadeConfig, config, {"out": out, "workers": workers},
                      transform=quick_profile if quick else None)
    bad = sorted(set(stage or []) - set(STAGES))
    if bad:
        raise UsageError(f"--stage {bad[0]}: expected one of {', '.join(STAGES)}")
    stages = [s for s in STAGES if s in set(stage)] if stage else list(STAGES)
    eval_cfg = EvalConfig(workers=4, threads=1, max_new_tokens=64)
    if cfg.apps:
        from apps.mixture import MixtureSetupError, mixture_inputs

        try:
            # travel's plans are long calls: the report's replay lets the model write as much as the probe does
            longer = eval_cfg.model_copy(update={"max_new_tokens": max(64, cfg.rollout.max_new_tokens)})
            mix = mixture_inputs(cfg, longer)
        except MixtureSetupError as err:
            raise UsageError(f"{config}: {err}") from err
        for note in mix.notes:
            console.print(f"[yellow]note[/yellow]: {note}", highlight=False)
        tasks, heldout, envs, sid, evaluator, sft = (mix.tasks, mix.heldout, mix.env_factory, mix.sid_factory,
                                                     mix.evaluator, mix.sft)
    else:
        tasks, heldout, envs, sid, evaluator, sft = _one_app_inputs(cfg, config, eval_cfg)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, disable=not console.is_terminal) as bar:
            bars: dict[str, Any] = {}

            def progress(what: str, n: int, total: int | None) -> None:
                if what not in bars:
                    bars[what] = bar.add_task(what, total=total)
                bar.update(bars[what], advance=n, total=total)

            cascade = Cascade(cfg, tasks, heldout, envs, sid, evaluator, progress, sft=sft)
            report = cascade.run(stages)
    except (CascadeError, RLError, ClusterError, SFTError) as err:
        raise UsageError(str(err)) from err
    if report:
        _print_cascade(report, cfg.out)


def _one_app_inputs(cfg: Any, config: Path, eval_cfg: Any) -> tuple[Any, ...]:
    """A one-app cascade's tasks, held-out tasks, environment, SID retrieval, evaluator and SFT source."""
    from apps.rl import env_factory, harness_evaluator

    kit = _kit(cfg.app)
    _check_dirs(world=cfg.world)
    tasks = _app_tasks(cfg.tasks, cfg.app)
    # splits by user share tasks (two shoppers, one intent): only tasks never trained on are held out
    train_ids = {t.task_id for t in tasks}
    unique = {t.task_id: t for path in cfg.heldout for t in _app_tasks(path, cfg.app)}
    heldout = [t for i, t in unique.items() if i not in train_ids]
    if len(heldout) < len(unique):
        console.print(f"[yellow]note[/yellow]: {len(unique) - len(heldout)} of {len(unique)} held-out tasks are also "
                      "training tasks; the report leaves them out", highlight=False)
    if not heldout:
        raise UsageError("every held-out task is also a training task: nothing to report on")
    evaluator = harness_evaluator(kit, cfg.world, eval_cfg)
    if kit.sft is None:
        raise UsageError(f"{config}: the {kit.name} app has no SFT data of its own yet (the seed SFT needs it)")
    return tasks, heldout, env_factory(kit, cfg.world), kit.sid, evaluator, kit.sft


def _print_cascade(report: dict[str, Any], out: Path) -> None:
    table = Table(title=f"held-out tasks: {report['tasks']} ({', '.join(report['heldout'])})")
    for col in ("agent", "success", "recall@10", "hit@10", "reward"):
        table.add_column(col, justify="left" if col == "agent" else "right")
    for name, m in report["agents"].items():
        table.add_row(name, *(f"{m.get(k, 0.0):.3f}" for k in ("success", "recall@10", "hit@10", "reward")))
    out_console.print(table)
    for name, m in report["agents"].items():  # a multi-app cascade: each app's share of the held-out tasks
        per_app = sorted({k.split("/")[0] for k in m if "/" in k})
        if per_app:
            out_console.print(f"{name}: " + "; ".join(
                f"{a} success {m[f'{a}/success']:.3f} reward {m[f'{a}/reward']:.3f}"
                + (f" words {m[f'{a}/words']:.1f}" if f"{a}/words" in m else "")
                + (f" p95 {m[f'{a}/turn_p95_ms']:.0f} ms" if f"{a}/turn_p95_ms" in m else "") for a in per_app),
                highlight=False)
    for pair, cells in (report.get("paired") or {}).items():
        parts = [f"{m} {c['delta']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]{'*' if c['excludes_zero'] else ''}"
                 for m, c in cells.items() if c.get("delta") is not None]
        out_console.print(f"{pair}: " + ", ".join(parts), highlight=False)
    rl = report.get("rl_reward") or {}
    if rl.get("reward_first") is not None and rl.get("reward_last") is not None:
        out_console.print(f"RL on its {rl['tasks']} low-certainty tasks: mean reward {rl['reward_first']:.3f} (first "
                          f"update) -> {rl['reward_last']:.3f} (update {rl['steps']})", highlight=False)
    on = report.get("rl_set") or {}
    if on.get("reward"):
        parts = [f"{m} {c['a']:.3f} -> {c['b']:.3f} ({c['delta']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"
                 f"{'*' if c['excludes_zero'] else ''})" for m in ("success", "reward") if (c := on.get(m))]
        out_console.print(f"RL's own {on['tasks']} tasks, SFT-2 -> final ({on['samples']} samples each at temperature "
                          f"{on['temperature']:g}): " + ", ".join(parts), highlight=False)
    gate = report.get("model_apps")
    if gate:
        cells = ", ".join(f"{a} {c['b']:.3f} vs {c['a']:.3f} ({c['delta']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}])"
                          for a, c in gate["evidence"].items())
        out_console.print(f"final vs each app's fallback (success): {cells}; sidekick serve lets the model answer "
                          f"{', '.join(gate['model_apps']) or 'no app'} (model_apps.json)", highlight=False)
    chosen = (report.get("final_stage") or {}).get("stage", "rl")
    beats = report["final_beats_seed"]
    why = "RL" if chosen == "rl" else "an earlier stage did better beyond doubt than RL"
    out_console.print(f"final = the {chosen} agent ({why}); vs seed_sft: success "
                      f"{'better' if beats['success'] else 'NOT better'}, "
                      f"recall@10 {'better' if beats['recall@10'] else 'NOT better'}  ->  {out / 'final'}"
                      "  (* = paired 95% CI excludes 0)", highlight=False)


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
    names: Annotated[str | None, typer.Option(
        help="How person names are found: rules | lexicon | ner (default: the config's, ner).")] = None,
    tagger: Annotated[bool | None, typer.Option(
        "--tagger/--no-tagger", help="Also use the learned PII tagger (default: the config's anonymise.tagger; "
        "trained once, about 5 minutes, on first use).")] = None,
    force: ForceOpt = False,
) -> None:
    """Anonymise, filter, deduplicate, select and split a world's logs (resumable; report.html in --out)."""
    from data_curation.config import CurateConfig
    from data_curation.pipeline import run_curation

    cfg = _config(CurateConfig, config, {}).with_overrides(
        key_file=key_file, new_key=new_key, certainty_file=certainty, keep_fraction=keep_fraction, workers=workers,
        names=names, tagger=tagger)
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
    dtype: Annotated[str | None, typer.Option(help="auto (bf16 where the CPU has it), bf16 or fp32 (default: the "
                                                   "config's engine.dtype, auto).")] = None,
    engine: Annotated[str | None, typer.Option(help="hf (CPU default) or vllm (GPU) (default: the config's "
                                                    "engine.backend).")] = None,
    lend: Annotated[bool, typer.Option("--lend", help="Lend idle capacity to RL rollout from the start (needs "
                                       "--api-key; an RL config names this server in `lenders`).")] = False,
    model_app: Annotated[list[str] | None, typer.Option("--model-app", help="An app whose turns the model answers "
                                                        "(repeat for several); the other apps answer from their "
                                                        "fallback. 'all': every app. Default: the config's "
                                                        "model_apps, else the apps the agent's model_apps.json "
                                                        "names (where it beat the fallback), else every app.")]
    = None,
) -> None:
    """Serve the REST API (shopping, livestream, travel, OpenAI-compatible chat); OpenAPI docs at /docs."""
    import uvicorn

    from apps.serve import ServeSetupError, build_server
    from serving.app import create_app
    from serving.server import ServeConfig

    if dtype not in (None, "auto", "bf16", "fp32"):
        raise UsageError(f"--dtype {dtype!r}: expected auto, bf16 or fp32")
    if engine not in (None, "hf", "vllm"):
        raise UsageError(f"--engine {engine!r}: expected hf or vllm")
    if not 0 < port < 65536:
        raise UsageError(f"--port {port}: expected 1-65535")
    cfg = _config(ServeConfig, config, {"api_key": api_key, "redis_url": redis_url})
    if lend:
        if cfg.api_key is None:
            raise UsageError("--lend needs --api-key (or SIDEKICK_API_KEY): the RL controller reaches a lending "
                             "replica through its admin routes")
        cfg.lending = cfg.lending.model_copy(update={"enabled": True})
    update = {k: v for k, v in {"dtype": dtype, "backend": engine}.items() if v is not None}
    cfg.engine = cfg.engine.model_copy(update=update)
    if model_app == ["all"]:
        cfg.model_apps, cfg.follow_measurement = None, False
    elif model_app:
        cfg.model_apps = list(model_app)
    try:
        server = build_server(agent, world or [], cfg)
    except ServeSetupError as err:
        raise UsageError(str(err)) from err
    base = f"http://{host}:{port}"
    console.print(f"serving {', '.join(server.apps)} on {base}  (docs: {base}/docs, metrics: {base}/metrics)",
                  highlight=False)
    fallback_only = [a for a in server.apps if server.model is not None and server.apps[a].loop.model is None]
    if fallback_only:
        console.print(f"the model answers {', '.join(a for a in server.apps if a not in fallback_only) or 'no app'}; "
                      f"{', '.join(fallback_only)} answer from their fallback (--model-app all: the model answers "
                      "every app)", highlight=False)
    uvicorn.run(create_app(server), host=host, port=port, log_level="warning")


class _EvalGroup(TyperGroup):
    """``sidekick eval AGENT --logs DIR`` is short for ``sidekick eval run AGENT --logs DIR``: anything that is
    not a subcommand name (or --help) is handed to ``run``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: typer's click Context
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(cls=_EvalGroup, no_args_is_help=True,
                       help="Offline evaluation: replay an agent on logged tasks (report.json + report.html), compare "
                            "two runs, the MovieLens benchmark. 'sidekick eval AGENT --logs DIR' = 'eval run ...'.")
app.add_typer(eval_app, name="eval")


@contextmanager
def _counted_progress(what: str) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """A progress bar whose total is set once known: yields ``(set_total, advance)``."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as bar:
        task = bar.add_task(what, total=None)
        yield (lambda n: bar.update(task, total=n)), (lambda n: bar.advance(task, n))


def _split_names(values: list[str] | None) -> list[str]:
    return [n.strip() for v in values or [] for n in v.split(",") if n.strip()]


@eval_app.command("run")
def eval_run(
    agent: Annotated[Path | None, typer.Argument(help="Agent directory (e.g. runs/train/final); omit to evaluate the "
                                                      "apps' fallbacks alone.")] = None,
    logs: Annotated[Path | None, typer.Option(help="Tasks to replay: a directory with tasks.jsonl (a curated split "
                                                   "such as runs/c/test, or a world) or a tasks file.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Output directory (default "
                                                                 "runs/eval/<parent>-<agent dir>); an earlier report "
                                                                 "there is replaced.")] = None,
    world: Annotated[list[Path] | None, typer.Option("--world", "-w", help="World directory of an app (repeat); "
                                                     "default: beside --logs, else the agent's training world.")]
    = None,
    baselines: Annotated[list[str] | None, typer.Option(help="Baselines over the same tasks, comma-separated: "
                                                        "fallback (the no-model fallback replayed), popularity, "
                                                        "bm25, dense, sasrec, or none (default fallback,bm25,dense "
                                                        "with an agent, popularity,bm25 without).")] = None,
    workers: Annotated[int | None, typer.Option(help="Tasks in flight at once, sharing engine batches (default 4).")]
    = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N tasks (default: all).")] = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads of the engine (default: torch's; 1 is "
                                                     "often faster on a busy machine).")] = None,
    seed: Annotated[int | None, typer.Option(help="Base seed of sampling (default 0); same seed, same report.")]
    = None,
    max_turns: Annotated[int | None, typer.Option(help="Most user turns per task (default 3).")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature (default 0 = greedy).")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Most tokens per model call (default 256).")] = None,
    enforce_budget: Annotated[bool | None, typer.Option("--enforce-budget/--measure-budget", help="Enforce each app's "
                                                        "latency budget as served (load-dependent) or only measure "
                                                        "it (default).")] = None,
    budget_ms: Annotated[float | None, typer.Option(help="Turn budget in ms for every app (default: per app).")]
    = None,
    n_boot: Annotated[int | None, typer.Option(help="Bootstrap resamples of the paired 95% CIs against each "
                                                    "baseline (default 2000; 0 = no CIs).")] = None,
    form: Annotated[bool | None, typer.Option("--form/--text", help="--form: send each travel task's constraints "
                                              "as form fields too; --text (default): the request text only, as a "
                                              "chat frontend sends it.")] = None,
    model_only: Annotated[bool | None, typer.Option("--model-only/--as-served", help="--model-only: the model "
                                                    "answers every turn, skipping each app's first answer (what "
                                                    "its rules are sure of, e.g. the livestream reader); "
                                                    "--as-served (default): as the server answers.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML EvalConfig (eval/run.py).")] = None,
    dtype: Annotated[str, typer.Option(help="auto (bf16 where the CPU has it), bf16 or fp32.")] = "auto",
) -> None:
    """Replay an agent on logged tasks; write traces.jsonl, per_task.jsonl, report.json, report.html (with plots)
    into --out, with paired bootstrap CIs of the agent against each baseline."""
    from apps.evaluate import DEFAULT_BASELINES, DEFAULT_BASELINES_NO_AGENT, EvalSetupError, evaluate
    from eval.replay import ReplayError
    from eval.run import EvalConfig

    if logs is None:
        raise UsageError("--logs DIR is required (a directory with tasks.jsonl, e.g. runs/c/test)")
    if dtype not in ("auto", "bf16", "fp32"):
        raise UsageError(f"--dtype {dtype!r}: expected auto, bf16 or fp32")
    cfg = _config(EvalConfig, config, {"workers": workers, "limit": limit, "threads": threads, "seed": seed,
                                       "max_turns": max_turns, "temperature": temperature,
                                       "max_new_tokens": max_new_tokens, "enforce_budget": enforce_budget,
                                       "budget_ms": budget_ms, "n_boot": n_boot, "form": form,
                                       "model_only": model_only})
    # runs/train/final -> runs/eval/train-final (agents are usually all called "final")
    out = out or Path("runs") / "eval" / ("-".join(agent.resolve().parts[-2:]) if agent is not None else "fallback")
    names = _split_names(baselines) if baselines else \
        list(DEFAULT_BASELINES if agent is not None else DEFAULT_BASELINES_NO_AGENT)
    names = [] if names == ["none"] else names
    try:
        with _counted_progress("eval") as (set_total, advance):
            report = evaluate(agent, logs, out, cfg, worlds=world or [], baselines=names,
                              dtype=dtype, progress=advance, on_total=set_total)  # type: ignore[arg-type]
    except EvalSetupError as err:
        raise UsageError(str(err)) from err
    except ReplayError as err:
        console.print(f"[red]error:[/red] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from err
    _print_eval(report, out)


def _print_eval(report: dict[str, Any], out: Path) -> None:
    from rich import box

    from eval.report import paired_table

    cols = ("success", "reward", "recall@10", "ndcg@10", "mrr", "turns", "tool_calls", "degraded")
    table = Table(title=f"eval: {report['counts']['tasks']:,} tasks")
    for col in ("app", "tasks", *cols):
        table.add_column(col, justify="left" if col == "app" else "right")
    for name, g in {"all": report["overall"], **report["by_app"]}.items():
        table.add_row(name, f"{g['tasks']:,}", *["—" if g.get(c) is None else f"{g[c]:.3f}" for c in cols])
    out_console.print(table)
    paired = report.get("paired") or {}
    for metric in [m for m in paired.get("metrics", ()) if m == "success" or m.startswith("ndcg@")]:
        head, rows = paired_table(paired, metric)
        if rows:
            t = Table(title=f"{metric}: agent vs baselines (Δ = agent − best; * CI excludes 0)", box=box.SIMPLE_HEAD,
                      show_edge=False, pad_edge=False, collapse_padding=True)  # fits 80 columns
            for col in head:
                t.add_column(col, justify="right" if col not in ("kind", "best", head[-1]) else "left")
            for row in rows:
                t.add_row(*row)
            out_console.print(t)
    t, checks = report["timing"], report["checks"]
    grounded = "0 ungrounded items served" if checks["served_output_grounded"] else \
        f"{checks['ungrounded_served']} UNGROUNDED ITEMS SERVED"
    out_console.print(f"[green]wrote[/green] {out / 'report.html'}  tasks/s={t['tasks_per_s']}  "
                      f"turn p50/p95 ms={t['turn_latency_ms']['p50']}/{t['turn_latency_ms']['p95']}  "
                      f"errors={report['counts']['errors']}  {grounded}", highlight=False)


@eval_app.command("compare")
def eval_compare(
    run_a: Annotated[Path, typer.Argument(help="First evaluation output (directory or its report.json), e.g. before.")],
    run_b: Annotated[Path, typer.Argument(help="Second evaluation output, e.g. after training.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for compare.json, compare.html, compare.png.")],
    label_a: Annotated[str | None, typer.Option(help="Name of the first run (default: its directory name).")] = None,
    label_b: Annotated[str | None, typer.Option(help="Name of the second run (default: its directory name).")] = None,
    n_boot: Annotated[int, typer.Option(min=0, help="Bootstrap resamples of the paired 95% CIs (0 = no CIs).")]
    = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap resamples.")] = 0,
) -> None:
    """Compare two evaluation runs metric by metric (B - A) with paired bootstrap 95% CIs per kind (tasks paired
    by id) and list the tasks B newly solves and newly fails."""
    from rich import box

    from apps.evaluate import EvalSetupError, compare_runs
    from eval.report import ci_text

    labels = (label_a or run_a.name, label_b or run_b.name) if label_a or label_b else None
    try:
        cmp = compare_runs(run_a, run_b, out, labels, n_boot=n_boot, seed=seed)
    except EvalSetupError as err:
        raise UsageError(str(err)) from err
    paired = cmp.get("paired")
    title = f"compare {cmp['labels'][0]} -> {cmp['labels'][1]}"
    if paired:
        title += f": {paired['paired_tasks']:,} tasks paired, {paired['only_a'] + paired['only_b']:,} unpaired"
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for col in ("group", "metric", "n", "A", "B", "Δ B−A [95% CI]; * excludes 0" if paired else "delta"):
        table.add_column(col, justify="right" if col in ("n", "A", "B") else "left")
    for group, metrics in cmp["groups"].items():
        cells = paired["groups"].get(group, {}) if paired else {}
        for m in ("success", "reward", "ndcg@10") if paired else ("success", "reward", "recall@10"):
            if m in cells:
                c = cells[m]
                table.add_row(group, m, f"{c['n']:,}", f"{c['a']:.3f}", f"{c['b']:.3f}",
                              ci_text(c["delta"], c["lo"], c["hi"]) + (" *" if c["excludes_zero"] else ""))
            elif not paired and m in metrics and metrics[m]["delta"] is not None:
                d = metrics[m]
                table.add_row(group, m, f"{metrics['tasks']['b']:,}", f"{d['a']:.3f}", f"{d['b']:.3f}",
                              f"{d['delta']:+.3f}")
    out_console.print(table)
    flips = cmp.get("flips")
    extra = f"  gained={len(flips['gained'])} lost={len(flips['lost'])}" if flips else ""
    note = "" if paired else "  (no per-task values beside a report: deltas without CIs)"
    out_console.print(f"[green]wrote[/green] {out / 'compare.html'}{extra}{note}", highlight=False)


@eval_app.command("movielens")
def eval_movielens(
    world: Annotated[Path, typer.Argument(help="MovieLens world (`sidekick world import-movielens --out DIR`).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (report.json, report.md, sid/).")],
    quick: Annotated[bool, typer.Option("--quick", help="Short training (SASRec 3 epochs, SID 5) for a smoke run.")]
    = False,
    methods: Annotated[list[str] | None, typer.Option(help="Methods, comma-separated: popularity, bm25, dense, "
                                                      "sasrec, sid, sid-lm (default: all but sid-lm).")] = None,
    max_users: Annotated[int | None, typer.Option(help="Only the first N users (default: all 943).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of SIDs, models and data order (default 0).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML MovieLensBenchConfig "
                                                "(apps/movielens/bench.py).")] = None,
) -> None:
    """MovieLens-100k leave-one-out next-item benchmark: SID generative retrieval vs popularity, BM25, dense, SASRec."""
    from apps.movielens.bench import MovieLensBenchConfig, MovieLensBenchError, format_table, run_movielens_benchmark

    cfg = _config(MovieLensBenchConfig, config, {"world": world, "out": out, "quick": quick or None,
                                                 "methods": _split_names(methods) or None, "max_users": max_users,
                                                 "seed": seed})
    try:
        report = run_movielens_benchmark(cfg, progress=lambda line: console.print(line, highlight=False))
    except MovieLensBenchError as err:
        raise UsageError(str(err)) from err
    out_console.print(format_table(report), highlight=False)
    out_console.print(f"[green]wrote[/green] {out / 'report.json'}", highlight=False)


def main() -> None:
    """Entry point: known errors become one line on stderr and a non-zero exit, never a traceback."""
    from apps import AppError

    try:
        app()
    except (RecordError, ConfigError, UsageError, CurationError, AppError, FileNotFoundError,
            NotADirectoryError) as err:
        console.print(f"[red]error:[/red] {err}", highlight=False, soft_wrap=True)  # one line, whatever the width
        sys.exit(2 if isinstance(err, UsageError | ConfigError | CurationError | AppError) else 1)


if __name__ == "__main__":
    main()
