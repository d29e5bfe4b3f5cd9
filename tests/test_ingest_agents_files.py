"""Codex rollout files and Gemini CLI chat logs written by the real CLIs against stub APIs.

The stubs chose every count (tests/fixtures/codex, tests/fixtures/gemini; see
tests/fixtures/capture/capture_codex.py and capture_gemini.py), and ``expected.json`` holds what
each request must become in disjoint buckets, so per-request equality is exact. Variants of the
formats (older layouts, duplicate records, bad lines) are made from copies of the real files.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest

from kvtrace.ingest import ingest
from kvtrace.ingest.codex_rollout import parse as parse_rollouts
from kvtrace.ingest.formats import sniff
from kvtrace.ingest.gemini_chats import parse as parse_chats

FIX = Path(__file__).parent / "fixtures"
CODEX = sorted(p.parent for p in (FIX / "codex").glob("*/expected.json"))
GEMINI = sorted(p.parent for p in (FIX / "gemini").glob("*/expected.json"))
BUCKETS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


def expected(d: Path) -> dict:
    return json.loads((d / "expected.json").read_text())


def rollouts(d: Path) -> list[Path]:
    return sorted((d / "sessions").rglob("rollout-*.jsonl"))


def chats(d: Path) -> list[Path]:
    return sorted((d / "tmp").rglob("session-*.json*"))


def buckets(row: dict) -> tuple[int, int, int, int]:
    write = row["cache_write_5m_tokens"] + row["cache_write_1h_tokens"] + row["cache_write_unknown_tokens"]
    return row["input_tokens"], row["cache_read_tokens"], write, row["output_tokens"]


def want_buckets(r: dict) -> tuple[int, int, int, int]:
    return tuple(r[k] for k in BUCKETS)


# -- Codex rollouts ---------------------------------------------------------------------------


@pytest.mark.parametrize("d", CODEX, ids=lambda d: d.name)
def test_rollouts_give_the_served_usage_per_response(d):
    exp = expected(d)
    p = parse_rollouts(rollouts(d))
    assert not p.rejects, [r.describe() for r in p.rejects]
    got = {r["request_id"]: r for r in p.requests.to_pylist()}
    assert set(got) == set(exp["requests"])  # keyed by the stub's response ids
    for rid, w in exp["requests"].items():
        g = got[rid]
        assert buckets(g) == want_buckets(w), rid
        assert g["cache_write_5m_tokens"] == g["cache_write_1h_tokens"] == 0  # no TTL split
        assert (g["agent"], g["source"], g["model"], g["session_id"]) == (
            "codex",
            "codex-rollout",
            w["model"],
            w["session_id"],
        )
        assert json.loads(g["attributes"])["reasoning_output_tokens"] == w["reasoning_tokens"]


def _rewrite(src: list[Path], dest: Path, edit) -> list[Path]:
    out = []
    for i, f in enumerate(src):
        lines = [orjson.loads(x) for x in f.read_bytes().splitlines() if x.strip()]
        target = dest / f"rollout-{i}.jsonl"
        target.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in edit(lines)))
        out.append(target)
    return out


@pytest.mark.parametrize("d", CODEX, ids=lambda d: d.name)
def test_older_rollouts_without_usage_records_give_the_same_rows(d, tmp_path):
    """Before token_usage_record, only event_msg token_count carried usage (last_token_usage)."""
    files = _rewrite(rollouts(d), tmp_path, lambda ls: [x for x in ls if x.get("type") != "token_usage_record"])
    new = {r["request_key"]: buckets(r) for r in parse_rollouts(rollouts(d)).requests.to_pylist()}
    old = parse_rollouts(files)
    assert {r["request_key"]: buckets(r) for r in old.requests.to_pylist()} == new
    assert all(r["request_id"] is None for r in old.requests.to_pylist())


def test_a_token_count_written_twice_counts_once_and_totals_are_ignored(tmp_path):
    d = CODEX[0]

    def double(lines):
        out = []
        for x in lines:
            out.append(x)
            if x.get("type") == "event_msg" and x["payload"].get("type") == "token_count":
                y = json.loads(json.dumps(x))
                y["payload"]["info"]["total_token_usage"]["input_tokens"] += 10**6  # must not matter
                out.append(y)
        return out

    files = _rewrite(rollouts(d), tmp_path, double)
    p = parse_rollouts(files)
    assert sorted(buckets(r) for r in p.requests.to_pylist()) == sorted(
        want_buckets(w) for w in expected(d)["requests"].values()
    )
    assert p.unknown["codex-rollout:duplicate_usage"] > 0


def _is_token_count(x: dict) -> bool:
    return x.get("type") == "event_msg" and x["payload"].get("type") == "token_count"


def _same_counts_again(lines: list[dict]) -> list[dict]:
    """The session's last response followed by another that reports exactly the same counts
    (a later response, so the running total grows by them again)."""
    last_tc = max(i for i, x in enumerate(lines) if _is_token_count(x))
    last_rec = max(i for i, x in enumerate(lines) if x.get("type") == "token_usage_record")
    rec, tc = json.loads(json.dumps(lines[last_rec])), json.loads(json.dumps(lines[last_tc]))
    rec["payload"]["response_id"] = "resp_same_counts_again"
    rec["timestamp"] = "2026-12-31T00:00:00.000Z"
    info = tc["payload"]["info"]
    for k, v in info["last_token_usage"].items():
        info["total_token_usage"][k] += v
    tc["timestamp"] = "2026-12-31T00:00:00.001Z"
    return lines + [rec, tc]


@pytest.mark.parametrize("layout", ["records", "token_count_only"])
def test_two_rollout_responses_with_the_same_counts_are_two_rows(tmp_path, layout):
    d = CODEX[0]

    def edit(lines):
        out = _same_counts_again(lines)
        return out if layout == "records" else [x for x in out if x.get("type") != "token_usage_record"]

    p = parse_rollouts(_rewrite(rollouts(d), tmp_path, edit))
    got = sorted(buckets(r) for r in p.requests.to_pylist())
    want = [want_buckets(w) for w in expected(d)["requests"].values()]
    assert len(got) == len(want) + 1 and len({r["request_key"] for r in p.requests.to_pylist()}) == len(got)
    assert sorted(set(got)) == sorted(set(want)) and not p.rejects, [r.describe() for r in p.rejects]
    if layout == "records":
        assert "resp_same_counts_again" in {r["request_id"] for r in p.requests.to_pylist()}


def test_a_response_whose_record_has_a_non_numeric_count_counts_once(tmp_path):
    d = CODEX[0]

    def edit(lines):
        out = json.loads(json.dumps(lines))
        rec = next(x for x in out if x.get("type") == "token_usage_record")
        rec["payload"]["usage"]["reasoning_output_tokens"] = "many"
        return out

    p = parse_rollouts(_rewrite(rollouts(d), tmp_path, edit))
    assert sorted(buckets(r) for r in p.requests.to_pylist()) == sorted(
        want_buckets(w) for w in expected(d)["requests"].values()
    )
    assert [(r.field, r.reason) for r in p.rejects] == [
        ("payload.usage.reasoning_output_tokens", 'not a token count (want a whole number from 0), got "many"')
    ]


def test_rollout_model_follows_turn_context_and_session_falls_back_to_the_file_name(tmp_path):
    d = CODEX[0]
    sid = expected(d)["requests"][expected(d)["order"][0]]["session_id"]

    def edit(lines):
        out = []
        for x in lines:
            if x.get("type") == "session_meta":
                continue
            if x.get("type") == "turn_context":
                x["payload"]["model"] = "gpt-test-model"
            out.append(x)
        return out

    [f] = _rewrite(rollouts(d), tmp_path, edit)
    named = f.rename(tmp_path / f"rollout-2026-01-01T00-00-00-{sid}.jsonl")
    rows = parse_rollouts([named]).requests.to_pylist()
    assert rows and all(r["session_id"] == sid and r["model"] == "gpt-test-model" for r in rows)


def test_rollout_problems_are_reported_not_fatal(tmp_path):
    d = CODEX[0]
    src = rollouts(d)[0].read_bytes().splitlines()
    usage = next(i for i, x in enumerate(src) if b'"token_count"' in x)
    bad = json.loads(src[usage])
    u = bad["payload"]["info"]["last_token_usage"]
    u["cached_input_tokens"] = u["input_tokens"] + 5  # cached beyond input: clipped, kept
    neg = json.loads(src[usage])
    neg["payload"]["info"]["last_token_usage"]["output_tokens"] = -1
    no_info = {"timestamp": bad["timestamp"], "type": "event_msg", "payload": {"type": "token_count", "info": None}}
    lines = src + [
        json.dumps(bad).encode(),
        json.dumps(neg).encode(),
        b'{"type": "event_msg", "payload": {"type": "token_count", ',
        json.dumps(no_info).encode(),
        b'{"timestamp": "2026-01-01T00:00:00Z", "type": "event_msg", "payload": {"type": "token_count", "in',
    ]
    f = tmp_path / "rollout-x.jsonl"
    f.write_bytes(b"\n".join(lines))  # no final newline: the last line is torn
    p = parse_rollouts([f])
    reasons = {(r.line, r.field): r.reason for r in p.rejects}
    n = len(src)
    assert "uncached input stored as 0" in reasons[(n + 1, "input_tokens")]
    assert reasons[(n + 2, "payload.info.last_token_usage.output_tokens")].startswith("not a token count")
    assert reasons[(n + 3, None)] == "malformed JSON"
    assert p.unknown["codex-rollout:token_count_without_usage"] == 1
    assert p.unknown["codex-rollout:torn_last_line"] == 1
    clipped = [r for r in p.requests.to_pylist() if r["ingested_from"].endswith(f":{n + 1}")]
    assert clipped and clipped[0]["input_tokens"] == 0 and clipped[0]["cache_read_tokens"] == u["cached_input_tokens"]


def test_rollouts_sniff_and_ingest_idempotently(store):
    files = [f for d in CODEX for f in rollouts(d)]
    assert {sniff(f) for f in files} == {"codex-rollout"}
    n = sum(len(expected(d)["requests"]) for d in CODEX)
    s1 = ingest(store, [d / "sessions" for d in CODEX])
    s2 = ingest(store, [d / "sessions" for d in CODEX], force=True)
    assert (s1.requests_added, s2.requests_added) == (n, 0)
    assert s1.formats == {"codex-rollout": len(files)}
    assert store.scalar("SELECT count(*) FROM requests WHERE agent = 'codex'") == n


# -- Gemini chat logs -------------------------------------------------------------------------


def _main_requests(d: Path) -> list[dict]:
    """Chat logs hold the conversation only: the main lane, not the router's utility calls."""
    return [r for r in expected(d)["requests"].values() if r["lane"] == "main"]


