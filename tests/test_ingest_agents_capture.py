"""The Codex and Gemini CLI fixtures: the stubs' wire shapes, coherence of the committed captures,
ccusage's reading of the same local files, and (slow) a fresh capture with the real CLIs.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "tests" / "fixtures" / "capture"
FIX = REPO / "tests" / "fixtures"
CODEX = sorted(p.parent for p in (FIX / "codex").glob("*/expected.json"))
GEMINI = sorted(p.parent for p in (FIX / "gemini").glob("*/expected.json"))
sys.path.insert(0, str(CAPTURE))

from agent_common import AgentReply  # noqa: E402
from stub_gemini import StubGemini  # noqa: E402
from stub_openai import StubOpenAI  # noqa: E402


def _post(url: str, body: dict, headers: dict | None = None) -> tuple[int, bytes, dict]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"content-type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.read(), dict(r.headers)


def _sse(data: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in data.decode().splitlines() if line.startswith("data: ")]


def test_openai_stub_streams_usage_with_cached_and_written_tokens_inside_input():
    with StubOpenAI(
        [AgentReply.call("exec_command", {"cmd": "echo hi"}), AgentReply.say("done")], "t", 0, report_cache_write=True
    ) as stub:
        meta = {"x-codex-turn-metadata": json.dumps({"request_kind": "turn", "session_id": "s1"})}
        events = [_sse(_post(stub.url + "/v1/responses", {"model": "m", "stream": True}, meta)[1]) for _ in range(2)]
        exp = stub.expected()
    done = [e[-1] for e in events]
    assert [e["type"] for e in done] == ["response.completed"] * 2
    assert done[0]["response"]["output"][0]["type"] == "function_call"
    for d, rid in zip(done, exp["order"]):
        u, w = d["response"]["usage"], exp["requests"][rid]
        assert d["response"]["id"] == rid and w["session_id"] == "s1"
        det = u["input_tokens_details"]
        assert u["input_tokens"] == w["input_tokens"] + det["cached_tokens"] + det["cache_write_tokens"]
        assert (det["cached_tokens"], det["cache_write_tokens"], u["output_tokens"]) == (
            w["cache_read_tokens"],
            w["cache_write_tokens"],
            w["output_tokens"],
        )
    # a prefix chain: each request reads what the previous read, wrote and sent
    first, second = (exp["requests"][r] for r in exp["order"])
    assert second["cache_read_tokens"] == sum(
        first[k] for k in ("cache_read_tokens", "cache_write_tokens", "input_tokens")
    )


def test_gemini_stub_streams_usage_metadata_with_cached_inside_the_prompt():
    with StubGemini([AgentReply.say("Hello there.")], "t", 0) as stub:
        _, data, _ = _post(stub.url + "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", {"contents": []})
        _, router, _ = _post(
            stub.url + "/v1beta/models/gemini-lite:generateContent",
            {
                "generationConfig": {
                    "responseMimeType": "application/json",
                    "responseJsonSchema": {
                        "type": "OBJECT",
                        "properties": {"score": {"type": "INTEGER"}},
                        "required": ["score"],
                    },
                }
            },
        )
        exp = stub.expected()
    chunks = _sse(data)
    assert len(chunks) == 2 and "candidatesTokenCount" not in chunks[0]["usageMetadata"]
    u = chunks[-1]["usageMetadata"]
    main, util = (exp["requests"][r] for r in exp["order"])
    assert (main["lane"], util["lane"]) == ("main", "utility")
    assert json.loads(json.loads(router)["candidates"][0]["content"]["parts"][0]["text"]) == {"score": 10}
    assert (
        u["promptTokenCount"] - u["cachedContentTokenCount"] + u.get("toolUsePromptTokenCount", 0)
        == main["input_tokens"]
    )
    assert u["candidatesTokenCount"] + u["thoughtsTokenCount"] == main["output_tokens"]
    assert u["totalTokenCount"] == (
        u["promptTokenCount"]
        + u["candidatesTokenCount"]
        + u["thoughtsTokenCount"]
        + u.get("toolUsePromptTokenCount", 0)
    )


def _otlp_records(d: Path, signal: str) -> list[dict]:
    f = d / f"{signal}.jsonl"
    data = f.read_bytes() if f.exists() else gzip.decompress((d / f"{signal}.jsonl.gz").read_bytes())
    return [json.loads(x) for x in data.splitlines() if x.strip()]


def _log_attrs(d: Path):
    for line in _otlp_records(d, "logs"):
        for rl in line["resourceLogs"]:
            for sl in rl["scopeLogs"]:
                for r in sl["logRecords"]:
                    yield {a["key"]: a["value"] for a in r.get("attributes", [])}


@pytest.mark.parametrize("d", CODEX, ids=lambda d: d.name)
def test_codex_capture_is_coherent(d):
    exp = json.loads((d / "expected.json").read_text())
    assert all(r["exit_code"] == 0 for r in exp["runs"]) and exp["requests"]
    done = [
        a
        for a in _log_attrs(d)
        if a.get("event.name", {}).get("stringValue") == "codex.sse_event"
        and a.get("event.kind", {}).get("stringValue") == "response.completed"
        and "input_token_count" in a
    ]
    assert len(done) == len(exp["requests"])
    served = sorted(r["api_usage"]["input_tokens"] for r in exp["requests"].values())
    # Codex logs input/output counts with Display: string values on the wire
    assert sorted(int(a["input_token_count"]["stringValue"]) for a in done) == served
    assert {r["session_id"] for r in exp["requests"].values()} == {a["conversation.id"]["stringValue"] for a in done}


@pytest.mark.parametrize("d", GEMINI, ids=lambda d: d.name)
def test_gemini_capture_is_coherent(d):
    exp = json.loads((d / "expected.json").read_text())
    assert all(r["exit_code"] == 0 for r in exp["runs"]) and exp["requests"]
    resp = [a for a in _log_attrs(d) if a.get("event.name", {}).get("stringValue") == "gemini_cli.api_response"]
    assert len(resp) == len(exp["requests"])
    assert {a["session.id"]["stringValue"] for a in resp} == {exp["session_id"]}
    assert sorted(int(a["input_token_count"]["intValue"]) for a in resp) == sorted(
        r["api_usage"]["promptTokenCount"] for r in exp["requests"].values()
    )


def _ccusage(args: list[str], env: dict) -> dict:
    ccusage = REPO / "node_modules" / ".bin" / "ccusage"
    if not ccusage.exists():
        pytest.skip("node_modules/.bin/ccusage missing: run `make tools`")
    proc = subprocess.run(
        [str(ccusage), *args, "daily", "--json", "--offline"],
        env={"PATH": os.environ.get("PATH", ""), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["totals"]


@pytest.mark.parametrize("d", CODEX, ids=lambda d: d.name)
def test_ccusage_reads_the_codex_rollouts_as_served(d, tmp_path):
    """ccusage subtracts cached and written tokens from Codex's input, as kvtrace does."""
    totals = _ccusage(["codex"], {"HOME": str(tmp_path), "CODEX_HOME": str(d)})
    rows = json.loads((d / "expected.json").read_text())["requests"].values()
    assert (
        totals["inputTokens"],
        totals["cacheReadTokens"],
        totals["cacheCreationTokens"],
        totals["outputTokens"],
    ) == tuple(
        sum(r[k] for r in rows) for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
    )


