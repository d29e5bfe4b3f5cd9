"""A small discrete-event engine: sessions are generator processes, requests are served in start order.

A process (``kvtrace.synth.workload``) yields actions:

* an ``int``: sleep that many milliseconds;
* a :class:`Request`: the engine does the cache accounting *at its start time* (in global start
  order, so the shared head's warmth is seen causally across sessions), draws its duration and
  resumes the process when it ends, sending the filled-in request back;
* a :class:`Note`: something to record now (user prompt, compaction, thread end); resumes at once;
* a :class:`Spawn`: start child processes (subagents) now, resume when all have finished, sending
  the list of their return values.

Every completed request and note goes to the sinks (ledger, OTLP, transcripts). Sinks are told the
current time (``advance``) so they can flush what can no longer change. All times are integer
epoch milliseconds, so runs are exact and reproducible.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

from kvtrace.synth import ids
from kvtrace.synth.cache import account, touches_head
from kvtrace.synth.catalog import MODELS


@dataclass(eq=False)
class User:
    """One developer: an anonymous id, an org, a machine (the OTLP resource) and a CC version."""

    id: str
    org_id: str
    name: str
    version: str
    os_type: str
    os_version: str
    arch: str


@dataclass(eq=False)
class Session:
    """One Claude Code session (one process, one transcript file)."""

    idx: int
    id: str
    user: User
    project: str  # the transcript folder name (cwd with non-alphanumerics as '-')
    cwd: str
    model: str
    rng: random.Random
    seed_key: str
    n_agents: int = 0


@dataclass(eq=False)
class Thread:
    """One conversation chain: the session's main thread or one subagent."""

    session: Session
    model: str
    kind: str  # "main" | "subagent"
    agent_id: str | None = None
    prompt: int = 0  # previous request's prompt tokens
    out: int = 0  # previous request's output tokens
    cached: int = 0  # previous request's read + write (0: nothing to continue)
    last_start: int | None = None
    break_reason: str | None = "start"  # set: the next request starts a new chain
    carry: int = 0  # conversation tokens carried into a new chain (model switch)
    last_uuid: str | None = None  # transcript parentUuid chain
    tool_ids: list = field(default_factory=list)  # tool_use ids awaiting results

    @property
    def head(self) -> int:
        spec = MODELS[self.model]
        return spec.main_head_tokens if self.kind == "main" else spec.subagent_head_tokens

    @property
    def thread_id(self) -> str:
        return self.agent_id or self.session.id

    def next_prompt(self, new_tokens: int) -> int:
        """The prompt size of a request appending ``new_tokens`` now."""
        if self.break_reason is not None:
            return self.head + self.carry + new_tokens
        return self.prompt + self.out + new_tokens

    def reset(self, reason: str, model: str | None = None) -> None:
        """Start a new chain at the next request.

        A compaction drops the conversation (the summary comes as new content); a model switch
        keeps it, but under the new model's head and with nothing of it cached.
        """
        self.carry = 0
        if model is not None and self.last_start is not None:
            self.carry = self.prompt + self.out - self.head
        if model is not None:
            self.model = model
        self.break_reason = reason
        self.cached = 0


class Request:
    """One API request: filled by the workload (what is appended, what comes back) then the engine."""

    __slots__ = (
        "thread",
        "parts",
        "output_tokens",
        "out_kind",
        "stop_reason",
        "tools",
        "query_source",
        "prompt_id",
        "tail",
        "in_transcript",
        "seq",
        "start_ms",
        "end_ms",
        "prompt_tokens",
        "read",
        "write",
        "input",
        "source",
        "cost_usd",
        "ttft_ms",
        "duration_ms",
        "request_id",
        "message_id",
        "chain_reason",
        "new_tokens",
        "model",
        "head",
    )

    def __init__(
        self,
        thread: Thread,
        parts: list,
        output_tokens: int,
        out_kind: str,
        stop_reason: str,
        tools: list,
        query_source: str,
        prompt_id: str,
        tail: int,
        in_transcript: bool = True,
    ):
        self.thread, self.parts, self.output_tokens = thread, parts, output_tokens
        self.out_kind, self.stop_reason, self.tools = out_kind, stop_reason, tools
        self.query_source, self.prompt_id, self.tail = query_source, prompt_id, tail
        self.in_transcript = in_transcript


@dataclass
class Note:
    """A non-request event: ``user_prompt``, ``compaction``, ``thread_end``."""

    kind: str
    thread: Thread
    data: dict = field(default_factory=dict)
    t_ms: int = 0


@dataclass
class Spawn:
    """Start these child processes now; resume the parent when all are done."""

    children: list


class _Wait:
    __slots__ = ("proc", "pending", "results")

    def __init__(self, proc: Generator, pending: int):
        self.proc, self.pending, self.results = proc, pending, []