@pytest.mark.parametrize("d", GEMINI, ids=lambda d: d.name)
def test_chat_logs_give_the_served_usage_per_response(d):
    exp = expected(d)
    p = parse_chats(chats(d))
    assert not p.rejects, [r.describe() for r in p.rejects]
    rows = p.requests.to_pylist()
    got = sorted((r["model"], *buckets(r)) for r in rows)
    assert got == sorted((w["model"], *want_buckets(w)) for w in _main_requests(d))
    assert {(r["agent"], r["source"], r["session_id"]) for r in rows} == {
        ("gemini-cli", "gemini-chat", exp["session_id"])
    }
    assert all(r["message_id"] for r in rows)


def _as_json_document(f: Path) -> dict:
    """The single-document layout of older CLI versions, from a JSONL chat log."""
    header, messages = None, {}
    for raw in f.read_bytes().splitlines():
        x = orjson.loads(raw)
        if "projectHash" in x:
            header = header or x
        elif "$set" not in x:
            messages[x["id"]] = x  # the last copy of a message wins
    return {**header, "messages": list(messages.values())}


@pytest.mark.parametrize("d", GEMINI, ids=lambda d: d.name)
def test_older_single_document_chat_logs_give_the_same_rows(d, tmp_path):
    files = []
    for i, f in enumerate(chats(d)):
        target = tmp_path / "proj" / "chats" / f"session-{i}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(_as_json_document(f), indent=2))  # pretty-printed, as written
        files.append(target)
    assert {sniff(f) for f in files} == {"gemini-chat"}
    old = {r["request_key"]: buckets(r) for r in parse_chats(files).requests.to_pylist()}
    assert old == {r["request_key"]: buckets(r) for r in parse_chats(chats(d)).requests.to_pylist()}


