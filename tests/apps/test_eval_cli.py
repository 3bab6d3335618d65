"""`sidekick eval` end to end as a user runs it: a briefly trained tiny agent and three small worlds, real
subprocesses, files written, exit codes and one-line errors.

    .venv/bin/python -m pytest tests/apps/test_eval_cli.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def sidekick(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "apps.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def _images(html_path: Path) -> list[str]:
    images: list[str] = []

    class Page(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "img":
                images.append(dict(attrs)["src"] or "")

    Page().feed(html_path.read_text(encoding="utf-8"))
    return images


def _one_line_error(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and expected in " ".join(proc.stderr.split()), proc.stderr


def in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str | Path
               ) -> tuple[int, str, str]:
    """``sidekick ARGS`` through the CLI's own entry point in this process (no interpreter start-up)."""
    from apps.cli import main

    monkeypatch.setattr(sys, "argv", ["sidekick", *map(str, args)])
    code = 0
    try:
        main()
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, " ".join(out.split()), " ".join(err.split())


def test_eval_agent_then_compare_with_the_fallback(worlds: dict[str, Path], tiny_agent: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    agent_out, fallback_out = tmp_path / "agent", tmp_path / "fallback"
    # the README shape: `sidekick eval AGENT --logs DIR` (short for `eval run`), as a real subprocess
    proc = sidekick("eval", tiny_agent, "--logs", worlds["shopping"], "--limit", 8, "--workers", 4, "--threads", 1,
                    "--max-turns", 2, "--baselines", "fallback,bm25", "--n-boot", 500, "--out", agent_out)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "wrote" in said and "0 ungrounded items served" in said
    assert "success: agent vs baselines" in said and "ndcg@10: agent vs baselines" in said and "Δ vs best" in said
    report = json.loads((agent_out / "report.json").read_text())
    assert report["counts"]["tasks"] == 8 and report["meta"]["agent"] == str(tiny_agent)
    assert report["checks"]["served_output_grounded"] and report["overall"]["steps"] > 0
    assert report["baselines"]["bm25"]["tasks"] == 8 and report["baselines"]["fallback"]["tasks"] == 8
    assert report["baselines"]["fallback"]["all"]["success"] is not None
    # the paired section: per kind and overall, the agent against the fallback (success…) and bm25 (ranking)
    paired = report["paired"]
    assert paired["baselines"] == ["fallback", "bm25"] and paired["n_boot"] == 500
    assert set(paired["groups"]) == {"all", *report["by_kind"]}
    vs_fallback = paired["groups"]["all"]["vs"]["fallback"]["success"]
    assert vs_fallback["n"] == 8 and vs_fallback["agent"] == report["overall"]["success"]
    assert vs_fallback["lo"] <= vs_fallback["delta"] <= vs_fallback["hi"]
    assert vs_fallback["excludes_zero"] == (vs_fallback["lo"] > 0 or vs_fallback["hi"] < 0)
    assert set(paired["groups"]["all"]["vs"]["bm25"]) == {"ndcg@10", "hit@10", "recall@10"}
    rows = [json.loads(x) for x in (agent_out / "per_task.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(set(r["values"]) == {"agent", "fallback", "bm25"} for r in rows)
    assert {"success", "reward", "ndcg@10", "hit@10", "recall@10"} <= set(rows[0]["values"]["fallback"])
    traces = (agent_out / "traces.jsonl").read_text().splitlines()
    assert len(traces) == 8 and json.loads(traces[0])["messages"][0]["role"] == "user"
    assert sorted(_images(agent_out / "report.html")) == ["baselines.png", "latency.png", "success.png"]
    for src in _images(agent_out / "report.html"):
        assert (agent_out / src).is_file()
    assert json.loads((agent_out / "manifest.json").read_text())["counts"]["tasks"] == 8

    # without an agent the fallback is the system under evaluation: as a baseline it is left out, with a note
    code, _, err = in_process(capsys, monkeypatch, "eval", "run", "--logs", worlds["shopping"], "--limit", 10,
                              "--baselines", "fallback", "--out", fallback_out)
    assert code == 0, err
    fallback = json.loads((fallback_out / "report.json").read_text())
    assert fallback["overall"]["degraded"] == 1.0 and fallback["baselines"] == {} and fallback["paired"] is None
    assert "fallback left out" in fallback["baselines_note"]
    # the agent run's fallback baseline is this very replay, task by task
    fb_rows = {r["task_id"]: r["values"]["agent"] for r in map(json.loads, (fallback_out / "per_task.jsonl").open())}
    assert all(fb_rows[r["task_id"]] == r["values"]["fallback"] for r in rows)

    code, out, err = in_process(capsys, monkeypatch, "eval", "compare", fallback_out, agent_out, "--out",
                                tmp_path / "cmp", "--n-boot", 500)
    assert code == 0 and "compare.html" in out, err
    assert "8 tasks paired, 2 unpaired" in out and "Δ B−A [95% CI]" in out
    cmp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert cmp["labels"] == ["fallback", "agent"] and cmp["flips"]["common_tasks"] == 8
    assert (cmp["paired"]["paired_tasks"], cmp["paired"]["only_a"], cmp["paired"]["only_b"]) == (8, 2, 0)
    cell = cmp["paired"]["groups"]["all"]["success"]
    assert cell["n"] == 8 and cell["b"] == report["overall"]["success"]
    assert cell["delta"] == pytest.approx(vs_fallback["delta"], abs=1e-6)  # B − A = agent − fallback, too
    assert any("2 only in fallback" in w for w in cmp["warnings"])
    assert _images(tmp_path / "cmp" / "compare.html") == ["compare.png"]


def test_eval_livestream_and_travel_in_one_run(worlds: dict[str, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    mixed = tmp_path / "mixed.jsonl"
    lines = [x for app in ("livestream", "travel") for x in (worlds[app] / "tasks.jsonl").read_text().splitlines()[:5]]
    mixed.write_text("\n".join(lines) + "\n")
    code, _, err = in_process(capsys, monkeypatch, "eval", "--logs", mixed, "--world", worlds["livestream"],
                              "--world", worlds["travel"], "--out", tmp_path / "o")
    assert code == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["counts"]["by_app"] == {"livestream": 5, "travel": 5}
    assert "r.correctness" in report["by_app"]["livestream"] and "r.feasible" in report["by_app"]["travel"]
    assert "no task here has target items to rank" in report["baselines_note"]


def test_model_only_skips_the_apps_first_answer(worlds: dict[str, Path], tiny_agent: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """As served the livestream reader answers the questions it is sure of before any model call; --model-only
    hands every turn to the model (the fallback baseline is the reader either way)."""
    reports = {}
    for mode in ("--as-served", "--model-only"):
        code, _, err = in_process(capsys, monkeypatch, "eval", tiny_agent, "--logs", worlds["livestream"], "--limit",
                                  6, "--baselines", "fallback", "--max-new-tokens", 8, mode, "--out", tmp_path / mode)
        assert code == 0, err
        reports[mode] = json.loads((tmp_path / mode / "report.json").read_text())
    served, alone = reports["--as-served"], reports["--model-only"]
    assert (served["meta"]["model_only"], alone["meta"]["model_only"]) == (False, True)
    pages = {mode: (tmp_path / mode / "report.html").read_text() for mode in reports}
    assert "Model only" in pages["--model-only"] and "Model only" not in pages["--as-served"]
    assert served["by_app"]["livestream"]["sure"] > 0 and alone["by_app"]["livestream"]["sure"] == 0
    assert alone["by_app"]["livestream"]["steps"] == 1.0 > served["by_app"]["livestream"]["steps"]  # model calls


def test_bad_inputs_are_one_line_errors(worlds: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _one_line_error(sidekick("eval", tmp_path / "no-agent", "--logs", worlds["shopping"], "--out", tmp_path / "o"),
                    "no such agent directory")
    for args, expected in (
        (("eval", "run", "--logs", tmp_path / "nowhere", "--out", tmp_path / "o"), "no such directory"),
        (("eval", "run", "--out", tmp_path / "o"), "--logs DIR is required"),
        (("eval", "--logs", worlds["shopping"], "--baselines", "magic", "--out", tmp_path / "o"), "--baselines magic"),
        (("eval", "compare", tmp_path, tmp_path, "--out", tmp_path / "c"), "no report.json"),
    ):
        code, _, err = in_process(capsys, monkeypatch, *args)
        assert code == 2 and expected in err and "Traceback" not in err, (args, err)


def test_eval_movielens(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from apps.movielens.importer import MovieLensImportConfig, import_movielens

    import_movielens(MovieLensImportConfig(), tmp_path / "ml")
    code, out, err = in_process(capsys, monkeypatch, "eval", "movielens", tmp_path / "ml", "--out", tmp_path / "b",
                                "--quick", "--methods", "popularity,bm25", "--max-users", 20)
    assert code == 0, err
    assert "| popularity |" in out and json.loads((tmp_path / "b" / "report.json").read_text())
    code, _, err = in_process(capsys, monkeypatch, "eval", "movielens", tmp_path / "nothing", "--out", tmp_path / "c")
    assert code == 2 and "has no catalog.jsonl" in err
