"""``generate``: run the synthetic workload and write OTLP JSON lines and/or transcripts (or send live).

Layout under ``out``::

    otlp/logs.jsonl[.gz]       one ExportLogsServiceRequest per log export interval
    otlp/metrics.jsonl[.gz]    one ExportMetricsServiceRequest per metric export interval
    claude/projects/<project>/<session>.jsonl[.gz]  (+ <session>/subagents/agent-<id>.jsonl)
    synth-run.md               the parameters and totals of the run (ignored by ingest)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from kvtrace.errors import ConfigError
from kvtrace.synth.config import SynthConfig
from kvtrace.synth.engine import Engine
from kvtrace.synth.ledger import Ledger
from kvtrace.synth.workload import World
from kvtrace.synth.transcripts import TranscriptSink
from kvtrace import __version__

FORMATS = ("otlp", "transcripts")


@dataclass
class SynthResult:
    """What a run produced: the exact ledger, output files and counts."""

    config: SynthConfig
    ledger: Ledger
    sessions: int
    files: dict[str, Path] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        """A JSON-able summary (totals, token mix, files)."""
        t = self.ledger.totals
        return {
            "seed": self.config.seed,
            "sessions": self.sessions,
            "requests": t["requests"],
            "cost_usd": t["cost_usd_micro"] / 1e6,
            "tokens": {
                k: t[k]
                for k in (
                    "cache_read_tokens",
                    "cache_write_5m_tokens",
                    "cache_write_1h_tokens",
                    "output_tokens",
                    "input_tokens",
                )
            },
            "token_mix": {k: round(v, 6) for k, v in self.ledger.token_mix().items()},
            "events": dict(self.ledger.notes),
            "files": {k: str(v) for k, v in self.files.items()},
            "counts": self.counts,
            "elapsed_s": round(self.elapsed_s, 2),
        }


def simulate(config: SynthConfig, keep_rows: bool = True) -> Ledger:
    """Run the workload and return only the ledger (no files): the truth for tests and analyses."""
    return generate(config, None, formats=(), keep_ledger=keep_rows).ledger


def generate(
    config: SynthConfig,
    out: str | Path | None,
    *,
    formats: tuple[str, ...] | list[str] = FORMATS,
    endpoint: str | None = None,
    gzip: bool = False,
    keep_ledger: bool = True,
    progress: Callable[[float], None] | None = None,
) -> SynthResult:
    """Generate a synthetic Claude Code workload.

    Args:
        config: the workload parameters (see ``SynthConfig``; presets in ``kvtrace.synth.PRESETS``).
        out: output folder (needed for file formats).
        formats: any of ``otlp`` (OTLP JSON lines files) and ``transcripts``.
        endpoint: if set, send OTLP live to this OTLP/HTTP base URL (e.g. ``http://127.0.0.1:4318``)
            through the opentelemetry-python exporters instead of writing OTLP files.
        gzip: compress every output file (``.jsonl.gz``, deterministic headers).
        keep_ledger: keep one ledger row per request (totals are kept either way).
        progress: called with the fraction of the arrival window simulated so far.

    Returns:
        A ``SynthResult`` with the ledger and counts.
    """
    from kvtrace.synth.otlp import FileExporter, LiveExporter, OtlpSink

    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise ConfigError(
            f"unknown synth format(s): {', '.join(sorted(unknown))}", hint="use --format otlp,transcripts"
        )
    if (formats or endpoint) and out is None and (endpoint is None or "transcripts" in formats):
        raise ConfigError("synth needs an output folder for file formats", hint="pass --out DIR")
    t_wall = time.perf_counter()
    ledger = Ledger(config.cache_ttl_s, keep_rows=keep_ledger)
    sinks: list = [ledger]
    files: dict[str, Path] = {}
    gz = ".gz" if gzip else ""
    otlp_sink = tr_sink = None
    if endpoint:
        otlp_sink = OtlpSink(config, LiveExporter(endpoint, "logs"), LiveExporter(endpoint, "metrics"))
    elif "otlp" in formats:
        files["otlp_logs"] = Path(out) / "otlp" / f"logs.jsonl{gz}"
        files["otlp_metrics"] = Path(out) / "otlp" / f"metrics.jsonl{gz}"
        otlp_sink = OtlpSink(
            config, FileExporter(files["otlp_logs"], "logs"), FileExporter(files["otlp_metrics"], "metrics")
        )
    if otlp_sink is not None:
        sinks.append(otlp_sink)
    if "transcripts" in formats:
        files["transcripts"] = Path(out) / "claude"
        tr_sink = TranscriptSink(files["transcripts"], config.cache_ttl_s, gzip_files=gzip)
        sinks.append(tr_sink)

    world = World(config)
    arrivals = world.arrivals()
    t0, span = config.start_ms, config.days * 86_400_000
    report = (lambda now: progress(min(1.0, (now - t0) / span))) if progress else None
    Engine(config, sinks, world.session, report).run(arrivals)
    if progress:
        progress(1.0)

    counts: dict[str, int] = {}
    if otlp_sink is not None:
        counts.update(otlp_sink.counts)
        if endpoint:
            for ex in (otlp_sink.logs_exporter, otlp_sink.metrics_exporter):
                counts[f"{ex.kind}_export_failures"] = ex.failures
    if tr_sink is not None:
        counts.update({f"transcript_{k}": v for k, v in tr_sink.counts.items()})
    result = SynthResult(config, ledger, len(arrivals), files, counts, time.perf_counter() - t_wall)
    if out is not None and (files or endpoint):
        _write_run_notes(Path(out), result)
    return result


def _write_run_notes(out: Path, result: SynthResult) -> None:
    import json

    out.mkdir(parents=True, exist_ok=True)
    cfg = result.config
    rows = "\n".join(f"| `{f.name}` | `{getattr(cfg, f.name)!r}` |" for f in fields(SynthConfig))
    s = result.summary()
    s.pop("elapsed_s")
    # Paths relative to the output folder, so the notes are the same wherever the run was written.
    s["files"] = {k: str(Path(v).relative_to(out)) if Path(v).is_relative_to(out) else v for k, v in s["files"].items()}
    text = (
        f"# kvtrace synth run\n\nGenerated by kvtrace {__version__} (`kvtrace synth`).\n\n"
        f"| parameter | value |\n|---|---|\n{rows}\n\n## Totals\n\n```json\n{json.dumps(s, indent=2)}\n```\n"
    )
    (out / "synth-run.md").write_text(text)
