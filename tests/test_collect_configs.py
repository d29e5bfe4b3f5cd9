"""The files in collectors/ stay correct: same settings everywhere, real variable names, real CLI flags."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import typer.main

from kvtrace.cli import app
from tests.collect_support import running_collector

COLLECTORS = Path(__file__).resolve().parents[1] / "collectors"


def _env_file() -> dict[str, str]:
    out = {}
    for line in (COLLECTORS / "claude-code.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*", key), line
            out[key] = value
    return out


def test_env_file_and_managed_settings_agree():
    env = _env_file()
    managed = json.loads((COLLECTORS / "managed-settings.json").read_text())["env"]
    assert env == managed
    assert env["CLAUDE_CODE_ENABLE_TELEMETRY"] == "1"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] in ("http/protobuf", "http/json", "grpc")


def test_env_file_drives_a_real_exporter_into_the_collector(tmp_path, monkeypatch):
    """The OTel SDK reads the same OTEL_* variables as Claude Code: endpoint and gzip must work."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

    with running_collector(tmp_path) as c:
        for key, value in _env_file().items():
            monkeypatch.setenv(key, value.replace("127.0.0.1:4318", f"127.0.0.1:{c.http_port}"))
        exporter = OTLPLogExporter()
        assert exporter._compression.value == "gzip"
        provider = LoggerProvider()
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        provider.get_logger("com.anthropic.claude_code.events").emit(body="claude_code.user_prompt")
        provider.shutdown()
        assert c.metrics.get("kvtrace_collect_stored_records_total", signal="logs") == 1


def test_systemd_unit_uses_real_collect_flags():
    text = (COLLECTORS / "kvtrace-collect.service").read_text()
    exec_start = re.search(r"^ExecStart=(.*?)(?<!\\)$", text.replace("\\\n", " "), re.M).group(1)
    argv = shlex.split(exec_start)
    assert argv[0].endswith("/kvtrace") and argv[1] == "collect"
    params = typer.main.get_command(app).commands["collect"].params
    known = {opt for p in params for opt in p.opts}
    flags = [a for a in argv[2:] if a.startswith("--")]
    assert flags and set(flags) <= known, set(flags) - known
    assert "KillMode=mixed" in text and "KillSignal=SIGTERM" in text
    # systemd's soft limit of 1,024 open files would cap the collector's connections
    assert int(re.search(r"^LimitNOFILE=(\d+)$", text, re.M).group(1)) >= 65536


def test_otelcol_configs_write_what_ingest_reads_and_forward_with_a_token():
    file_cfg = (COLLECTORS / "otelcol-file.yaml").read_text()
    exporters = re.findall(r"^  file/\w+:\n((?:    .*\n)+)", file_cfg, re.M)
    assert len(exporters) == 3
    for block in exporters:
        assert "append: true" in block and "format: json" in block and "rotation:" in block
        assert "compression" not in block  # kvtrace reads plain JSON lines
        assert re.search(r"path: \S+\.jsonl\n", block)  # rotated copies keep .jsonl: a folder walk finds them
    forward = (COLLECTORS / "otelcol-forward.yaml").read_text()
    assert "otlphttp/kvtrace:" in forward and 'Authorization: "Bearer ${env:KVTRACE_COLLECT_TOKEN}"' in forward
    assert "retry_on_failure:" in forward and "storage: file_storage/queue" in forward
