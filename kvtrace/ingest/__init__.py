"""Ingest: pure parsers per format, and the pipeline that merges them into the warehouse."""

from kvtrace.ingest.pipeline import IngestSummary, expand_inputs, ingest

__all__ = ["IngestSummary", "expand_inputs", "ingest"]
