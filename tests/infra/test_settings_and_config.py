"""Settings (defaults < YAML < SIDEKICK_* env) and stage-config loading. `pytest tests/infra`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from infra.config import ConfigError, load_config
from infra.logging import configure_logging
from infra.settings import Settings


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SIDEKICK_CONFIG", raising=False)
    s = Settings()
    assert s.seed == 0 and s.log_format == "text" and s.ray_address is None and s.api_key is None


def test_yaml_then_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "custom.yaml"
    cfg.write_text("seed: 5\nlog_level: DEBUG\nworkers: 3\n")
    monkeypatch.setenv("SIDEKICK_CONFIG", str(cfg))
    monkeypatch.setenv("SIDEKICK_WORKERS", "7")
    s = Settings()
    assert (s.seed, s.log_level, s.workers) == (5, "DEBUG", 7)  # env beats the file
    assert Settings(seed=9).seed == 9  # explicit arguments beat both


def test_sidekick_yaml_in_cwd_is_picked_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SIDEKICK_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sidekick.yaml").write_text("log_format: json\n")
    assert Settings().log_format == "json"


def test_bad_settings_are_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SIDEKICK_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(FileNotFoundError, match=r"missing\.yaml"):
        Settings()
    cfg = tmp_path / "s.yaml"
    cfg.write_text("sede: 5\n")
    monkeypatch.setenv("SIDEKICK_CONFIG", str(cfg))
    with pytest.raises(ValidationError, match="sede"):
        Settings()
    monkeypatch.delenv("SIDEKICK_CONFIG")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIDEKICK_SEED", "-3")
    with pytest.raises(ValidationError, match="seed"):
        Settings()


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: int = 10
    name: str = "x"


def test_load_config_layers(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("items: 20\nname: y\n")
    assert load_config(_Cfg, path, {"items": 30, "name": None}) == _Cfg(items=30, name="y")
    assert load_config(_Cfg) == _Cfg()


@pytest.mark.parametrize(
    ("text", "message"),
    [("items: [1, 2\n", "not valid YAML"), ("- 1\n- 2\n", "expected a mapping"),
     ("itemz: 3\n", "field 'itemz'"), ("items: many\n", "field 'items'")],
)
def test_load_config_errors_name_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_config(_Cfg, path)
    assert str(path) in str(err.value)


def test_json_logs(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", "json")
    logging.getLogger("sidekick.test").info("world.written", extra={"fields": {"items": 3}})
    line = capsys.readouterr().err.strip().splitlines()[-1]
    obj = json.loads(line)
    assert obj["event"] == "world.written" and obj["items"] == 3 and obj["level"] == "info"
    configure_logging("INFO", "text")
    logging.getLogger("sidekick.test").info("again", extra={"fields": {"n": 1}})
    assert capsys.readouterr().err.strip().endswith("sidekick.test: again n=1")
