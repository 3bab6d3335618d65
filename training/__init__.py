"""Training: base models, SFT, the Ray RL runtime and the cascaded SFT -> probe -> SFT -> RL recipe."""
