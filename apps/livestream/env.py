"""The livestream app's episode parts: the request a live frontend sends, the correctness + helpfulness +
brevity reward (LiveThinking), and the simulated viewer."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

from apps.livestream.agent import DONT_KNOW, MAX_ANSWER_WORDS
from apps.livestream.reader import find_word
from apps.livestream.world import (
    answer_facts,
    render_fact,
)
from harness.agent import Final
from harness.catalog import AttributeValue, Catalog
from harness.env import Reward
from harness.tasks import Task


def request_constraints(task: Task) -> dict[str, Any]:
    """What a live request carries for ``task`` (stream and time, never the ground-truth product)."""
    return {k: task.constraints[k] for k in ("stream_id", "ts_offset_s") if task.constraints.get(k) is not None}


# ------------------------------------------------------------------------------------------------ reward
@dataclass(frozen=True)
class RewardWeights:
    """Weights of :func:`reward` (they sum to 1) and the word count beyond which brevity falls."""

    correctness: float = 0.6
    helpfulness: float = 0.2
    brevity: float = 0.2
    max_words: int = MAX_ANSWER_WORDS

    @classmethod
    def of(cls, weights: Mapping[str, float]) -> RewardWeights:
        """From a config's mapping (names left out keep their defaults); a ValueError names what is wrong:
        an unknown name, a negative weight, weights not summing to 1, max_words < 1."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(weights) - set(names))
        if unknown:
            raise ValueError(f"unknown livestream reward weight {unknown[0]!r}; expected {', '.join(names)}")
        values: dict[str, Any] = {k: (int(v) if k == "max_words" else float(v)) for k, v in weights.items()}
        w = cls(**values)
        negative = [n for n in names[:3] if not getattr(w, n) >= 0]
        if negative:
            raise ValueError(f"livestream reward weight {negative[0]} is {getattr(w, negative[0])}: weights are >= 0")
        total = w.correctness + w.helpfulness + w.brevity
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"livestream reward weights correctness + helpfulness + brevity sum to {total:g}, not 1 "
                             "(the reward stays in [0, 1])")
        if w.max_words < 1:
            raise ValueError(f"livestream reward max_words is {w.max_words}: at least 1")
        return w


_POLARITY = re.compile(r"\b(yes|yeah|yep|yup|no|nope|not|isn'?t|doesn'?t|won'?t|can'?t|cannot)\b")


def polarity(text: str) -> str | None:
    """'yes' or 'no' by the first yes/no word of ``text``, None when it has none."""
    m = _POLARITY.search(text.lower())
    if m is None:
        return None
    return "yes" if m.group(1) in ("yes", "yeah", "yep", "yup") else "no"


def fact_mentioned(name: str, value: AttributeValue, text: str) -> float:
    """How much of a fact's value ``text`` states, in [0, 1] (list facts: the share of elements)."""
    low = text.lower()
    if isinstance(value, bool):
        return float(polarity(text) == ("yes" if value else "no"))
    if isinstance(value, list):
        if not value:
            return float(re.search(r"\b(?:none|no)\b", low) is not None)
        return sum(find_word(v, low) is not None for v in value) / len(value)
    if isinstance(value, int | float):
        if name == "stock" and value == 0 and "sold out" in low:
            return 1.0
        number = f"{value:.2f}" if name == "price" else str(value)
        found = find_word(render_fact(name, value), low) or re.search(rf"(?<![\d.]){re.escape(number)}(?!\d)", low)
        return float(found is not None)
    return float(find_word(str(value), low) is not None)


def correctness(task: Task, answer: str, catalog: Catalog) -> float:
    """Share of the task's facts the answer states (plus the yes/no of a yes/no question); for unanswerable
    and off-topic tasks (``answer == ""``), 1 when the answer says it does not know."""
    if not task.answer:
        return float(DONT_KNOW.search(answer) is not None)
    values = answer_facts(task, catalog)
    checks = [fact_mentioned(fact.rpartition(".")[2], v, answer) for fact, v in values.items()]
    gold = polarity(task.answer)
    if gold is not None and not any(isinstance(v, bool) for v in values.values()):
        checks.append(float(polarity(answer) == gold))
    return sum(checks) / len(checks) if checks else 0.0


def reward(task: Task, final: Final, catalog: Catalog, weights: RewardWeights | None = None) -> Reward:
    """LiveThinking's multi-objective reward — correctness, helpfulness, brevity — with rule-based parts.

    Sun et al. 2025, "LiveThinking: Enabling Real-Time Efficient Reasoning for AI-Powered Livestreaming via
    Reinforcement Learning" (arXiv:2510.07685) train with GRPO on a reward balancing correctness (every claim
    is supported by the product documents and answers the question), helpfulness and brevity; the paper
    scores the first two with an LLM judge. Here each part is checked against the world's ground truth::

        R = C * (w_c + w_h * H + w_b * B)                    w_c, w_h, w_b = 0.6, 0.2, 0.2
        C = mean over the task's facts of fact_mentioned(answer)  (+ the yes/no of a yes/no question)
            unanswerable / off-topic (task.answer == ""): C = 1 if the answer says it does not know
        H = |cited_facts ∩ task.facts| / |task.facts|;  unanswerable / off-topic: H = 1 if nothing is cited
        B = 1 - min(1, max(0, words - N) / N)                N = max_words (30)

    C gates the rest (a short, well-cited wrong answer earns nothing), so R is in [0, 1].
    ``success`` = C == 1.
    """
    w = weights or RewardWeights()
    answer = final.reply
    c = correctness(task, answer, catalog)
    cited = {str(f) for f in final.data.get("cited_facts") or []}
    if task.answer:
        h = len(cited & set(task.facts)) / len(set(task.facts)) if task.facts else 0.0
    else:
        h = float(not cited)
    words = len(answer.split())
    b = 1.0 - min(1.0, max(0, words - w.max_words) / w.max_words)
    total = c * (w.correctness + w.helpfulness * h + w.brevity * b)
    return Reward(value=total, success=c == 1.0,
                  parts={"correctness": c, "helpfulness": h, "brevity": b, "words": float(words)})


def reward_fn(catalog: Catalog, weights: RewardWeights | None = None) -> Callable[[Task, Final], Reward]:
    """:func:`reward` bound to a catalog: the ``RewardFn`` that :class:`harness.env.AppEnv` holds."""
    return partial(reward, catalog=catalog, weights=weights)


# ------------------------------------------------------------------------------------------------ simulated viewer
def simulated_user(task: Task, assistant_text: str) -> str:
    """A viewer's nudge: when the assistant asks back or says nothing, the viewer repeats the question
    (pointing at the screen for a 'this one' question); otherwise a short thanks."""
    question = next((m.content for m in reversed(task.messages) if m.role == "user"), "")
    text = assistant_text.strip()
    if text and "?" not in text:
        return "ok thanks!"
    if task.meta.get("reference") == "this_one":
        return f"the one on screen right now — {question}"
    return f"pls just answer: {question}" if question else "hello??"
