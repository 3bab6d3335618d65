"""RL runtime: algorithms, rollout, controller, cascade."""