class Driver:
    """Steps session processes through the actions above, on any clock: the caller says what
    sleeping, serving a request, recording a note and resuming a process mean.

    ``sleep(proc, ms)`` resumes ``proc`` after ``ms``; ``request(proc, r)`` serves ``r`` and resumes
    ``proc`` with it when it completes; ``note(n)`` records ``n`` (the process goes on at once);
    ``resume(proc, val)`` resumes ``proc`` with ``val`` now (a spawned child, or a parent whose
    children have all finished, with their return values).
    """

    def __init__(self, sleep: Callable, request: Callable, note: Callable, resume: Callable):
        self.sleep, self.request, self.note, self.resume = sleep, request, note, resume
        self._waits: dict[int, _Wait] = {}

    def step(self, proc: Generator, val: Any) -> None:
        """Send ``val`` to ``proc`` and run it up to its next wait."""
        while True:
            try:
                act = proc.send(val)
            except StopIteration as stop:
                w = self._waits.pop(id(proc), None)
                if w is not None:
                    w.results.append(stop.value)
                    w.pending -= 1
                    if w.pending == 0:
                        self.resume(w.proc, w.results)
                return
            kind = type(act)
            if kind is int:
                self.sleep(proc, act)
                return
            if kind is Request:
                self.request(proc, act)
                return
            if kind is Note:
                self.note(act)
                val = None
                continue
            if kind is Spawn:
                w = _Wait(proc, len(act.children))
                for child in act.children:
                    self._waits[id(child)] = w
                    self.resume(child, None)
                return
            raise TypeError(f"a synth process yielded {act!r}")


def lognormal_ms(rng: random.Random, spec: tuple[float, float, float], scale: float = 1000.0) -> int:
    """A log-normal draw (median, sigma, max), in ms; ``scale`` converts spec units to ms."""
    median, sigma, cap = spec
    return max(1, int(min(median * math.exp(sigma * rng.gauss(0.0, 1.0)), cap) * scale))


class Engine:
    """Runs session processes in simulated time and feeds completed requests to sinks."""

    def __init__(
        self,
        cfg: Any,
        sinks: list,
        make_session: Callable[[int, int], Generator],
        progress: Callable[[int], None] | None = None,
    ):
        self.cfg, self.sinks, self.make_session, self.progress = cfg, sinks, make_session, progress
        self.ttl_ms = int(cfg.cache_ttl_s * 1000)
        self.ttl_label = "1h" if cfg.cache_ttl_s >= 3600 else "5m"
        self.now = 0
        self.head_touch: dict[tuple, int] = {}
        self._heap: list = []
        self._n = 0
        self.seq = 0
        self._driver = Driver(
            sleep=lambda proc, ms: self._push(self.now + ms, proc, None),
            request=self._request,
            note=self._note,
            resume=lambda proc, val: self._push(self.now, proc, val),
        )
        self._step = self._driver.step

    def _push(self, t: int, proc: Generator | None, val: Any) -> None:
        self._n += 1
        heapq.heappush(self._heap, (t, self._n, proc, val))

    def run(self, arrivals: list[int]) -> None:
        """Start session ``i`` at ``arrivals[i]`` and run everything to completion."""
        for i, t in enumerate(arrivals):
            self._push(t, None, i)
        last_progress = 0
        while self._heap:
            t, _, proc, val = heapq.heappop(self._heap)
            self.now = t
            for s in self.sinks:
                s.advance(t)
            if proc is None:
                proc, val = self.make_session(val, t), None
            self._step(proc, val)
            if self.progress is not None and t - last_progress >= 600_000:
                last_progress = t
                self.progress(t)
        for s in self.sinks:
            s.close()

    def _request(self, proc: Generator, r: Request) -> None:
        self._serve(r)
        self._push(r.end_ms, proc, r)

    def _note(self, n: Note) -> None:
        n.t_ms = n.data.pop("at", self.now)
        for s in self.sinks:
            s.note(n)

    def _serve(self, r: Request) -> None:
        th, now = r.thread, self.now
        sess = th.session
        spec = MODELS[th.model]
        new = 0
        for p in r.parts:
            new += p[1]
        r.new_tokens = new
        # The last breakpoint sits inside the newest message, so the uncached tail never reaches back
        # into the head or the previous prefix.
        r.tail = min(r.tail, max(new, 1))
        r.prompt_tokens = th.next_prompt(new)
        r.head = head = th.head
        r.chain_reason = th.break_reason
        prev_cached = 0 if th.break_reason is not None else th.cached
        key = (sess.user.org_id, th.model, th.kind) if self.cfg.shared_heads else (sess.id, th.model, th.kind)
        r.read, r.write, r.input, r.source = account(
            r.prompt_tokens,
            r.tail,
            prev_cached,
            th.last_start,
            head,
            self.head_touch.get(key),
            now,
            self.ttl_ms,
            spec.min_cacheable_tokens,
        )
        if touches_head(r.prompt_tokens, r.tail, head, spec.min_cacheable_tokens):
            self.head_touch[key] = now
        rng = sess.rng
        ttft = lognormal_ms(rng, self.cfg.ttft_base_ms, 1.0)
        ttft += int((r.write + r.input) * 1000 / spec.prefill_tok_s + r.read * 50 / spec.prefill_tok_s)
        gen = int(r.output_tokens * 1000 / spec.decode_tok_s * rng.uniform(0.85, 1.15))
        r.ttft_ms, r.duration_ms = ttft, ttft + gen
        r.start_ms, r.end_ms = now, now + ttft + gen
        w5, w1 = (r.write, 0) if self.ttl_label == "5m" else (0, r.write)
        r.cost_usd = spec.cost_usd(r.input, r.read, w5, w1, r.output_tokens)
        r.model = th.model
        r.request_id, r.message_id = ids.request_id(rng), ids.message_id(rng)
        r.seq = self.seq
        self.seq += 1
        th.prompt, th.out, th.cached, th.last_start = r.prompt_tokens, r.output_tokens, r.read + r.write, now
        th.break_reason, th.carry = None, 0
        for s in self.sinks:
            s.request(r)
