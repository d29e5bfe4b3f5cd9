"""The step-level model of one vLLM-V1-like inference node with KV tiers below its GPUs.

Every scheduler step decodes one token for each running sequence past its prefill and spends the
rest of the token budget (``max_num_batched_tokens``) on chunked prefill: first the running
sequences still in prefill, then waiting requests admitted first come, first served while fewer
than ``max_num_seqs`` run and their blocks can be allocated. Running sequences pin their GPU KV;
freed blocks stay as a prefix cache evicted LRU (:mod:`kvtrace.simulate.tiers`). When a running
sequence cannot get a block, the most recently admitted one is preempted and recomputed later,
and that step admits no waiting request.

Below the GPU, tiers (DRAM, NVMe, ...) follow LMCache by default: ``chunk_tokens`` chunks; after
a request's prefill every tier is given the prompt's full chunks it lacks (write-through); a lookup
returns the longest prefix contiguous across tiers, each chunk read from the fastest tier that has
it; chunks loaded from a lower tier are written back to the upper offload tiers; loads block the
step that admits the request (``load="block"``: the loads of one step share each tier's link, so
the step waits for each tier's bytes at its read bandwidth) or hold only that request
(``load="overlap"``: the transfers in flight on one tier's link share its bandwidth equally). Storing into the first
offload tier is a synchronous copy that adds to the step (``store_blocks``); lower tiers write in
the background. With ``tier_mode="exclusive"`` a chunk lives in one tier instead: nothing is
written at prefill, evictions spill whole chunks to the next tier down (in the background), and a
hit read from a lower tier moves up to the GPU.

Clients talk to a :class:`Fleet`: one or more nodes on one event clock behind a per-request
router (round robin, least loaded); ``Node.run`` is a fleet of one.

A step's time comes from :class:`kvtrace.simulate.cost.StepCost`. Decode-only stretches with
nothing to admit are advanced many steps at once (their step times are computed together), which
changes no result, only the work.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from kvtrace.errors import ConfigError
from kvtrace.simulate.cost import StepCost
from kvtrace.simulate.tiers import Residency

CAUSES = ("new", "write_through", "write_back", "restore", "spill")


@dataclass
class Policy:
    """Scheduler and offload switches (defaults: vLLM V1 with LMCache)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_tokens: int = 16
    chunk_tokens: int = 256
    load: str = "block"  # block | overlap
    tier_mode: str = "inclusive"  # inclusive: write-through to every tier; exclusive: spill on eviction
    store: str = "missing"  # missing: write the chunks a tier lacks; all: rewrite every chunk
    write_back: bool = True  # a chunk loaded from a lower tier is written to the tiers above it
    store_blocks: bool = True  # the copy into the first offload tier adds to the step
    cache_output: bool = True  # the GPU prefix cache keeps decoded tokens' blocks (vLLM does)
    resume_gap_s: float = 300.0  # a turn after a longer idle gap is "resumed"

    def validate(self) -> None:
        if self.load not in ("block", "overlap"):
            raise ConfigError(f"load policy {self.load!r}", hint="use block or overlap")
        if self.store not in ("missing", "all"):
            raise ConfigError(f"store policy {self.store!r}", hint="use missing or all")
        if self.tier_mode not in ("inclusive", "exclusive"):
            raise ConfigError(
                f"tier mode {self.tier_mode!r}", hint="use inclusive (write-through) or exclusive (spill on eviction)"
            )
        if self.tier_mode == "exclusive" and (self.store != "missing" or not self.write_back):
            raise ConfigError(
                "exclusive tiers write only what they spill and always move a hit up",
                hint="drop --store and --no-write-back, or use --tier-mode inclusive",
            )
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1 or self.block_tokens < 1 or self.chunk_tokens < 1:
            raise ConfigError(
                "max_num_seqs, max_num_batched_tokens, block and chunk sizes must be >= 1",
                hint="e.g. --max-num-seqs 256 --max-batched-tokens 8192",
            )

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LowerTier:
    """An offload tier: capacity in tokens, link bandwidths (GB/s), latency, and its tier file entry."""

    name: str
    capacity_tokens: int
    read_gbps: float
    write_gbps: float
    latency_s: float = 0.0
    kind: str = "dram"
    spec: object = None  # kvtrace.replay.tiers.Tier, for drives and prices


class Head:
    """A prompt head shared by many chains (system prompt + tool definitions). What a node holds of
    it while sequences run on it is that node's state (``Node.head_ref``, ``Node.head_hold``)."""

    __slots__ = ("key", "tokens")

    def __init__(self, key, tokens: int):
        self.key, self.tokens = key, tokens


class Chain:
    """One append-only conversation: its head, and the tokens the tiers may hold (``valid``)."""

    __slots__ = ("head", "valid", "__weakref__")

    def __init__(self, head: Head | None = None):
        self.head, self.valid = head, 0


