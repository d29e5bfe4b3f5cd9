"""A seeded generator of a ``~/.claude/projects`` tree shaped like real Claude Code transcripts.

It writes compact JSON lines as the CLI does: user prompts, bulky tool results (the text twice,
in ``message.content`` and ``toolUseResult``), each API response as 1-3 lines (one per content
block, each with a full copy of ``usage``; builds before 2.1.98 put a placeholder
``output_tokens`` on the first lines), subagent files under ``<session>/subagents/`` (beside the
``agent-<id>.meta.json`` sidecar the CLI writes) that replay a few parent messages under new
request ids, resumed sessions that copy an earlier session's history into a new file,
compaction markers, synthetic and API-error records.

Two shapes (``SHAPES``), as different users' trees are:

* ``default``: builds 2.0-2.1, sessions of 5-60 prompts, bulky tool results and thinking, a
  ``file-history-snapshot`` per session and progress lines (about 44% of all lines, some
  embedding a subagent's assistant message);
* ``current``: the record set of 2.1.197 (as in ``tests/fixtures/claude_code``): a
  ``queue-operation`` enqueue/dequeue pair before each prompt, a ``last-prompt`` after it,
  ``mode`` lines, ``attachment`` lines (agent and skill listings) at the start and after each
  compaction, the newer ``usage`` fields, ``entrypoint``/``promptId`` on every record, subagent
  results carrying the subagent's ``usage`` in the parent's tool result; no progress lines.
  Session lengths have a long tail (a few sessions of thousands of responses), responses are
  terser and tool results smaller: more responses in fewer bytes; some text is not ASCII.

The generator knows the truth: every unique response once, with its final output count, by UTC
day. ``generate`` returns it (and writes ``truth.json`` beside ``projects/``).
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import orjson

MODELS = ["claude-sonnet-4-5-20250929", "claude-opus-4-1-20250805", "claude-haiku-4-5-20251001"]
GENERATOR_VERSION = 3  # bump when the shape of the tree changes (cached trees are keyed by it)
START = datetime(2026, 7, 1, tzinfo=timezone.utc)
DAYS = 30
WORDS = (
    "the of and to in is for that with on as this are be by from it at an or was if "
    "def return import class self None True False const let function await async yield "
    "token cache prefix request model session agent context window reuse block tier"
).split()


@dataclass(frozen=True)
class Shape:
    """What a tree's sessions look like (its size is ``generate``'s argument)."""

    versions: tuple[str, ...]
    current_records: bool  # 2.1.197's record set (module docstring); else the older one
    progress: bool  # progress lines after tool uses, agent_progress for subagents
    prompts: Callable[[random.Random], int]  # prompts in a session
    steps: int  # responses to a prompt at most (it ends at one without tool use)
    tool_p: float  # a response asks for tools
    thinking_p: float  # a response starts with a thinking block
    text: tuple[int, int]  # characters of a response's text block
    tool_input: tuple[int, int]
    tool_result: tuple[int, int]
    subagent_p: float  # a tool use runs a subagent
    subagent_steps: tuple[int, int]
    resume_p: float  # a session resumes an earlier one (copies its history)
    extra_words: tuple[str, ...] = ()  # beside WORDS: non-ASCII text ("—" is common in current prose)


SHAPES = {
    "default": Shape(
        versions=("2.0.62", "2.1.88", "2.1.197", "2.1.220"),
        current_records=False,
        progress=True,
        prompts=lambda r: r.randint(5, 60),
        steps=8,
        tool_p=0.8,
        thinking_p=0.4,
        text=(30, 600),
        tool_input=(10, 300),
        tool_result=(50, 1_600),
        subagent_p=0.03,
        subagent_steps=(3, 25),
        resume_p=0.04,
    ),
    # Long-tailed sessions (median ~14 prompts, a few over 500), short answers, small tool results.
    "current": Shape(
        versions=("2.1.152", "2.1.197", "2.1.220"),
        current_records=True,
        progress=False,
        prompts=lambda r: max(1, round(r.lognormvariate(2.6, 1.1))),
        steps=12,
        tool_p=0.85,
        thinking_p=0.2,
        text=(20, 300),
        tool_input=(10, 200),
        tool_result=(20, 700),
        subagent_p=0.0145,
        subagent_steps=(3, 40),
        resume_p=0.03,
        extra_words=("—", "→", "✓"),
    ),
}


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


class _Gen:
    def __init__(self, seed: int, shape: Shape):
        self.r = random.Random(seed)
        self.shape = shape
        r = self.r
        parts = []
        words = WORDS + list(shape.extra_words)
        for _ in range(120_000):
            w = r.choice(words)
            parts.append(w + ("\n" if r.random() < 0.08 else '"' if r.random() < 0.01 else " "))
        self.text = "".join(parts)

    def txt(self, lo: int, hi: int) -> str:
        n = self.r.randint(lo, hi)
        i = self.r.randrange(0, len(self.text) - n)
        return self.text[i : i + n]

    def uid(self) -> str:
        return str(uuid.UUID(int=self.r.getrandbits(128), version=4))

    def tag(self, prefix: str) -> str:
        return prefix + "".join(
            self.r.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz123456789") for _ in range(24)
        )


class _Session:
    """One transcript file being written (a main session or a subagent)."""

    def __init__(
        self, g: _Gen, truth: dict, session_id: str, cwd: str, version: str, t: datetime, agent_id: str | None = None
    ):
        self.g, self.truth, self.shape = g, truth, g.shape
        self.session_id, self.cwd, self.version, self.t = session_id, cwd, version, t
        self.agent_id = agent_id
        self.lines: list[bytes] = []
        self.parent: str | None = None
        self.prompt_id: str | None = None
        self.model = g.r.choice(MODELS)
        self.ttl_1h = g.r.random() < 0.3
        self.context = g.r.randint(8_000, 20_000)
        self.last_call: datetime | None = None
        self.last_usage: dict | None = None
        self.assistant_records: list[dict] = []  # for replays and agent_progress copies
        # Builds before 2.1.98 wrote the message_start placeholder as output_tokens on early blocks.
        self.placeholder_output = _version_key(version) < (2, 1, 98)

    def base(self, typ: str) -> dict:
        """The common fields of the older record set (uuid and timestamp are added by emit)."""
        d = {
            "parentUuid": self.parent,
            "isSidechain": self.agent_id is not None,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": self.version,
            "gitBranch": "main",
        }
        if self.agent_id:
            d["agentId"] = self.agent_id
        d["type"] = typ
        return d

    def record(self, typ: str, head: dict, body: dict | None = None, tail: dict | None = None) -> dict:
        """A record of the current set, its keys in the CLI's order: ``head`` before ``type``,
        ``body`` after it, ``tail`` between the timestamp and the common fields."""
        d: dict = {"parentUuid": self.parent, "isSidechain": self.agent_id is not None}
        d.update(head)
        d["type"] = typ
        if body:
            d.update(body)
        d.update(uuid=None, timestamp=None)
        if tail:
            d.update(tail)
        d.update(
            userType="external",
            entrypoint="sdk-cli",
            cwd=self.cwd,
            sessionId=self.session_id,
            version=self.version,
            gitBranch="main",
        )
        return d

    def emit(self, rec: dict, advance_ms: int = 50) -> None:
        u = self.g.uid()
        rec["uuid"] = u
        rec["timestamp"] = _iso(self.t)
        self.lines.append(orjson.dumps(rec))
        self.parent = u
        self.t += timedelta(milliseconds=advance_ms)

    def plain(self, rec: dict) -> None:
        """A record without uuid and parent (queue-operation, last-prompt, mode)."""
        self.lines.append(orjson.dumps(rec))

    def prompt(self, first: bool = False) -> str:
        g = self.g
        text = g.txt(40, 600)
        if not self.shape.current_records:
            d = self.base("user")
            d["message"] = {"role": "user", "content": text}
            self.emit(d, g.r.randint(500, 3000))
            return text
        self.prompt_id = g.uid()
        if not self.agent_id:
            ts = _iso(self.t)
            self.plain(
                {
                    "type": "queue-operation",
                    "operation": "enqueue",
                    "timestamp": ts,
                    "sessionId": self.session_id,
                    "content": text,
                }
            )
            self.plain(
                {"type": "queue-operation", "operation": "dequeue", "timestamp": ts, "sessionId": self.session_id}
            )
        head = {"promptId": self.prompt_id} | ({"agentId": self.agent_id} if self.agent_id else {})
        tail = {} if self.agent_id else {"permissionMode": "default", "promptSource": "sdk"}
        self.emit(
            self.record("user", head, {"message": {"role": "user", "content": text}}, tail), g.r.randint(500, 3000)
        )
        if first and not self.agent_id:
            self.listings()
        return text

    def listings(self) -> None:
        """The agent and skill listings a current build attaches at a session's start (and after
        a compaction)."""
        g = self.g
        agents = ["claude", "Explore", "general-purpose", "Plan", "statusline-setup"]
        self.emit(
            self.record(
                "attachment",
                {
                    "attachment": {
                        "type": "agent_listing_delta",
                        "addedTypes": agents,
                        "addedLines": [f"- {a}: {g.txt(100, 600)}" for a in agents],
                        "removedTypes": [],
                        "isInitial": True,
                        "showConcurrencyNote": True,
                    }
                },
            ),
            0,
        )
        names = [g.tag("skill-")[:14] for _ in range(13)]
        self.emit(
            self.record(
                "attachment",
                {
                    "attachment": {
                        "type": "skill_listing",
                        "content": "\n".join(f"- {n}: {g.txt(150, 550)}" for n in names),
                        "skillCount": len(names),
                        "isInitial": True,
                        "names": names,
                    }
                },
            ),
            100,
        )

    def turn_end(self, prompt: str) -> None:
        if self.shape.current_records and not self.agent_id:
            self.plain(
                {
                    "type": "last-prompt",
                    "lastPrompt": prompt[:200],
                    "leafUuid": self.parent,
                    "sessionId": self.session_id,
                }
            )
            if self.g.r.random() < 0.3:
                self.plain({"type": "mode", "mode": "normal", "sessionId": self.session_id})

    def compact(self) -> None:
        r = self.g.r
        if not self.shape.current_records:
            d = self.base("system")
            d.update(
                subtype="compact_boundary",
                content="Conversation compacted",
                isMeta=False,
                level="info",
                compactMetadata={"trigger": "auto", "preTokens": self.context},
            )
            self.emit(d)
            return
        keep = self.parent
        post = r.randint(500, 3000)
        d: dict = {
            "parentUuid": None,
            "logicalParentUuid": keep,
            "isSidechain": self.agent_id is not None,
            "type": "system",
            "subtype": "compact_boundary",
            "content": "Conversation compacted",
            "isMeta": False,
            "timestamp": None,
            "uuid": None,
            "level": "info",
            "compactMetadata": {
                "trigger": "auto",
                "preTokens": self.context,
                "durationMs": r.randint(2_000, 60_000),
                "preservedSegment": {"headUuid": keep, "anchorUuid": self.g.uid(), "tailUuid": keep},
                "postTokens": post,
                "cumulativeDroppedTokens": self.context - post,
            },
            "userType": "external",
            "entrypoint": "sdk-cli",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": self.version,
            "gitBranch": "main",
            "slug": "proud-toasting-quokka",
        }
        self.emit(d)
        summary = (
            "This session is being continued from a previous conversation that ran out of context. "
            "The summary below covers the earlier portion of the conversation.\n\nSummary:\n" + self.g.txt(800, 3000)
        )
        self.emit(
            self.record(
                "user",
                {"promptId": self.prompt_id},
                {
                    "message": {"role": "user", "content": summary},
                    "isVisibleInTranscriptOnly": True,
                    "isCompactSummary": True,
                },
            )
        )
        if not self.agent_id:
            self.listings()

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
            self.compact()
            self.context = r.randint(10_000, 30_000)
        self.last_call = self.t
        w1h = write if self.ttl_1h else 0
        inp, out = r.choice([1, 2, 3, 4, 6, 8, r.randint(10, 3000)]), r.randint(20, 4000)
        split = {"ephemeral_5m_input_tokens": write - w1h, "ephemeral_1h_input_tokens": w1h}
        if not self.shape.current_records:
            return {
                "input_tokens": inp,
                "cache_creation_input_tokens": write,
                "cache_read_input_tokens": read,
                "cache_creation": split,
                "output_tokens": out,
                "service_tier": "standard",
            }
        return {
            "input_tokens": inp,
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
            "output_tokens": out,
            "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
            "service_tier": "standard",
            "cache_creation": {"ephemeral_1h_input_tokens": w1h, "ephemeral_5m_input_tokens": write - w1h},
            "inference_geo": "",
            "iterations": [],
            "speed": "standard",
        }

    def response(self, tool: bool) -> list[str]:
        """One API response as 1-3 lines; returns the tool_use ids it asked for."""
        g, r, shape = self.g, self.g.r, self.shape
        usage = self.usage()
        self.last_usage = usage
        final_out = usage["output_tokens"]
        msg_id, req_id = g.tag("msg_01"), g.tag("req_01")
        blocks: list[dict] = []
        if r.random() < shape.thinking_p:
            blocks.append({"type": "thinking", "thinking": g.txt(100, 900), "signature": g.txt(60, 200)})
        if r.random() < 0.7 or not tool:
            blocks.append({"type": "text", "text": g.txt(*shape.text)})
        tools = []
        if tool:
            for _ in range(r.choice([1, 1, 1, 2])):
                tid = g.tag("toolu_01")
                tools.append(tid)
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": tid,
                        "name": r.choice(["Bash", "Read", "Edit", "Grep"]),
                        "input": {"command": g.txt(*shape.tool_input)},
                    }
                )
        blocks = blocks[:3]
        day = _iso(self.t)[:10]
        for i, b in enumerate(blocks):
            last = i == len(blocks) - 1
            u = dict(usage)
            if not last and self.placeholder_output:
                u["output_tokens"] = r.randint(1, 12)
            stop = ("tool_use" if tool else "end_turn") if last else None
            if shape.current_records:
                msg = {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [b],
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": u,
                    "stop_details": None,
                }
                head = ({"agentId": self.agent_id} if self.agent_id else {}) | {"message": msg, "requestId": req_id}
                if self.agent_id:
                    head["attributionAgent"] = "general-purpose"
                d = self.record("assistant", head)
            else:
                d = self.base("assistant")
                d["message"] = {
                    "model": self.model,
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "content": [b],
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": u,
                }
                d["requestId"] = req_id
            self.emit(d, r.randint(5, 400))
            self.assistant_records.append(d)
        self.truth[msg_id] = {
            "day": day,
            "model": self.model,
            "input": usage["input_tokens"],
            "cache_read": usage["cache_read_input_tokens"],
            "cache_write_5m": usage["cache_creation"]["ephemeral_5m_input_tokens"],
            "cache_write_1h": usage["cache_creation"]["ephemeral_1h_input_tokens"],
            "output": final_out,
            "subagent": self.agent_id is not None,
        }
        return tools

    def progress(self, tool_id: str) -> None:
        d = self.base("progress")
        d["data"] = {
            "type": self.g.r.choice(["hook_progress", "bash_progress"]),
            "hookEvent": "PostToolUse",
            "hookName": "PostToolUse:Bash",
            "command": self.g.txt(20, 200),
            "output": self.g.txt(0, 120),
        }
        d["toolUseID"] = tool_id
        d["parentToolUseID"] = tool_id
        self.emit(d, self.g.r.randint(10, 2000))

    def tool_result(self, tool_id: str, tool_use: dict | None = None, agent: _Session | None = None) -> None:
        """The user record answering a tool use (``agent``: the subagent that ran it)."""
        g = self.g
        out = g.txt(*self.shape.tool_result)
        content: object = out
        if not self.shape.current_records:
            d = self.base("user")
            d["message"] = {
                "role": "user",
                "content": [{"tool_use_id": tool_id, "type": "tool_result", "content": out}],
            }
            d["toolUseResult"] = {"stdout": out, "stderr": "", "interrupted": False, "isImage": False}
            self.emit(d, g.r.randint(200, 20_000))
            return
        if agent is not None:
            content = [{"type": "text", "text": out}]
            result = {
                "status": "completed",
                "prompt": g.txt(20, 200),
                "agentId": agent.agent_id,
                "agentType": "general-purpose",
                "content": content,
                "resolvedModel": agent.model,
                "totalDurationMs": g.r.randint(2_000, 300_000),
                "totalTokens": g.r.randint(10_000, 200_000),
                "totalToolUseCount": len(agent.assistant_records),
                "usage": agent.last_usage,
                "toolStats": {
                    "readCount": 0,
                    "searchCount": 0,
                    "bashCount": 1,
                    "editFileCount": 0,
                    "linesAdded": 0,
                    "linesRemoved": 0,
                    "otherToolCount": 0,
                },
            }
        else:
            result = {"stdout": out, "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False}
        head = {"promptId": self.prompt_id} | ({"agentId": self.agent_id} if self.agent_id else {})
        body = {
            "message": {
                "role": "user",
                "content": [{"tool_use_id": tool_id, "type": "tool_result", "content": content, "is_error": False}],
            }
        }
        tail = {"toolUseResult": result, "sourceToolAssistantUUID": tool_use["uuid"] if tool_use else self.parent}
        self.emit(self.record("user", head, body, tail), g.r.randint(200, 20_000))

    def error_or_synthetic(self) -> None:
        err = self.g.r.random() < 0.6
        text = "API Error: 529 Overloaded" if err else "No response requested."
        msg = {
            "id": self.g.uid(),
            "model": "<synthetic>",
            "role": "assistant",
            "type": "message",
            "stop_reason": "stop_sequence",
            "stop_sequence": "",
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
            "content": [{"type": "text", "text": text}],
        }
        if self.shape.current_records:
            tail = {"message": msg, "requestId": self.g.tag("req_01")}
            if err:
                tail.update(error="overloaded_error", isApiErrorMessage=True, apiErrorStatus=529)
            self.emit(self.record("assistant", {}, None, tail))
            return
        d = self.base("assistant")
        d["message"] = msg
        if err:
            d["isApiErrorMessage"] = True
        self.emit(d)


def _write(path: Path, lines: list[bytes]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(data)
    return len(data)


def _run_session(
    g: _Gen,
    truth: dict,
    root: Path,
    project: str,
    cwd: str,
    t: datetime,
    session_id: str | None = None,
    history: list[bytes] | None = None,
) -> tuple[int, _Session]:
    r, shape = g.r, g.shape
    sid = session_id or g.uid()
    s = _Session(g, truth, sid, cwd, r.choice(shape.versions), t)
    if history:
        s.lines.extend(history)
    if not shape.current_records:
        s.emit(
            {
                "type": "file-history-snapshot",
                "messageId": g.uid(),
                "snapshot": {"trackedFileBackups": {}},
                "isSnapshotUpdate": False,
            },
            10,
        )
    written = 0
    for n in range(shape.prompts(r)):
        text = s.prompt(first=n == 0 and not history)
        for _ in range(r.randint(1, shape.steps)):
            if r.random() < 0.01:
                s.error_or_synthetic()
            tools = s.response(tool=r.random() < shape.tool_p)
            tool_use = s.assistant_records[-1]
            for tid in tools:
                if shape.progress:
                    for _ in range(r.randint(1, 5)):
                        s.progress(tid)
                agent = None
                if r.random() < shape.subagent_p:  # a Task tool use: a subagent runs
                    n_bytes, agent = _run_subagent(g, truth, root, project, s, tid)
                    written += n_bytes
                s.tool_result(tid, tool_use, agent)
            if not tools:
                break
        s.turn_end(text)
        s.t += timedelta(seconds=r.choice([5, 20, 60, 200, 400, 2000]))
    written += _write(root / "projects" / project / f"{sid}.jsonl", s.lines)
    return written, s


def _run_subagent(
    g: _Gen, truth: dict, root: Path, project: str, parent: _Session, tool_id: str
) -> tuple[int, _Session]:
    r, shape = g.r, g.shape
    agent_id = "".join(r.choice("0123456789abcdef") for _ in range(17))
    a = _Session(g, truth, parent.session_id, parent.cwd, parent.version, parent.t, agent_id=agent_id)
    a.prompt_id = parent.prompt_id
    # A subagent file may replay a few parent responses under new request ids (the /btw case).
    if parent.assistant_records and r.random() < 0.3:
        for rec in r.sample(parent.assistant_records, min(2, len(parent.assistant_records))):
            copy = dict(rec, isSidechain=True, agentId=agent_id, requestId=g.tag("req_01"))
            a.lines.append(orjson.dumps(copy))
    a.prompt()
    for _ in range(r.randint(*shape.subagent_steps)):
        n_before = len(a.assistant_records)
        tools = a.response(tool=r.random() < 0.85)
        if shape.progress and r.random() < 0.5:  # the parent shows the subagent's progress, embedding its message
            d = parent.base("progress")
            d["data"] = {
                "type": "agent_progress",
                "agentId": agent_id,
                "prompt": "",
                "message": a.assistant_records[n_before],
            }
            d["toolUseID"] = tool_id
            parent.t = a.t
            parent.emit(d)
        tool_use = a.assistant_records[-1]
        for tid in tools:
            a.tool_result(tid, tool_use)
        if not tools:
            break
    parent.t = a.t + timedelta(seconds=1)
    sub = root / "projects" / project / parent.session_id / "subagents" / f"agent-{agent_id}.jsonl"
    n = _write(sub, a.lines)
    # The CLI writes a small JSON sidecar beside each subagent transcript (not a transcript).
    meta = orjson.dumps(
        {"agentType": "general-purpose", "description": g.txt(5, 30), "toolUseId": tool_id, "spawnDepth": 1}
    )
    sub.with_name(f"agent-{agent_id}.meta.json").write_bytes(meta)
    return n + len(meta), a


def generate(
    root: Path, target_bytes: int = 300 << 20, seed: int = 7, projects: int = 12, shape: str = "default"
) -> dict:
    """Write ``root/projects/...`` of about ``target_bytes`` in one of ``SHAPES``; return and save
    the truth.

    The truth (``root/truth.json``) has per-day totals of every unique response and counts of
    responses, main-thread and subagent.
    """
    g = _Gen(seed, SHAPES[shape])
    r = g.r
    truth: dict[str, dict] = {}
    names = [
        f"-home-dev-work-{w}"
        for w in ("kvtrace", "api", "web", "infra", "ml", "docs", "cli", "db", "auth", "billing", "mobile", "search")
    ][:projects]
    total = 0
    done: list[tuple[str, _Session]] = []
    while total < target_bytes:
        project = r.choice(names)
        cwd = "/" + project[1:].replace("-", "/")
        t = START + timedelta(seconds=r.randint(0, DAYS * 86400 - 6 * 3600))
        if done and r.random() < g.shape.resume_p:  # a resumed session: copy an earlier one's history
            old_project, old = r.choice(done)
            n, s = _run_session(g, truth, root, old_project, old.cwd, old.t + timedelta(minutes=30), history=old.lines)
            project = old_project
        else:
            n, s = _run_session(g, truth, root, project, cwd, t)
        total += n
        done.append((project, s))
    summary = summarize(truth)
    summary["bytes"] = total
    summary["files"] = sum(1 for _ in (root / "projects").rglob("*.jsonl"))
    summary["shape"] = shape
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
    return {
        "days": dict(sorted(days.items())),
        "totals": totals,
        "subagent_responses": sum(1 for v in truth.values() if v["subagent"]),
    }


def add_session(root: Path, seed: int, shape: str = "default") -> tuple[Path, dict]:
    """Write one more session file (the 'new file' of a repeat run); return its path and truth map."""
    g = _Gen(seed, SHAPES[shape])
    truth: dict = {}
    t = START + timedelta(days=DAYS - 1, hours=1)
    _, s = _run_session(g, truth, root, "-home-dev-work-kvtrace", "/home/dev/work/kvtrace", t, session_id=g.uid())
    return root / "projects" / "-home-dev-work-kvtrace" / f"{s.session_id}.jsonl", truth
