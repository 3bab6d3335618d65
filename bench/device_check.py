"""GPU check of the vLLM path (run on a machine with a GPU and vLLM): trie-constrained generate, a served
shopping turn and an RL step whose rollout runs on vLLM with a weight update. Prints one JSON line.

    bash bench/device_check.sh            # what the device tool runs; --quick is the default size here
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import apps
from apps.shopping.sft import SOURCE
from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
from harness.agent import AgentLoop, ModelAccess
from harness.agent_dir import agent_engine, load_agent
from harness.session import SessionState
from infra.engines import EngineSettings
from infra.engines.base import GenerationRequest, SamplingParams
from serving.server import AgentServer
from sid.build import category_sids
from training.rl.rollout import EpisodeJob, RolloutSettings, run_episodes
from training.rl.trainer import TrainerSettings
from training.rl.workers import TrainWorker
from training.sft import SFTConfig, train_sft

VLLM = EngineSettings(backend="vllm", dtype="bf16", gpu_memory_utilization=0.3, enforce_eager=True, max_model_len=4096)


def main() -> None:
    out: dict[str, object] = {}
    root = Path(tempfile.mkdtemp(prefix="device-check-"))
    world = root / "world"
    generate_shopping_world(ShoppingWorldConfig(items=300, tasks=40, sessions=0, customers=1), world)
    sid = category_sids(world, root / "sid")
    cfg = SFTConfig.model_validate({"base": "tiny", "world": world, "sid": sid, "out": root / "sft", "max_steps": 4,
                                    "batch_size": 4, "max_seq_len": 128, "align_items": 20, "save_every": 0,
                                    "eval_every": 0, "precision": "fp32"})
    agent_dir = train_sft(cfg, SOURCE).final_dir
    assert agent_dir is not None
    agent = load_agent(agent_dir)
    kit, env = apps.kit("shopping"), apps.load_env(world)
    t0 = time.perf_counter()
    engine = agent_engine(agent, VLLM)
    out["vllm_start_s"] = round(time.perf_counter() - t0, 1)
    model = ModelAccess(engine=engine, tokenizer=agent.tokenizer, sid=kit.sid(env, agent) if kit.sid else None)
    # 1. generate under the SID trie constraint: a SID span names a live item
    loop = AgentLoop(env.spec, model)
    session = SessionState(app="shopping", messages=[{"role": "user", "content": "hiking boots"}])
    ctx = loop.begin(session, None).ctx
    prompt = agent.tokenizer("<|sid_start|>", add_special_tokens=False)["input_ids"]
    [[c]] = engine.generate([GenerationRequest(prompt=prompt, params=SamplingParams(max_new_tokens=8, temperature=0),
                                               constraint=loop.sid_constraint(ctx))])
    out["constrained_text"] = c.text
    # 2. one served shopping turn on vLLM
    server = AgentServer({"shopping": env.spec}, model)
    result = server.run_turn("shopping", SessionState(app="shopping"), "waterproof hiking boots", 5000.0)
    server.close()
    out["served"] = {"reply": result.final.reply[:80], "degraded": result.degraded, "reason": result.reason}
    # 3. one RL step whose rollout runs on vLLM, then the weights go back to the vLLM engine
    tasks = [t for t in __import__("apps.evaluate", fromlist=["load_tasks"]).load_tasks(world) if not t.hidden][:2]
    jobs = [EpisodeJob(task=t, group=g, sample=s, seed=s) for g, t in enumerate(tasks) for s in range(2)]
    trajs = run_episodes(jobs, env, model, RolloutSettings(max_new_tokens=32, engine=VLLM))
    trainer = TrainWorker(agent_dir, TrainerSettings())
    parts = trainer.rl_step(trajs)
    from training.rl.trainer import state_from_numpy

    engine.update_weights(state_from_numpy(trainer.weights()), 1)
    [[after]] = engine.generate([GenerationRequest(prompt=prompt, params=SamplingParams(max_new_tokens=4))])
    out["rl"] = {"trajectories": len(trajs), "loss": {k: round(float(v), 5) for k, v in parts.items()},
                 "weights_version": engine.weights_version, "generates_after_update": bool(after.token_ids)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
