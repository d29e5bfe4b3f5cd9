"""Ingest: pure parsers per format, and the pipeline that merges them into the warehouse.

The pipeline (and the warehouse with it) is imported on first use of ``ingest``,
``IngestSummary`` or ``expand_inputs``: a command that only reads a file with one of the
parsers (``kvtrace replay trace.jsonl``) does not start DuckDB.
"""

import importlib

__all__ = ["IngestSummary", "expand_inputs", "ingest"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("kvtrace.ingest.pipeline"), name)
    raise AttributeError(f"module 'kvtrace.ingest' has no attribute '{name}'")
