"""Streaming data curation: log records, anonymisation, dedup, filters, selection, splits, quarantine.

Entry point: :func:`data_curation.pipeline.run_curation` (CLI ``sidekick curate``), configured by
:class:`data_curation.config.CurateConfig`. Stages live in :mod:`data_curation.stages`; the per-record
work of one shard in :mod:`data_curation.shard_job` and :mod:`data_curation.processor`; PII detection in
:mod:`data_curation.pii` and :mod:`data_curation.names`, scored by :mod:`data_curation.pii_score`.
"""
