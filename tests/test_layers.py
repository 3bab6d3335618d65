"""DESIGN.md's layer rule, checked on the source: a lower layer never imports a higher one."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYER = {"infra": 0, "sid": 1, "data_curation": 1, "harness": 1, "training": 2, "serving": 2, "eval": 2, "apps": 3}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_lower_layers_never_import_higher_ones() -> None:
    bad = []
    for package, level in LAYER.items():
        for path in (ROOT / package).rglob("*.py"):
            for name in _imports(path):
                if name in LAYER and LAYER[name] > level:
                    bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def _modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    mods: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.add(node.module)
    return mods


def test_sid_is_pure() -> None:
    """sid/ knows nothing of apps (DESIGN.md: 'sid/ is pure'); of the harness it reads only the Item contract."""
    for path in (ROOT / "sid").rglob("*.py"):
        mods = _modules(path)
        assert not {m.split(".")[0] for m in mods} & {"apps", "data_curation", "training", "serving", "eval"}, path
        assert {m for m in mods if m.split(".")[0] == "harness"} <= {"harness.catalog"}, path
