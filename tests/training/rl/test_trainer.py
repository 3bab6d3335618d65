"""Trajectory packing, the shared-prefix forward and the policy update.

Run: ``.venv/bin/python -m pytest tests/training/rl/test_trainer.py -q``
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from training.rl.trainer import PolicyTrainer, TrainerSettings, shared_prefix_len, token_logprobs
from training.rl.trajectory import SequenceBuilder, Trajectory, pack

PREFIX = list(range(5, 45))  # 40 shared prompt tokens


def _model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, max_position_embeddings=256)
    return LlamaForCausalLM(cfg)


def _traj(group: int, sample: int, completion: list[int], context: list[int] | None = None,
          second: list[int] | None = None, reward: float = 0.0) -> Trajectory:
    seq = SequenceBuilder([*PREFIX, 50 + sample])
    seq.add_completion(completion, [-1.0] * len(completion), version=3)
    if context is not None and second is not None:
        seq.add_context(context)
        seq.add_completion(second, [-2.0] * len(second), version=4)
    return Trajectory(task_id=f"t{group}", group=group, sample=sample, tokens=seq.tokens, mask=seq.mask,
                      logprobs=seq.logprobs, chunks=seq.chunks, versions=seq.versions, reward=reward)


def test_packing_masks_every_token_the_policy_did_not_write() -> None:
    a = _traj(0, 0, [7, 8], context=[60, 61, 62], second=[9])
    b = _traj(0, 1, [10])
    batch = pack([a, b], pad_id=1)
    n = len(PREFIX) + 1
    assert batch.input_ids.shape == (2, n + 6)
    # row a: prompt (mask 0) | 7 8 (1) | tool output 60 61 62 (0) | 9 (1)
    assert batch.mask[0].tolist() == [0.0] * n + [1, 1, 0, 0, 0, 1]
    assert batch.chunks[0, n:].tolist() == [0, 0, -1, -1, -1, 1]
    assert batch.old_logp[0, n:].tolist() == [-1.0, -1.0, 0, 0, 0, -2.0]
    # row b: prompt | 10 | padding (attention 0, mask 0, pad id)
    assert batch.mask[1].tolist() == [0.0] * n + [1, 0, 0, 0, 0, 0]
    assert batch.attention[1].tolist() == [1] * (n + 1) + [0] * 5
    assert batch.input_ids[1, n + 1:].tolist() == [1] * 5
    assert a.version == 3 and a.response_tokens == 3


def test_shared_prefix_stops_before_the_first_policy_token() -> None:
    same_start = [_traj(0, 0, [7, 8]), _traj(0, 0, [7, 9])]  # identical prompts and a shared first policy token
    assert shared_prefix_len(pack(same_start, 1)) == len(PREFIX) + 1
    differ = [_traj(0, 0, [7]), _traj(0, 1, [7])]  # prompts differ at their last token
    assert shared_prefix_len(pack(differ, 1)) == len(PREFIX)


def test_shared_prefix_forward_equals_the_full_forward_in_values_and_gradients() -> None:
    trajs = [_traj(0, 0, [7, 8], context=[60, 61], second=[9, 3]), _traj(0, 1, [10]), _traj(1, 2, [11, 12, 13])]
    batch = pack(trajs, pad_id=1)
    fast, slow = _model(), _model()
    lp_fast, ent_fast = token_logprobs(fast, batch, with_entropy=True)
    full = slow(input_ids=batch.input_ids, attention_mask=batch.attention).logits
    ref = torch.log_softmax(full[:, :-1].float(), -1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    m = batch.mask[:, 1:]
    torch.testing.assert_close(lp_fast[:, 1:] * m, ref * m, atol=1e-5, rtol=1e-4)
    assert ent_fast is not None and ent_fast.shape == batch.mask.shape
    (lp_fast * batch.mask).sum().backward()
    (ref * m).sum().backward()
    for (name, p), q in zip(fast.named_parameters(), slow.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-3, msg=lambda s, n=name: f"{n}: {s}")


def test_rl_step_moves_probability_towards_the_better_sample() -> None:
    model = _model()
    good, bad = _traj(0, 0, [20], reward=1.0), _traj(0, 1, [21], reward=0.0)
    # prompts differ only in the sample token: make them equal so both answer the same context
    bad.tokens[len(PREFIX)] = good.tokens[len(PREFIX)]
    batch = pack([good, bad], 1)
    with torch.no_grad():
        before, _ = token_logprobs(model, batch)
    for t, lp in zip((good, bad), before[:, -1].tolist(), strict=True):
        t.logprobs[-1] = lp  # on-policy: behaviour log-probs are the current ones
    trainer = PolicyTrainer(model, 1, TrainerSettings(lr=1e-2, advantage="grpo"))
    parts = trainer.rl_step([good, bad])
    with torch.no_grad():
        after, _ = token_logprobs(model, batch)
    assert after[0, -1] > before[0, -1] and after[1, -1] < before[1, -1]
    assert trainer.version == 1 and math.isfinite(parts["grad_norm"]) and parts["clip_fraction"] == 0.0
    # on-policy, ratio 1: the surrogate is -mean(A) over tokens = -(1 + -1)/2 = 0
    assert parts["pg"] == pytest.approx(0.0, abs=1e-6)


def test_an_rl_batch_without_policy_tokens_changes_no_weight_and_counts_as_an_update() -> None:
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    inert = [Trajectory(task_id="t0", group=0, sample=k, tokens=[3], mask=[0], logprobs=[0.0], chunks=[-1],
                        reward=float(k)) for k in range(2)]
    trainer = PolicyTrainer(model, 1, TrainerSettings(lr=1e-2, advantage="grpo"))
    assert trainer.rl_step(inert) == {"no_policy_tokens": 1.0, "grad_norm": 0.0}
    assert trainer.version == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_sft_step_lowers_the_nll_of_the_kept_trajectories() -> None:
    model = _model()
    trainer = PolicyTrainer(model, 1, TrainerSettings(lr=1e-2))
    trajs = [_traj(0, 0, [20, 21, 3]), _traj(1, 1, [22, 3])]
    first = trainer.sft_step(trajs)["nll"]
    for _ in range(5):
        last = trainer.sft_step(trajs)["nll"]
    assert last < first


def test_kl_needs_a_reference() -> None:
    with pytest.raises(ValueError, match="reference"):
        PolicyTrainer(_model(), 1, TrainerSettings(kl_coef=0.1))


def test_a_batch_of_two_apps_is_micro_batched_by_opening_with_the_gradient_of_one_batch() -> None:
    """Two apps' prompts (openings longer than OPENING tokens) interleaved A, B, A, B: micro-batches of 2 are
    [A, A] and [B, B] (each runs its shared prompt once) and accumulate to the gradient of the whole batch."""
    from training.rl.trainer import OPENING, micro_batches

    def app_traj(app: int, group: int, sample: int, completion: list[int], reward: float) -> Trajectory:
        seq = SequenceBuilder([app + (i % 40) for i in range(OPENING + 6)] + [50 + sample])
        seq.add_completion(completion, [-1.0] * len(completion), version=0)
        return Trajectory(task_id=f"t{group}", group=group, sample=sample, tokens=seq.tokens, mask=seq.mask,
                          logprobs=seq.logprobs, chunks=seq.chunks, versions=seq.versions, reward=reward)

    trajs = [app_traj(5, 0, 0, [20, 21], 1.0), app_traj(9, 1, 0, [22], 0.0), app_traj(5, 0, 1, [23], 0.0),
             app_traj(9, 1, 1, [24, 25, 26], 1.0)]
    assert micro_batches(trajs, 2) == [[0, 2], [1, 3]]
    grads = []
    for micro in (2, 8):
        model = _model()
        trainer = PolicyTrainer(model, 1, TrainerSettings(lr=1e-3, micro_batch=micro, advantage="grpo",
                                                          max_grad_norm=1e9))
        trainer.rl_step(trajs)
        grads.append([p.grad.clone() for p in model.parameters()])
    for split, whole in zip(*grads, strict=True):
        torch.testing.assert_close(split, whole, atol=1e-6, rtol=1e-4)