class Turn:
    """One request a client issues: ``prompt`` tokens on ``chain`` (the first ``keep`` still valid),
    ``output`` tokens to generate; ``on_done(t)`` is called when it completes."""

    __slots__ = (
        "chain",
        "prompt",
        "output",
        "keep",
        "cohort",
        "on_done",
        "want_t",
        "issue_t",
        "admit_t",
        "ready_t",
        "first_t",
        "done_t",
        "hits",
        "label",
        "seq",
        "node",
    )

    def __init__(
        self,
        chain: Chain,
        prompt: int,
        output: int,
        keep: int | None = None,
        cohort: str = "continuing",
        on_done: Callable[[float], None] | None = None,
        label=None,
    ):
        self.chain, self.prompt, self.output = chain, int(prompt), max(int(output), 1)
        self.keep = chain.valid if keep is None else int(keep)
        self.cohort, self.on_done, self.label = cohort, on_done, label
        self.want_t = self.issue_t = self.admit_t = self.ready_t = self.first_t = self.done_t = None
        self.hits: list[int] | None = None  # tokens per tier (GPU first) at the first admission
        self.seq = 0  # issue order
        self.node = 0  # the node of the fleet that served it


class _Seq:
    __slots__ = (
        "turn",
        "target",
        "computed",
        "own",
        "gen",
        "d0",
        "g0",
        "hit_end",
        "segs",
        "loaded",
        "uid",
        "epoch",
        "ready_t",
        "link_done",
    )

    def __init__(self, turn: Turn, uid: int):
        self.turn, self.uid = turn, uid
        self.target = turn.prompt  # tokens to prefill (grows by the generated ones after a preemption)
        self.computed = 0
        self.own = 0  # GPU tokens pinned for the chain beyond the shared head
        self.gen = 0  # output tokens generated
        self.d0 = self.g0 = 0
        self.hit_end = 0
        self.segs: list = []  # (lower tier index, start, end) loaded
        self.loaded = False
        self.epoch = 0
        self.ready_t = 0.0
        self.link_done: dict = {}  # overlapped loads: tier index -> when its transfer completes


