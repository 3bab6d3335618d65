"""Keyed pseudonyms (HMAC-SHA256) for user ids and order ids, and where the secret key comes from.

The same id and key always give the same pseudonym (so a user's sessions stay linked across runs);
another key gives unrelated pseudonyms, and without the key a pseudonym cannot be reversed or even
checked against a guessed id. The key is looked up, in order, in: the configured key file, the
settings' ``anonymise_key_file``, the env var ``SIDEKICK_ANONYMISE_KEY``. It is held in memory only;
outputs carry at most :meth:`Pseudonymiser.key_id`, an HMAC of a fixed label, to tell keys apart.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from data_curation.errors import CurationError

KEY_ENV = "SIDEKICK_ANONYMISE_KEY"
MIN_KEY_BYTES = 16


def _check(key: bytes, where: str) -> bytes:
    if len(key) < MIN_KEY_BYTES:
        raise CurationError(f"{where}: the anonymisation key is {len(key)} bytes; it needs at least {MIN_KEY_BYTES}")
    return key


def read_key_file(path: Path) -> bytes:
    """The key in ``path`` (surrounding whitespace removed)."""
    if not path.is_file():
        raise CurationError(f"{path}: anonymisation key file not found (create one with --new-key {path})")
    return _check(path.read_bytes().strip(), str(path))


def resolve_key(key_file: Path | None, settings_key_file: Path | None) -> bytes:
    """The key from the first source that has one; a clear error when none does."""
    if key_file is not None:
        return read_key_file(key_file)
    if settings_key_file is not None:
        return read_key_file(settings_key_file)
    env = os.environ.get(KEY_ENV, "").strip()
    if env:
        return _check(env.encode(), f"env {KEY_ENV}")
    raise CurationError(
        "no anonymisation key: pass --key-file FILE (or --new-key FILE to create one), set "
        f"anonymise_key_file in the settings, or set {KEY_ENV}"
    )


def create_key_file(path: Path, out_dir: Path) -> Path:
    """Write a fresh 256-bit key (hex) to ``path``, readable by the owner only. Never inside ``out_dir``."""
    target = path.resolve()
    out = out_dir.resolve()
    if target == out or out in target.parents:
        raise CurationError(f"--new-key {path}: the key must not be written inside the output directory {out_dir}")
    if path.exists():
        raise CurationError(f"--new-key {path}: file exists; use --key-file {path} to reuse it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    return path


class Pseudonymiser:
    """``user(id) -> 'u_…'`` and ``order(id) -> 'o_…'``: 80-bit HMAC-SHA256 pseudonyms, domain-separated."""

    def __init__(self, key: bytes) -> None:
        self._key = _check(key, "Pseudonymiser")

    def _mac(self, domain: bytes, value: str) -> str:
        return hmac.new(self._key, domain + b"\x00" + value.encode(), hashlib.sha256).hexdigest()

    def user(self, user_id: str) -> str:
        return "u_" + self._mac(b"user", user_id)[:20]

    def order(self, order_id: str) -> str:
        return "o_" + self._mac(b"order", order_id)[:20]

    def key_id(self) -> str:
        """A short fingerprint that tells keys apart without revealing them (safe to write to manifests)."""
        return self._mac(b"sidekick-key-id", "")[:12]

    def __repr__(self) -> str:  # never show the key, even in a traceback
        return f"Pseudonymiser(key_id={self.key_id()})"

    def __getstate__(self) -> dict[str, bytes]:  # pickled to worker processes only
        return {"_key": self._key}

    def __setstate__(self, state: dict[str, bytes]) -> None:
        self._key = state["_key"]
