"""The agentic coding workload: who works when, and what each session sends (generator processes).

A session starts with the shared head plus a user prompt. Each further request of a prompt
appends a tool result (250-600 tokens) or a file read (1,500-3,500), or the answers of
subagents it spawned; the model answers 40-200 tokens or a 400-900 token code block; every
length is jittered by ±100. A user prompt leads to a geometric number of requests, then the
user thinks. At the context cap the session compacts (a ``compact`` request whose output is
the summary, then a new chain from head + summary). A returning cohort pauses after about 20
requests for about 15 minutes and resumes. The engine does all cache accounting.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any, Generator

from kvtrace.synth import ids
from kvtrace.synth.engine import Note, Request, Session, Spawn, Thread, User, lognormal_ms

_TOOLS = (("Bash", 0.5), ("Grep", 0.2), ("Edit", 0.2), ("Glob", 0.1))
_REPOS = (
    "payments-api",
    "web-frontend",
    "infra",
    "data-pipeline",
    "mobile-app",
    "ml-platform",
    "auth-service",
    "docs",
    "search",
    "billing",
)


def _pick(rng: random.Random, weights: dict[str, float] | tuple) -> str:
    items = list(weights.items()) if isinstance(weights, dict) else list(weights)
    total = sum(w for _, w in items)
    x = rng.random() * total
    for name, w in items:
        x -= w
        if x < 0:
            return name
    return items[-1][0]


class World:
    """The fleet (users, orgs) and the process factories, for one config and seed."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        r = random.Random(f"kvtrace-synth:{cfg.seed}:fleet")
        orgs = [ids.uuid4(r) for _ in range(cfg.orgs)]
        self.users: list[User] = []
        for i in range(cfg.users):
            os_type = "darwin" if r.random() < 0.55 else "linux"
            self.users.append(
                User(
                    id=ids.user_hash(r),
                    org_id=orgs[i % cfg.orgs],
                    name=f"dev{i + 1:02d}",
                    version=cfg.cc_versions[r.randrange(len(cfg.cc_versions))],
                    os_type=os_type,
                    os_version="24.6.0" if os_type == "darwin" else "6.8.0-52-generic",
                    arch="arm64" if os_type == "darwin" else "x64",
                )
            )
        # A few developers do most of the work (Zipf-like weights), each in 1-3 repositories.
        self.user_weights = tuple((i, 1.0 / math.sqrt(i + 1)) for i in range(cfg.users))
        self.repos = [[_REPOS[r.randrange(len(_REPOS))] for _ in range(1 + r.randrange(3))] for _ in range(cfg.users)]

    # -- arrivals ---------------------------------------------------------------------------
    def arrivals(self) -> list[int]:
        """Session start times (epoch ms): a Poisson process inside the active windows."""
        cfg = self.cfg
        r = random.Random(f"kvtrace-synth:{cfg.seed}:arrivals")
        start, end = cfg.start_ms, cfg.start_ms + int(cfg.days * 86_400_000)
        rate_per_ms = cfg.arrival_rate_per_min / 60_000.0
        out: list[int] = []
        day0 = start - start % 86_400_000
        for d in range(int((end - day0) // 86_400_000) + 1):
            day = day0 + d * 86_400_000
            weekday = (day // 86_400_000 + 3) % 7  # 1970-01-01 was a Thursday
            if weekday not in cfg.active_weekdays:
                continue
            a, b = (0, 24) if cfg.active_hours is None else cfg.active_hours
            lo, hi = max(start, day + a * 3_600_000), min(end, day + b * 3_600_000)
            t = float(lo)
            while True:
                t += r.expovariate(rate_per_ms)
                if t >= hi:
                    break
                out.append(int(t))
        return out

    # -- processes --------------------------------------------------------------------------
    def session(self, idx: int, t0: int) -> Generator:
        """Create session ``idx`` (arriving at ``t0``) and return its process."""
        cfg = self.cfg
        key = f"kvtrace-synth:{cfg.seed}:session:{idx}"
        rng = random.Random(key)
        u = int(_pick(rng, self.user_weights))
        user = self.users[u]
        repo = self.repos[u][rng.randrange(len(self.repos[u]))]
        home = "/Users" if user.os_type == "darwin" else "/home"
        cwd = f"{home}/{user.name}/src/{repo}"
        sess = Session(
            idx=idx,
            id=ids.uuid4(rng),
            user=user,
            project=re.sub(r"[^A-Za-z0-9]", "-", cwd),
            cwd=cwd,
            model=_pick(rng, cfg.model_mix),
            rng=rng,
            seed_key=key,
        )
        return _session_proc(self, sess)

    def draw(self, rng: random.Random, lo_hi: tuple[int, int]) -> int:
        """A uniform length in [lo, hi], jittered by ± jitter_tokens, at least 1."""
        j = self.cfg.jitter_tokens
        return max(1, rng.randint(lo_hi[0], lo_hi[1]) + (rng.randint(-j, j) if j else 0))

    def next_content(self, rng: random.Random, allow_agents: bool) -> tuple[str, list]:
        """What the next turn appends: ('file'|'tool'|'agent', tool calls [(name, tool_use_id)])."""
        cfg = self.cfg
        if allow_agents and rng.random() < cfg.subagent_prob:
            n = rng.randint(*cfg.subagent_parallel)
            return "agent", [("Task", ids.tool_use_id(rng)) for _ in range(n)]
        if rng.random() < cfg.file_read_prob:
            return "file", [("Read", ids.tool_use_id(rng))]
        return "tool", [(_pick(rng, _TOOLS), ids.tool_use_id(rng))]

    def answer(self, rng: random.Random) -> tuple[int, str]:
        cfg = self.cfg
        if rng.random() < cfg.code_block_prob:
            return self.draw(rng, cfg.code_block_tokens), "code"
        return self.draw(rng, cfg.output_tokens), "text"


def _turns(rng: random.Random, median_sigma: tuple[float, float]) -> int:
    median, sigma = median_sigma
    return max(1, round(median * math.exp(sigma * rng.gauss(0.0, 1.0))))


def _compact_if_full(w: World, th: Thread, parts: list, rng: random.Random, prompt_id: str) -> Generator:
    """If appending ``parts`` would pass the context cap, compact first (mutates ``parts``)."""
    cfg = w.cfg
    new = sum(p[1] for p in parts)
    if th.break_reason is not None or th.prompt + th.out + new <= cfg.context_cap_tokens:
        return
    summary = w.draw(rng, cfg.compact_summary_tokens)
    pre = th.prompt + th.out
    yield Request(
        th,
        [("instruction", w.draw(rng, cfg.compact_instruction_tokens), None, None)],
        summary,
        "summary",
        "end_turn",
        [],
        "compact",
        prompt_id,
        rng.randint(*cfg.tail_tokens),
        in_transcript=False,
    )
    yield Note("compaction", th, {"pre_tokens": pre, "post_tokens": th.head + summary, "prompt_id": prompt_id})
    th.reset("compaction")
    parts.insert(0, ("summary", summary, None, None))


def _session_proc(w: World, s: Session) -> Generator:
    cfg, rng = w.cfg, s.rng
    th = Thread(s, s.model, "main")
    if rng.random() < cfg.returning_fraction:
        segments = [rng.randint(*cfg.returning_after_turns) for _ in range(cfg.returning_resumes)]
        segments.append(_turns(rng, cfg.session_turns))
    else:
        segments = [_turns(rng, cfg.session_turns)]
    p_more = 1.0 - 1.0 / max(cfg.requests_per_prompt, 1.0)
    first = True
    for seg_i, n_turns in enumerate(segments):
        if seg_i > 0:
            yield int(rng.uniform(*cfg.returning_idle_s) * 1000)
        done = 0
        while done < n_turns:
            if not first:
                yield lognormal_ms(rng, cfg.user_think_s)
                if len(cfg.model_mix) > 1 and rng.random() < cfg.model_switch_prob:
                    others = {m: x for m, x in cfg.model_mix.items() if m != th.model}
                    if others:
                        th.reset("model_change", _pick(rng, others))
            first = False
            prompt_id = ids.uuid4(rng)
            ptok = w.draw(rng, cfg.user_prompt_tokens)
            yield Note("user_prompt", th, {"prompt_id": prompt_id, "prompt_tokens": ptok})
            parts: list = [("prompt", ptok, None, None)]
            while True:
                done += 1
                last = done >= n_turns or rng.random() >= p_more
                yield from _compact_if_full(w, th, parts, rng, prompt_id)
                out, out_kind = w.answer(rng)
                kind, tools = ("end", []) if last else w.next_content(rng, allow_agents=True)
                yield Request(
                    th,
                    parts,
                    out,
                    out_kind,
                    "end_turn" if last else "tool_use",
                    tools,
                    "repl_main_thread",
                    prompt_id,
                    rng.randint(*cfg.tail_tokens),
                )
                if last:
                    break
                if kind == "agent":
                    results = yield Spawn([_subagent_proc(w, th, prompt_id, tid) for _, tid in tools])
                    by_tool = {r[0]: r for r in results}
                    parts = [("agent", by_tool[tid][2], tid, by_tool[tid][1]) for _, tid in tools]
                    yield rng.randint(20, 400)
                else:
                    size = cfg.file_read_tokens if kind == "file" else cfg.tool_result_tokens
                    parts = [(kind, w.draw(rng, size), tools[0][1], tools[0][0])]
                    yield lognormal_ms(rng, cfg.tool_time_s)
    yield Note("thread_end", th)


def _subagent_proc(w: World, parent: Thread, prompt_id: str, tool_id: str) -> Generator:
    s = parent.session
    s.n_agents += 1
    cfg = w.cfg
    rng = random.Random(f"{s.seed_key}:agent:{s.n_agents}")
    model = _pick(rng, cfg.subagent_model_mix)
    th = Thread(s, parent.model if model == "inherit" else model, "subagent", agent_id=ids.agent_id(rng))
    n = rng.randint(*cfg.subagent_turns)
    parts: list = [("task", w.draw(rng, cfg.subagent_task_tokens), None, None)]
    answer = 0
    for i in range(n):
        last = i == n - 1
        yield from _compact_if_full(w, th, parts, rng, prompt_id)
        if last:
            answer, out_kind = w.draw(rng, cfg.subagent_answer_tokens), "text"
            kind, tools = "end", []
        else:
            answer, out_kind = w.answer(rng)
            kind, tools = w.next_content(rng, allow_agents=False)
        yield Request(
            th,
            parts,
            answer,
            out_kind,
            "end_turn" if last else "tool_use",
            tools,
            "subagent",
            prompt_id,
            rng.randint(*cfg.tail_tokens),
        )
        if last:
            break
        size = cfg.file_read_tokens if kind == "file" else cfg.tool_result_tokens
        parts = [(kind, w.draw(rng, size), tools[0][1], tools[0][0])]
        yield lognormal_ms(rng, cfg.tool_time_s)
    yield Note("thread_end", th)
    return tool_id, th.agent_id, answer
