"""The one exception curation raises for problems a user can fix (missing key, bad input directory, …)."""

from __future__ import annotations


class CurationError(ValueError):
    """Curation cannot go on; the message names the file, option or field to change."""
