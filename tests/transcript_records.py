"""Builders of Claude Code transcript records and files (no tests here): ``assistant`` (an API
response with its ``usage``), ``user`` and ``progress_with_agent_message`` records; ``write``
puts records into a JSON lines file; ``main_file`` and ``agent_file`` are where Claude Code keeps a
session's transcript and a subagent's, under ``projects/`` of a config root."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

SESSION = "2b9d8116-e1de-4038-a101-5fd575fdcb0e"
PROJECT = "-home-dev-work-kvtrace"
_uuids = itertools.count()


def usage(inp=2, read=9982, w5=0, w1=0, out=412, total=None, split=True) -> dict:
    u = {
        "input_tokens": inp,
        "cache_creation_input_tokens": w5 + w1 if total is None else total,
        "cache_read_input_tokens": read,
        "output_tokens": out,
        "service_tier": "standard",
    }
    if split:
        u["cache_creation"] = {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1}
    return u


def assistant(
    msg="msg_1",
    req="req_1",
    out=412,
    ts="2026-08-01T04:50:42.628Z",
    sidechain=False,
    agent=None,
    block="text",
    model="claude-opus-4-8",
    **usage_kw,
) -> dict:
    d = {
        "parentUuid": None,
        "isSidechain": sidechain,
        "userType": "external",
        "cwd": "/home/dev/work/kvtrace",
        "sessionId": SESSION,
        "version": "2.1.220",
        "gitBranch": "main",
    }
    if agent:
        d["agentId"] = agent
    d.update(
        {
            "message": {
                "model": model,
                "id": msg,
                "type": "message",
                "role": "assistant",
                "content": [{"type": block, block: "…"}],
                "stop_reason": "tool_use",
                "usage": usage(out=out, **usage_kw),
            },
            "requestId": req,
            "type": "assistant",
            "uuid": f"u-{next(_uuids)}",
            "timestamp": ts,
        }
    )
    if req is None:
        del d["requestId"]
    return d


def user(text="please look", tool_result_bytes=0) -> dict:
    content = (
        [{"tool_use_id": "toolu_1", "type": "tool_result", "content": "x" * tool_result_bytes}]
        if tool_result_bytes
        else text
    )
    return {
        "parentUuid": None,
        "isSidechain": False,
        "type": "user",
        "sessionId": SESSION,
        "message": {"role": "user", "content": content},
        "uuid": f"u-{next(_uuids)}",
        "timestamp": "2026-08-01T04:50:40.000Z",
    }


def progress_with_agent_message(inner: dict) -> dict:
    """A parent's progress line that embeds a subagent's assistant record (it must not count)."""
    return {
        "type": "progress",
        "sessionId": SESSION,
        "data": {"type": "agent_progress", "message": inner},
        "uuid": f"u-{next(_uuids)}",
        "timestamp": "2026-08-01T04:50:43.000Z",
    }


def write(path: Path, records: list, *, sep=(",", ":"), tail: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(
        (r if isinstance(r, str) else json.dumps(r, separators=sep, ensure_ascii=False)) + "\n" for r in records
    )
    path.write_text(text + (tail or ""))
    return path


def main_file(root: Path, name=SESSION) -> Path:
    return root / "projects" / PROJECT / f"{name}.jsonl"


def agent_file(root: Path, agent="a08bf6deeb6ef7e1f") -> Path:
    return root / "projects" / PROJECT / SESSION / "subagents" / f"agent-{agent}.jsonl"
