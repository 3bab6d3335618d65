"""Give the memory a finished piece of work freed back to the operating system.

glibc keeps freed heap memory in its arenas for reuse: after a training stage the process can hold several
GB it no longer uses (the SmolLM2 seed SFT left the cascade's main process at 11.6 GB, and the RL stage's Ray
workers were then killed for memory on a 24 GB machine). :func:`release_memory` collects garbage and asks
glibc to return its free pages (``malloc_trim``); elsewhere (another libc, macOS) it only collects garbage.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import cache
from typing import Any

import psutil


@cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (argtypes set), or None without glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def rss_bytes() -> int:
    """This process's resident set size (psutil)."""
    return int(psutil.Process().memory_info().rss)


def release_memory() -> bool:
    """``gc.collect()``, then glibc's ``malloc_trim(0)``; True when glibc returned memory to the system."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    return bool(trim(0))
