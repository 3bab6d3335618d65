"""The one agent step's prompt building: token in, token out (the session's token context extended by the
template's delta) vs rendering the whole chat afresh every step (what the loop did before), on real agent
turns — a scripted model runs search_catalog -> get_item -> respond, so the prompt grows with tool results.

    .venv/bin/python bench/agent_step.py --quick          # table + bench/results/agent_step.json

Both build the prompt of every step of the same turns with the same tokenizer (the tiny agent's, or
``--agent DIR``); the table gives ms per step and prompt tokens, and checks that the rendered prompt and
the token context agree on everything but the model's own tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import apps
from bench.common import ensure_sid_dir, ensure_tiny_agent, ensure_world
from harness.agent import AgentLoop, ModelAccess, fit_prompt
from harness.agent_dir import load_agent
from harness.protocol import render_call
from harness.session import SessionState
from infra.engines.base import Completion, GenerationRequest


class Script:
    """An engine that answers with scripted tool calls, tokenised by the real tokenizer (ids as a model's)."""

    def __init__(self, tokenizer: object, replies: list[str]) -> None:
        self.tok, self.replies = tokenizer, replies
        self.calls: list[GenerationRequest] = []
        self.tokens_per_second = None
        self.weights_version = 0

    def generate(self, requests: list[GenerationRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            text = self.replies[len(self.calls) % len(self.replies)]
            self.calls.append(req)
            ids = self.tok(text + self.tok.eos_token, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
            out.append([Completion(request_id="s", index=0, token_ids=ids, text=text, logprobs=[0.0] * len(ids),
                                   finish_reason="eos", prompt_tokens=len(req.prompt), latency_ms=0.0,
                                   weights_version=0)])
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 turns (default 100).")
    ap.add_argument("--agent", type=Path, default=None, help="Agent directory (default: a tiny agent built here).")
    ap.add_argument("--work", type=Path, default=Path("runs/bench"), help="Cache of the shared bench inputs.")
    ap.add_argument("--out", type=Path, default=Path("bench/results/agent_step.json"))
    args = ap.parse_args()
    world = ensure_world(args.work, 2000)
    agent_dir = args.agent or ensure_tiny_agent(args.work, world, ensure_sid_dir(world, args.work / "sid-2000"), 0, 1)
    tok = load_agent(agent_dir).tokenizer
    env = apps.load_env(world)
    items = [i.item_id for i in list(env.spec.catalog)[:3]]
    replies = [render_call("search_catalog", {"query": "warm jacket"}), render_call("get_item", {"item_id": items[0]}),
               render_call("respond", {"text": "This one.", "item_ids": [items[0]]})]
    turns = 20 if args.quick else 100
    rows = {"token context": [], "render afresh": []}
    tokens: list[int] = []
    for t in range(turns):
        engine = Script(tok, replies)
        loop = AgentLoop(env.spec, ModelAccess(engine, tok))  # type: ignore[arg-type]
        session = SessionState(app="shopping")
        turn = loop.begin(session, f"a warm jacket for winter, turn {t}")
        while True:
            start = time.perf_counter()
            request = turn.request()
            rows["token context"].append((time.perf_counter() - start) * 1000)
            if request is None:
                break
            start = time.perf_counter()
            fresh = fit_prompt(tok, env.spec.system_prompt, session.messages, env.spec.tools.schemas(), 4096)
            rows["render afresh"].append((time.perf_counter() - start) * 1000)
            tokens.append(len(request.prompt))
            assert fresh is not None and abs(len(fresh) - len(request.prompt)) < 64
            if turn.apply(engine.generate([request])[0][0]):
                break
        turn.finish()
    table = {name: {"ms_p50": round(statistics.median(v), 3), "ms_mean": round(statistics.fmean(v), 3),
                    "steps": len(v)} for name, v in rows.items()}
    result = {"turns": turns, "prompt_tokens_p50": statistics.median(tokens), "agent": str(agent_dir), **table}
    print(f"{'prompt building':16s} {'ms p50':>8s} {'ms mean':>8s} {'steps':>6s}   (prompt tokens p50 "
          f"{result['prompt_tokens_p50']:.0f})")
    for name, r in table.items():
        print(f"{name:16s} {r['ms_p50']:8.2f} {r['ms_mean']:8.2f} {r['steps']:6d}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
