"""``simulate()``: several tier configurations on the same sessions, side by side (a JSON-able dict).

A :class:`Scenario` holds everything one comparison needs: the workload, the node (model, GPU,
GPU KV capacity, step-cost factors, scheduler limits), the offload policy and the configurations
(a tier file and which of its tiers to use). ``seed-study`` is a committed scenario
(``data/scenarios/seed-study.toml``). The output schema is documented in docs/simulate.md.
"""

from __future__ import annotations

import math
import tomllib
from datetime import datetime, timedelta
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

import numpy as np

from kvtrace.errors import ConfigError
from kvtrace.replay.catalog import KVModel, resolve_model
from kvtrace.replay.tiers import TierSet, load_tiers
from kvtrace.simulate.cost import StepCost, load_gpu
from kvtrace.simulate.engine import CAUSES, ROUTERS, Fleet, LowerTier, Metrics, Node, Policy
from kvtrace.simulate.sources import SynthSource, TesterSource, WarehouseSource
from kvtrace.synth.config import PRESETS, preset
from kvtrace.store import open_store
from kvtrace.units import is_span, parse_duration

SCHEMA = "kvtrace.simulate/1"
COHORTS = ("new", "continuing", "resumed")


@dataclass
class TierConfig:
    """One configuration: a tier file and the tiers of it to use (the first is the GPU's)."""

    name: str
    tiers: str
    use: list[str] | None = None

    def resolve(self, option: str = "--config") -> tuple[TierSet, list]:
        """The tier file and the chosen tiers; errors name the configuration and ``option``."""
        what = {"--config": "config", "": "configuration"}.get(option, option)
        try:
            ts = load_tiers(self.tiers)
        except ConfigError as e:
            said = e.args[0]  # it may start with the file's name, which may be the configuration's
            head = "" if said.startswith(f"{self.name}:") else f" {self.name}:"
            raise ConfigError(f"{what}{head} {said}", hint=e.hint) from None
        chosen = ts.tiers if not self.use else []
        if self.use:
            by = {t.name.lower(): t for t in ts.tiers}
            for n in self.use:
                if n.lower() not in by:
                    raise ConfigError(
                        f"{what} {self.name}: tier {n!r} is not in {ts.name}",
                        hint="tiers: " + ", ".join(t.name for t in ts.tiers),
                    )
                chosen.append(by[n.lower()])
        if not chosen or chosen[0].kind != "hbm" and chosen[0] is not ts.tiers[0]:
            raise ConfigError(
                f"{what} {self.name}: the first tier must be the GPU's (HBM)",
                hint="e.g. " + _as(option, "dram=seed-testbed:HBM,DRAM"),
            )
        return ts, chosen


def parse_config(spec: str, option: str = "--config") -> TierConfig:
    """``[NAME=]TIERS[:TIER,TIER]``: ``dram=seed-testbed:HBM,DRAM``, ``my.toml``. ``option`` names
    where the text came from in errors (``--config``; ``kvtrace report --simulate``; empty: a
    profile's list, whose error names the file and key)."""
    name, sep, rest = spec.partition("=")
    if not sep:
        name, rest = "", spec
    path, colon, use = rest.rpartition(":") if ":" in rest and not Path(rest).exists() else (rest, "", "")
    if not colon:
        path = rest
    if not path:
        raise ConfigError(
            f"{option} {spec!r}: no tier file".lstrip(), hint="e.g. " + _as(option, "dram=seed-testbed:HBM,DRAM")
        )
    names = [u.strip() for u in use.split(",") if u.strip()] or None
    return TierConfig(
        name=name.strip() or (path if names is None else f"{Path(path).stem}:{use}"), tiers=path, use=names
    )


@dataclass
class Scenario:
    """A workload, a node and the configurations to compare (see the module docstring)."""

    name: str = "custom"
    description: str = ""
    duration_s: float = 7200.0
    sessions: str = "seed-study"  # a synth preset name, or kv-cache-tester trace files / a folder
    workload: dict = field(default_factory=dict)  # synth parameter overrides (kvtrace synth --params)
    db: str | None = None  # the warehouse, for sessions = "warehouse"
    since: str | None = None
    until: str | None = None
    rate_per_min: float | None = None  # session arrivals per minute (default: the workload's)
    rate_scale: float | None = None  # a multiple of that rate (warehouse: of the recorded sessions)
    warmup_s: float = 0.0  # simulated before the measured duration, not measured (whole minutes)
    seed: int = 0
    model: str = "MiniMax-M2.7:fp8"
    gpu: str = "RTX-PRO-6000"
    gpus: int = 4
    gpu_kv_tokens: int | None = None  # default: the tier file's HBM less the weights
    prefill_efficiency: float = 0.5
    decode_efficiency: float = 0.5
    overhead_s: float = 0.002
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    router: str = "affinity"  # affinity | round-robin | least-loaded (fleets)
    max_in_flight: int = 0  # a load generator's cap on requests in flight per node (0: none)
    policy: dict = field(default_factory=dict)
    configs: list[TierConfig] = field(default_factory=list)
    gpu_usd_per_hour: float | None = None  # per GPU; default: the hardware catalog's
    amortize_years: float = 3.0  # offload tiers' purchase price spread over this
    decode_step: list | None = None  # a measured decode step [batch, context tokens, seconds]

    def check_router(self) -> None:
        if self.router not in ROUTERS:
            raise ConfigError(f"unknown router {self.router!r}", hint="use " + ", ".join(ROUTERS))

    def policy_obj(self) -> Policy:
        p = Policy(max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens, **self.policy)
        p.validate()
        return p

    def kv_model(self) -> KVModel:
        return resolve_model(self.model)

    def cost(self) -> StepCost:
        return StepCost(
            self.kv_model(),
            load_gpu(self.gpu),
            self.gpus,
            self.prefill_efficiency,
            self.decode_efficiency,
            self.overhead_s,
        )


