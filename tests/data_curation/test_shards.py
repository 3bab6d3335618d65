"""Byte-range shards cover every line once; the shard reader quarantines with global line numbers.

    pytest tests/data_curation/test_shards.py
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from data_curation.shards import plan_shards, shard_reader


def _session(i: int) -> str:
    return json.dumps({"session_id": f"s{i}", "user_id": "u", "started_at": 1.0,
                       "turns": [{"role": "user", "text": f"tent number {i}", "ts": 1.0}]})


def test_shards_cover_every_line_once(tmp_path: Path) -> None:
    path = tmp_path / "logs.jsonl"
    lines = [_session(i) for i in range(50)]
    path.write_text("\n".join(lines))  # no newline at the end
    for size in (1, 100, 333, 10_000):
        shards = plan_shards(path, size)
        assert shards[0].start == 0 and shards[-1].end == path.stat().st_size
        assert all(a.end == b.start for a, b in itertools.pairwise(shards))
        ids = [s.session_id for sh in shards for s in shard_reader(path, sh, tmp_path / f"q{size}.jsonl")]
        assert ids == [f"s{i}" for i in range(50)]
        firsts = [sh.first_line for sh in shards]
        assert firsts[0] == 1 and firsts == sorted(set(firsts))


def test_bad_lines_are_quarantined_without_their_content(tmp_path: Path) -> None:
    path = tmp_path / "logs.jsonl"
    secret = "jane.doe@example.com"
    rows = [_session(0), "{not json " + secret, "", _session(1),
            json.dumps({"session_id": "s2", "user_id": "u", "started_at": -1, "turns": [], "note": secret}),
            _session(3)]
    path.write_text("\n".join(rows) + "\n")
    q = tmp_path / "q.jsonl"
    shards = plan_shards(path, 200)
    assert len(shards) > 1
    good = []
    for sh in shards:
        reader = shard_reader(path, sh, q)
        good += [s.session_id for s in reader]
    assert good == ["s0", "s1", "s3"]
    entries = [json.loads(line) for line in q.read_text().splitlines()]
    assert [(e["line"], e["kind"]) for e in entries] == [(2, "bad_json"), (5, "invalid")]
    assert secret not in q.read_text() and "raw" not in entries[0]
    assert "started_at" in entries[1]["reason"] and "note" in entries[1]["reason"]
    assert entries[0]["offset"] == len(rows[0]) + 1
