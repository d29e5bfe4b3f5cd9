"""Closed-loop clients: where sessions come from and when each sends its next turn.

- :class:`SynthSource` runs ``kvtrace synth``'s own session processes (the seed-study workload:
  Poisson session arrivals, tool results and file reads appended per turn, user think time, a
  returning cohort that pauses ~15 minutes, compaction at the context cap, subagents), but a
  request now takes as long as the simulated node needs: the process resumes when its response
  completes and then sleeps its tool/think time.
- :class:`WarehouseSource` takes the warehouse's requests (``queries/simulate_turns.sql``): each
  thread of a session is a client that starts at its recorded first request and then sends each
  next request after the gap it recorded (next start, i.e. end minus duration, minus this end).
- :class:`TesterSource` replays kv-cache-tester conversations (``api_time``/``think_time`` per
  request): each request is sent its own ``think_time`` after the previous one completed, and
  sub-agent entries run as conversations of their own that the thread waits for; conversations
  start as a Poisson process, cycling through the files.

Synth and kv-cache-tester sources scale with ``rate`` (sessions per minute); warehouse sessions
scale by a multiple (``scale``): recorded sessions are copied, or kept at random, whole (see
:class:`WarehouseSource`). ``shard=(i, n)``
keeps every n-th session (for warehouse sessions: every n-th instance, copies included) from the
i-th: the sessions a session-affinity router sends to node i of n (round robin over sessions).
A turn's cohort is ``new`` (a session's first request), ``resumed`` (its thread was idle longer
than the policy's resume gap) or ``continuing``.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

from kvtrace.errors import BadTraceInput, ConfigError
from kvtrace.simulate.engine import Chain, Head, Node, Turn
from kvtrace.synth.config import SynthConfig
from kvtrace.synth.engine import Driver, Note, Request
from kvtrace.synth.workload import World


class SynthSource:
    """The ``kvtrace synth`` workload (``cfg``), sessions arriving during the first ``window_s``."""

    def __init__(self, cfg: SynthConfig, window_s: float, resume_gap_s: float = 300.0, shard: tuple[int, int] = (0, 1)):
        self.cfg, self.window_s, self.resume_gap_s, self.shard = cfg, window_s, resume_gap_s, shard
        self.world = World(cfg)
        self.heads: dict = {}
        self.chains: dict = {}  # synth Thread -> Chain
        self.last_done: dict = {}  # synth Thread -> completion time of its previous request
        self.sessions = 0  # started from measure_from on (the end of a warm-up)
        self.measure_from = 0.0
        self.driver: Driver | None = None

    def __call__(self, node: Node) -> None:
        self.driver = Driver(
            sleep=lambda proc, ms: node.at(node.now + ms / 1000.0, self._resume, node, proc, None),
            request=lambda proc, r: node.issue(self._turn(node, proc, r)),
            note=self._note,
            resume=lambda proc, val: node.at(node.now, self._resume, node, proc, val),
        )
        t0 = self.cfg.start_ms
        for i, t in enumerate(self.world.arrivals()):
            at = (t - t0) / 1000.0
            if at >= self.window_s:
                break
            if i % self.shard[1] == self.shard[0]:
                node.at(at, self._arrive, node, i)

    def _arrive(self, now: float, node: Node, idx: int) -> None:
        self.sessions += now >= self.measure_from
        proc = self.world.session(idx, int(now * 1000) + self.cfg.start_ms)
        self.driver.step(proc, None)

    def _resume(self, now: float, node: Node, proc, val) -> None:
        self.driver.step(proc, val)

    def _note(self, note: Note) -> None:
        if note.kind == "thread_end":
            self.chains.pop(note.thread, None)
            self.last_done.pop(note.thread, None)

    def _turn(self, node: Node, proc, r: Request) -> Turn:
        th = r.thread
        new = sum(p[1] for p in r.parts)
        prompt = th.next_prompt(new)
        key = (th.model, th.kind) if self.cfg.shared_heads else (th.session.id, th.model, th.kind)
        head = self.heads.get(key)
        if head is None:
            head = self.heads[key] = Head(key, th.head)
        chain = self.chains.get(th)
        if chain is None or th.break_reason is not None:
            chain = self.chains[th] = Chain(head)
        last = self.last_done.get(th)
        if last is None:
            cohort = "new" if th.kind == "main" else "continuing"
        else:
            cohort = "resumed" if node.now - last > self.resume_gap_s else "continuing"
        th.prompt, th.out, th.cached, th.last_start = prompt, r.output_tokens, prompt, int(node.now * 1000)
        th.break_reason, th.carry = None, 0

        def done(t: float, th=th, proc=proc, r=r) -> None:
            self.last_done[th] = t
            node.at(t, self._resume, node, proc, r)

        return Turn(chain, prompt, r.output_tokens, cohort=cohort, on_done=done, label=th)


class TesterSource:
    """kv-cache-tester conversations (JSON, optionally gzipped), closed loop on ``think_time``."""

    def __init__(
        self,
        paths: list[Path],
        rate_per_min: float,
        window_s: float,
        seed: int = 0,
        resume_gap_s: float = 300.0,
        shard: tuple[int, int] = (0, 1),
    ):
        if not paths:
            raise ConfigError("no kv-cache-tester trace files given", hint="pass --sessions DIR_OR_FILES")
        if rate_per_min <= 0:
            raise ConfigError("the session rate must be > 0", hint="e.g. --rate 2.5")
        self.convs = [read_tester(p) for p in paths]
        self.rate, self.window_s, self.seed, self.resume_gap_s = rate_per_min, window_s, seed, resume_gap_s
        self.shard = shard
        self.sessions = 0  # started from measure_from on (the end of a warm-up)
        self.measure_from = 0.0

    def __call__(self, node: Node) -> None:
        rng = random.Random(f"kvtrace-simulate:{self.seed}:arrivals")
        t, i = 0.0, 0
        while True:
            t += rng.expovariate(self.rate / 60.0)
            if t >= self.window_s:
                break
            if i % self.shard[1] == self.shard[0]:
                node.at(t, self._start, node, self.convs[i % len(self.convs)])
            i += 1

    def _start(self, now: float, node: Node, conv: dict) -> None:
        self.sessions += now >= self.measure_from
        self._after(node, _Conversation(conv["requests"], conv["block_size"]), 0, now)

    def _after(self, node: Node, c: "_Conversation", i: int, t: float) -> None:
        """Request ``i`` of ``c`` comes next; its previous one completed at ``t``. As kv-cache-tester
        replays (``think-only``): a request is sent its own ``think_time`` after the previous one
        completed; a run of ``subagent`` entries starts its sub-agents at once, each a conversation of
        its own, and the thread's next request waits for all of them (and for its think time)."""
        reqs = c.reqs
        if i >= len(reqs):
            if c.on_end is not None:
                c.on_end(t)
            return
        if reqs[i].get("type") != "subagent":
            delay = float(reqs[i].get("think_time") or 0.0) if i else 0.0
            node.at(t + delay, lambda now: self._send(node, c, i))
            return
        j = i
        while j < len(reqs) and reqs[j].get("type") == "subagent":
            j += 1
        subs = [r["requests"] for r in reqs[i:j] if r.get("requests")]
        left = [len(subs)]

        def sub_done(t_end: float) -> None:
            left[0] -= 1
            if left[0]:
                return
            if j >= len(reqs):  # the sub-agents were the last of the thread
                self._after(node, c, j, t_end)
                return
            # the thread goes on when they have all ended, and its think time since its own last
            # request has passed
            ready = (t if c.last is None else c.last) + float(reqs[j].get("think_time") or 0.0)
            node.at(max(t_end, ready), lambda now: self._send(node, c, j))

        if not subs:
            self._after(node, c, j, t)
            return
        for sub in subs:
            self._after(node, _Conversation(sub, c.bt, sub=True, on_end=sub_done), 0, t)

    def _send(self, node: Node, c: "_Conversation", i: int) -> None:
        r = c.reqs[i]
        ids = r["hash_ids"]
        # the chain whose last request shares the longest prefix with this one (whatever its
        # ``type``, s or n: requests of a thread extend each other); none shared: a new chain
        best, same = None, 0
        for k, (ch, prev) in enumerate(c.chains):
            n = _common_prefix(prev, ids)
            if n > same:
                best, same = k, n
        if best is None:
            ch, keep = Chain(None), 0
            c.chains.append([ch, ids])
        else:
            ch = c.chains[best][0]
            keep = min(same * c.bt, ch.valid)
            c.chains[best][1] = ids
        if c.last is None:
            cohort = "continuing" if c.sub else "new"
        else:
            cohort = "resumed" if node.now - c.last > self.resume_gap_s else "continuing"

        def done(t: float) -> None:
            c.last = t
            self._after(node, c, i + 1, t)

        node.issue(Turn(ch, r["in"], r["out"], keep=keep, cohort=cohort, on_done=done))


