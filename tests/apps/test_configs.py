"""Every YAML config shipped under apps/ (sub-folders too) loads and validates against its model."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from apps.livestream.world import LivestreamWorldConfig
from apps.shopping.world import ShoppingWorldConfig
from apps.travel.world import TravelWorldConfig
from data_curation.config import CurateConfig
from infra.config import load_config
from serving.server import ServeConfig
from training.cascade import CascadeConfig, quick_profile
from training.rl.controller import RLConfig
from training.sft import SFTConfig

APPS = Path(__file__).resolve().parents[2] / "apps"
MODELS: dict[str, type[BaseModel]] = {
    "cascade.yaml": CascadeConfig,
    "livestream/world.yaml": LivestreamWorldConfig,
    "serve.yaml": ServeConfig,
    "shopping/cascade.yaml": CascadeConfig,
    "livestream/cascade_smollm2.yaml": CascadeConfig,
    "shopping/curate.yaml": CurateConfig,
    "shopping/rl.yaml": RLConfig,
    "shopping/sft.yaml": SFTConfig,
    "shopping/world.yaml": ShoppingWorldConfig,
    "travel/world.yaml": TravelWorldConfig,
}


def _yaml_files() -> list[Path]:
    return sorted(p for p in APPS.rglob("*") if p.suffix in (".yaml", ".yml"))


def test_there_are_configs_and_each_has_a_model() -> None:
    files = _yaml_files()
    assert files
    unknown = [str(p.relative_to(APPS)) for p in files if str(p.relative_to(APPS)) not in MODELS]
    assert not unknown, f"add these to MODELS so they are validated: {unknown}"


@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(APPS)))
def test_config_validates(path: Path) -> None:
    model = MODELS[str(path.relative_to(APPS))]
    cfg = load_config(model, path)
    assert cfg == model.model_validate(cfg.model_dump())  # and it round-trips


def test_the_cascade_profiles_and_their_seed_sft_validate() -> None:
    path = APPS / "shopping/cascade.yaml"
    for transform in (None, quick_profile):
        cfg = load_config(CascadeConfig, path, transform=transform)
        sft = cfg.sft_config()  # the seed SFT section is a whole SFTConfig
        assert sft.out == cfg.out / "seed_sft" / "sft"
    quick = load_config(CascadeConfig, path, transform=quick_profile)
    full = load_config(CascadeConfig, path)
    assert quick.out != full.out and quick.quick == {}
    # the full profile: SmolLM2 with LoRA; --quick: the tiny model, full fine-tune
    assert full.sft_config().base == "smollm2-135m" and full.sft_config().lora is not None
    assert quick.sft_config().base == "tiny" and quick.sft_config().lora is None
