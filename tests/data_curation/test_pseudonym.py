"""Keyed pseudonyms: stable for a key, unrelated across keys; where the key comes from; new keys.

    pytest tests/data_curation/test_pseudonym.py
"""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import pytest

from data_curation.errors import CurationError
from data_curation.pseudonym import KEY_ENV, Pseudonymiser, create_key_file, read_key_file, resolve_key

KEY = b"0123456789abcdef0123456789abcdef"


def test_same_key_same_pseudonym_other_key_other_pseudonym() -> None:
    a, b = Pseudonymiser(KEY), Pseudonymiser(KEY)
    other = Pseudonymiser(KEY[::-1])
    assert a.user("cust-000001") == b.user("cust-000001")
    assert a.user("cust-000001") != other.user("cust-000001")
    assert a.user("cust-000001") != a.user("cust-000002")
    assert a.user("cust-000001").startswith("u_") and len(a.user("x")) == 22
    assert a.order("ORD-1") != a.user("ORD-1")  # domains are separated


def test_key_is_never_shown() -> None:
    p = Pseudonymiser(KEY)
    assert KEY.decode() not in repr(p) and KEY.decode() not in p.key_id()
    assert pickle.loads(pickle.dumps(p)).user("u") == p.user("u")


def test_key_sources_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f1, f2 = tmp_path / "a.key", tmp_path / "b.key"
    f1.write_text("  " + "a" * 20 + "\n")
    f2.write_text("b" * 20)
    monkeypatch.setenv(KEY_ENV, "c" * 20)
    assert resolve_key(f1, f2) == b"a" * 20
    assert resolve_key(None, f2) == b"b" * 20
    assert resolve_key(None, None) == b"c" * 20
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(CurationError, match="no anonymisation key"):
        resolve_key(None, None)


def test_bad_keys_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(CurationError, match="not found"):
        read_key_file(tmp_path / "missing.key")
    short = tmp_path / "short.key"
    short.write_text("abc")
    with pytest.raises(CurationError, match="at least 16"):
        read_key_file(short)


def test_new_key_file(tmp_path: Path) -> None:
    path = create_key_file(tmp_path / "keys" / "k", tmp_path / "out")
    assert len(read_key_file(path)) == 64
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(CurationError, match="exists"):
        create_key_file(path, tmp_path / "out")
    with pytest.raises(CurationError, match="inside the output"):
        create_key_file(tmp_path / "out" / "k", tmp_path / "out")