class _Conversation:
    """One kv-cache-tester thread being replayed: a conversation's requests, or a sub-agent's."""

    def __init__(self, reqs: list, bt: int, sub: bool = False, on_end=None):
        self.reqs, self.bt, self.sub, self.on_end = reqs, bt, sub, on_end
        self.chains: list = []  # [Chain, the hash_ids of its last request]
        self.last: float | None = None  # when its previous request completed


def _common_prefix(a: list, b: list) -> int:
    """How many leading block hashes ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def read_tester(path: Path) -> dict:
    """One kv-cache-tester conversation: ``block_size`` and ``requests`` with ``in``, ``out``, ``hash_ids``."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, ValueError) as e:
        line = e.lineno if isinstance(e, json.JSONDecodeError) else None
        why = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        raise BadTraceInput(
            str(path), line, f"not a kv-cache-tester trace: {why}", hint="pass trace_NNNN.json files of kv-cache-tester"
        ) from e
    if not isinstance(doc, dict) or not isinstance(doc.get("requests"), list):
        raise BadTraceInput(
            str(path), None, "no requests list", field="requests", hint="pass trace_NNNN.json files of kv-cache-tester"
        )
    _check_requests(str(path), doc["requests"], "request ")
    bt = doc.setdefault("block_size", 64)
    if isinstance(bt, bool) or not isinstance(bt, int) or bt < 1:
        raise BadTraceInput(
            str(path), None, f"block_size must be a whole number of tokens >= 1, not {bt!r}", field="block_size"
        )
    return doc


