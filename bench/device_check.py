"""GPU check of the engine paths (run on a machine with a GPU): SFT on CUDA, trie-constrained generate, a served
shopping turn, an RL step whose rollout runs on the GPU engine with a weight update, and sleep/wake on the GPU
(what lending capacity to rollout needs). Prints one JSON line.

    bash bench/device_check.sh                  # what the device tool runs
    python bench/device_check.py --backend hf   # transformers on CUDA (no vLLM needed)
    python bench/device_check.py --backend vllm # vLLM (pip install the project's `gpu` extra)

``--backend auto`` (default) takes vLLM where it imports, else the HF engine on CUDA.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import apps
from apps.evaluate import load_tasks
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
from training.rl.trainer import TrainerSettings, state_from_numpy
from training.rl.workers import TrainWorker
from training.sft import SFTConfig, train_sft

SETTINGS = {
    "vllm": EngineSettings(backend="vllm", dtype="bf16", gpu_memory_utilization=0.3, enforce_eager=True,
                           max_model_len=4096),
    "hf": EngineSettings(backend="hf", dtype="bf16"),
}


def _mib(peak: bool = False) -> float:
    if not torch.cuda.is_available():
        return 0.0
    return round((torch.cuda.max_memory_allocated() if peak else torch.cuda.memory_allocated()) / 2**20, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["auto", "hf", "vllm"], default="auto")
    ap.add_argument("--cpu", action="store_true", help="dry run of the script on the CPU (hf backend only)")
    args = ap.parse_args()
    backend = args.backend
    if backend == "auto":
        backend = "vllm" if importlib.util.find_spec("vllm") is not None else "hf"
    if not torch.cuda.is_available() and not args.cpu:
        raise SystemExit("device_check: no CUDA device is visible (--cpu: a dry run here)")
    device = "cpu" if args.cpu else "cuda"
    settings = SETTINGS[backend]
    out: dict[str, Any] = {"backend": backend, "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
                           "torch": torch.__version__, "transformers": __import__("transformers").__version__}
    root = Path(tempfile.mkdtemp(prefix="device-check-"))
    world = root / "world"
    generate_shopping_world(ShoppingWorldConfig(items=300, tasks=40, sessions=0, customers=1), world)
    sid = category_sids(world, root / "sid")
    # 0. SFT on the GPU (device auto = cuda, precision auto = bf16 autocast there)
    t0 = time.perf_counter()
    cfg = SFTConfig.model_validate({"base": "tiny", "world": world, "sid": sid, "out": root / "sft", "max_steps": 8,
                                    "batch_size": 4, "max_seq_len": 128, "align_items": 20, "save_every": 0,
                                    "eval_every": 0, "precision": "auto", "device": device})
    sft = train_sft(cfg, SOURCE)
    agent_dir = sft.final_dir
    assert agent_dir is not None
    out["sft"] = {"steps": sft.step, "s": round(time.perf_counter() - t0, 1), "eval_loss": sft.eval_loss,
                  "peak_gpu_mib": _mib(peak=True)}
    del sft
    gc.collect()
    base_mib = _mib()  # what is left of the SFT run (nothing, when it cleaned up)
    agent = load_agent(agent_dir)
    if backend == "hf":
        agent.model.to(device)
    out["weights_mib"] = round(sum(p.numel() * p.element_size() for p in agent.model.parameters()) / 2**20, 1)
    out["gpu_mib_before_engine"] = base_mib
    kit, env = apps.kit("shopping"), apps.load_env(world)
    t0 = time.perf_counter()
    engine = agent_engine(agent, settings)
    out["engine_start_s"] = round(time.perf_counter() - t0, 1)
    model = ModelAccess(engine=engine, tokenizer=agent.tokenizer, sid=kit.sid(env, agent) if kit.sid else None)
    # 1. generate under the SID trie constraint: a SID span names a live item
    loop = AgentLoop(env.spec, model)
    session = SessionState(app="shopping", messages=[{"role": "user", "content": "hiking boots"}])
    ctx = loop.begin(session, None).ctx
    prompt = agent.tokenizer("<|sid_start|>", add_special_tokens=False)["input_ids"]
    [[c]] = engine.generate([GenerationRequest(prompt=prompt, params=SamplingParams(max_new_tokens=8, temperature=0),
                                               constraint=loop.sid_constraint(ctx))])
    out["constrained_text"] = c.text
    # a batch of 32 sampled rows, seeded: the same seed gives the same tokens whatever shares the batch
    reqs = [GenerationRequest(prompt=prompt, params=SamplingParams(max_new_tokens=16, temperature=1.0, seed=i))
            for i in range(32)]
    engine.generate(reqs)  # warm-up: the first CUDA call pays for kernel loading
    t0 = time.perf_counter()
    batch = engine.generate(reqs)
    out["batch32_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    [[alone]] = engine.generate(reqs[5:6])
    out["seeded_row_reproduces"] = alone.token_ids == batch[5][0].token_ids
    # 2. one served shopping turn on the GPU engine
    server = AgentServer({"shopping": env.spec}, model)
    result = server.run_turn("shopping", SessionState(app="shopping"), "waterproof hiking boots", 5000.0)
    server.close()
    out["served"] = {"reply": result.final.reply[:80], "degraded": result.degraded, "reason": result.reason}
    # 3. one RL step whose rollout runs on the GPU engine, then the weights go back to it
    tasks = [t for t in load_tasks(world) if not t.hidden][:2]
    jobs = [EpisodeJob(task=t, group=g, sample=s, seed=s) for g, t in enumerate(tasks) for s in range(2)]
    trajs = run_episodes(jobs, env, model, RolloutSettings(max_new_tokens=32, engine=settings))
    trainer = TrainWorker(agent_dir, TrainerSettings())
    parts = trainer.rl_step(trajs)
    engine.update_weights(state_from_numpy(trainer.weights()), 1)
    [[after]] = engine.generate([GenerationRequest(prompt=prompt, params=SamplingParams(max_new_tokens=4))])
    out["rl"] = {"trajectories": len(trajs), "loss": {k: round(float(v), 5) for k, v in parts.items()},
                 "weights_version": engine.weights_version, "generates_after_update": bool(after.token_ids)}
    # 4. sleep / wake on the GPU: what a serving replica does to lend its memory to rollout, and to take it back
    gc.collect()
    mem: dict[str, float] = {"awake": _mib()}
    engine.sleep(1)
    mem["sleep1"] = _mib()
    engine.wake()
    mem["woken1"] = _mib()
    [[w1]] = engine.generate([GenerationRequest(prompt=prompt, params=SamplingParams(max_new_tokens=4,
                                                                                      temperature=0))])
    engine.sleep(2)
    mem["sleep2"] = _mib()
    engine.wake()
    engine.update_weights(state_from_numpy(trainer.weights()), 2)
    [[w2]] = engine.generate([GenerationRequest(prompt=prompt, params=SamplingParams(max_new_tokens=4,
                                                                                      temperature=0))])
    out["sleep_wake"] = {"gpu_mib": mem, "same_tokens_after_level2": w1.token_ids == w2.token_ids,
                         "weights_version": engine.weights_version}
    # 5. lending on one device: the served engine and an RL run's rollout slot side by side (a second model on
    # the same GPU), a turn cutting the lent rollout mid-call, every episode still finished
    try:
        out["lending"] = _lending_check(world, agent_dir, settings, model, env, tasks)
    except Exception as err:  # prepared without a device: report what broke instead of hiding the other steps
        out["lending"] = {"error": f"{type(err).__name__}: {err}"}
    print(json.dumps(out))


def _lending_check(world: Path, agent_dir: Path, settings: EngineSettings, model: ModelAccess, env: Any,
                   tasks: list[Any]) -> dict[str, Any]:
    import threading

    from apps.serve import lending_slot
    from serving.lending import LendingConfig
    from serving.server import ServeConfig
    from training.rl.lending import JoinSpec

    server = AgentServer({"shopping": env.spec}, model,
                         ServeConfig(api_key="device-check", lending=LendingConfig(enabled=True, idle_ms=0)))
    spec = JoinSpec(run="device-check", app="shopping", world=str(world), agent=str(agent_dir),
                    rollout=RolloutSettings(max_new_tokens=64, max_turns=1, engine=settings))
    lender = server.start_lending(lending_slot)
    try:
        t0 = time.perf_counter()
        lender.join(spec)
        join_s = time.perf_counter() - t0
        gpu_mib = _mib()
        jobs = [EpisodeJob(task=t, group=g, sample=s, seed=s) for g, t in enumerate(tasks) for s in range(8)]
        lender.submit("device-check", jobs)
        threading.Timer(0.05, lambda: server.run_turn("shopping", SessionState(app="shopping"), "trail shoes",
                                                      5000.0)).start()
        done: list[Any] = []
        end = time.monotonic() + 300
        while len(done) < len(jobs) and time.monotonic() < end:
            done += lender.collect("device-check")[0]
            time.sleep(0.05)
        return {"join_s": round(join_s, 1), "gpu_mib_both_engines": gpu_mib, "episodes": len(done),
                "of": len(jobs), "preemptions": dict(lender.preemptions), "rollout_tokens": lender.tokens}
    finally:
        lender.close()
        server.close()


if __name__ == "__main__":
    main()
