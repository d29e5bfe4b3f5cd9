"""The real Claude Code CLI exports straight to ``kvtrace collect``: per-request tokens come out exact.

The CLI (pinned in package.json, ``make tools``) runs headless against the stub Messages API of
the capture fixtures (tests/fixtures/capture/), once per protocol: ``http/json``,
``http/protobuf`` with gzip, and ``grpc``, each exporting to one in-process collector. After the
collector stops (its final ingest), every request the stub served has one row in the warehouse
whose input, output, cache-read and cache-write tokens equal what the stub sent.

Everything runs in a private network namespace whose only interface is loopback
(``unshare -n``, as the capture script does): the CLI cannot reach any other address. The test
is skipped without root, ``unshare`` or the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "tests" / "fixtures" / "capture"
CLAUDE = REPO / "node_modules" / ".bin" / "claude"
PROTOCOLS = {"http/json": {}, "http/protobuf": {"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}, "grpc": {}}


def runner() -> None:
    """Inside the namespace: ``python -c 'from tests.test_collect_claude_e2e import runner; runner()' OUT``."""
    out = Path(sys.argv[1])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    ifaces = sorted(name for _, name in socket.if_nameindex())
    if ifaces != ["lo"]:
        raise SystemExit(f"expected only a loopback interface, got {ifaces}")
    sys.path.insert(0, str(CAPTURE))
    from capture import base_env  # noqa: E402
    from stub_anthropic import StubAnthropic  # noqa: E402
    from stub_script import Reply, ScriptedResponder  # noqa: E402

    from kvtrace.collect.config import CollectorConfig
    from kvtrace.collect.server import Collector
    from kvtrace.store import Store

    db = out / "kv.duckdb"
    collector = Collector(
        CollectorConfig(spool=out / "spool", db=db, http_port=0, grpc_port=0, ingest_every=60)
    ).start()
    served, runs = {}, []
    try:
        for k, (protocol, extra) in enumerate(PROTOCOLS.items()):
            scratch = out / f"run{k}"
            work, config, home = (scratch / d for d in ("work", "config", "home"))
            for d in (work, config, home):
                d.mkdir(parents=True)
            script = {
                "main": [
                    Reply.tool("Bash", {"command": "echo hi", "description": "Print hi"}),
                    Reply.text("It printed hi."),
                ]
            }
            with StubAnthropic(
                ScriptedResponder(script), name=f"collect-e2e-{protocol}", token_base=60 + 5 * k
            ) as stub:
                port = collector.grpc_port if protocol == "grpc" else collector.http_port
                env = base_env(stub.url, f"http://127.0.0.1:{port}", config, home, protocol, True) | extra
                t0 = time.time()
                proc = subprocess.run(
                    [
                        str(CLAUDE),
                        "-p",
                        "Say hi with bash.",
                        "--output-format",
                        "json",
                        "--allowedTools",
                        "Bash(echo:*)",
                    ],
                    env=env,
                    cwd=work,
                    capture_output=True,
                    text=True,
                    timeout=180,
                    stdin=subprocess.DEVNULL,
                )
                time.sleep(1.5)  # the CLI flushes on exit; a late export still lands
                runs.append(
                    {
                        "protocol": protocol,
                        "exit": proc.returncode,
                        "wall_s": round(time.time() - t0, 1),
                        "stderr": proc.stderr[-1500:],
                    }
                )
                for rid, row in stub.expected()["requests"].items():
                    if row["status"] == 200:
                        served[rid] = {
                            "protocol": protocol,
                            **{
                                key: row[key]
                                for key in (
                                    "input_tokens",
                                    "output_tokens",
                                    "cache_read_tokens",
                                    "cache_creation_tokens",
                                )
                            },
                        }
    finally:
        collector.stop()
    with Store(db, read_only=True) as store:
        rows = store.query(
            "SELECT request_id, input_tokens, output_tokens, cache_read_tokens, "
            "cache_write_5m_tokens + cache_write_1h_tokens + cache_write_unknown_tokens FROM requests"
        )
    stored = {
        r[0]: dict(zip(("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"), r[1:]))
        for r in rows
    }
    requests_by_protocol = {}
    for line in collector.metrics.render().splitlines():
        if line.startswith("kvtrace_collect_requests_total{"):
            requests_by_protocol[line.split(" ")[0]] = float(line.split(" ")[1])
    (out / "result.json").write_text(
        json.dumps({"runs": runs, "served": served, "stored": stored, "requests": requests_by_protocol}, indent=1)
    )


def _missing(why: str) -> None:
    if os.environ.get("KVTRACE_REQUIRE_TOOLS") == "1":  # CI: a missing tool is a failure, not a skip
        pytest.fail(why)
    pytest.skip(why)


def test_claude_code_cli_to_collect_exact_tokens_over_each_protocol(tmp_path):
    pytest.importorskip("kvtrace.ingest.otlp_json")
    if not CLAUDE.exists():
        _missing("node_modules/.bin/claude missing: run `make tools`")
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        _missing("needs root, unshare and ip for a loopback-only network namespace")
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        _missing("unshare -n is not permitted here")
    proc = subprocess.run(
        [
            "unshare",
            "-n",
            "--",
            sys.executable,
            "-c",
            "from tests.test_collect_claude_e2e import runner; runner()",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    for run in result["runs"]:
        assert run["exit"] == 0, run
    served, stored = result["served"], result["stored"]
    for protocol in PROTOCOLS:
        assert sum(1 for r in served.values() if r["protocol"] == protocol) >= 2, (protocol, result["runs"])
    assert set(stored) == set(served)
    for rid, row in served.items():
        assert stored[rid] == {k: v for k, v in row.items() if k != "protocol"}, (rid, row["protocol"])
    answered = {k for k, n in result["requests"].items() if n > 0 and ('code="200"' in k or 'code="OK"' in k)}
    for label in (
        'encoding="json",protocol="http",signal="logs"',
        'encoding="protobuf",protocol="http",signal="logs"',
        'encoding="protobuf",protocol="grpc",signal="logs"',
    ):
        assert any(label in k for k in answered), (label, answered)