def _check_requests(path: str, reqs: list, where: str) -> None:
    """Every request carries whole ``in``/``out`` counts, ``hash_ids`` and a ``think_time`` (a
    missing one is estimated from ``t`` and ``api_time``); a ``subagent`` entry carries its own
    ``requests`` (``where``: how an error names the request, e.g. "request 16.")."""
    hint = "kv-cache-tester requests carry in, out, hash_ids, think_time (or type subagent and requests)"
    prev = None
    for k, r in enumerate(reqs):
        name = f"{where}{k}"

        def bad(why: str, field: str) -> BadTraceInput:
            return BadTraceInput(path, None, f"{name}: {why}", field=field, hint=hint)

        if not isinstance(r, dict):
            raise bad("not an object", "requests")
        if r.get("type") == "subagent":
            if r.get("requests") is None:
                r["requests"] = []
            if not isinstance(r["requests"], list):
                raise bad("a subagent entry's requests must be a list", "requests")
            _check_requests(path, r["requests"], f"{name}.")
            continue
        for f in ("in", "out", "hash_ids"):
            if f not in r:
                raise bad("lacks it", f)
        for f, low in (("in", 1), ("out", 0)):
            if isinstance(r[f], bool) or not isinstance(r[f], int) or r[f] < low:
                raise bad(f"must be a whole number of tokens >= {low}, not {r[f]!r}", f)
        ids = r["hash_ids"]
        if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
            raise bad("must be a list of whole block hashes", "hash_ids")
        think = r.get("think_time")
        if think is None:  # t[k] = t[k-1] + api_time[k-1] + think_time[k]
            think = 0.0
            if prev is not None and _number(r.get("t")) and _number(prev.get("t")):
                api = prev.get("api_time")
                think = max(float(r["t"]) - float(prev["t"]) - (float(api) if _number(api) else 0.0), 0.0)
            r["think_time"] = think
        elif not (_number(think) and 0 <= think < math.inf):
            raise bad(f"must be seconds >= 0, not {think!r}", "think_time")
        r.setdefault("type", "n")
        prev = r


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _start_end(ts_us: int, dur_ms, origin: float | None) -> tuple[float, float]:
    """A recorded request's start and end in seconds: the end is its time stamp; a recorded
    duration longer than any API call can last is not trusted to move the start; none starts
    before ``origin``."""
    end = ts_us / 1e6
    start = end - min((dur_ms or 0.0) / 1e3, MAX_REQUEST_S)
    return (start if origin is None else max(start, origin)), end


