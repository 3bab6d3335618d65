"""The livestream example that README.md and ``make demo`` print works as printed on the demo's world.

The demo makes its livestream world with ``sidekick world livestream`` and the defaults, so this test does
the same (seed 0) and sends the exact body both files show to a real server: a product must be on screen at
that second, and the answer must be about it (cited facts), not "not sure which product you mean".

Run: .venv/bin/python -m pytest tests/apps/livestream/test_printed_example.py -q -m integration
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from apps.livestream.world import LivestreamWorldConfig, generate_livestream_world
from apps.serve import build_server
from serving.app import create_app
from serving.background import BackgroundServer
from serving.server import ServeConfig

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


def printed_bodies(path: Path) -> list[dict[str, Any]]:
    """The JSON bodies sent to /v1/livestream/answer in a README or Makefile (shell and make quoting undone)."""
    text = path.read_text().replace('\\"', '"')
    found = re.findall(r"/v1/livestream/answer[^\n]*\n[^\n]*-d '(\{[^']*\})'", text)
    return [json.loads(body) for body in found]


def test_the_printed_livestream_example_asks_about_a_product_on_screen(tmp_path: Path) -> None:
    bodies = printed_bodies(ROOT / "README.md") + printed_bodies(ROOT / "Makefile")
    assert len(bodies) == 2, bodies  # one in each: if this fails, an example moved and this test must follow
    world = tmp_path / "livestream"
    generate_livestream_world(LivestreamWorldConfig(), world)  # what `sidekick world livestream` makes
    streams = {s["stream_id"]: s for s in map(json.loads, (world / "streams.jsonl").open())}
    server = build_server(None, [world], ServeConfig())
    with BackgroundServer(create_app(server)) as url:
        for body in bodies:
            stream = streams[body["stream_id"]]
            on_screen = [i for i, (a, b) in zip(stream["item_ids"], stream["windows"], strict=True)
                         if a <= body["ts_offset_s"] <= b]
            assert on_screen, f"nothing is on screen at second {body['ts_offset_s']} of {body['stream_id']}"
            reply = httpx.post(url + "/v1/livestream/answer", json=body, timeout=30).json()
            assert "not sure which product" not in reply["answer"], reply
            assert reply["cited_facts"], reply