def parse_rate(value, what: str = "--rate") -> dict:
    """A session rate as typed: ``5`` (sessions per minute) or ``2x`` (a multiple of the workload's
    own rate); the Scenario fields it sets."""
    text = str(value).strip().lower()
    multiple = text.endswith("x")
    try:
        v = float(text[:-1] if multiple else text) if not isinstance(value, bool) else math.nan
    except ValueError:
        v = math.nan
    if not (v > 0 and math.isfinite(v)):
        raise ConfigError(f"{what} {value!r}: not a positive number", hint="e.g. 5 (sessions per minute) or 2x")
    return {"rate_scale": v} if multiple else {"rate_per_min": v, "rate_scale": None}


def scenario_names() -> list[str]:
    files = resources.files("kvtrace.simulate").joinpath("data/scenarios")
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".toml"))


def load_scenario(spec: str) -> Scenario:
    """A committed scenario by name (``seed-study``) or a TOML file of the same shape."""
    if spec in scenario_names():
        text = resources.files("kvtrace.simulate").joinpath(f"data/scenarios/{spec}.toml").read_text()
        where = f"scenario {spec}"
    elif Path(spec).exists():
        text, where = Path(spec).read_text(), spec
    else:
        raise ConfigError(f"unknown scenario {spec!r}", hint="use " + ", ".join(scenario_names()) + " or a TOML file")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: not valid TOML: {e}", hint="see docs/simulate.md for the scenario format") from e
    doc = dict(doc)
    configs = [TierConfig(name=c["name"], tiers=c["tiers"], use=c.get("use")) for c in doc.pop("config", [])]
    for key in ("duration", "warmup"):
        if key in doc:
            doc[f"{key}_s"] = parse_duration(doc.pop(key), what=f"{where}: {key}")
    if "rate" in doc:  # 5 (per minute) or "2x"
        doc.update(parse_rate(doc.pop("rate"), what=f"{where}: rate"))
    for key in ("rate_per_min", "rate_scale"):
        v = doc.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf):
            raise ConfigError(f"{where}: {key} must be a positive number, not {v!r}", hint='or write rate = 5 or "2x"')
    if "max_in_flight" in doc:
        check_max_in_flight(doc["max_in_flight"], f"{where}: max_in_flight")
    known = set(Scenario.__dataclass_fields__)
    bad = set(doc) - known
    if bad:
        raise ConfigError(f"{where}: field '{sorted(bad)[0]}' is unknown", hint="known: " + ", ".join(sorted(known)))
    return Scenario(**doc, configs=configs)


