"""File names inside a world directory (``sidekick world …``) that every later stage reads."""

CATALOG_FILE = "catalog.jsonl"
LOGS_FILE = "logs.jsonl"
TASKS_FILE = "tasks.jsonl"
PRIVATE_DIR = "private"
"""Answer keys (PII locations, duplicate groups) for scoring curation; never fed to training."""
