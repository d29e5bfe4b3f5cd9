"""The OTLP sink: requests and notes -> OpenTelemetry SDK log records and DELTA sums, as Claude Code emits.

Shapes follow Claude Code's telemetry: resource ``service.name=claude-code`` (one resource per
developer machine), scope ``com.anthropic.claude_code.events`` for log events whose body is
``claude_code.<event>`` with attribute ``event.name``; scope ``com.anthropic.claude_code`` for
the ``claude_code.token.usage`` (``type`` = input/output/cacheRead/cacheCreation) and
``claude_code.cost.usage`` counters with DELTA temporality (only series that changed are sent).

Batching is on simulated time: every ``log_export_interval_s`` the records of that window are
exported as one batch (one line of a file), every ``metric_export_interval_s`` the delta points
of that window: what a Collector with a batch processor in front of a file exporter writes for
a fleet. ``event.sequence`` is assigned per session in emission order at export time.
Timestamps are simulated (ms resolution), never the wall clock.
"""

from __future__ import annotations

from typing import Any

from opentelemetry._logs import LogRecord
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from kvtrace.synth import ids
from kvtrace.synth import otlp_json

EVENTS_SCOPE = "com.anthropic.claude_code.events"
METRICS_SCOPE = "com.anthropic.claude_code"
_METRIC_QS = {"repl_main_thread": "main", "subagent": "subagent", "compact": "auxiliary"}
_TERMINALS = ("vscode", "iTerm.app", "tmux", "Apple_Terminal", "cursor", "ghostty")