@pytest.mark.parametrize("d", GEMINI, ids=lambda d: d.name)
def test_ccusage_reads_the_gemini_chats_as_served(d, tmp_path):
    """ccusage agrees on input (tool-use prompt tokens included) and cache reads; it leaves
    thinking tokens out of output (they are only in its total), where kvtrace bills them as output."""
    (tmp_path / ".gemini").mkdir()
    shutil.copytree(d / "tmp", tmp_path / ".gemini" / "tmp")
    totals = _ccusage(["gemini"], {"HOME": str(tmp_path)})
    rows = [r for r in json.loads((d / "expected.json").read_text())["requests"].values() if r["lane"] == "main"]
    assert (
        totals["inputTokens"],
        totals["cacheReadTokens"],
        totals["outputTokens"] + sum(r["thoughts_tokens"] for r in rows),
    ) == tuple(sum(r[k] for r in rows) for k in ("input_tokens", "cache_read_tokens", "output_tokens"))


def _capture(script: str, scenario: str, out: Path, binary: str) -> dict:
    if not (REPO / "node_modules" / ".bin" / binary).exists():
        pytest.skip(f"node_modules/.bin/{binary} missing: run `make tools`")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a loopback-only network namespace")
    proc = subprocess.run(
        [sys.executable, str(CAPTURE / script), "-s", scenario, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "network namespace: loopback only" in proc.stdout
    return json.loads((out / scenario / "expected.json").read_text())


@pytest.mark.slow
def test_capture_runs_the_real_codex_cli(tmp_path):
    from kvtrace.ingest.codex_rollout import parse

    exp = _capture("capture_codex.py", "exec_tool", tmp_path, "codex")
    rows = parse(sorted((tmp_path / "exec_tool").rglob("rollout-*.jsonl"))).requests.to_pylist()
    assert sorted(r["request_id"] for r in rows) == sorted(exp["requests"])


@pytest.mark.slow
def test_capture_runs_the_real_gemini_cli(tmp_path):
    from kvtrace.ingest.gemini_chats import parse

    exp = _capture("capture_gemini.py", "resume", tmp_path, "gemini")
    rows = parse(sorted((tmp_path / "resume").rglob("session-*.json*"))).requests.to_pylist()
    assert len(rows) == sum(r["lane"] == "main" for r in exp["requests"].values()) == 2
