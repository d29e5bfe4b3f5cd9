"""The collector's own counters, served as Prometheus text at ``GET /metrics``."""

from __future__ import annotations

import threading
from collections import defaultdict

# name -> (type, help); every series the collector exports is declared here once.
METRICS: dict[str, tuple[str, str]] = {
    "kvtrace_collect_requests_total": (
        "counter",
        "Export requests answered, by protocol, encoding, signal and status code.",
    ),
    "kvtrace_collect_received_records_total": (
        "counter",
        "Records (log records, data points, spans) in decoded requests.",
    ),
    "kvtrace_collect_stored_records_total": ("counter", "Records written and fsynced to the spool (acknowledged)."),
    "kvtrace_collect_rejected_records_total": (
        "counter",
        "Lines and records of ingested segments that ingest rejected (reasons logged with -v).",
    ),
    "kvtrace_collect_received_bytes_total": ("counter", "Request bytes after decompression."),
    "kvtrace_collect_spool_bytes": ("gauge", "Bytes of spool segments not yet ingested (open, sealed, ready)."),
    "kvtrace_collect_spool_queue_bytes": ("gauge", "Bytes of accepted batches waiting for the spool writer."),
    "kvtrace_collect_segments_sealed_total": ("counter", "Spool segments sealed."),
    "kvtrace_collect_segments_ingested_total": ("counter", "Spool segments ingested into the warehouse."),
    "kvtrace_collect_ingested_requests_total": ("counter", "Request rows added to the warehouse by the collector."),
    "kvtrace_collect_ingest_errors_total": ("counter", "Ingest cycles that failed (segments stay for the next one)."),
    "kvtrace_collect_last_ingest_timestamp_seconds": (
        "gauge",
        "Unix time of the last successful ingest cycle (0: none yet).",
    ),
    "kvtrace_collect_segment_failures_total": (
        "counter",
        "Segments set aside in SPOOL/failed/ because ingest cannot read their content.",
    ),
    "kvtrace_collect_segments_set_aside": (
        "gauge",
        "Segments in SPOOL/failed/ (OTLP JSON lines; see SPOOL/failed/*.error.txt).",
    ),
    "kvtrace_collect_segments_retrying": (
        "gauge",
        "Segments whose conversion or ingest failed and is retried with backoff.",
    ),
    "kvtrace_collect_recovered_segments_total": ("counter", "Open segments recovered after an unclean stop."),
}


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{str(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


class Metrics:
    """Thread-safe counters and gauges keyed by name and labels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[tuple, float]] = defaultdict(dict)

    def inc(self, name: str, value: float = 1, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._values[name]
            series[key] = series.get(key, 0) + value

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self._values[name][tuple(sorted(labels.items()))] = value

    def get(self, name: str, **labels: str) -> float:
        """One series' value; without labels, the sum over all series of ``name``."""
        with self._lock:
            series = self._values.get(name, {})
            if labels:
                return series.get(tuple(sorted(labels.items())), 0)
            return sum(series.values())

    def render(self) -> str:
        """Prometheus text exposition format (version 0.0.4)."""
        lines = []
        with self._lock:
            for name, (kind, help_text) in METRICS.items():
                lines.append(f"# HELP {name} {help_text}")
                lines.append(f"# TYPE {name} {kind}")
                series = self._values.get(name) or {(): 0}
                for key, value in sorted(series.items()):
                    v = int(value) if float(value).is_integer() else value
                    lines.append(f"{name}{_labels(dict(key))} {v}")
        return "\n".join(lines) + "\n"