class OtlpSink:
    """Buffers events per export window and hands SDK batches to exporters (file or live)."""

    def __init__(self, cfg: Any, logs_exporter: Any | None, metrics_exporter: Any | None):
        self.start = cfg.start_ms
        self.log_iv = int(cfg.log_export_interval_s * 1000)
        self.met_iv = int(cfg.metric_export_interval_s * 1000)
        self.logs_exporter, self.metrics_exporter = logs_exporter, metrics_exporter
        self._logs: dict[int, list] = {}
        self._metrics: dict[int, dict] = {}
        self._next_log = self.start + self.log_iv
        self._next_met = self.start + self.met_iv
        self._order = 0
        self._seq: dict[str, int] = {}
        self._resources: dict[str, Any] = {}
        self._scopes: dict[tuple, Any] = {}
        self._delta = AggregationTemporality.DELTA
        self.counts = {"log_records": 0, "log_lines": 0, "metric_points": 0, "metric_lines": 0}

    # -- SDK objects ------------------------------------------------------------------------
    def _resource(self, user: Any) -> Any:
        # Machines alike share one Resource: OTLP encoders key batches by resource equality, and the
        # protobuf metrics encoder keeps only the last ResourceMetrics of equal resources.
        key = (user.version, user.os_type, user.os_version, user.arch)
        res = self._resources.get(key)
        if res is None:
            res = self._resources[key] = Resource(
                {
                    "service.name": "claude-code",
                    "service.version": user.version,
                    "os.type": user.os_type,
                    "os.version": user.os_version,
                    "host.arch": user.arch,
                }
            )
        return res

    def _scope(self, name: str, version: str) -> Any:
        sc = self._scopes.get((name, version))
        if sc is None:
            sc = self._scopes[(name, version)] = InstrumentationScope(name, version)
        return sc

    @staticmethod
    def _identity(sess: Any) -> dict:
        u = sess.user
        return {
            "user.id": u.id,
            "session.id": sess.id,
            "organization.id": u.org_id,
            "terminal.type": _TERMINALS[int(u.name[3:]) % len(_TERMINALS)],
        }

    # -- sink interface -----------------------------------------------------------------------
    def request(self, r: Any) -> None:
        self._add_log(r.end_ms, r)
        if self.metrics_exporter is None:
            return
        sess = r.thread.session
        w = self._metrics.setdefault((r.end_ms - self.start) // self.met_iv, {})
        qs = _METRIC_QS.get(r.query_source, "auxiliary")
        for typ, n in (
            ("input", r.input),
            ("output", r.output_tokens),
            ("cacheRead", r.read),
            ("cacheCreation", r.write),
            (None, r.cost_usd),
        ):
            if n:
                key = (sess.id, r.model, qs, typ)
                cur = w.get(key)
                if cur is None:
                    w[key] = [sess, r.model, qs, typ, float(n)]
                else:
                    cur[4] += n

    def note(self, n: Any) -> None:
        if n.kind in ("user_prompt", "compaction"):
            self._add_log(n.t_ms, n)

    def _add_log(self, t_ms: int, item: Any) -> None:
        if self.logs_exporter is None:
            return
        self._order += 1
        self._logs.setdefault((t_ms - self.start) // self.log_iv, []).append((t_ms, self._order, item))

    def advance(self, now_ms: int) -> None:
        if now_ms >= self._next_log:
            self._flush_logs(now_ms)
        if now_ms >= self._next_met:
            self._flush_metrics(now_ms)

    def close(self) -> None:
        self._flush_logs(None)
        self._flush_metrics(None)
        for ex in (self.logs_exporter, self.metrics_exporter):
            if ex is not None:
                ex.shutdown()

    # -- logs -----------------------------------------------------------------------------------
    def _flush_logs(self, now_ms: int | None) -> None:
        ready = sorted(w for w in self._logs if now_ms is None or self.start + (w + 1) * self.log_iv <= now_ms)
        for w in ready:
            items = self._logs.pop(w)
            items.sort(key=lambda x: (x[0], x[1]))
            batch = [self._log_record(t, item) for t, _, item in items]
            self.logs_exporter.export(batch)
            self.counts["log_records"] += len(batch)
            self.counts["log_lines"] += 1
        if now_ms is not None:
            self._next_log = now_ms - (now_ms - self.start) % self.log_iv + self.log_iv

    def _log_record(self, t_ms: int, item: Any) -> Any:
        sess = item.thread.session
        seq = self._seq.get(sess.id, 0) + 1
        self._seq[sess.id] = seq
        attrs = self._identity(sess)
        if hasattr(item, "request_id"):  # a Request
            name = "api_request"
            attrs.update(
                {
                    "event.name": name,
                    "event.timestamp": ids.iso_ms(t_ms),
                    "event.sequence": seq,
                    "prompt.id": item.prompt_id,
                    "model": item.model,
                    "input_tokens": item.input,
                    "output_tokens": item.output_tokens,
                    "cache_read_tokens": item.read,
                    "cache_creation_tokens": item.write,
                    "cost_usd": item.cost_usd,
                    "duration_ms": item.duration_ms,
                    "ttft_ms": item.ttft_ms,
                    "request_id": item.request_id,
                    "query_source": item.query_source,
                }
            )
        elif item.kind == "user_prompt":
            name = "user_prompt"
            # Non-API events carry their numbers as strings, as Claude Code sends them.
            attrs.update(
                {
                    "event.name": name,
                    "event.timestamp": ids.iso_ms(t_ms),
                    "event.sequence": seq,
                    "prompt.id": item.data["prompt_id"],
                    "prompt_length": str(item.data["prompt_tokens"] * ids.CHARS_PER_TOKEN),
                    "prompt": "<REDACTED>",
                }
            )
        else:
            name = "compaction"
            attrs.update(
                {
                    "event.name": name,
                    "event.timestamp": ids.iso_ms(t_ms),
                    "event.sequence": seq,
                    "prompt.id": item.data["prompt_id"],
                    "pre_tokens": str(item.data["pre_tokens"]),
                    "post_tokens": str(item.data["post_tokens"]),
                    "trigger": "auto",
                }
            )
        ns = t_ms * 1_000_000
        lr = LogRecord(timestamp=ns, observed_timestamp=ns, body=f"claude_code.{name}", attributes=attrs)
        user = sess.user
        return ReadableLogRecord(lr, self._resource(user), self._scope(EVENTS_SCOPE, user.version))

    # -- metrics --------------------------------------------------------------------------------
    def _flush_metrics(self, now_ms: int | None) -> None:
        ready = sorted(w for w in self._metrics if now_ms is None or self.start + (w + 1) * self.met_iv <= now_ms)
        for w in ready:
            series = self._metrics.pop(w)
            t0 = (self.start + w * self.met_iv) * 1_000_000
            t1 = t0 + self.met_iv * 1_000_000
            by_res: dict[int, tuple[Any, list, list]] = {}
            for sess, model, qs, typ, value in series.values():
                res = self._resource(sess.user)
                entry = by_res.get(id(res))
                if entry is None:
                    entry = by_res[id(res)] = (sess.user, [], [])
                attrs = self._identity(sess)
                if typ is None:
                    attrs.update({"model": model, "query_source": qs})
                    entry[2].append(NumberDataPoint(attrs, t0, t1, round(value, 10)))
                else:
                    attrs.update({"type": typ, "model": model, "query_source": qs})
                    entry[1].append(NumberDataPoint(attrs, t0, t1, value))
            rms = []
            for user, tokens, cost in by_res.values():
                metrics = []
                if tokens:
                    metrics.append(
                        Metric(
                            "claude_code.token.usage", "Number of tokens used", "tokens", Sum(tokens, self._delta, True)
                        )
                    )
                if cost:
                    metrics.append(
                        Metric(
                            "claude_code.cost.usage",
                            "Cost of the Claude Code session",
                            "USD",
                            Sum(cost, self._delta, True),
                        )
                    )
                rms.append(
                    ResourceMetrics(
                        self._resource(user), [ScopeMetrics(self._scope(METRICS_SCOPE, user.version), metrics, "")], ""
                    )
                )
            self.metrics_exporter.export(MetricsData(rms))
            self.counts["metric_points"] += len(series)
            self.counts["metric_lines"] += 1
        if now_ms is not None:
            self._next_met = now_ms - (now_ms - self.start) % self.met_iv + self.met_iv


class FileExporter:
    """Writes each batch as one OTLP JSON line (``.gz`` paths are gzip-compressed, deterministically)."""

    def __init__(self, path: Any, kind: str):
        import io
        from pathlib import Path

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._encode = otlp_json.logs_line if kind == "logs" else otlp_json.metrics_line
        raw = open(path, "wb")
        if path.suffix == ".gz":
            import gzip

            raw = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6)
        self._raw = raw
        self._f = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")

    def export(self, batch: Any) -> None:
        self._f.write(self._encode(batch))

    def shutdown(self) -> None:
        self._f.close()


class LiveExporter:
    """Sends each batch through the real OTLP/HTTP (protobuf) exporter of opentelemetry-python."""

    def __init__(self, endpoint: str, kind: str, headers: dict | None = None, timeout_s: float = 10.0):
        base = endpoint.rstrip("/")
        if kind == "logs":
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as E

            url = base if base.endswith("/v1/logs") else base + "/v1/logs"
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as E

            url = base if base.endswith("/v1/metrics") else base + "/v1/metrics"
        self._ex = E(endpoint=url, headers=headers, timeout=timeout_s)
        self.kind, self.failures, self.sent = kind, 0, 0

    def export(self, batch: Any) -> None:
        result = self._ex.export(batch)
        ok = getattr(result, "name", str(result)) == "SUCCESS"
        self.sent += 1
        self.failures += 0 if ok else 1

    def shutdown(self) -> None:
        self._ex.shutdown()
