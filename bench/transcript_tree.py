"""A seeded generator of a ``~/.claude/projects`` tree shaped like real Claude Code transcripts.

It writes compact JSON lines as the CLI does: user prompts, bulky tool results (the text twice,
in ``message.content`` and ``toolUseResult``), each API response as 1-3 lines (one per content
block, each with a full copy of ``usage``; older builds put a placeholder ``output_tokens`` on the
first lines), progress lines (about 44% of all lines, some embedding a subagent's assistant
message), subagent files under ``<session>/subagents/`` (beside the ``agent-<id>.meta.json``
sidecar the CLI writes) that replay a few parent messages under new request ids, resumed sessions
that copy an earlier session's history into a new file, compaction markers, synthetic and
API-error records.

The generator knows the truth: every unique response once, with its final output count, by UTC
day. ``generate`` returns it (and writes ``truth.json`` beside ``projects/``).
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson

MODELS = ["claude-sonnet-4-5-20250929", "claude-opus-4-1-20250805", "claude-haiku-4-5-20251001"]
GENERATOR_VERSION = 2  # bump when the shape of the tree changes (cached trees are keyed by it)
VERSIONS = ["2.0.62", "2.1.88", "2.1.197", "2.1.220"]
START = datetime(2026, 7, 1, tzinfo=timezone.utc)
DAYS = 30
WORDS = ("the of and to in is for that with on as this are be by from it at an or was if "
         "def return import class self None True False const let function await async yield "
         "token cache prefix request model session agent context window reuse block tier").split()


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


class _Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)
        r = self.r
        parts = []
        for _ in range(120_000):
            w = r.choice(WORDS)
            parts.append(w + ("\n" if r.random() < 0.08 else '"' if r.random() < 0.01 else " "))
        self.text = "".join(parts)

    def txt(self, lo: int, hi: int) -> str:
        n = self.r.randint(lo, hi)
        i = self.r.randrange(0, len(self.text) - n)
        return self.text[i:i + n]

    def uid(self) -> str:
        return str(uuid.UUID(int=self.r.getrandbits(128), version=4))

    def tag(self, prefix: str) -> str:
        return prefix + "".join(self.r.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz123456789")
                                for _ in range(24))


class _Session:
    """One transcript file being written (a main session or a subagent)."""

    def __init__(self, g: _Gen, truth: dict, session_id: str, cwd: str, version: str, t: datetime,
                 agent_id: str | None = None):
        self.g, self.truth = g, truth
        self.session_id, self.cwd, self.version, self.t = session_id, cwd, version, t
        self.agent_id = agent_id
        self.lines: list[bytes] = []
        self.parent: str | None = None
        self.model = g.r.choice(MODELS)
        self.ttl_1h = g.r.random() < 0.3
        self.context = g.r.randint(8_000, 20_000)
        self.last_call: datetime | None = None
        self.assistant_records: list[dict] = []   # for replays and agent_progress copies
        # Builds before 2.1.98 wrote the message_start placeholder as output_tokens on early blocks.
        self.placeholder_output = version < "2.1.98"

    def base(self, typ: str) -> dict:
        d = {"parentUuid": self.parent, "isSidechain": self.agent_id is not None, "userType": "external",
             "cwd": self.cwd, "sessionId": self.session_id, "version": self.version, "gitBranch": "main"}
        if self.agent_id:
            d["agentId"] = self.agent_id
        d["type"] = typ
        return d

    def emit(self, rec: dict, advance_ms: int = 50) -> None:
        u = self.g.uid()
        rec["uuid"] = u
        rec["timestamp"] = _iso(self.t)
        self.lines.append(orjson.dumps(rec))
        self.parent = u
        self.t += timedelta(milliseconds=advance_ms)

    def prompt(self) -> None:
        d = self.base("user")
        d["message"] = {"role": "user", "content": self.g.txt(40, 600)}
        self.emit(d, self.g.r.randint(500, 3000))

    def usage(self) -> dict:
        r = self.g.r
        idle = self.last_call is None or (self.t - self.last_call).total_seconds() > (3600 if self.ttl_1h else 300)
        new = r.randint(200, 6000)
        if idle:
            write, read = self.context + new, 0
        else:
            write, read = new, self.context
        self.context += new
        if self.context > 160_000:  # compaction: the context shrinks
            d = self.base("system")
            d.update(subtype="compact_boundary", content="Conversation compacted", isMeta=False, level="info",
                     compactMetadata={"trigger": "auto", "preTokens": self.context})
            self.emit(d)
            self.context = r.randint(10_000, 30_000)
        self.last_call = self.t
        w1h = write if self.ttl_1h else 0
        return {"input_tokens": r.choice([1, 2, 3, 4, 6, 8, r.randint(10, 3000)]),
                "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
                "cache_creation": {"ephemeral_5m_input_tokens": write - w1h, "ephemeral_1h_input_tokens": w1h},
                "output_tokens": r.randint(20, 4000), "service_tier": "standard"}

    def response(self, tool: bool) -> list[str]:
        """One API response as 1-3 lines; returns the tool_use ids it asked for."""
        g, r = self.g, self.g.r
        usage = self.usage()
        final_out = usage["output_tokens"]
        msg_id, req_id = g.tag("msg_01"), g.tag("req_01")
        blocks: list[dict] = []
        if r.random() < 0.4:
            blocks.append({"type": "thinking", "thinking": g.txt(100, 900), "signature": g.txt(60, 200)})
        if r.random() < 0.7 or not tool:
            blocks.append({"type": "text", "text": g.txt(30, 600)})
        tools = []
        if tool:
            for _ in range(r.choice([1, 1, 1, 2])):
                tid = g.tag("toolu_01")
                tools.append(tid)
                blocks.append({"type": "tool_use", "id": tid, "name": r.choice(["Bash", "Read", "Edit", "Grep"]),
                               "input": {"command": g.txt(10, 300)}})
        blocks = blocks[:3]
        day = _iso(self.t)[:10]
        for i, b in enumerate(blocks):
            last = i == len(blocks) - 1
            u = dict(usage)
            if not last and self.placeholder_output:
                u["output_tokens"] = r.randint(1, 12)
            d = self.base("assistant")
            d["message"] = {"model": self.model, "id": msg_id, "type": "message", "role": "assistant",
                            "content": [b], "stop_reason": ("tool_use" if tool else "end_turn") if last else None,
                            "stop_sequence": None, "usage": u}
            d["requestId"] = req_id
            self.emit(d, r.randint(5, 400))
            self.assistant_records.append(d)
        self.truth[msg_id] = {"day": day, "model": self.model, "input": usage["input_tokens"],
                              "cache_read": usage["cache_read_input_tokens"],
                              "cache_write_5m": usage["cache_creation"]["ephemeral_5m_input_tokens"],
                              "cache_write_1h": usage["cache_creation"]["ephemeral_1h_input_tokens"],
                              "output": final_out, "subagent": self.agent_id is not None}
        return tools

    def progress(self, tool_id: str) -> None:
        d = self.base("progress")
        d["data"] = {"type": self.g.r.choice(["hook_progress", "bash_progress"]), "hookEvent": "PostToolUse",
                     "hookName": "PostToolUse:Bash", "command": self.g.txt(20, 200), "output": self.g.txt(0, 120)}
        d["toolUseID"] = tool_id
        d["parentToolUseID"] = tool_id
        self.emit(d, self.g.r.randint(10, 2000))

    def tool_result(self, tool_id: str) -> None:
        out = self.g.txt(50, 1_600)
        d = self.base("user")
        d["message"] = {"role": "user", "content": [{"tool_use_id": tool_id, "type": "tool_result", "content": out}]}
        d["toolUseResult"] = {"stdout": out, "stderr": "", "interrupted": False, "isImage": False}
        self.emit(d, self.g.r.randint(200, 20_000))

    def error_or_synthetic(self) -> None:
        d = self.base("assistant")
        err = self.g.r.random() < 0.6
        text = "API Error: 529 Overloaded" if err else "No response requested."
        d["message"] = {"id": self.g.uid(), "model": "<synthetic>", "role": "assistant", "type": "message",
                        "stop_reason": "stop_sequence", "stop_sequence": "",
                        "usage": {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                                  "cache_read_input_tokens": 0},
                        "content": [{"type": "text", "text": text}]}
        if err:
            d["isApiErrorMessage"] = True
        self.emit(d)


def _write(path: Path, lines: list[bytes]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(data)
    return len(data)


def _run_session(g: _Gen, truth: dict, root: Path, project: str, cwd: str, t: datetime,
                 session_id: str | None = None, history: list[bytes] | None = None) -> tuple[int, _Session]:
    r = g.r
    sid = session_id or g.uid()
    s = _Session(g, truth, sid, cwd, r.choice(VERSIONS), t)
    if history:
        s.lines.extend(history)
    s.emit({"type": "file-history-snapshot", "messageId": g.uid(), "snapshot": {"trackedFileBackups": {}},
            "isSnapshotUpdate": False}, 10)
    written = 0
    for _ in range(r.randint(5, 60)):
        s.prompt()
        for _ in range(r.randint(1, 8)):
            if r.random() < 0.01:
                s.error_or_synthetic()
            tools = s.response(tool=r.random() < 0.8)
            for tid in tools:
                for _ in range(r.randint(1, 5)):
                    s.progress(tid)
                if r.random() < 0.03:  # a Task tool use: a subagent runs
                    written += _run_subagent(g, truth, root, project, s, tid)
                s.tool_result(tid)
            if not tools:
                break
        s.t += timedelta(seconds=r.choice([5, 20, 60, 200, 400, 2000]))
    written += _write(root / "projects" / project / f"{sid}.jsonl", s.lines)
    return written, s


def _run_subagent(g: _Gen, truth: dict, root: Path, project: str, parent: _Session, tool_id: str) -> int:
    r = g.r
    agent_id = "".join(r.choice("0123456789abcdef") for _ in range(17))
    a = _Session(g, truth, parent.session_id, parent.cwd, parent.version, parent.t, agent_id=agent_id)
    # A subagent file may replay a few parent responses under new request ids (the /btw case).
    if parent.assistant_records and r.random() < 0.3:
        for rec in r.sample(parent.assistant_records, min(2, len(parent.assistant_records))):
            copy = dict(rec, isSidechain=True, agentId=agent_id, requestId=g.tag("req_01"))
            a.lines.append(orjson.dumps(copy))
    a.prompt()
    for _ in range(r.randint(3, 25)):
        n_before = len(a.assistant_records)
        tools = a.response(tool=r.random() < 0.85)
        if r.random() < 0.5:  # the parent shows the subagent's progress, embedding its message
            d = parent.base("progress")
            d["data"] = {"type": "agent_progress", "agentId": agent_id, "prompt": "",
                         "message": a.assistant_records[n_before]}
            d["toolUseID"] = tool_id
            parent.t = a.t
            parent.emit(d)
        for tid in tools:
            a.tool_result(tid)
        if not tools:
            break
    parent.t = a.t + timedelta(seconds=1)
    sub = root / "projects" / project / parent.session_id / "subagents" / f"agent-{agent_id}.jsonl"
    n = _write(sub, a.lines)
    # The CLI writes a small JSON sidecar beside each subagent transcript (not a transcript).
    meta = orjson.dumps({"agentType": "general-purpose", "description": g.txt(5, 30), "toolUseId": tool_id,
                         "spawnDepth": 1})
    sub.with_name(f"agent-{agent_id}.meta.json").write_bytes(meta)
    return n + len(meta)


def generate(root: Path, target_bytes: int = 300 << 20, seed: int = 7, projects: int = 12) -> dict:
    """Write ``root/projects/...`` of about ``target_bytes``; return and save the truth.

    The truth (``root/truth.json``) has per-day totals of every unique response and counts of
    responses, main-thread and subagent.
    """
    g = _Gen(seed)
    r = g.r
    truth: dict[str, dict] = {}
    names = [f"-home-dev-work-{w}" for w in ("kvtrace", "api", "web", "infra", "ml", "docs", "cli", "db",
                                             "auth", "billing", "mobile", "search")][:projects]
    total = 0
    done: list[tuple[str, _Session]] = []
    while total < target_bytes:
        project = r.choice(names)
        cwd = "/" + project[1:].replace("-", "/")
        t = START + timedelta(seconds=r.randint(0, DAYS * 86400 - 6 * 3600))
        if done and r.random() < 0.04:  # a resumed session: copy an earlier one's history
            old_project, old = r.choice(done)
            n, s = _run_session(g, truth, root, old_project, old.cwd, old.t + timedelta(minutes=30),
                                history=old.lines)
            project = old_project
        else:
            n, s = _run_session(g, truth, root, project, cwd, t)
        total += n
        done.append((project, s))
    summary = summarize(truth)
    summary["bytes"] = total
    summary["files"] = sum(1 for _ in (root / "projects").rglob("*.jsonl"))
    (root / "truth.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return summary


def summarize(truth: dict[str, dict]) -> dict:
    """Per-day token totals, overall totals and response counts of a truth map."""
    keys = ("input", "cache_read", "cache_write_5m", "cache_write_1h", "output")
    days: dict[str, dict] = defaultdict(lambda: dict.fromkeys(keys, 0) | {"responses": 0})
    for v in truth.values():
        d = days[v["day"]]
        for k in keys:
            d[k] += v[k]
        d["responses"] += 1
    totals = {k: sum(d[k] for d in days.values()) for k in (*keys, "responses")}
    return {"days": dict(sorted(days.items())), "totals": totals,
            "subagent_responses": sum(1 for v in truth.values() if v["subagent"])}


def add_session(root: Path, seed: int) -> tuple[Path, dict]:
    """Write one more session file (the 'new file' of a repeat run); return its path and truth map."""
    g = _Gen(seed)
    truth: dict = {}
    t = START + timedelta(days=DAYS - 1, hours=1)
    _, s = _run_session(g, truth, root, "-home-dev-work-kvtrace", "/home/dev/work/kvtrace", t, session_id=g.uid())
    return root / "projects" / "-home-dev-work-kvtrace" / f"{s.session_id}.jsonl", truth
