"""train / val / test assignment by user (no user in two splits), by task, or time-based for test.

- ``user`` mode: each pseudonymous user gets a uniform number u in [0, 1) from a seeded hash;
  u < test_fraction -> test, u < test_fraction + val_fraction -> val, else train.
- ``time`` mode: test = the sessions that started in the last ``test_fraction`` of sessions by time
  (a quantile cut of ``started_at``); earlier sessions of users who appear in test are dropped
  (``user_in_test``) so no user crosses splits; the remaining users go to val / train by u.
- ``task`` mode: tasks are grouped by the *wording family* of their text (:func:`text_family`:
  price clauses and opening request words dropped, case, punctuation, spacing and numbers folded, so
  "a kitchen upgrade, under 240", "I need a kitchen upgrade, total budget $180" and "a kitchen upgrade"
  are one family), optionally joining families that are near-duplicates
  (MinHash, :class:`data_curation.dedup.NearDupIndex`). Within each task kind, groups are taken
  in the order of a seeded hash of their key and dealt out by quota: a group goes to test while
  the middle of its tasks falls in the first ``test_fraction`` of the kind's tasks, then to val
  for the next ``val_fraction``, the rest to train. Every session goes to its task's group's split,
  so val and test hold their fractions of tasks of every kind, and no task or wording is in two
  splits. Sessions without a task go by user (as in ``user`` mode); a user may cross splits.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from data_curation.config import SplitConfig
from data_curation.dedup import MinHasher, NearDupIndex, exact_key, normalise_text

SPLITS = ("train", "val", "test")
DROPPED_USER_IN_TEST = 3
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A good 64-bit mixer (Steele et al., SplitMix64), vectorised over uint64."""
    with np.errstate(over="ignore"):
        z = (x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return z ^ (z >> np.uint64(31))


def unit_hash(keys: np.ndarray, seed: int) -> np.ndarray:
    """keys (uint64) -> floats in [0, 1), fixed for a (key, seed) pair."""
    with np.errstate(over="ignore"):
        mixed = splitmix64(keys.astype(np.uint64) ^ splitmix64(np.array([seed], dtype=np.uint64))[0])
    return (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)


_MONEY = r"(?:[$€£]\s*)?\d[\d.,]*\s*(?:dollars|bucks|usd|eur|euros|gbp|[$€£])?"
_PRICE_CLAUSE = re.compile(
    r"\b(?:total\s+)?(?:for\s+)?(?:under|below|less than|no more than|not over|max(?:imum)?|budget(?:\s+(?:of|is))?|"
    r"up to|at most|within|cheaper than|about|around|(?:i can\s+)?spend(?:\s+(?:about|around|up to))?)\s*"
    + _MONEY + r"(?:\s+(?:max(?:imum)?|tops|or less))?|" + _MONEY + r"\s+(?:max(?:imum)?|tops|or less)\b|"
    r"\(\s*max\s+" + _MONEY + r"\s*\)|\bi can\b(?=\s*[.?!]?\s*$)", re.IGNORECASE)
_OPENING = re.compile(
    r"^\s*(?:(?:hi|hey|hello|please|so|ok|okay)\b[\s,!.]*|"
    r"(?:i need|i want(?: to buy)?|i'?m looking for|i am looking for|"
    r"looking for|i'?m after|help me (?:get|find|pick)|can you (?:put together|help me find|find me|find|recommend)|"
    r"could you (?:find|recommend)|do you have|got any|any|find me|show me|a|an|the|some)\b[\s,]*)+", re.IGNORECASE)


def text_family(text: str) -> str:
    """The wording family of a text: what it asks, without how. Price clauses (``under $240``, ``total
    budget 700``, ``(max 90 bucks)``, ``I can spend about 300``) and the opening request words (``I need``,
    ``help me get``, ``can you put together``, ``any``) are dropped, every other number (``size 42``) is
    written as 0, then case, punctuation and spacing are folded (:func:`data_curation.dedup.normalise_text`):
    "I need a kitchen upgrade, total budget $240" and "help me get a kitchen upgrade for under 180 dollars"
    are one family, "any kitchen upgrade?" too."""
    return normalise_text(_NUMBER.sub("0", _OPENING.sub("", _PRICE_CLAUSE.sub(" ", text))))


def _key(text: str) -> int:
    """A non-zero 64-bit key (0 means "no task" in :func:`assign_splits`)."""
    return exact_key(text, ()) or 1


def task_groups(
    texts: Mapping[str, str], *, near_threshold: float = 0.0, num_perm: int = 64, shingle_chars: int = 5,
    seed: int = 0,
) -> dict[str, int]:
    """task_id -> group key (non-zero uint64-sized int). Tasks share a key when their texts are of one
    wording family or, with ``near_threshold`` > 0, when their families are near-duplicates (greedy
    clustering in sorted family order: a family joins the first earlier representative it matches)."""
    family = {tid: text_family(text) for tid, text in texts.items()}
    rep = {f: f for f in family.values()}
    if near_threshold > 0:
        hasher = MinHasher(num_perm, shingle_chars, seed)
        index = NearDupIndex(near_threshold, num_perm, seed)
        names = sorted(rep)
        for i, f in enumerate(names):
            if f:
                match = index.match_or_add(i, hasher.signature(f))
                rep[f] = names[match] if match is not None else f
    return {tid: _key("text\x1f" + rep[f]) if f else _key("task\x1f" + tid) for tid, f in family.items()}


def _by_hash(keys: np.ndarray, cfg: SplitConfig, seed: int) -> np.ndarray:
    """Per key 0 train, 1 val, 2 test by thresholds on its unit hash."""
    u = unit_hash(keys, seed)
    out = np.zeros(len(keys), dtype=np.int8)
    out[u < cfg.test_fraction + cfg.val_fraction] = 1
    out[u < cfg.test_fraction] = 2
    return out


def assign_splits(user: np.ndarray, started: np.ndarray, cfg: SplitConfig, seed: int) -> np.ndarray:
    """Per session (user and time modes): 0 train, 1 val, 2 test, 3 dropped (time mode: a test user's
    earlier session)."""
    if cfg.mode == "task":
        raise ValueError("task mode splits by task: use assign_task_splits")
    if cfg.mode == "user" or cfg.test_fraction == 0 or len(user) == 0:
        return _by_hash(user, cfg, seed)
    u = unit_hash(user, seed)
    out = np.zeros(len(user), dtype=np.int8)
    cutoff = np.quantile(started, 1 - cfg.test_fraction, method="higher")
    test = started >= cutoff
    test_users = np.unique(user[test])
    out[u < cfg.val_fraction] = 1
    out[np.isin(user, test_users)] = DROPPED_USER_IN_TEST
    out[test] = 2
    return out


def assign_groups(key: np.ndarray, size: np.ndarray, stratum: Sequence[str], cfg: SplitConfig,
                  seed: int) -> np.ndarray:
    """Per task group: 0 train, 1 val, 2 test. ``size`` = tasks in the group; within each stratum (task
    kind) groups in seeded-hash order go to test while the middle of their tasks lies below test_fraction
    of the stratum's tasks, then to val below test_fraction + val_fraction, then to train."""
    out = np.zeros(len(key), dtype=np.int8)
    u = unit_hash(key, seed)
    labels = np.asarray(stratum, dtype=object)
    for label in sorted(set(labels.tolist())):
        idx = np.flatnonzero(labels == label)
        idx = idx[np.lexsort((key[idx], u[idx]))]  # (G,) groups of this stratum in hash order
        n = size[idx].astype(np.float64)
        middle = (np.cumsum(n) - n / 2) / n.sum()  # where each group's tasks are centred, in (0, 1)
        out[idx[middle < cfg.test_fraction + cfg.val_fraction]] = 1
        out[idx[middle < cfg.test_fraction]] = 2
    return out


def assign_task_splits(
    user: np.ndarray, group: np.ndarray, task: Sequence[str | None], kind: Mapping[str, str], cfg: SplitConfig,
    seed: int,
) -> np.ndarray:
    """Per session (task mode): 0 train, 1 val, 2 test.

    ``group``: per session the key of its task's group (:func:`task_groups`), 0 for a session without a
    task, which is split by ``user`` as in user mode; ``task``: per session its task id; ``kind``:
    task id -> kind (the strata; a task missing there counts as kind ""). A group's kind is the most
    common kind of its tasks.
    """
    if not len(user) == len(group) == len(task):
        raise ValueError(f"one user, group and task per session ({len(user)}, {len(group)}, {len(task)})")
    group = group.astype(np.uint64)
    out = np.zeros(len(user), dtype=np.int8)
    no_task = group == 0
    out[no_task] = _by_hash(user[no_task].astype(np.uint64), cfg, seed)
    keys, inverse = np.unique(group[~no_task], return_inverse=True)
    members: list[set[str]] = [set() for _ in keys]
    for g, t in zip(inverse.tolist(), [t for t, nt in zip(task, no_task.tolist(), strict=True) if not nt],
                    strict=True):
        members[g].add(t or "")
    size = np.array([len(m) for m in members], dtype=np.int64)
    stratum = [min(Counter(kind.get(t, "") for t in m).most_common(), key=lambda kc: (-kc[1], kc[0]))[0]
               for m in members]
    out[~no_task] = assign_groups(keys, size, stratum, cfg, seed)[inverse]
    return out