def test_two_chat_messages_with_the_same_counts_are_two_rows(tmp_path):
    d = GEMINI[0]
    src = chats(d)[0].read_bytes().splitlines()
    msg = next(orjson.loads(x) for x in reversed(src) if b'"tokens"' in x)
    again = {**msg, "id": "same-counts-again", "timestamp": "2026-12-31T00:00:00.000Z"}
    f = tmp_path / "chats" / chats(d)[0].name
    f.parent.mkdir()
    f.write_bytes(b"\n".join(src + [orjson.dumps(again), orjson.dumps(again)]) + b"\n")  # the second: a copy
    before = parse_chats(chats(d)).requests.to_pylist()
    p = parse_chats([f])
    rows = p.requests.to_pylist()
    assert len(rows) == len(before) + 1 and not p.rejects
    assert len({r["request_key"] for r in rows}) == len(rows)
    assert {r["request_key"] for r in before} <= {r["request_key"] for r in rows}  # the first keeps its key
    assert sum(r["message_id"] == "same-counts-again" for r in rows) == 1


def test_chat_log_problems_and_the_prompt_log_are_reported(tmp_path):
    d = GEMINI[0]
    src = chats(d)[0].read_bytes().splitlines()
    msg = next(orjson.loads(x) for x in src if b'"tokens"' in x)
    clipped = {**msg, "id": "clip", "tokens": {**msg["tokens"], "cached": msg["tokens"]["input"] + 1}}
    neg = {**msg, "id": "neg", "tokens": {**msg["tokens"], "output": -3}}
    untokened = {k: v for k, v in msg.items() if k != "tokens"} | {"id": "never"}
    f = tmp_path / "chats" / "session-x.jsonl"
    f.parent.mkdir()
    f.write_bytes(
        b"\n".join(
            src
            + [
                orjson.dumps(clipped),
                orjson.dumps(neg),
                orjson.dumps(untokened),
                b'{"id": "x", "type": "gemini", "tokens": {',
            ]
        )
        + b"\n"
    )
    prompt_log = tmp_path / "logs.json"
    prompt_log.write_text(
        json.dumps(
            [{"sessionId": "s", "messageId": 0, "type": "user", "message": "hi", "timestamp": "2026-01-01T00:00:00Z"}]
            * 3
        )
    )
    assert sniff(prompt_log) == "gemini-chat"
    p = parse_chats([f, prompt_log])
    n = len(src)
    reasons = {(r.line, r.field): r.reason for r in p.rejects}
    assert "stored as the tool tokens only" in reasons[(n + 1, "tokens.input")]
    assert reasons[(n + 2, "tokens.output")].startswith("not a token count")
    assert reasons[(n + 4, None)] == "malformed JSON"
    assert p.unknown["gemini-chat:gemini_without_tokens"] == 1
    assert p.unknown["gemini-chat:prompt_log"] == 3
    row = next(r for r in p.requests.to_pylist() if r["message_id"] == "clip")
    assert row["input_tokens"] == (msg["tokens"].get("tool") or 0)


def test_chat_logs_sniff_and_ingest_idempotently(store, tmp_path):
    files = [f for d in GEMINI for f in chats(d)]
    assert {sniff(f) for f in files} == {"gemini-chat"}
    gz = tmp_path / "session-gz.jsonl.gz"
    gz.write_bytes(gzip.compress(files[0].read_bytes()))
    assert sniff(gz) == "gemini-chat"
    n = sum(len(_main_requests(d)) for d in GEMINI)
    s1 = ingest(store, [d / "tmp" for d in GEMINI])
    s2 = ingest(store, [d / "tmp" for d in GEMINI] + [gz], force=True)
    assert (s1.requests_added, s2.requests_added, s2.duplicates_skipped > 0) == (n, 0, True)
    assert store.scalar("SELECT count(*) FROM requests WHERE agent = 'gemini-cli'") == n
