"""`sidekick curate` as a user runs it: a real subprocess, resume on rerun, one-line errors.

    pytest -m integration tests/data_curation/test_curate_cli.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
SIDEKICK = str(Path(sys.executable).parent / "sidekick")


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SIDEKICK, *map(str, args)], capture_output=True, text=True, timeout=300, env=env)


def test_curate_world(tmp_path: Path) -> None:
    world, out, key = tmp_path / "w", tmp_path / "c", tmp_path / "keys" / "k"
    assert run("world", "shopping", "--out", world, "--items", 2000, "--tasks", 100, "--sessions", 300).returncode == 0
    cfg = tmp_path / "curate.yaml"
    cfg.write_text("select:\n  embedder: hashing\n  keep_fraction: 0.8\nanonymise:\n  tagger: false\n")
    first = run("curate", world, "--out", out, "--config", cfg, "--new-key", key, "--workers", 1)
    assert first.returncode == 0, first.stderr
    assert "input_lines=300" in " ".join(first.stdout.split())
    report = json.loads((out / "report.json").read_text())
    assert report["funnel"]["balanced"] and report["config"]["select"]["keep_fraction"] == 0.8
    again = run("curate", world, "--out", out, "--config", cfg, "--key-file", key)
    assert again.returncode == 0, again.stderr
    assert all(not s["ran"] for s in json.loads((out / "report.json").read_text())["stages"].values())


def test_one_line_errors(tmp_path: Path) -> None:
    no_key = run("curate", tmp_path, "--out", tmp_path / "c", env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert no_key.returncode == 2 and "Traceback" not in no_key.stderr
    assert "no logs.jsonl" in " ".join(no_key.stderr.split())
    bad = run("curate", tmp_path, "--out", tmp_path / "c", "--keep-fraction", 0)
    assert bad.returncode == 2 and "keep_fraction" in bad.stderr and "Traceback" not in bad.stderr
    bad_names = run("curate", tmp_path, "--out", tmp_path / "c", "--names", "bert")
    assert bad_names.returncode == 2 and "names" in bad_names.stderr and "Traceback" not in bad_names.stderr


def test_curate_scrubs_pii_the_generator_never_wrote(tmp_path: Path) -> None:
    """Names and addresses planted into a world's logs by hand are gone from every curated split."""
    world, out, key = tmp_path / "w", tmp_path / "c", tmp_path / "keys" / "k"
    assert run("world", "shopping", "--out", world, "--items", 2000, "--tasks", 100, "--sessions", 200).returncode == 0
    planted = ["Nokuthula Dlamini", "Karl-Marx-Allee 91, 10243 Berlin", "Olumide", "ola dot nordmann at online dot no"]
    lines = (world / "logs.jsonl").read_text().splitlines()
    ids = []
    for i, value in enumerate(planted):  # the first user turn of some sessions gets a value appended
        s = json.loads(lines[i])
        ids.append(s["session_id"])
        turn = next(t for t in s["turns"] if t["role"] == "user")
        turn["text"] += f" - please send it to {value}" if i != 2 else f" and can {value} collect it friday"
        lines[i] = json.dumps(s)
    (world / "logs.jsonl").write_text("\n".join(lines) + "\n")
    cfg = tmp_path / "curate.yaml"
    cfg.write_text("select:\n  embedder: hashing\n  keep_fraction: 1.0\nquality:\n  require_outcome: false\n")
    done = run("curate", world, "--out", out, "--config", cfg, "--new-key", key, "--workers", 1, "--no-tagger")
    assert done.returncode == 0, done.stderr
    text = "".join(p.read_text() for p in out.glob("*/logs.jsonl"))
    assert text and not any(v in text for v in [*planted, "Nokuthula", "Karl-Marx-Allee", "nordmann"])
    kept = {s["session_id"]: s for p in out.glob("*/logs.jsonl") for s in map(json.loads, p.read_text().splitlines())}
    written = [" ".join(t["text"] for t in kept[i]["turns"]) for i in ids if i in kept]
    assert len(written) >= 3, "the planted sessions should survive curation (else this test proves nothing)"
    assert all(any(p in w for p in ("<NAME>", "<ADDRESS>", "<EMAIL>")) for w in written)


def test_curate_with_the_tagger_scrubs_what_no_rule_finds(tmp_path: Path) -> None:
    """The tagger (anonymise.tagger, on by default) in a real `sidekick curate`: a lower-case name with no cue, which
    the rules leave, is gone. The model is one trained here on a few sentences of this test (`anonymise.tagger_dir`):
    the default one takes ~5 minutes to train on first use (tests/data_curation/test_tagger.py trains through the same
    code; bench/curation.py scores the real one)."""
    from data_curation.tagger import train_tagger

    sets = tmp_path / "sets"
    sets.mkdir()
    rows = []
    for i, name in enumerate(["zubair", "ottilie", "kwabena", "marisol", "teodor", "haruka", "ifeoma", "leilani",
                              "casimir", "anouk", "soraya", "tamati", "yusuf", "elodie", "dmitri", "priyanka"]):
        for j, pattern in enumerate(["leave it with {} next door if nobody answers", "{} will collect the parcel",
                                     "thanks {} for the quick reply", "is the blue kettle in stock, {} asked"]):
            text = pattern.format(name)
            rows.append({"id": f"r{i}-{j}", "turns": [text], "pii": [{"turn": 0, "type": "NAME", "value": name}]})
        rows.append({"id": f"r{i}-n", "turns": ["leave it at the door if nobody answers"], "pii": []})
    (sets / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    train_tagger(tmp_path / "tagger", sets, ("mine",), epochs=25, progress=False)
    world, out, key = tmp_path / "w", tmp_path / "c", tmp_path / "keys" / "k"
    assert run("world", "shopping", "--out", world, "--items", 2000, "--tasks", 100, "--sessions", 120).returncode == 0
    lines = (world / "logs.jsonl").read_text().splitlines()
    s = json.loads(lines[0])
    turn = next(t for t in s["turns"] if t["role"] == "user")
    turn["text"] += " - leave it with brenna next door if nobody answers"
    lines[0] = json.dumps(s)
    (world / "logs.jsonl").write_text("\n".join(lines) + "\n")
    cfg = tmp_path / "curate.yaml"
    cfg.write_text("select:\n  embedder: hashing\n  keep_fraction: 1.0\nquality:\n  require_outcome: false\n"
                   f"anonymise:\n  tagger_dir: {tmp_path / 'tagger'}\n")
    without = run("curate", world, "--out", tmp_path / "rules", "--config", cfg, "--new-key", key, "--no-tagger")
    assert without.returncode == 0, without.stderr
    assert "brenna" in "".join(p.read_text() for p in (tmp_path / "rules").glob("*/logs.jsonl"))  # else: no proof
    done = run("curate", world, "--out", out, "--config", cfg, "--key-file", key)
    assert done.returncode == 0, done.stderr
    text = "".join(p.read_text() for p in out.glob("*/logs.jsonl"))
    assert "leave it with <NAME> next door" in text and "brenna" not in text
    assert json.loads((out / "report.json").read_text())["config"]["anonymise"]["tagger"] is True
    cfg.write_text(f"anonymise:\n  tagger_dir: {tmp_path / 'sets'}\n")  # a directory without a trained tagger
    bad = run("curate", world, "--out", tmp_path / "bad", "--config", cfg, "--key-file", key)
    assert bad.returncode == 2 and "no trained PII tagger" in bad.stderr and "Traceback" not in bad.stderr
