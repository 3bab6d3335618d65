"""Co-occurrence embeddings from session logs (the optional collaborative half of item vectors)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sid.build import collaborative_embeddings


def test_items_bought_together_point_the_same_way(tmp_path: Path) -> None:
    logs = tmp_path / "logs.jsonl"
    sessions = []
    for k in range(40):  # a/b always together, c/d always together, e never seen with anything
        pair = ("a", "b") if k % 2 == 0 else ("c", "d")
        events = [{"type": "view", "ts": 1.0, "item_id": i} for i in pair]
        sessions.append({"session_id": f"s{k}", "user_id": "u", "started_at": 0, "events": events})
    logs.write_text("\n".join(json.dumps(s) for s in sessions) + "\n{broken line\n")
    v = collaborative_embeddings(logs, ["a", "b", "c", "d", "e"], dim=2, seed=0)
    assert v.shape == (5, 2)
    np.testing.assert_allclose(np.linalg.norm(v[:4], axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > 0.99 and v[2] @ v[3] > 0.99 and abs(v[0] @ v[2]) < 0.1
    assert not v[4].any()  # never co-occurs: zeros, not noise


def test_too_few_sessions_give_zeros(tmp_path: Path) -> None:
    logs = tmp_path / "logs.jsonl"
    logs.write_text(json.dumps({"events": [{"item_id": "a"}, {"item_id": "b"}]}) + "\n")
    assert not collaborative_embeddings(logs, ["a", "b"], dim=8, seed=0).any()
