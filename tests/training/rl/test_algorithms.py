"""Advantage estimators and losses against values worked out by hand (the arithmetic is in the comments).

Run: .venv/bin/python -m pytest tests/training/rl/test_algorithms.py -q
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from training.rl.algorithms import (
    LossConfig,
    aggregate,
    chunk_log_ratio,
    combine_rewards,
    dr_grpo_advantages,
    grpo_advantages,
    k3_kl,
    lite_ppo_advantages,
    policy_loss,
    ppo_clip_loss,
    rebn_advantages,
    rloo_advantages,
    zero_variance_groups,
)

# group 0: [1, 0, 0, 1] (mean 0.5, std 0.5); group 1: [2, 4] (mean 3, std 1); group 2: [5] alone
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 4.0, 5.0])
GROUPS = torch.tensor([0, 0, 0, 0, 7, 7, 3])  # ids need not be 0..n-1


def test_grpo_by_hand() -> None:
    assert_close(grpo_advantages(REWARDS, GROUPS, eps=0.0), torch.tensor([1.0, -1.0, -1.0, 1.0, -1.0, 1.0, 0.0]))


def test_dr_grpo_by_hand() -> None:
    assert_close(dr_grpo_advantages(REWARDS, GROUPS), torch.tensor([0.5, -0.5, -0.5, 0.5, -1.0, 1.0, 0.0]))


def test_lite_ppo_uses_the_batch_std() -> None:
    # batch: sum r^2 = 47, n mean^2 = 169/7, sum of squares about the mean = 160/7, pop std = sqrt(160)/7
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, -1.0, 1.0, 0.0]) * 7 / math.sqrt(160)
    assert_close(lite_ppo_advantages(REWARDS, GROUPS, eps=0.0), expected)


def test_rloo_by_hand() -> None:
    # 1 - (0 + 0 + 1)/3 = 2/3; 0 - (1 + 0 + 1)/3 = -2/3; 2 - 4 = -2; 4 - 2 = 2; alone: 0
    assert_close(rloo_advantages(REWARDS, GROUPS), torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3, -2.0, 2.0, 0.0]))


def test_rebn_by_hand() -> None:
    # gamma 0.5: episode [0, 1] -> returns [0.5, 1]; episode [1] -> [1]; all turns [0.5, 1, 1]:
    # mean 5/6, pop std sqrt(2)/6 -> [-sqrt(2), sqrt(2)/2], [sqrt(2)/2]
    a, b = rebn_advantages([[0.0, 1.0], [1.0]], gamma=0.5, eps=0.0)
    assert_close(a, torch.tensor([-math.sqrt(2), math.sqrt(2) / 2]))
    assert_close(b, torch.tensor([math.sqrt(2) / 2]))
    with pytest.raises(ValueError, match="gamma"):
        rebn_advantages([[1.0]], gamma=1.5)


def test_ppo_clip_higher_by_hand() -> None:
    log_ratio = torch.log(torch.tensor([[1.5, 1.5, 0.5, 0.5]]))
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    # rho 1.5, A +1: min(1.5, 1.28) -> -1.28; A -1: min(-1.5, -1.28) -> +1.5
    # rho 0.5, A +1: min(0.5, 0.8) -> -0.5;   A -1: min(-0.5, -0.8) -> +0.8
    assert_close(ppo_clip_loss(log_ratio, adv, 0.2, 0.28), torch.tensor([[-1.28, 1.5, -0.5, 0.8]]))


def test_k3_kl_by_hand() -> None:
    # l = log 0.5, l_ref = log 0.25: d = log 0.5 -> 0.5 - log 0.5 - 1 = 0.193147...
    kl = k3_kl(torch.log(torch.tensor([[0.5]])), torch.log(torch.tensor([[0.25]])))
    assert_close(kl, torch.tensor([[0.5 + math.log(2) - 1]]))
    assert_close(k3_kl(torch.zeros(2, 3), torch.zeros(2, 3)), torch.zeros(2, 3))


def test_aggregations_by_hand() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(values, mask, "token").item() == pytest.approx(10 / 4)
    assert aggregate(values, mask, "seq").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(values, mask, "seq-sum-norm").item() == pytest.approx(10 / 6)
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(values, mask, "mean")  # type: ignore[arg-type]


def test_chunk_ratio_is_the_mean_log_ratio_of_each_chunk() -> None:
    logp = torch.tensor([[0.1, 0.3, 0.5, 0.7], [0.2, 0.2, 0.2, 0.2]])
    old = torch.zeros(2, 4)
    chunks = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 0]])
    # row 0: chunk 0 mean(0.1, 0.3) = 0.2; chunk 1 only 0.5 is valid; row 1: chunk 1 mean(0.2, 0.2)
    assert_close(chunk_log_ratio(logp, old, chunks, mask), torch.tensor([[0.2, 0.2, 0.5, 0.0], [0.0, 0.2, 0.2, 0.0]]))


def test_policy_loss_pushes_up_good_tokens_and_reports_parts() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]])).requires_grad_(True)
    old = logp.detach().clone()
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 2)
    loss, parts = policy_loss(logp, old, adv, mask, LossConfig(kl_coef=0.1), ref_logp=old.clone())
    loss.backward()
    assert logp.grad is not None
    # at rho = 1: d(-rho A)/d logp = -A / (B T) under token aggregation (4 tokens); KL's gradient is 0 at ref
    assert_close(logp.grad, torch.tensor([[-0.25, -0.25], [0.25, 0.25]]))
    assert parts["pg"] == pytest.approx(0.0) and parts["kl"] == pytest.approx(0.0) and parts["clip_fraction"] == 0.0
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, old, adv, mask, LossConfig(kl_coef=0.1))


def test_dynamic_sampling_drops_exactly_the_zero_variance_groups() -> None:
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 3.0, 3.0, 2.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 4])
    assert zero_variance_groups(rewards, groups).tolist() == [True, True, False, False, True, True, True]


def test_combine_rewards_weights_and_typos() -> None:
    parts = {"correctness": 1.0, "helpfulness": 0.5, "brevity": 0.2}
    assert combine_rewards(parts, {"correctness": 1.0, "helpfulness": 0.5, "brevity": 0.25}) == pytest.approx(1.3)
    with pytest.raises(KeyError, match="brevty"):
        combine_rewards(parts, {"brevty": 1.0})