def check_max_in_flight(v, what: str = "--max-in-flight") -> None:
    """A load generator's cap: a whole number of requests, 0 for none."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{what} must be a whole number of requests >= 0, not {v!r}", hint="e.g. 16, or 0 for no cap")


def _as(option: str, value: str) -> str:
    return f"{option} {value}" if option else value


def check_configs(configs: list[TierConfig], option: str = "--config") -> None:
    """Every configuration names a tier file and tiers that exist, and no two share a name
    (errors name ``option``): checked before anything runs."""
    if not configs:
        raise ConfigError(
            "no configuration to simulate", hint=f"pass {_as(option, 'TIERS')} (or --scenario seed-study)"
        )
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ConfigError("two configurations share a name", hint="name them: " + _as(option, "gpu=seed-testbed:HBM"))
    for c in configs:
        c.resolve(option)


def _source(sc: Scenario, shard: tuple[int, int] = (0, 1), recorded: "Recorded | None" = None):
    """The sessions of ``sc`` for node ``shard[0]`` of ``shard[1]``; ``recorded``: the warehouse
    sessions already read (:func:`read_recorded`), else ``sc.db`` is read."""
    gap = sc.policy_obj().resume_gap_s
    scale = 1.0 if sc.rate_scale is None else sc.rate_scale  # checked where it is read
    window = warmup_of(sc) + sc.duration_s  # sessions arrive throughout, warm-up included
    if sc.sessions in PRESETS:
        over = {**sc.workload, "seed": sc.seed, "days": window / 86400.0}
        if sc.rate_per_min is not None:
            over["arrival_rate_per_min"] = sc.rate_per_min
        cfg = preset(sc.sessions, **over)
        if scale != 1.0:
            cfg = cfg.replace(arrival_rate_per_min=cfg.arrival_rate_per_min * scale)
        return SynthSource(cfg, window, resume_gap_s=gap, shard=shard)
    if sc.sessions == "warehouse":
        rec = recorded if recorded is not None else read_recorded(sc)
        return WarehouseSource(rec.rows, gap, shard, scale, sc.seed, rec.origin_us)
    p = Path(sc.sessions)
    files = sorted(p.glob("*.json*")) if p.is_dir() else [Path(x) for x in sc.sessions.split(",")]
    missing = [str(f) for f in files if not f.exists()]
    if missing or not files:
        raise ConfigError(
            f"sessions {sc.sessions!r}: not a synth preset and no trace files found",
            hint="use " + ", ".join(PRESETS) + ", warehouse (with --db), or kv-cache-tester trace files / a folder",
        )
    rate = (sc.rate_per_min or 2.5) * scale
    return TesterSource(files, rate, window, seed=sc.seed, resume_gap_s=gap, shard=shard)


def warmup_of(sc: Scenario) -> float:
    """The scenario's warm-up in seconds, rounded up to whole minutes (the series' bins). Every run
    asks for it first, so it also refuses what no run can measure: a duration <= 0, a negative
    warm-up, a warm-up of warehouse sessions without --since."""
    if not sc.duration_s > 0:
        raise ConfigError(f"the duration must be > 0, not {sc.duration_s:g} s", hint="e.g. --duration 2h")
    if not sc.warmup_s >= 0:
        raise ConfigError(f"the warm-up must be >= 0 s, not {sc.warmup_s:g}", hint="e.g. --warmup 30m")
    if sc.warmup_s and sc.sessions == "warehouse" and sc.since is None:
        raise ConfigError(
            "a warm-up of warehouse sessions simulates the requests before --since: give --since",
            hint="e.g. --since 1d --warmup 1h",
        )
    return math.ceil(sc.warmup_s / 60.0) * 60.0


@dataclass
class Recorded:
    """Warehouse sessions as read once for every node and run of a simulation (picklable: worker
    processes take them): the rows of :meth:`WarehouseSource.rows` and the time origin."""

    rows: list
    origin_us: int | None = None
    since_us: int | None = None  # the window's start (--since), when it has one

    def span_s(self) -> float | None:
        """The simulated time that covers the window: from its first request's start (after a
        warm-up: from ``--since``, where the warm-up ends) to its last request's end, plus
        ``WAREHOUSE_TAIL_S``, in whole minutes; ``None`` when the window holds no request."""
        origin = self.since_us if self.origin_us is not None else None
        rows = self.rows if origin is None else [r for r in self.rows if r[2] >= origin]
        if not rows:
            return None
        return math.ceil((WarehouseSource.span_of(rows, origin) + WAREHOUSE_TAIL_S) / 60.0) * 60.0


def read_recorded(sc: Scenario, store=None) -> Recorded | None:
    """The warehouse rows of the scenario's window, and of its warm-up before it (``None`` unless
    its sessions are ``warehouse``); ``store``: an open warehouse, else ``sc.db`` is opened."""
    if sc.sessions != "warehouse":
        return None
    warm = warmup_of(sc)  # its refusals come before anything is read
    if sc.rate_per_min is not None:
        raise ConfigError(
            f"a rate of {sc.rate_per_min:g} sessions a minute (--rate, or the scenario's rate) does not apply"
            " to warehouse sessions: they keep their recorded arrivals",
            hint="scale them by a multiple instead, e.g. --rate 2x (twice the sessions) or --rate 0.5x",
        )
    if store is None:
        with open_store(sc.db, read_only=True) as opened:
            return read_recorded(sc, opened)
    since, origin_us, window_us = _bound(store, sc.since), None, None
    if since is not None:
        at = _instant_of(store, since)
        window_us = _epoch_us(at)
        if warm:  # the warm-up reads the requests of the time before the window, from its start
            since, origin_us = at - timedelta(seconds=warm), window_us - int(warm * 1e6)
    return Recorded(WarehouseSource.rows(store, since, _bound(store, sc.until)), origin_us, window_us)


def _epoch_us(t: datetime) -> int:
    return (t - datetime(1970, 1, 1)) // timedelta(microseconds=1)


# Simulated time after a window's last recorded request, for the last responses to finish.
WAREHOUSE_TAIL_S = 300.0


def _instant_of(store, bound) -> datetime:
    """A window bound (ISO text or a datetime) as the warehouse query reads it: a naive UTC datetime."""
    try:
        return store.scalar("SELECT CAST(? AS TIMESTAMP)", [bound])
    except Exception as e:  # DuckDB's conversion error, whatever its class
        raise ConfigError(
            f"window bound {bound!r}: not a time", hint="e.g. --since 2026-03-02T09:00 or --since 1d"
        ) from e


def _bound(store, v: str | None):
    """A window bound: ISO text as is (refused unless it is a time), a span (``7d``) back from the
    last request."""
    if v is None:
        return v
    if not is_span(v):
        _instant_of(store, v)
        return v
    last = store.scalar("SELECT max(ts) FROM request_usage")
    return None if last is None else last - timedelta(seconds=parse_duration(v, what="--since"))


def build_node(sc: Scenario, cfg: TierConfig, cost: StepCost | None = None, keep_turns: bool = False) -> Node:
    """The node of one configuration (GPU KV capacity, offload tiers) with the scenario's policy."""
    model = sc.kv_model()
    ts, chosen = cfg.resolve()
    gpu_tier, lower = chosen[0], chosen[1:]
    kv = sc.gpu_kv_tokens
    if kv is None:
        kv = int(gpu_tier.bytes_for(model) // model.bytes_per_token)
    tiers = []
    for t in lower:
        cap = t.capacity_tokens if t.capacity_tokens is not None else int(t.bytes_for(model) // model.bytes_per_token)
        if t.read_gbps <= 0 or t.write_gbps <= 0:
            raise ConfigError(
                f"tier {t.name} of {ts.name} needs read_gbps and write_gbps", hint="set them in the tier file"
            )
        tiers.append(LowerTier(t.name, cap, t.read_gbps, t.write_gbps, t.latency_us * 1e-6, t.kind, t))
    return Node(cost or sc.cost(), kv, tiers, sc.policy_obj(), keep_turns=keep_turns)


@dataclass
class NodeRun:
    """What one node's run leaves (picklable: nodes of a fleet run in worker processes)."""

    metrics: Metrics
    gpu_capacity: int
    gpu_first_full: float | None
    tier_capacity: list[int]
    tier_first_full: list
    tier_used: list[int]
    unserved: int
    sessions: int
    nodes: int = 1
    unserved_wait: float | None = None  # the longest an unserved request had waited by the end


def run_node(
    sc: Scenario,
    cfg: TierConfig,
    shard: tuple[int, int] = (0, 1),
    cost: StepCost | None = None,
    on_progress=None,
    recorded: Recorded | None = None,
) -> NodeRun:
    """Simulate one node of a fleet of ``shard[1]`` under session affinity: it serves every
    ``shard[1]``-th session, starting with session ``shard[0]`` (``recorded``: as for :func:`_source`)."""
    fleet = Fleet([build_node(sc, cfg, cost)], max_in_flight=sc.max_in_flight)
    src = _source(sc, shard, recorded)
    warm = warmup_of(sc)
    fleet.run(_warmed(src, warm, fleet.nodes), warm + sc.duration_s, on_progress)
    return replace(_node_run(fleet.nodes[0], src.sessions, warm), **_unserved(fleet, warm + sc.duration_s))


def _run_nodes(sc: Scenario, cfg: TierConfig, shards: list, cost, recorded) -> list[NodeRun]:
    """Several nodes of a fleet one after the other (a worker process's share)."""
    return [run_node(sc, cfg, sh, cost, None, recorded) for sh in shards]


def _warmed(src, warm: float, nodes: list[Node]):
    """``src`` with its sessions counted, and every node's totals marked, from the end of the warm-up."""
    if not warm:
        return src
    src.measure_from = warm

    def start(fleet) -> None:
        fleet.at(warm, lambda now: [n.metrics.mark() for n in nodes])
        src(fleet)

    return start


def _unserved(fleet: Fleet, end: float) -> dict:
    """Requests sent or held at the client by the ``end`` of the run that had no first token by
    then: how many, and the longest any had waited (since its client wanted to send it). A node
    busy at the end lets clients act a little past it; what they send then is not counted."""
    turns = [t for t in fleet.held]
    for n in fleet.nodes:
        turns += [s.turn for s in (*n.waiting, *n.running) if s.turn.first_t is None]  # a preempted turn may have one
    waits = [end - (t.want_t if t.want_t is not None else t.issue_t) for t in turns]
    waits = [w for w in waits if w >= 0]
    return {"unserved": len(waits), "unserved_wait": max(waits, default=None)}


def _node_run(node: Node, sessions: int, warm: float = 0.0) -> NodeRun:
    """What a node's run leaves, from the end of its warm-up of ``warm`` seconds (times from there;
    a tier already full then has ``first_full`` 0)."""
    m = node.metrics
    if warm:
        m.drop_head(warm)

    def since(t):
        return None if t is None else max(t - warm, 0.0)

    return NodeRun(
        m,
        node.gpu.capacity,
        since(node.gpu.first_full_at),
        [r.capacity for r in node.res],
        [since(r.first_full_at) for r in node.res],
        [r.used for r in node.res],
        0,  # unserved: set from the fleet (:func:`_unserved`)
        sessions,
    )


def run_fleet(
    sc: Scenario,
    cfg: TierConfig,
    nodes: int,
    cost: StepCost | None = None,
    on_progress=None,
    recorded: Recorded | None = None,
) -> NodeRun:
    """Simulate ``nodes`` nodes on one event clock behind the scenario's per-request router
    (round-robin or least-loaded): every session, any node."""
    fleet = Fleet([build_node(sc, cfg, cost) for _ in range(nodes)], sc.router, sc.max_in_flight)
    src = _source(sc, recorded=recorded)
    warm = warmup_of(sc)
    fleet.run(_warmed(src, warm, fleet.nodes), warm + sc.duration_s, on_progress)
    return replace(
        _merge([_node_run(n, 0, warm) for n in fleet.nodes]),
        sessions=src.sessions,
        **_unserved(fleet, warm + sc.duration_s),
    )


def _merge(runs: list[NodeRun]) -> NodeRun:
    """A fleet's figures: sums of the nodes' series and counts, their TTFTs pooled, first fills the earliest."""
    if len(runs) == 1:
        return runs[0]
    m = runs[0].metrics
    for r in runs[1:]:
        o = r.metrics
        for name in (
            "prompt_tok",
            "output_tok",
            "computed_tok",
            "busy_s",
            "steps",
            "read",
            "occupancy",
            "running",
            "waiting",
            "hit_tokens",
        ):
            setattr(m, name, getattr(m, name) + getattr(o, name))
        for c in CAUSES:
            m.write[c] = m.write[c] + o.write[c]
        m.prompt_total += o.prompt_total
        m.preemptions += o.preemptions
        m.ttft.extend(o.ttft)
    m.ttft.sort(key=lambda row: row[1])

    def first(xs):
        xs = [x for x in xs if x is not None]
        return min(xs) if xs else None

    K = len(runs[0].tier_capacity)
    return NodeRun(
        m,
        sum(r.gpu_capacity for r in runs),
        first(r.gpu_first_full for r in runs),
        [sum(r.tier_capacity[k] for r in runs) for k in range(K)],
        [first(r.tier_first_full[k] for r in runs) for k in range(K)],
        [sum(r.tier_used[k] for r in runs) for k in range(K)],
        sum(r.unserved for r in runs),
        sum(r.sessions for r in runs),
        len(runs),
        max((r.unserved_wait for r in runs if r.unserved_wait is not None), default=None),
    )


def run_config(
    sc: Scenario,
    cfg: TierConfig,
    cost: StepCost | None = None,
    nodes: int = 1,
    jobs: int = 1,
    on_progress=None,
    recorded: Recorded | None = None,
) -> dict:
    """Simulate one configuration on ``nodes`` nodes behind the scenario's router; its ``configs[]``
    entry. Under session affinity the nodes are independent: with ``jobs`` > 1 they run in that
    many worker processes (same results). Other routers share one event clock in this process.
    ``on_progress``: called with the share of the work done (simulated time over the nodes).
    ``recorded``: warehouse sessions already read (:func:`read_recorded`); else they are read here,
    once for all the nodes."""
    if nodes < 1:
        raise ConfigError("--nodes must be >= 1", hint="e.g. --nodes 4, or --nodes auto with --ttft-p90")
    sc.check_router()
    shards = [(i, nodes) for i in range(nodes)]
    if recorded is None:
        recorded = read_recorded(sc)

    def node_share(i: int):  # node i of the nodes run one after the other
        return None if on_progress is None else (lambda f: on_progress((i + f) / nodes))

    if sc.router != "affinity" and nodes > 1:
        runs = [run_fleet(sc, cfg, nodes, cost, on_progress, recorded)]
    elif jobs > 1 and nodes > 1:
        from concurrent.futures import ProcessPoolExecutor

        workers = min(jobs, nodes)
        groups = [shards[w::workers] for w in range(workers)]  # one task a worker: its rows sent once
        by_shard: dict = {}
        with ProcessPoolExecutor(max_workers=workers) as ex:
            args = [sc] * workers, [cfg] * workers, groups, [cost] * workers, [recorded] * workers
            for group, group_runs in zip(groups, ex.map(_run_nodes, *args)):
                by_shard.update(zip(group, group_runs))
                if on_progress is not None:
                    on_progress(len(by_shard) / nodes)
        runs = [by_shard[sh] for sh in shards]
    else:
        runs = [run_node(sc, cfg, sh, cost, node_share(i), recorded) for i, sh in enumerate(shards)]
    merged = _merge(runs)
    merged.nodes = nodes
    out = summarize(merged, sc, cfg, cost or sc.cost())
    out["nodes"] = nodes
    return out


def size_fleet(
    sc: Scenario,
    cfg: TierConfig,
    ttft_p90_s: float,
    cost: StepCost | None = None,
    jobs: int = 1,
    max_nodes: int = 256,
    recorded: Recorded | None = None,
) -> dict:
    """The fewest nodes whose pooled p90 TTFT (every cohort) is at most ``ttft_p90_s`` with no
    request left without a first token for longer than that at the end (one sent in the last
    instants is not a miss; doubling, then bisection); that fleet's ``configs[]`` entry with the
    sizes tried."""
    if sc.max_in_flight:
        raise ConfigError(
            "a cap on requests in flight hides the queue from the TTFT target",
            hint="pass --max-in-flight 0 to size the fleet (users' own clients have no such cap)",
        )
    tried: dict[int, dict] = {}
    if recorded is None:
        recorded = read_recorded(sc)

    def p90(n: int) -> float:
        if n not in tried:
            tried[n] = run_config(sc, cfg, cost, nodes=n, jobs=jobs, recorded=recorded)
        t = tried[n]["ttft"]
        late = t["unserved_max_wait_s"] is not None and t["unserved_max_wait_s"] > ttft_p90_s
        return math.inf if t["all"]["p90_s"] is None or late else t["all"]["p90_s"]

    lo, hi = 0, 1
    while p90(hi) > ttft_p90_s:
        lo, hi = hi, hi * 2
        if hi > max_nodes:
            raise ConfigError(
                f"config {cfg.name}: even {max_nodes} nodes miss a p90 TTFT of {ttft_p90_s:g} s",
                hint="raise the target, or check the workload's rate",
            )
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if p90(mid) <= ttft_p90_s else (mid, hi)
    out = dict(tried[hi])
    out["sizing"] = {
        "ttft_p90_target_s": ttft_p90_s,
        "tried": [
            {
                "nodes": n,
                "ttft_p90_s": tried[n]["ttft"]["all"]["p90_s"],
                "unserved": tried[n]["ttft"]["unserved"],
                "unserved_max_wait_s": tried[n]["ttft"]["unserved_max_wait_s"],
            }
            for n in sorted(tried)
        ],
    }
    return out


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if len(x) else None


def summarize(run: NodeRun, sc: Scenario, cfg: TierConfig, cost: StepCost) -> dict:
    """One configuration's figures (see docs/simulate.md for each field)."""
    m = run.metrics
    bpt = cost.model.bytes_per_token
    lower = cfg.resolve()[1][1:]
    span = sc.duration_s
    processed = (m.prompt_tok + m.output_tok) / m.bin_s
    computed = m.computed_tok / m.bin_s
    last_hour = processed[-max(int(round(3600 / m.bin_s)), 1) :]
    series = []
    names = ["GPU"] + [t.name for t in lower]
    for b in range(m.n):
        series.append(
            {
                "t_s": b * m.bin_s,
                "processed_tokens_per_s": round(float(processed[b]), 1),
                "computed_tokens_per_s": round(float(computed[b]), 1),
                "output_tokens_per_s": round(float(m.output_tok[b] / m.bin_s), 1),
                "gpu_busy": round(float(min(m.busy_s[b] / m.bin_s / run.nodes, 1.0)), 4),
                "running": int(m.running[b]),
                "waiting": int(m.waiting[b]),
                "occupancy_bytes": {n: float(m.occupancy[k, b]) * bpt for k, n in enumerate(names)},
            }
        )
    total_prompt = max(m.prompt_total, 1)
    tiers = [
        {
            "name": "GPU",
            "kind": "hbm",
            "capacity_tokens": run.gpu_capacity,
            "capacity_bytes": float(run.gpu_capacity) * bpt,
            "first_full_s": run.gpu_first_full,
            "hit_ratio": float(m.hit_tokens[0]) / total_prompt,
            "read_bytes_per_s": 0.0,
            "write_bytes_per_s": 0.0,
        }
    ]
    for k, lt in enumerate(lower):
        writes = {c: m.write[c][k] for c in CAUSES}
        wsum = sum(writes.values())
        wmean = float(wsum.sum()) / span
        item = {
            "name": lt.name,
            "kind": lt.kind,
            "capacity_tokens": run.tier_capacity[k],
            "capacity_bytes": float(run.tier_capacity[k]) * bpt,
            "first_full_s": run.tier_first_full[k],
            "hit_ratio": float(m.hit_tokens[k + 1]) / total_prompt,
            "read_bytes_per_s": float(m.read[k].sum()) / span,
            "read_bytes_per_s_peak": float(m.read[k].max()) / m.bin_s,
            "write_bytes_per_s": wmean,
            "write_bytes_per_s_peak": float(wsum.max()) / m.bin_s,
            "write_bytes_per_s_by_cause": {c: float(v.sum()) / span for c, v in writes.items()},
            "occupancy_end_bytes": float(run.tier_used[k]) * bpt,
        }
        d = lt.drives
        if d is not None:  # every node has its own drives
            item.update(
                raid=d.raid,
                dwpd_per_drive=d.dwpd(wmean / run.nodes),
                dwpd_rating=d.dwpd_rating,
                dwpd_per_drive_at_peak=d.dwpd(item["write_bytes_per_s_peak"] / run.nodes),
            )
        tiers.append(item)
    ttft = {}
    rows = m.ttft
    for c in (*COHORTS, "all"):
        sel = [r for r in rows if r[0] == c or c == "all"]
        tot = np.array([r[2] + r[3] + r[4] for r in sel])
        q, ld, pf, cw = (np.array([r[i] for r in sel]) for i in (2, 3, 4, 5))
        ttft[c] = {
            "count": len(sel),
            "p50_s": _pct(tot, 50),
            "p90_s": _pct(tot, 90),
            "p99_s": _pct(tot, 99),
            "max_s": float(tot.max()) if len(tot) else None,
            "mean_s": float(tot.mean()) if len(tot) else None,
            "queue_p50_s": _pct(q, 50),
            "load_p50_s": _pct(ld, 50),
            "prefill_p50_s": _pct(pf, 50),
            "queue_mean_s": float(q.mean()) if len(q) else None,
            "load_mean_s": float(ld.mean()) if len(ld) else None,
            "prefill_mean_s": float(pf.mean()) if len(pf) else None,
            "client_wait_p50_s": _pct(cw, 50),
            "client_wait_p90_s": _pct(cw, 90),
            "client_wait_max_s": float(cw.max()) if len(cw) else None,
        }
    ttft["unserved"] = run.unserved
    ttft["unserved_max_wait_s"] = run.unserved_wait
    total_processed = float((m.prompt_tok + m.output_tok).sum())
    gpu_usd_h = sc.gpu_usd_per_hour if sc.gpu_usd_per_hour is not None else cost.gpu.usd_per_hour
    capex = {t.name: _capex(t, float(cap) * bpt / run.nodes) for t, cap in zip(lower, run.tier_capacity)}
    tier_usd_h = sum(v for v in capex.values() if v) * run.nodes / (sc.amortize_years * 8766)
    gpu_usd = (gpu_usd_h or 0.0) * sc.gpus * run.nodes * span / 3600
    usd = gpu_usd + tier_usd_h * span / 3600
    return {
        "name": cfg.name,
        "tiers_file": cfg.tiers,
        "tiers_used": names,
        "peak_tokens_per_s": float(processed.max()),
        "steady_tokens_per_s": float(last_hour.mean()),
        "computed_peak_tokens_per_s": float(computed.max()),
        "computed_steady_tokens_per_s": float(computed[-len(last_hour) :].mean()),
        "processed_tokens": total_processed,
        "gpu_busy": float(m.busy_s.sum()) / span / run.nodes,
        "requests_started": len(m.ttft),
        "preemptions": m.preemptions,
        "gpu_kv_tokens": run.gpu_capacity // run.nodes,
        "sessions": run.sessions,
        "series": series,
        "tiers": tiers,
        "ttft": ttft,
        "cost": {
            "gpu_usd_per_hour": gpu_usd_h,
            "gpus": sc.gpus,
            "amortize_years": sc.amortize_years,
            "tier_capex_usd": capex,
            "tier_usd_per_hour": tier_usd_h,
            "usd_per_million_processed_tokens": usd / total_processed * 1e6 if total_processed else None,
            "gpu_usd_per_million_processed_tokens": gpu_usd / total_processed * 1e6 if total_processed else None,
        },
    }


def _capex(t, kv_bytes: float) -> float | None:
    if t.usd_per_tb is None:
        return None
    raw = t.drives.count * t.drives.size_bytes if t.drives is not None else kv_bytes
    return raw / 1e12 * float(t.usd_per_tb)


def simulate(
    sc: Scenario,
    progress=None,
    nodes: int = 1,
    ttft_p90_s: float | None = None,
    jobs: int = 1,
    store=None,
    recorded: Recorded | None = None,
) -> dict:
    """Run every configuration of ``sc`` on the same sessions; ratios are to the first.

    ``progress``: called as ``progress(name, share)`` when a configuration starts (share 0) and as
    its simulated time advances (the share of it done; not within a ``ttft_p90_s`` search).

    ``nodes``: identical nodes behind the scenario's router; ``ttft_p90_s``: instead, find for
    each configuration the fewest nodes meeting that p90 TTFT; ``jobs``: worker processes.
    ``store``: an open warehouse that ``warehouse`` sessions are read from (``kvtrace report``'s);
    else ``sc.db`` is opened; ``recorded``: those sessions already read (:func:`read_recorded`)."""
    check_configs(sc.configs)
    cost = sc.cost()
    sc.check_router()
    for c in sc.configs:  # every configuration is checked before any runs
        build_node(sc, c, cost)
    if recorded is None:
        recorded = read_recorded(sc, store)  # read once for every configuration and node
    _source(sc, recorded=recorded)
    out = []
    for c in sc.configs:
        if progress:
            progress(c.name, 0.0)
        if ttft_p90_s is not None:
            out.append(size_fleet(sc, c, ttft_p90_s, cost, jobs=jobs, recorded=recorded))
        else:
            within = (lambda f, name=c.name: progress(name, f)) if progress else None
            out.append(run_config(sc, c, cost, nodes=nodes, jobs=jobs, on_progress=within, recorded=recorded))
    base = out[0]
    for o in out:
        o["ratio_peak"] = o["peak_tokens_per_s"] / base["peak_tokens_per_s"] if base["peak_tokens_per_s"] else None
        o["ratio_steady"] = (
            o["steady_tokens_per_s"] / base["steady_tokens_per_s"] if base["steady_tokens_per_s"] else None
        )
    return {
        "schema": SCHEMA,
        "scenario": sc.name,
        "nodes": "auto" if ttft_p90_s is not None else nodes,
        "router": "session-affinity" if sc.router == "affinity" else sc.router,
        "max_in_flight": sc.max_in_flight,
        "description": sc.description,
        "duration_s": sc.duration_s,
        "sessions": sc.sessions,
        "rate_per_min": sc.rate_per_min,
        "rate_scale": sc.rate_scale,
        "warmup_s": warmup_of(sc),
        "seed": sc.seed,
        "node": {
            **cost.describe(),
            "gpu_kv_tokens": sc.gpu_kv_tokens,
            "max_num_seqs": sc.max_num_seqs,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
        },
        "policy": sc.policy_obj().to_dict(),
        "configs": out,
    }


def calibrate(
    sc: Scenario,
    target_tokens_per_s: float,
    config: str | None = None,
    metric: str = "steady",
    fit: str = "prefill",
    tol: float = 0.01,
    max_iter: int = 14,
    recorded: Recorded | None = None,
) -> dict:
    """Fit the efficiency factors to one measured throughput of one configuration (the GPU-only one).

    ``fit="prefill"``: the prefill efficiency is found by bisection so that the configuration's
    ``metric`` (``steady`` or ``peak`` processed tokens/s) matches the target, and the decode
    efficiency follows at each trial from the scenario's measured decode step
    (``decode_step = [batch, context, seconds]``) when it has one, else stays as it is.
    ``fit="both"``: both factors scaled by one multiplier. Only that configuration is run.
    """
    if fit not in ("prefill", "both"):
        raise ConfigError(f"unknown fit {fit!r}", hint="use prefill or both")
    cfg = next((c for c in sc.configs if c.name == config), None) if config else (sc.configs[0] if sc.configs else None)
    if cfg is None:
        raise ConfigError(
            f"no configuration named {config!r}" if config else "no configuration to calibrate",
            hint="names: " + ", ".join(c.name for c in sc.configs) if sc.configs else "pass --config",
        )
    p0, d0 = sc.prefill_efficiency, sc.decode_efficiency
    key = f"{metric}_tokens_per_s"
    if recorded is None:
        recorded = read_recorded(sc)  # once for every trial
    trail = []

    def factors(x: float) -> tuple[float, float]:
        if fit == "both":
            return p0 * x, d0 * x
        if sc.decode_step:
            b, ctx, secs = sc.decode_step
            return x, replace(sc, prefill_efficiency=x).cost().fit_decode_efficiency(int(b), float(ctx), float(secs))
        return x, d0

    def at(x: float) -> float:
        pe, de = factors(x)
        v = run_config(replace(sc, prefill_efficiency=pe, decode_efficiency=min(de, 1.0)), cfg, recorded=recorded)[key]
        trail.append({"prefill_efficiency": round(pe, 4), "decode_efficiency": round(de, 4), key: round(v, 1)})
        return v

    lo, hi = (0.02, 1.0) if fit == "prefill" else (0.05, 1.0 / max(p0, d0))
    if at(hi) < target_tokens_per_s:
        raise ConfigError(
            f"even at full efficiency the {cfg.name} configuration serves less than {target_tokens_per_s:g} tokens/s",
            hint="check the GPU, model and GPU KV capacity",
        )
    x = hi
    for _ in range(max_iter):
        x = math.sqrt(lo * hi)
        v = at(x)
        if abs(v - target_tokens_per_s) <= tol * target_tokens_per_s:
            break
        lo, hi = (x, hi) if v < target_tokens_per_s else (lo, x)
    pe, de = factors(x)
    return {
        "config": cfg.name,
        "metric": metric,
        "fit": fit,
        "target_tokens_per_s": target_tokens_per_s,
        "prefill_efficiency": round(pe, 4),
        "decode_efficiency": round(min(de, 1.0), 4),
        "trail": trail,
    }
