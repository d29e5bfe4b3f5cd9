"""The transcript sink: a ``~/.claude/projects`` tree as Claude Code writes it (compact JSON lines).

``projects/<project>/<session>.jsonl`` per session; a subagent writes
``<session>/subagents/agent-<id>.jsonl`` with ``isSidechain: true`` and the parent's
``sessionId``. Each API response becomes one line per content block (thinking, text, each
``tool_use``) sharing ``message.id`` and ``requestId``, each with a full copy of ``usage``; the
earlier lines carry a placeholder ``output_tokens``, the last the final count. User records carry
prompts and bulky tool results (the text twice for Bash/Read/Grep: in ``message.content`` and
``toolUseResult``, as the CLI does), so sizes are realistic. A compaction writes a
``compact_boundary`` system record and the summary as a user record; the compaction request
itself is not in the transcript (its usage is only in telemetry). Files are written when their
thread ends, so each file is in time order.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from kvtrace.synth import ids


class TranscriptSink:
    """Buffers each thread's lines and writes its file when the thread ends."""

    def __init__(self, root: Any, ttl_s: int, gzip_files: bool = False):
        self.root = Path(root)
        self.one_hour = ttl_s >= 3600
        self.gzip_files = gzip_files
        self._buf: dict[int, tuple[Any, random.Random, list]] = {}
        self.counts = {"files": 0, "lines": 0, "bytes": 0, "responses": 0}

    def _state(self, th: Any) -> tuple[Any, random.Random, list]:
        st = self._buf.get(id(th))
        if st is None:
            st = self._buf[id(th)] = (th, random.Random(f"{th.session.seed_key}:t:{th.thread_id}"), [])
        return st

    def _base(self, th: Any, rng: random.Random, kind: str, t_ms: int) -> dict:
        s = th.session
        u = ids.uuid4(rng)
        d = {
            "parentUuid": th.last_uuid,
            "isSidechain": th.kind != "main",
            "userType": "external",
            "cwd": s.cwd,
            "sessionId": s.id,
            "version": s.user.version,
            "gitBranch": "main",
        }
        if th.agent_id:
            d["agentId"] = th.agent_id
        d["type"] = kind
        d["uuid"] = u
        d["timestamp"] = ids.iso_ms(t_ms)
        th.last_uuid = u
        return d

    # -- sink interface -------------------------------------------------------------------------
    def request(self, r: Any) -> None:
        if not r.in_transcript:
            return
        th = r.thread
        _, rng, lines = self._state(th)
        n = len(r.parts)
        for i, part in enumerate(r.parts):
            lines.append(orjson.dumps(self._user_record(th, rng, part, r.start_ms - (n - i), r.prompt_id)))
        self._assistant(th, rng, lines, r)

    def note(self, n: Any) -> None:
        th = n.thread
        if n.kind == "compaction":
            _, rng, lines = self._state(th)
            d = self._base(th, rng, "system", n.t_ms)
            d.update(
                {
                    "subtype": "compact_boundary",
                    "content": "Conversation compacted",
                    "isMeta": False,
                    "level": "info",
                    "compactMetadata": {"trigger": "auto", "preTokens": n.data["pre_tokens"]},
                }
            )
            lines.append(orjson.dumps(d))
        elif n.kind == "thread_end":
            st = self._buf.pop(id(th), None)
            if st is not None and st[2]:
                self._write(th, st[2])

    def advance(self, now_ms: int) -> None:
        pass

    def close(self) -> None:
        for th, _, lines in list(self._buf.values()):
            if lines:
                self._write(th, lines)
        self._buf.clear()

    # -- records ------------------------------------------------------------------------------
    def _user_record(self, th: Any, rng: random.Random, part: tuple, t_ms: int, prompt_id: str) -> dict:
        kind, tokens, tool_id, label = part
        d = self._base(th, rng, "user", t_ms)
        text = ids.filler(rng, tokens)
        if kind in ("prompt", "task"):
            d["message"] = {"role": "user", "content": text}
            if kind == "prompt":
                d["promptId"] = prompt_id
        elif kind == "summary":
            d["message"] = {
                "role": "user",
                "content": "This session is being continued from a previous "
                "conversation that ran out of context. Summary:\n" + text,
            }
            d["isCompactSummary"] = True
            d["isVisibleInTranscriptOnly"] = True
        elif kind == "agent":
            d["message"] = {
                "role": "user",
                "content": [
                    {"tool_use_id": tool_id, "type": "tool_result", "content": [{"type": "text", "text": text}]}
                ],
            }
            d["toolUseResult"] = {
                "status": "completed",
                "agentId": label,
                "totalTokens": tokens,
                "content": [{"type": "text", "text": text[:200]}],
            }
        else:
            d["message"] = {
                "role": "user",
                "content": [{"tool_use_id": tool_id, "type": "tool_result", "content": text}],
            }
            if label == "Read":
                d["toolUseResult"] = {
                    "type": "text",
                    "file": {
                        "filePath": f"{th.session.cwd}/src/{text[:12].split()[0]}.py",
                        "content": text,
                        "numLines": text.count("\n") + 1,
                        "startLine": 1,
                        "totalLines": text.count("\n") + 1,
                    },
                }
            elif label == "Edit":
                d["toolUseResult"] = {
                    "filePath": f"{th.session.cwd}/src/module.py",
                    "oldString": text[:80],
                    "newString": text[80:160],
                    "userModified": False,
                }
            else:
                d["toolUseResult"] = {"stdout": text, "stderr": "", "interrupted": False, "isImage": False}
        return d

    def _assistant(self, th: Any, rng: random.Random, lines: list, r: Any) -> None:
        out = r.output_tokens
        blocks: list = []
        if out > 60 and rng.random() < 0.3:
            think = out // 4
            blocks.append(
                {"type": "thinking", "thinking": ids.filler(rng, think), "signature": f"Eq{rng.getrandbits(128):032x}"}
            )
            out -= think
        if r.out_kind == "code" and r.tools:
            text_tokens, code_tokens = min(out, 60), max(out - 60, 1)
        else:
            text_tokens, code_tokens = out, 0
        text = ids.filler(rng, text_tokens)
        if r.out_kind == "code" and not r.tools:
            text = "```python\n" + text + "\n```"
        blocks.append({"type": "text", "text": text})
        for j, (name, tid) in enumerate(r.tools):
            if name == "Task":
                inp = {
                    "description": "Investigate " + ids.filler(rng, 4).split("\n")[0],
                    "prompt": ids.filler(rng, 40),
                    "subagent_type": "general-purpose",
                }
            elif name == "Read":
                inp = {"file_path": f"{th.session.cwd}/src/module.py"}
            elif code_tokens and j == 0:
                inp = {
                    "file_path": f"{th.session.cwd}/src/module.py",
                    "old_string": ids.filler(rng, 20),
                    "new_string": ids.filler(rng, code_tokens),
                }
            else:
                inp = {"command": ids.filler(rng, 12).replace("\n", " "), "description": "Run a command"}
            blocks.append({"type": "tool_use", "id": tid, "name": name, "input": inp})
        w5, w1 = (0, r.write) if self.one_hour else (r.write, 0)
        last = len(blocks) - 1
        placeholder = min(r.output_tokens, rng.randint(1, 8))
        for j, block in enumerate(blocks):
            usage = {
                "input_tokens": r.input,
                "cache_creation_input_tokens": r.write,
                "cache_read_input_tokens": r.read,
                "cache_creation": {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1},
                "output_tokens": r.output_tokens if j == last else placeholder,
                "service_tier": "standard",
            }
            t = r.end_ms if j == last else r.start_ms + r.ttft_ms + j
            d = self._base(th, rng, "assistant", t)
            d["requestId"] = r.request_id
            d["message"] = {
                "model": r.model,
                "id": r.message_id,
                "type": "message",
                "role": "assistant",
                "content": [block],
                "stop_reason": r.stop_reason if j == last else None,
                "stop_sequence": None,
                "usage": usage,
            }
            lines.append(orjson.dumps(d))
        self.counts["responses"] += 1

    def _write(self, th: Any, lines: list) -> None:
        s = th.session
        folder = self.root / "projects" / s.project
        if th.agent_id:
            folder = folder / s.id / "subagents"
            name = f"agent-{th.agent_id}.jsonl"
        else:
            name = f"{s.id}.jsonl"
        folder.mkdir(parents=True, exist_ok=True)
        data = b"\n".join(lines) + b"\n"
        path = folder / name
        if self.gzip_files:
            import gzip

            data = gzip.compress(data, compresslevel=9, mtime=0)
            path = path.with_name(name + ".gz")
        path.write_bytes(data)
        self.counts["files"] += 1
        self.counts["lines"] += len(lines)
        self.counts["bytes"] += len(data)