class Metrics:
    """Per-minute series and per-turn records of one run."""

    def __init__(self, duration_s: float, tier_names: list[str], bin_s: float = 60.0):
        self.bin_s = bin_s
        self.n = max(int(math.ceil(duration_s / bin_s)), 1)
        n, K = self.n, len(tier_names)
        self.prompt_tok = np.zeros(n)
        self.output_tok = np.zeros(n)
        self.computed_tok = np.zeros(n)
        self.busy_s = np.zeros(n)
        self.steps = np.zeros(n)
        self.read = np.zeros((K, n))
        self.write = {c: np.zeros((K, n)) for c in CAUSES}
        self.occupancy = np.zeros((K + 1, n))
        self.running = np.zeros(n)
        self.waiting = np.zeros(n)
        self.hit_tokens = np.zeros(K + 1)
        self.prompt_total = 0
        self.preemptions = 0
        self.turns: list[Turn] = []
        self.ttft: list[tuple] = []  # (cohort, issue, queue s, load s, prefill s, client wait s)
        self._mark = (np.zeros(K + 1), 0, 0)

    def bin(self, t: float) -> int:
        return min(max(int(t // self.bin_s), 0), self.n - 1)

    def mark(self) -> None:
        """Remember the running totals now (the end of a warm-up): :meth:`drop_head` subtracts them."""
        self._mark = (self.hit_tokens.copy(), self.prompt_total, self.preemptions)

    def drop_head(self, t: float) -> None:
        """Keep only what follows a warm-up of ``t`` seconds (whole bins; :meth:`mark` was called at
        ``t``), timed from its end: the series' later bins, the turns issued from ``t`` on, the totals
        since the mark."""
        k = int(round(t / self.bin_s))
        for name in ("prompt_tok", "output_tok", "computed_tok", "busy_s", "steps", "running", "waiting"):
            setattr(self, name, getattr(self, name)[k:])
        self.read, self.occupancy = self.read[:, k:], self.occupancy[:, k:]
        self.write = {c: w[:, k:] for c, w in self.write.items()}
        self.n -= k
        hits, prompt, preemptions = self._mark
        self.hit_tokens = self.hit_tokens - hits
        self.prompt_total -= prompt
        self.preemptions -= preemptions
        self.ttft = [(c, issue - t, *rest) for c, issue, *rest in self.ttft if issue >= t]
        self.turns = [x for x in self.turns if x.issue_t >= t]

    def first_token(self, t: Turn) -> None:
        wait = t.issue_t - t.want_t if t.want_t is not None else 0.0
        self.ttft.append(
            (t.cohort, t.issue_t, t.admit_t - t.issue_t, t.ready_t - t.admit_t, t.first_t - t.ready_t, wait)
        )


class Node:
    """One inference node. ``run(source, duration_s)`` simulates it (see the module docstring)."""

    def __init__(
        self,
        cost: StepCost,
        gpu_kv_tokens: int,
        lower: list[LowerTier],
        policy: Policy | None = None,
        keep_turns: bool = False,
    ):
        self.cost, self.policy = cost, policy or Policy()
        self.policy.validate()
        p = self.policy
        if gpu_kv_tokens < p.block_tokens:
            raise ConfigError(
                f"GPU KV capacity of {gpu_kv_tokens} tokens holds no block",
                hint="give the GPU KV capacity in tokens, e.g. --gpu-kv 400K",
            )
        self.head_ref: dict = {}  # Head -> running sequences on it
        self.head_hold: dict = {}  # Head -> its GPU tokens pinned while they run
        self.gpu = Residency("GPU", gpu_kv_tokens // p.block_tokens * p.block_tokens, p.block_tokens)
        self.lower = lower
        self.res = [
            Residency(t.name, t.capacity_tokens // p.chunk_tokens * p.chunk_tokens, p.chunk_tokens) for t in lower
        ]
        self.bpt = cost.model.bytes_per_token
        self.excl = p.tier_mode == "exclusive" and bool(lower)
        self.seg_start: list[dict] = [{} for _ in lower]  # exclusive: where each object's segment starts
        if self.excl:
            self.gpu.on_evict = self._gpu_evicted
            for k, r in enumerate(self.res):
                r.on_evict = lambda obj, before, after, k=k: self._lower_evicted(k, obj, before, after)
        self.keep_turns = keep_turns
        self.now = 0.0
        self._duration = 0.0
        self._next_sample = 0.0
        self.waiting: deque[_Seq] = deque()  # FCFS (index 0 first)
        self.running: list[_Seq] = []  # admission order
        self.prefilling: list[_Seq] = []
        self.loading: list[_Seq] = []
        self.decoding: dict[int, _Seq] = {}
        self._finish: list = []  # heap (finish decode step, uid, epoch)
        self.dec_steps = 0
        self.dec_ctx = 0  # sum of decoding sequences' contexts
        self._uid = 0
        self.links: list[list] = [[] for _ in lower]  # overlapped transfers in flight: [seq, bytes left]
        self.link_t = [0.0] * len(lower)  # when each link's transfers were last advanced
        self.metrics: Metrics | None = None

    # -- clients (through the fleet, which owns the event clock) ----------------------------------
    def enqueue(self, turn: Turn, t: float, prev_t: float) -> None:
        """``turn`` arrives at time ``t`` (the fleet has cut stale residencies); ``prev_t`` is when
        the fleet's previous client event happened. An idle node wakes up at ``t``."""
        if not self.running and not self.waiting and t > self.now:
            self._sample_to(max(self.now, prev_t))
            self._set_now(t)
        if turn.prompt + turn.output - 1 > self.gpu.capacity:  # vLLM refuses to start with such a max length
            raise ConfigError(
                f"a turn of {turn.prompt} prompt and {turn.output} output tokens does not fit the GPU KV cache "
                f"of {self.gpu.capacity} tokens",
                hint="raise the GPU KV capacity (--gpu-kv), or for synth sessions lower their context cap "
                "(--set context_cap_tokens=32000)",
            )
        turn.issue_t = t
        self._uid += 1
        turn.seq = self._uid
        self.waiting.append(_Seq(turn, self._uid))

    def _cut(self, ch: Chain, keep: int) -> None:
        split = self._split(ch, self.policy.block_tokens)
        self.gpu.cut(ch, max(keep - split, 0))
        for k, r in enumerate(self.res):
            local = max(keep - self._split(ch, r.unit), 0)
            if self.excl and ch in r.lru:
                r.cut(ch, max(local - self.seg_start[k][ch], 0))
                if ch not in r.lru:
                    del self.seg_start[k][ch]
            else:
                r.cut(ch, local)

    @staticmethod
    def _split(ch: Chain, unit: int) -> int:
        return ch.head.tokens // unit * unit if ch.head is not None else 0

    # -- the loop ---------------------------------------------------------------------------
    def run(
        self, start: Callable[["Fleet"], None], duration_s: float, on_progress: Callable[[float], None] | None = None
    ) -> Metrics:
        """Run clients (``start(fleet)`` schedules their first turns) on this node alone for
        ``duration_s`` seconds (``on_progress`` as for :meth:`Fleet.run`)."""
        return Fleet([self]).run(start, duration_s, on_progress)[0]

    def _begin(self, duration_s: float) -> None:
        self.metrics = Metrics(duration_s, [t.name for t in self.lower])
        self._duration = duration_s
        self._next_sample = 0.0

    def _sample_to(self, t: float) -> None:
        m = self.metrics
        while t >= self._next_sample and self._next_sample < self._duration:
            self._sample(m.bin(self._next_sample))
            self._next_sample += m.bin_s

    def _act(self, horizon: float, next_event: float) -> None:
        """One turn of the loop for a busy node: sample, finish loads, then a step or a stretch of
        decode-only steps that stops at ``horizon`` (when a client may act next); ``next_event``:
        the next scheduled client action (after now)."""
        self._sample_to(self.now)
        if self.loading:
            self._finish_loads()
        if not self._fast_forward(horizon):
            self._step(next_event)

    def _end(self) -> None:
        if not self.running and not self.waiting:  # idle since its last step: it holds what it
            self._sample_to(self._duration)  # held then to the end of the run
        for r in [self.gpu, *self.res]:
            r.now = self.now

    def _sample(self, b: int) -> None:
        m = self.metrics
        m.occupancy[0, b] = self.gpu.used
        for k, r in enumerate(self.res):
            m.occupancy[k + 1, b] = r.used
        m.running[b] = len(self.running)
        m.waiting[b] = len(self.waiting)

    def _finish_loads(self) -> None:
        done = [s for s in self.loading if s.ready_t <= self.now]
        for s in done:
            self.loading.remove(s)
            s.loaded = True
            if s.turn.first_t is None:
                s.turn.ready_t = s.ready_t
            self.prefilling.append(s)

    def _set_now(self, t: float) -> None:
        self.now = t
        self.gpu.now = t
        for r in self.res:
            r.now = t

    # -- admission: hits and loads ----------------------------------------------------------------
    def _gpu_hit(self, s: _Seq) -> int:
        ch = s.turn.chain
        bs = self.policy.block_tokens
        h = ch.head
        if h is None:
            g = self.gpu.get(ch)
        else:
            split = self._split(ch, bs)
            held = self.head_hold[h] if h in self.head_ref else self.gpu.get(h)
            g = held if held < split else split + self.gpu.get(ch)
        return min(g, (s.target - 1) // bs * bs)

    def _lower_hits(self, s: _Seq, g: int) -> tuple[int, list]:
        """Extend a GPU hit of ``g`` tokens with the lower tiers: (end of the hit, loaded segments)."""
        if not self.res:
            return g, []
        if self.excl:
            return self._exclusive_hits(s, g)
        ch = s.turn.chain
        c = self.policy.chunk_tokens
        split = self._split(ch, c)
        h = ch.head
        pos, segs = g, []
        limit = s.target - 1
        if h is not None and pos < split:
            for k, r in enumerate(self.res):
                end = min(r.get(h), limit)
                if end > pos:
                    segs.append((k, pos, end))
                    pos = end
            if pos < split:
                return pos, segs
        for k, r in enumerate(self.res):
            end = min(split + r.get(ch), limit)
            if end > pos:
                segs.append((k, pos, end))
                pos = end
        return pos, segs

    def _pin(self, s: _Seq) -> int:
        """Pin the chain's GPU residency (and its head) for ``s``; returns the GPU hit tokens."""
        ch = s.turn.chain
        h = ch.head
        if h is not None:
            ref = self.head_ref.get(h, 0)
            if ref == 0:
                self.head_hold[h] = self.gpu.pin(h)
            self.head_ref[h] = ref + 1
        g = self._gpu_hit(s)
        split = self._split(ch, self.policy.block_tokens)
        if h is not None and self.head_hold[h] < split:
            self.gpu.cut(ch, 0)  # unreachable behind the missing head blocks: recomputed
            s.own = 0
        else:
            s.own = self.gpu.pin(ch)
            excess = s.own - max(g - split, 0)
            if excess > 0:  # blocks past the (capped) hit are recomputed
                self.gpu.pinned -= excess
                s.own -= excess
        return g

    def _release(self, s: _Seq, keep_tokens: int) -> None:
        """Unpin ``s``'s blocks; the first ``keep_tokens`` of its chain stay cached."""
        ch = s.turn.chain
        h = ch.head
        split = self._split(ch, self.policy.block_tokens)
        if h is not None:
            self.gpu.unpin(ch, s.own, max(keep_tokens - split, 0))
            ref = self.head_ref[h] - 1
            if ref == 0:
                hold = self.head_hold.pop(h)
                del self.head_ref[h]
                self.gpu.unpin(h, hold, hold)
            else:
                self.head_ref[h] = ref
        else:
            self.gpu.unpin(ch, s.own, keep_tokens)
        s.own = 0

    def _grow(self, s: _Seq, upto: int) -> None:
        """Account GPU memory for ``s`` having computed up to token ``upto`` (room already made)."""
        ch = s.turn.chain
        h = ch.head
        split = self._split(ch, self.policy.block_tokens) if h is not None else 0
        hold = self.head_hold[h] if h is not None else 0
        if h is not None and upto > hold and hold < split:
            add = min(upto, split) - hold
            self.head_hold[h] = hold + add
            self.gpu.pinned += add
        own = max(upto - split, 0)
        if own > s.own:
            self.gpu.pinned += own - s.own
            s.own = own

    def _admit(self, s: _Seq, budget: int, reserve: int, step_bytes: list) -> tuple[bool, int]:
        """Try to admit the head of the waiting queue: (admitted, first chunk). ``reserve`` tokens
        must stay free (this step's decode tokens); blocking loads add to ``step_bytes`` per tier."""
        g = self._pin(s)
        end, segs = self._lower_hits(s, g)
        need = end - g + min(s.target - end, budget)
        if self.excl:  # being read, the segments are the tiers' most recent
            for k, a, e in segs:
                self.res[k].touch(self._seg_obj(s.turn.chain, e))
        if not self.gpu.make_room(need + reserve):
            self._release(s, s.own + self._split(s.turn.chain, self.policy.block_tokens))
            return False, 0
        t = s.turn
        m = self.metrics
        if t.admit_t is None:
            t.admit_t = self.now
            hits = [g] + [0] * len(self.res)
            for k, a, b in segs:
                hits[k + 1] += b - a
            t.hits = hits
            m.hit_tokens += hits
            m.prompt_total += t.prompt
        s.computed = end
        s.hit_end = end
        s.segs = segs
        if self.excl:
            for k, a, e in segs:
                self._move_up(k, s.turn.chain, e)
        self._grow(s, end)
        b = m.bin(self.now)
        per_tier = [0] * len(self.res)
        for k, a, e in segs:
            per_tier[k] += e - a
        for k, tok in enumerate(per_tier):
            if tok:
                nbytes = tok * self.bpt
                m.read[k, b] += nbytes
                if self.policy.load == "block":
                    step_bytes[k] += nbytes
                else:
                    self._link_advance(k)
                    self.links[k].append([s, float(nbytes)])
                    self._link_project(k)
        self.running.append(s)
        if self.policy.load == "overlap" and any(per_tier):
            self.loading.append(s)
            return True, 0
        s.loaded = True
        return True, min(s.target - s.computed, budget)

    # -- links: overlapped transfers share a tier's read bandwidth equally --------------------------
    def _link_advance(self, k: int) -> None:
        """Serve link ``k``'s transfers up to now (each gets bandwidth / transfers in flight)."""
        bw = self.lower[k].read_gbps * 1e9
        active, t = self.links[k], self.link_t[k]
        while active and t < self.now:
            rate = bw / len(active)
            least = min(x[1] for x in active)
            if t + least / rate <= self.now:
                t += least / rate
                for x in active:
                    x[1] -= least
                active[:] = [x for x in active if x[1] > 1e-6]
            else:
                served = rate * (self.now - t)
                for x in active:
                    x[1] -= served
                t = self.now
        self.link_t[k] = self.now

    def _link_project(self, k: int) -> None:
        """When each transfer on link ``k`` completes if no other joins; its request is ready once
        all its transfers have (plus the tier's latency)."""
        bw = self.lower[k].read_gbps * 1e9
        t, done, n = self.link_t[k], 0.0, len(self.links[k])
        for s, left in sorted(self.links[k], key=lambda x: (x[1], x[0].uid)):
            t += (left - done) * n / bw
            done, n = left, n - 1
            s.link_done[k] = t + self.lower[k].latency_s
            s.ready_t = max(s.link_done.values())

    # -- exclusive tiers: a chunk lives in one tier; evictions spill down, hits move up ------------
    # An offload tier holds a segment [start, start + tokens) of an object (a head, or a chain past
    # its head's whole chunks): the residency counts its tokens, ``seg_start`` keeps its start.
    def _seg_obj(self, ch: Chain, end: int):
        """The object a hit segment ending at ``end`` was read from: the head or the chain."""
        h = ch.head
        return h if h is not None and end <= self._split(ch, self.policy.chunk_tokens) else ch

    def _exclusive_hits(self, s: _Seq, g: int) -> tuple[int, list]:
        ch = s.turn.chain
        split = self._split(ch, self.policy.chunk_tokens)
        h = ch.head
        pos, segs, limit = g, [], s.target - 1
        if h is not None and pos < split:
            pos = self._walk(h, 0, pos, min(split, limit), segs)
            if pos < split:
                return pos, segs
        return self._walk(ch, split, pos, limit, segs), segs

    def _walk(self, obj, off: int, pos: int, limit: int, segs: list) -> int:
        """Extend a hit at ``pos`` with the tier segments that contain it, in any order."""
        moved = True
        while moved and pos < limit:
            moved = False
            for k, r in enumerate(self.res):
                n = r.lru.get(obj, 0)
                if n:
                    a = off + self.seg_start[k][obj]
                    e = min(a + n, limit)
                    if a <= pos < e:
                        segs.append((k, pos, e))
                        pos, moved = e, True
        return pos

    def _move_up(self, k: int, ch: Chain, end: int) -> None:
        """A hit read tier ``k``'s segment up to ``end``: those chunks now live on the GPU."""
        obj = self._seg_obj(ch, end)
        r, st = self.res[k], self.seg_start[k]
        n = r.lru.get(obj, 0)
        if not n:
            return
        off = 0 if obj is not ch else self._split(ch, self.policy.chunk_tokens)
        start, stop = st[obj], st[obj] + n
        new = max(start, (end - off) // r.unit * r.unit)  # a chunk the GPU holds only part of stays
        del r.lru[obj]
        r.cached -= n
        if new < stop:
            r.lru[obj] = stop - new
            r.cached += stop - new
            st[obj] = new
        else:
            del st[obj]

    def _gpu_evicted(self, obj, before: int, after: int) -> None:
        """The GPU evicted ``obj``'s tokens [after, before): their whole chunks spill to the first
        offload tier (a chunk still partly on the GPU goes whole; a chain's last partial one is lost)."""
        c = self.policy.chunk_tokens
        if isinstance(obj, Head):
            a, b = after // c * c, before // c * c
        else:
            d = self._split(obj, self.policy.block_tokens) - self._split(obj, c)
            a, b = (d + after) // c * c, (d + before) // c * c
        if b > a:
            self._spill_into(0, obj, a, b)

    def _lower_evicted(self, k: int, obj, before: int, after: int) -> None:
        st = self.seg_start[k]
        start = st[obj]
        if not after:
            del st[obj]
        if k + 1 < len(self.res):
            self._spill_into(k + 1, obj, start + after, start + before)

    def _spill_into(self, k: int, obj, a: int, b: int) -> None:
        """Write ``obj``'s chunks [a, b) to tier ``k`` (joining the segment it holds when they touch,
        else replacing it), making room by spilling its least recently used tails further down."""
        r, st = self.res[k], self.seg_start[k]
        have = r.lru.pop(obj, 0)
        r.cached -= have
        old = (st[obj], st[obj] + have) if have else (a, a)
        if have and a <= old[1] and old[0] <= b:
            a, b = min(a, old[0]), max(b, old[1])
        if not r.make_room(b - a):  # what does not fit, the segment's tail, goes further down
            fit = a + max(r.free, 0) // r.unit * r.unit
            if k + 1 < len(self.res) and b > fit:
                self._spill_into(k + 1, obj, fit, b)
            b = fit
        written = (b - a) - max(0, min(b, old[1]) - max(a, old[0]))
        if b > a:
            r.lru[obj] = b - a
            r.cached += b - a
            st[obj] = a
        else:
            st.pop(obj, None)
        if written > 0:
            m = self.metrics
            m.write["spill"][k, m.bin(self.now)] += written * self.bpt

    # -- preemption ---------------------------------------------------------------------------------
    def _preempt(self, protect: set) -> bool:
        """Preempt the most recently admitted running sequence not in ``protect`` (recompute later)."""
        for i in range(len(self.running) - 1, -1, -1):
            v = self.running[i]
            if v.uid in protect:
                continue
            del self.running[i]
            if v in self.prefilling:
                self.prefilling.remove(v)
            if v in self.loading:
                self.loading.remove(v)
                for k in list(v.link_done):  # its transfers stop; the others get their share back
                    self._link_advance(k)
                    self.links[k] = [x for x in self.links[k] if x[0] is not v]
                    self._link_project(k)
                v.link_done = {}
            cached = v.computed
            if v.uid in self.decoding:
                del self.decoding[v.uid]
                steps = self.dec_steps - v.d0
                v.gen = v.g0 + steps
                self.dec_ctx -= v.target + v.gen
                v.own += steps
                cached = v.target + v.gen - 1
            self._release(v, cached // self.policy.block_tokens * self.policy.block_tokens)
            v.epoch += 1
            v.target = v.turn.prompt + v.gen
            v.computed = 0
            v.loaded = False
            v.ready_t = 0.0
            self.waiting.appendleft(v)
            self.metrics.preemptions += 1
            return True
        return False

    # -- steps --------------------------------------------------------------------------------------
    def _fast_forward(self, horizon: float) -> bool:
        """Advance a stretch of decode-only steps at once; False if the next step is not one."""
        B = len(self.decoding)
        if not B or self.prefilling or self.loading or (self.waiting and len(self.running) < self.policy.max_num_seqs):
            return False
        k = self._finish[0][0] - self.dec_steps
        room = (self.gpu.free + self.gpu.cached) // B
        k = min(k, room)
        if k < 4:
            return False
        horizon = min(horizon, self._duration) - self.now
        first = self.cost.step(B, self.dec_ctx, [])  # steps only grow longer as contexts do
        if first > 0:
            if 3 * first >= horizon:  # the horizon comes within 3 steps
                return False
            k = min(k, int(horizon / first) + 1)  # no more steps than fit before it, and one
        times = self.cost.decode_steps(B, self.dec_ctx, k)
        cum = np.cumsum(times)
        if horizon < cum[-1]:
            k = int(np.searchsorted(cum, horizon, side="left")) + 1
            if k < 4:
                return False
            cum = cum[:k]
            times = times[:k]
        self.gpu.make_room(B * k)
        self.gpu.pinned += B * k
        m = self.metrics
        ends = self.now + cum
        bins = np.minimum((ends // m.bin_s).astype(np.int64), m.n - 1)
        np.add.at(m.output_tok, bins, B)
        np.add.at(m.computed_tok, bins, B)
        np.add.at(m.busy_s, bins, times)
        np.add.at(m.steps, bins, 1)
        self.dec_ctx += B * k
        self.dec_steps += k
        self._set_now(float(ends[-1]))
        self._complete_decodes()
        return True

    def _complete_decodes(self) -> None:
        while self._finish and self._finish[0][0] <= self.dec_steps:
            _, uid, epoch = heapq.heappop(self._finish)
            s = self.decoding.get(uid)
            if s is None or s.epoch != epoch:
                continue
            del self.decoding[uid]
            steps = self.dec_steps - s.d0
            s.gen = s.g0 + steps
            s.own += steps
            self.dec_ctx -= s.target + s.gen
            self._done(s)

    def _done(self, s: _Seq) -> None:
        t = s.turn
        self.running.remove(s)
        total = t.prompt + t.output - 1  # the last token's KV is never written
        self._grow(s, total)
        keep = total if self.policy.cache_output else t.prompt
        self._release(s, keep // self.policy.block_tokens * self.policy.block_tokens)
        t.done_t = self.now
        t.chain.valid = max(t.chain.valid, t.prompt + t.output)
        if self.keep_turns:
            self.metrics.turns.append(t)
        if t.on_done is not None:
            t.on_done(self.now)

    def _step(self, next_event: float) -> None:
        p = self.policy
        m = self.metrics
        budget = p.max_num_batched_tokens
        scheduled: set = set()
        preempted0 = m.preemptions
        # decode tokens first: each decoding sequence needs room for one more token
        while self.decoding and not self.gpu.make_room(len(self.decoding)):
            if not self._preempt(scheduled):
                break
        budget -= len(self.decoding)
        chunks: list[tuple[_Seq, int, int]] = []
        for s in list(self.prefilling):
            if budget <= 0:
                break
            if s not in self.prefilling:
                continue
            c = min(s.target - s.computed, budget)
            scheduled.add(s.uid)
            ok = self.gpu.make_room(len(self.decoding) + c)
            while not ok and self._preempt(scheduled):
                ok = self.gpu.make_room(len(self.decoding) + c)
            if not ok:
                scheduled.discard(s.uid)
                break
            chunks.append((s, s.computed, c))
            self._grow(s, s.computed + c)
            budget -= c
        step_bytes = [0] * len(self.res)
        admitted_now = []
        # as vLLM V1, a step that had to preempt admits nothing (it would only preempt again)
        while self.waiting and budget > 0 and len(self.running) < p.max_num_seqs and m.preemptions == preempted0:
            s = self.waiting[0]
            admitted, c = self._admit(s, budget, len(self.decoding), step_bytes)
            if not admitted:
                break
            self.waiting.popleft()
            admitted_now.append(s)
            if s.loaded:
                if c:
                    scheduled.add(s.uid)
                    self._grow(s, s.computed + c)
                    chunks.append((s, s.computed, c))
                    budget -= c
                self.prefilling.append(s)
        # blocking loads of this step run together: each tier's link carries all of its bytes
        load_s = max(
            (nb / (lt.read_gbps * 1e9) + lt.latency_s for nb, lt in zip(step_bytes, self.lower) if nb), default=0.0
        )
        for s in admitted_now:
            if s.loaded and s.turn.first_t is None:
                s.turn.ready_t = self.now + load_s
        B = len(self.decoding)
        if not B and not chunks:
            if m.preemptions != preempted0:  # everything was preempted: the next step admits
                return
            if self.loading:  # only loads in flight: wait for the first
                self._set_now(max(self.now, min(s.ready_t for s in self.loading)))
                return
            # nothing runs and the queue's head cannot be admitted (turns that do not fit are refused
            # when sent): an error rather than a node stuck forever
            if self.waiting and not self.running:
                raise ConfigError(
                    f"a prompt of {self.waiting[0].target} tokens cannot be admitted to the GPU KV cache of "
                    f"{self.gpu.capacity} tokens",
                    hint="raise the GPU KV capacity (--gpu-kv)",
                )
            self._set_now(max(self.now, next_event))
            return
        self.gpu.pinned += B
        dt = self.cost.step(B, self.dec_ctx, [(a, c) for _, a, c in chunks]) + load_s
        # prefill completions: their prompts are stored to the offload tiers at the end of the step
        self._set_now(self.now + dt)
        finished = []
        store_s = 0.0
        for s, a, c in chunks:
            s.computed = a + c
            if s.computed >= s.target:
                finished.append(s)
                store_s += self._store(s)
        if p.store_blocks and store_s:
            dt += store_s
            self._set_now(self.now + store_s)
        b = m.bin(self.now - 1e-12) if dt > 0 else m.bin(self.now)
        new_tok = sum(c for _, _, c in chunks)
        m.computed_tok[b] += new_tok + B
        m.output_tok[b] += B
        m.busy_s[b] += dt
        m.steps[b] += 1
        self.dec_ctx += B
        self.dec_steps += 1
        self._complete_decodes()
        for s in finished:
            self.prefilling.remove(s)
            t = s.turn
            if s.gen == 0:
                s.gen = 1
                t.first_t = self.now
                m.first_token(t)
                m.prompt_tok[b] += t.prompt
                m.output_tok[b] += 1
                m.computed_tok[b] += 1
            if s.gen >= t.output:
                self._done(s)
                continue
            s.g0, s.d0 = s.gen, self.dec_steps
            self.decoding[s.uid] = s
            self.dec_ctx += s.target + s.gen
            heapq.heappush(self._finish, (s.d0 + t.output - s.gen, s.uid, s.epoch))

    def _store(self, s: _Seq) -> float:
        """Write the prompt's full chunks to the offload tiers; seconds of the blocking copy."""
        if not self.res or s.epoch or self.excl:
            return 0.0
        p = self.policy
        ch = s.turn.chain
        c = p.chunk_tokens
        split = self._split(ch, c)
        target = s.turn.prompt // c * c
        m = self.metrics
        b = m.bin(self.now)
        blocking = 0.0
        for k, r in enumerate(self.res):
            h = ch.head
            have = min(r.get(h), split) if h is not None else 0
            have = have if have < split else split + r.get(ch)
            lo = 0 if p.store == "all" else have
            if not p.write_back:
                # without write-back this tier cannot hold what lower tiers served: it stops at the first of it
                below = [a for j, a, _ in s.segs if j > k]
                if below:
                    target_k = min(target, max(min(below) // c * c, have))
                else:
                    target_k = target
            else:
                target_k = target
            if target_k <= lo and p.store != "all":
                if h is not None:
                    r.touch(h)
                r.touch(ch)
                continue
            # what is written: [lo, target_k), by where each token came from
            counts = dict.fromkeys(CAUSES, 0)
            computed = max(0, target_k - max(lo, s.hit_end))
            counts["new"] = computed
            back = 0
            for j, a, e in s.segs:
                if j > k:
                    back += max(0, min(e, target_k) - max(a, lo))
            counts["write_back"] = back
            rest = max(target_k - lo, 0) - computed - back
            if p.store == "all":
                counts["restore"] = max(0, min(have, target_k) - lo)
                counts["write_through"] = max(rest - counts["restore"], 0)
                counts["restore"] = min(counts["restore"], rest)
            else:
                counts["write_through"] = max(rest, 0)
            if h is not None:  # the head is the most recent: touch, store the chain, store it
                r.touch(h)
            if target_k > split:
                r.put(ch, target_k - split)
            if h is not None:
                r.put(h, min(target_k, split))
            nbytes = 0
            for cause, tok in counts.items():
                if tok:
                    m.write[cause][k, b] += tok * self.bpt
                    nbytes += tok * self.bpt
            if k == 0 and nbytes:
                blocking = nbytes / (self.lower[0].write_gbps * 1e9)
        return blocking


ROUTERS = ("affinity", "round-robin", "least-loaded")


class Fleet:
    """Identical nodes on one event clock behind a per-request router; what clients talk to.

    Clients schedule their actions with ``at`` and send turns with ``issue``; the router picks the
    node of each turn: ``round-robin`` (turn after turn, whatever its session) or ``least-loaded``
    (the node with the fewest outstanding requests, running or waiting; the first on a tie). A
    session's next turn may land on another node, whose caches miss it. The loop lets the busy
    node furthest behind act next, after every client action due by then; a node's stretch of
    decode steps stops where another node may make a client act. One node alone is the same run
    whatever the router (``Node.run``); session affinity keeps nodes independent, so it runs each
    node on its own share of the sessions instead (:func:`kvtrace.simulate.run.run_config`).

    ``max_in_flight`` (0: none) is a load generator's admission control, per node: while that many
    requests per node are in flight (sent, not completed), a client's next turn waits at the
    client, first come first served, and is sent when one completes. A turn's ``want_t`` is when
    its client wanted to send it, ``issue_t`` when it was sent (what TTFT is timed from).
    """

    def __init__(self, nodes: list[Node], router: str = "round-robin", max_in_flight: int = 0):
        if router not in ROUTERS[1:] and len(nodes) > 1:
            raise ConfigError(f"router {router!r} on one event clock", hint="use round-robin or least-loaded")
        if max_in_flight < 0:
            raise ConfigError(
                f"a cap of {max_in_flight} requests in flight (--max-in-flight)", hint="e.g. 16, or 0 for no cap"
            )
        self.nodes, self.router = nodes, router
        self.cap = max_in_flight * len(nodes)
        self.in_flight = 0
        self.held: deque[Turn] = deque()  # turns waiting at the client for a free slot
        self.now = 0.0
        self._events: list = []
        self._n = 0
        self._next = 0  # round robin: the next node
        self._prev_t = 0.0  # the previous client event's time

    def at(self, t: float, fn: Callable, *args) -> None:
        """Call ``fn(t, *args)`` at simulated time ``t``."""
        self._n += 1
        heapq.heappush(self._events, (t, self._n, fn, args))

    def loads(self) -> list[int]:
        """Outstanding requests (running or waiting) per node."""
        return [len(n.running) + len(n.waiting) for n in self.nodes]

    def issue(self, turn: Turn) -> None:
        """A client sends ``turn`` now, or holds it while ``max_in_flight`` requests are in flight."""
        turn.want_t = self.now
        if self.cap:
            then = turn.on_done

            def done(t: float, then=then) -> None:
                self.at(t, self._slot_freed)
                if then is not None:
                    then(t)

            turn.on_done = done
            if self.in_flight >= self.cap:
                self.held.append(turn)
                return
            self.in_flight += 1
        self._send(turn)

    def _slot_freed(self, now: float) -> None:
        self.in_flight -= 1
        if self.held:
            self.in_flight += 1
            self._send(self.held.popleft())

    def _send(self, turn: Turn) -> None:
        """Send ``turn`` to a node now: what every node holds of its chain past ``turn.keep`` is stale."""
        ch = turn.chain
        if turn.keep < ch.valid:
            for n in self.nodes:
                n._cut(ch, turn.keep)
        ch.valid = turn.prompt
        if len(self.nodes) == 1:
            i = 0
        elif self.router == "round-robin":
            i, self._next = self._next, (self._next + 1) % len(self.nodes)
        else:
            loads = self.loads()
            i = loads.index(min(loads))
        turn.node = i
        self.nodes[i].enqueue(turn, self.now, self._prev_t)

    def run(
        self, start: Callable[["Fleet"], None], duration_s: float, on_progress: Callable[[float], None] | None = None
    ) -> list[Metrics]:
        """Run clients (``start(fleet)`` schedules their first turns) for ``duration_s`` seconds;
        each node's metrics. ``on_progress``: called with the share of ``duration_s`` simulated,
        every 1/500 of it."""
        nodes, ev = self.nodes, self._events
        for n in nodes:
            n._begin(duration_s)
        start(self)
        report_at = 0.0
        while True:
            node, t_node = None, math.inf
            for n in nodes:
                if (n.running or n.waiting) and n.now < t_node:
                    node, t_node = n, n.now
            if ev and ev[0][0] <= t_node:
                if node is None and ev[0][0] > duration_s:
                    break
                # a client acts at its own time (a step may have run past it): it sends, sleeps
                # and is stamped from then; the scheduler sees it at the node's next step boundary
                t, _, fn, args = heapq.heappop(ev)
                self.now = t
                fn(t, *args)
                self._prev_t = t
                if on_progress is not None and t >= report_at:
                    on_progress(min(1.0, t / duration_s) if duration_s > 0 else 1.0)
                    report_at = t + duration_s / 500
                continue
            if node is None or t_node >= duration_s:
                break
            horizon = nxt = ev[0][0] if ev else math.inf
            for n in nodes:  # another busy node may make a client act from its time on
                if n is not node and (n.running or n.waiting) and n.now < horizon:
                    horizon = n.now
            node._act(horizon, nxt)
        for n in nodes:
            n._end()
        return [n.metrics for n in nodes]
