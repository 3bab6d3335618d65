"""Streaming data curation: log records, anonymisation, dedup, filters, selection, splits, quarantine."""
