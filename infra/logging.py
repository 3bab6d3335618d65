"""Structured logging: ``log.info("world.written", extra={"fields": {"items": n}})``.

Text format for people (``event key=value …``), JSON lines for machines (``log_format: json``).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_CONFIGURED = False


class _Formatter(logging.Formatter):
    def __init__(self, fmt: str) -> None:
        super().__init__()
        self.json = fmt == "json"

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "fields", {}) or {}
        if self.json:
            obj = {
                "ts": round(record.created, 3),
                "level": record.levelname.lower(),
                "logger": record.name,
                "event": record.getMessage(),
                **fields,
            }
            if record.exc_info:
                obj["exc"] = self.formatException(record.exc_info)
            return json.dumps(obj, default=str, ensure_ascii=False)
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        kv = " ".join(f"{k}={v}" for k, v in fields.items())
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}" + (f" {kv}" if kv else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Install one stderr handler on the root logger (idempotent; later calls change level/format)."""
    global _CONFIGURED
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(fmt))
    if _CONFIGURED:
        for h in list(root.handlers):
            if getattr(h, "_sidekick", False):
                root.removeHandler(h)
    handler._sidekick = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("faiss.loader", "httpx", "filelock"):  # library chatter below WARNING is not for users
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    _CONFIGURED = True


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)
