"""``kvtrace collect`` throughput and acknowledgement latency with 8 concurrent exporters.

The collector runs as its own process (``kvtrace collect``, spool on local disk, every batch
fsynced before its 200). Eight exporter processes send Claude Code-shaped ``api_request`` log
batches of 512 records (the OTel SDKs' default batch size), encoded beforehand with the OTel
Python SDK's OTLP encoder, over HTTP with the SDK exporter's transport (``requests``), so the
clients' CPU goes to sending, not encoding: the figure is the collector's. Two phases per wire
encoding (``http/protobuf`` + gzip, ``http/json``):

* ``saturation``: closed loop, each exporter sends its next batch when the previous is answered:
  the most records/s the collector acknowledges on this machine.
* ``target``: open loop at the goal rate (20,000 records/s in total), each exporter on its own
  schedule: acknowledgement latency p50/p99 at that load.

Records/s counts acknowledged records (the collector's stored-records counter must agree). The
four phases above measure the receiving path (``--ingest-every off``, no segment sealed during the
run); a fifth runs the protobuf target phase as deployed: default 64 MiB / 60 s segments and the
worker converting and ingesting into a warehouse every 5 s beside the receiver. The collector's
CPU per record comes from /proc, so it holds whatever else runs on the (shared) machine.
Environment: ``KVTRACE_BENCH_QUICK=1`` (short phases).
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXPORTERS = 8
BATCH = 512
TARGET_RPS = 20_000
QUICK = os.environ.get("KVTRACE_BENCH_QUICK") == "1"
PHASE_S = 4.0 if QUICK else 15.0


# -- one exporter process --------------------------------------------------------------------


def _payloads(name: str, encoding: str, n_batches: int) -> list[bytes]:
    """Distinct batches of Claude Code api_request events, encoded by the OTel SDK."""
    import orjson
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "claude-code", "service.version": "2.1.197"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("com.anthropic.claude_code.events", "2.1.197")
    for i in range(n_batches * BATCH):
        logger.emit(
            body="claude_code.api_request",
            attributes={
                "event.name": "api_request",
                "session.id": f"{name}-session-{i // 40}",
                "user.id": "u" * 64,
                "organization.id": "1f6d3c1e-0000-4000-8000-000000000000",
                "terminal.type": "vscode",
                "event.timestamp": "2026-08-01T10:00:00.000Z",
                "event.sequence": i,
                "prompt.id": f"p-{i // 8}",
                "model": "claude-sonnet-4-5",
                "request_id": f"req_{name}_{i:08d}",
                "query_source": "repl_main_thread",
                "input_tokens": 3 + i % 50,
                "output_tokens": 40 + i % 400,
                "cache_read_tokens": 20_000 + i,
                "cache_creation_tokens": 300 + i % 900,
                "cost_usd": 0.0123,
                "cost_usd_micros": 12300,
                "duration_ms": 900 + i % 300,
                "ttft_ms": 400 + i % 100,
                "speed": "normal",
            },
        )
    records = exporter.get_finished_logs()
    out = []
    for b in range(n_batches):
        msg = encode_logs(records[b * BATCH : (b + 1) * BATCH])
        if encoding == "json":
            d = json_format.MessageToDict(msg, use_integers_for_enums=True)
            out.append(orjson.dumps(d))  # no trace ids here, so json_format's base64 trap does not apply
        else:
            out.append(gzip.compress(msg.SerializeToString(), compresslevel=6))
    return out


def exporter_main() -> None:
    """``python -c 'from bench.bench_collect import exporter_main; exporter_main()' NAME URL ENC MODE RATE DURATION``.

    Prints ``ready`` once its batches are encoded, then reads the start time (Unix seconds) from
    stdin, so every exporter starts together after the encoding work is done.
    """
    import requests

    name, url, encoding, mode, rate, duration = sys.argv[1:7]
    rate, duration = float(rate), float(duration)
    payloads = _payloads(name, encoding, 4)
    headers = (
        {"content-type": "application/json"}
        if encoding == "json"
        else {"content-type": "application/x-protobuf", "content-encoding": "gzip"}
    )
    session = requests.Session()
    session.post(url, data=b"{}" if encoding == "json" else b"", headers={"content-type": headers["content-type"]})
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    time.sleep(max(0.0, start - time.time()))
    t0 = time.perf_counter()
    latencies, acked, errors, i = [], 0, 0, 0
    interval = BATCH / rate if mode == "target" else 0.0
    while True:
        due = t0 + i * interval
        now = time.perf_counter()
        if now - t0 >= duration:
            break
        if due > now:
            time.sleep(due - now)
        sent = time.perf_counter()
        r = session.post(url, data=payloads[i % len(payloads)], headers=headers, timeout=30)
        latencies.append(time.perf_counter() - sent)
        if r.status_code == 200:
            acked += BATCH
        else:
            errors += 1
        i += 1
    elapsed = time.perf_counter() - t0
    print(json.dumps({"acked": acked, "errors": errors, "elapsed": elapsed, "latencies": latencies}))


# -- driver ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _counter(port: int, name: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def _stored(port: int) -> float:
    return _counter(port, "kvtrace_collect_stored_records_total")


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), independent of what else the machine runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _phase(port: int, pid: int, encoding: str, mode: str) -> dict:
    url = f"http://127.0.0.1:{port}/v1/logs"
    per_rate = TARGET_RPS / EXPORTERS
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from bench.bench_collect import exporter_main; exporter_main()",
                f"e{k}{mode[0]}{encoding[0]}",
                url,
                encoding,
                mode,
                str(per_rate),
                str(PHASE_S),
            ],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(EXPORTERS)
    ]
    for p in procs:  # every exporter has encoded its batches: start them together
        assert p.stdout.readline().strip() == "ready"
    before = _stored(port)
    ingested_before = _counter(port, "kvtrace_collect_ingested_requests_total")
    cpu_before = _cpu_seconds(pid)
    start = time.time() + 0.5
    # Open loop: spread the exporters' schedules over one interval, as independent clients are;
    # closed loop: start together.
    spacing = BATCH / per_rate / EXPORTERS if mode == "target" else 0.0
    for k, p in enumerate(procs):
        p.stdin.write(f"{start + k * spacing}\n")
        p.stdin.flush()
    results = [json.loads(p.communicate(timeout=PHASE_S + 120)[0]) for p in procs]
    acked = sum(r["acked"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    lat = [x for r in results for x in r["latencies"]]
    stored = _stored(port) - before
    cpu = _cpu_seconds(pid) - cpu_before
    ingested = _counter(port, "kvtrace_collect_ingested_requests_total") - ingested_before
    return {
        "encoding": encoding,
        "mode": mode,
        "exporters": EXPORTERS,
        "batch_records": BATCH,
        "records_acked": acked,
        "records_per_s": round(acked / elapsed),
        "batches": len(lat),
        "errors": sum(r["errors"] for r in results),
        "stored_matches_acked": stored == acked,
        # CPU the collector process spent per acknowledged record: what one core can sustain,
        # whatever else the machine was running during the phase
        "collector_cpu_s": round(cpu, 2),
        "records_per_collector_cpu_s": round(acked / cpu) if cpu else None,
        "requests_ingested_during_phase": int(ingested),
        "ack_latency_ms": {
            "p50": round(_percentile(lat, 0.5) * 1e3, 2),
            "p90": round(_percentile(lat, 0.9) * 1e3, 2),
            "p99": round(_percentile(lat, 0.99) * 1e3, 2),
            "max": round(max(lat) * 1e3, 2) if lat else None,
        },
        "offered_records_per_s": TARGET_RPS if mode == "target" else None,
    }


def _with_collector(tmp: Path, extra: list[str], phases: list[tuple[str, str]]) -> list[dict]:
    """Start ``kvtrace collect`` (HTTP only, spool under ``tmp``), run the phases, stop it cleanly."""
    port = _free_port()
    log = open(tmp / "collector.log", "ab")
    collector = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvtrace",
            "collect",
            "--spool",
            str(tmp / "spool"),
            "--http-port",
            str(port),
            "--grpc-port",
            "-1",
            *extra,
        ],
        cwd=REPO,
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.time() + 30
        while True:
            try:
                _stored(port)
                break
            except OSError:
                if time.time() > deadline or collector.poll() is not None:
                    raise RuntimeError("the collector did not start") from None
                time.sleep(0.1)
        return [_phase(port, collector.pid, enc, mode) for enc, mode in phases]
    finally:
        collector.terminate()
        collector.wait(timeout=300)
        log.close()


def main() -> dict:
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-collect-") as tmp:
        # The receiving path alone: nothing sealed, converted or ingested during the phases.
        receive = Path(tmp) / "receive"
        receive.mkdir()
        phases = _with_collector(
            receive,
            ["--ingest-every", "off", "--segment-age", "10m", "--segment-size", "1GiB"],
            [(enc, mode) for enc in ("protobuf", "json") for mode in ("saturation", "target")],
        )
        spool_bytes = sum(p.stat().st_size for p in (receive / "spool").rglob("seg-*") if p.is_file())
        # As deployed: default segments, and the worker converting and ingesting every 5 s beside it.
        deployed = Path(tmp) / "deployed"
        deployed.mkdir()
        with_ingest = _with_collector(
            deployed, ["--db", str(deployed / "kv.duckdb"), "--ingest-every", "5s"], [("protobuf", "target")]
        )
        for p in with_ingest:
            p["mode"] = "target, ingest every 5s"
    goal = next(p for p in phases if p["encoding"] == "protobuf" and p["mode"] == "target")
    best = max(p["records_per_s"] for p in phases if p["mode"] == "saturation")
    return {
        "what": "kvtrace collect: acknowledged log records/s and ack latency, 8 exporter processes, "
        "512-record batches, fsync before every 200",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_at_start": load_at_start,
            "load_average_at_end": os.getloadavg(),
        },
        "phase_seconds": PHASE_S,
        "quick": QUICK,
        "phases": phases + with_ingest,
        "spool_bytes_written": spool_bytes,
        "goal": {
            "records_per_s": TARGET_RPS,
            "p99_ms": 100,
            "met": best >= TARGET_RPS
            and goal["ack_latency_ms"]["p99"] < 100
            and goal["records_per_s"] >= 0.95 * TARGET_RPS,
        },
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
