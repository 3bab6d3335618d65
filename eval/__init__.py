"""Offline evaluation against anonymised logs: replay, metrics, baselines, reports."""