# The longest a model request is taken to last (API clients give up well before): a longer
# recorded duration is cut to this, so that one bad record cannot stretch the simulated time.
MAX_REQUEST_S = 3600.0
# A copy of a recorded session (``scale`` > 1) starts up to this much earlier or later than its
# original: apart from it, and still at the same time of day give or take half an hour.
COPY_SPREAD_S = 1800.0
# The largest session multiple (``--rate 1000x``): copies are held in memory.
MAX_SCALE = 1000.0


class WarehouseSource:
    """Closed-loop threads from the warehouse's recorded requests (see the module docstring).

    A thread's requests form one conversation chain while each prompt extends the previous prompt
    and output; a shorter prompt (a compaction, a new chain) starts a new one. Session starts keep
    their recorded times, from the window's first request.

    ``scale`` multiplies the sessions (traffic growth): each recorded session runs
    ``floor(scale)`` times, and once more with probability ``scale - floor(scale)`` (below 1: it
    is kept with probability ``scale``). The first instance keeps the recorded times; each copy is
    the whole session moved by one offset drawn from ``±COPY_SPREAD_S`` (mirrored back at an end
    of the recorded span it would pass; not moved if it still does not fit). Draws are seeded by
    ``seed`` and the session's id, so they depend on neither the shard nor other sessions. The
    shards deal instances in the order of their sessions' first rows (time order).
    """

    def __init__(
        self,
        rows: list[tuple],
        resume_gap_s: float = 300.0,
        shard: tuple[int, int] = (0, 1),
        scale: float = 1.0,
        seed: int = 0,
        origin_us: int | None = None,
    ):
        if not rows:
            raise ConfigError(
                "the warehouse has no requests in the window", hint="ingest telemetry first, or widen --since/--until"
            )
        if not 0 < scale <= MAX_SCALE:
            raise ConfigError(
                f"the session multiple must be > 0 and at most {MAX_SCALE:g}, not {scale:g}", hint="e.g. --rate 2x"
            )
        self.resume_gap_s = resume_gap_s
        threads: dict = {}
        t0 = None
        origin = None if origin_us is None else origin_us / 1e6
        for session, thread, ts_us, dur_ms, prompt, out in rows:
            start, end = _start_end(ts_us, dur_ms, origin)
            t0 = start if t0 is None else min(t0, start)
            threads.setdefault((session, thread), []).append((start, end, int(prompt), int(out)))
        t0 = t0 if origin is None else origin
        # from the first request's start (or the origin) to the last request's end (every session,
        # whatever the shard)
        self.span_s = max(b for v in threads.values() for _, b, _, _ in v) - t0
        by_session: dict = {}
        for (session, thread), v in threads.items():
            v.sort(key=lambda turn: turn[1])  # by end, as recorded
            by_session.setdefault(session, []).append((thread, [(a - t0, b - t0, p, o) for a, b, p, o in v]))
        # instances (session, copy) numbered by first appearance: the shards deal them round robin
        self.threads = {}
        k = 0
        for session, session_threads in by_session.items():
            for copy, shift in enumerate(self._shifts(session, session_threads, scale, seed)):
                if k % shard[1] == shard[0]:
                    for thread, turns in session_threads:
                        self.threads[((session, copy), thread)] = [(a + shift, b + shift, p, o) for a, b, p, o in turns]
                k += 1
        if not k:
            raise ConfigError(
                f"a multiple of {scale:g} keeps none of the {len(by_session)} recorded sessions",
                hint="raise the multiple (--rate)",
            )
        self.sessions = 0  # started from measure_from on (the end of a warm-up)
        self.measure_from = 0.0

    @staticmethod
    def span_of(rows: list, origin_us: int | None = None) -> float:
        """The ``span_s`` a source of ``rows`` has, without building it."""
        origin = None if origin_us is None else origin_us / 1e6
        ends = [_start_end(r[2], r[3], origin) for r in rows]
        return max(e for _, e in ends) - (origin if origin is not None else min(a for a, _ in ends))

    def _shifts(self, session: str, session_threads: list, scale: float, seed: int) -> list[float]:
        """The offsets of a session's instances (empty when thinning drops it)."""
        if scale == 1.0:
            return [0.0]
        rng = random.Random(f"kvtrace-simulate:{seed}:scale:{session}")
        whole = int(scale)
        n = whole + (rng.random() < scale - whole)
        if not n:
            return []
        first = min(t[0][0] for _, t in session_threads)
        last = max(t[-1][1] for _, t in session_threads)
        shifts = [0.0]
        for _ in range(n - 1):
            d = rng.uniform(-COPY_SPREAD_S, COPY_SPREAD_S)
            # past an end of the span, mirrored back at that end (the density near it stays even)
            if first + d < 0:
                d = -2 * first - d
            elif last + d > self.span_s:
                d = 2 * (self.span_s - last) - d
            if first + d < 0 or last + d > self.span_s:
                d = 0.0
            shifts.append(d)
        return shifts

    @staticmethod
    def rows(store, since=None, until=None) -> list[tuple]:
        """The window's requests with a prompt, as the constructor takes them."""
        from kvtrace.store import load_query

        rows = store.query(load_query("simulate_turns").sql, {"since": since, "until": until})
        return [r for r in rows if r[4] and r[4] > 0]

    def __call__(self, node: Node) -> None:
        seen = set()
        for (session, thread), turns in sorted(self.threads.items(), key=lambda kv: (kv[1][0][0], kv[0])):
            new = session not in seen
            seen.add(session)
            node.at(turns[0][0], lambda now, turns=turns, new=new: self._send(node, turns, 0, None, new, None))

    def _send(self, node: Node, turns: list, i: int, ch: Chain | None, new: bool, last: float | None) -> None:
        if i >= len(turns):
            return
        if i == 0 and new:
            self.sessions += node.now >= self.measure_from
        start, end, prompt, out = turns[i]
        prev = turns[i - 1] if i else None
        if ch is None or prev is None or prompt < prev[2] + prev[3]:
            ch = Chain(None)
        cohort = (
            ("new" if new else "continuing")
            if i == 0
            else ("resumed" if last is not None and node.now - last > self.resume_gap_s else "continuing")
        )
        gap = max(turns[i + 1][0] - end, 0.0) if i + 1 < len(turns) else 0.0

        def done(t: float) -> None:
            node.at(t + gap, lambda now: self._send(node, turns, i + 1, ch, False, t))

        node.issue(Turn(ch, max(prompt, 1), out, cohort=cohort, on_done=done))
