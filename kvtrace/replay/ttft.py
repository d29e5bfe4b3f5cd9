"""Time to first token per request: reload the hit prefix from its tiers, re-prefill the rest.

Per request with ``L`` prompt tokens of which ``h[k]`` are served by tier *k*:

- reload ``= sum over tiers with hits of (bytes_k / read bandwidth_k + latency_k)``;
- prefill of the missed tokens: ``(L - h) / rate`` at a fixed prefill rate, or with the FLOPs
  model ``(F(L) - F(h)) / (gpus x TFLOPS x MFU)`` where ``F`` is the model's causal prefill cost
  (:meth:`kvtrace.replay.catalog.KVModel.prefill_flops`), so a long cached prefix still costs
  the new tokens' attention over it;
- TTFT ``= max(reload, prefill)`` when loading overlaps compute (layer-wise), else their sum.
  Queueing and decode are not modelled.

A request is *resumed* when the time since the previous request of its session exceeds the
resume gap, else *continuing*; the first request of a session is *new*. Without session ids the
previous request is the one that last touched the request's deepest cached block (its
conversation's previous turn), and a request with no cached block is *new*.

GPU-seconds of prefill avoided by tier *k*: ``(F(H[k]) - F(H[k-1])) / (TFLOPS x MFU)`` with ``H``
the cumulative hit tokens, i.e. the compute the tier's tokens would have cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from kvtrace.errors import ConfigError
from kvtrace.replay.catalog import KVModel
from kvtrace.replay.distances import Distances
from kvtrace.replay.tiers import Compute, ResolvedTier

QUANTILES = (0.5, 0.9, 0.99)
CDF_POINTS = 41


@dataclass
class TTFTConfig:
    """How prefill and reload combine (see the module docstring)."""

    overlap: bool = True
    resume_gap_s: float = 300.0
    prefill_tokens_per_s: float | None = None  # overrides the FLOPs model when set
    tflops: float | None = None  # per GPU; default from the tiers' [compute]
    mfu: float | None = None
    gpus: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _gaps(t_us: np.ndarray, session: np.ndarray | None, dist: Distances) -> np.ndarray:
    """Seconds since the request's previous turn; NaN for a first request."""
    n = len(t_us)
    gap = np.full(n, np.nan)
    if session is not None and dist.kernel.startswith("numba"):
        from kvtrace.replay.kernel import session_gaps  # compiled: no sort of every request

        return session_gaps(t_us, np.asarray(session))
    if session is not None:
        order = np.argsort(session, kind="stable")  # by session, in time within each
        s = session[order]
        same = np.zeros(n, dtype=bool)
        same[1:] = s[1:] == s[:-1]
        g = np.full(n, np.nan)
        g[1:] = (t_us[order][1:] - t_us[order][:-1]) / 1e6
        gap[order[same]] = g[same]
        return gap
    if len(dist):
        last = np.flatnonzero(np.append(dist.req[1:] != dist.req[:-1], True))
        gap[dist.req[last]] = dist.age[last] / 1e6
    return gap


def _quantiles(xs: np.ndarray, qs) -> np.ndarray:
    """``np.quantile`` (linear interpolation) of an already sorted array."""
    pos = np.asarray(qs, dtype=np.float64) * (len(xs) - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _stats(x: np.ndarray, cdf: bool = False) -> dict:
    """Count, mean and quantiles in milliseconds (and CDF points when asked)."""
    if len(x) == 0:
        out = {"count": 0, "mean_ms": None, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None}
        return {**out, "cdf_ms": []} if cdf else out
    xs = np.sort(x)
    q = _quantiles(xs, QUANTILES) * 1e3
    out = {
        "count": int(len(x)),
        "mean_ms": float(x.mean()) * 1e3,
        "p50_ms": float(q[0]),
        "p90_ms": float(q[1]),
        "p99_ms": float(q[2]),
        "max_ms": float(xs[-1]) * 1e3,
    }
    if cdf:
        out["cdf_ms"] = [float(v) * 1e3 for v in _quantiles(xs, np.linspace(0, 1, CDF_POINTS))]
    return out


def ttft_report(
    t_us: np.ndarray,
    input_length: np.ndarray,
    session: np.ndarray | None,
    dist: Distances,
    hit_b: np.ndarray,
    hit_t: np.ndarray,
    tiers: list[ResolvedTier],
    model: KVModel,
    compute: Compute,
    cfg: TTFTConfig,
    block_size: int,
) -> dict:
    """TTFT distributions per request class and the GPU-seconds each tier saves."""
    L = input_length.astype(np.float64)
    hit = hit_t.sum(axis=0).astype(np.float64)
    bpt = model.bytes_per_token
    reload = np.zeros(len(L))
    for k, rt in enumerate(tiers):
        if rt.tier.read_gbps <= 0:
            raise ConfigError(f"tier {rt.tier.name} has no read bandwidth", hint="set read_gbps in the tier file")
        extra = rt.bytes_per_block - block_size * bpt
        nbytes = hit_t[k] * float(bpt) + hit_b[k] * float(extra)
        reload += nbytes / (rt.tier.read_gbps * 1e9) + np.where(hit_t[k] > 0, rt.tier.latency_us * 1e-6, 0.0)
    rate = cfg.prefill_tokens_per_s or compute.prefill_tokens_per_s
    gpus = cfg.gpus or compute.gpus or 1
    cum = np.cumsum(hit_t, axis=0).astype(np.float64)
    if rate:
        prefill = (L - hit) / rate
        base = L / rate
        gpu_s_tier = [float((cum[k] - (cum[k - 1] if k else 0)).sum()) / rate * gpus for k in range(len(tiers))]
        gpu_s_total = float((L - hit).sum()) / rate * gpus
        how = {"mode": "rate", "prefill_tokens_per_s": rate, "gpus": gpus}
    else:
        tflops = cfg.tflops or compute.tflops
        mfu = cfg.mfu or compute.mfu
        if not tflops:
            raise ConfigError(
                "the TTFT model needs a prefill rate or GPU TFLOPS",
                hint="add [compute] tflops to the tier file, or pass --prefill-rate",
            )
        per_gpu = tflops * 1e12 * mfu
        F = model.prefill_flops
        FL = F(L)
        prefill = (FL - F(hit)) / (per_gpu * gpus)
        base = FL / (per_gpu * gpus)
        gpu_s_tier = []
        prev = np.zeros(len(L))
        for k in range(len(tiers)):
            Fk = F(cum[k])
            gpu_s_tier.append(float((Fk - prev).sum()) / per_gpu)
            prev = Fk
        gpu_s_total = float((FL - F(hit)).sum()) / per_gpu
        how = {"mode": "flops", "tflops_per_gpu": tflops, "mfu": mfu, "gpus": gpus}
    ttft = np.maximum(reload, prefill) if cfg.overlap else reload + prefill
    gap = _gaps(t_us, session, dist)
    classes = {
        "all": np.ones(len(L), dtype=bool),
        "continuing": gap <= cfg.resume_gap_s,
        "resumed": gap > cfg.resume_gap_s,
        "new": np.isnan(gap),
    }
    qs = np.linspace(0, 1, CDF_POINTS)
    out = {
        "prefill": how,
        "overlap": cfg.overlap,
        "resume_gap_s": cfg.resume_gap_s,
        "session_source": "session ids" if session is not None else "prefix owner",
        **{name: {**_stats(ttft[m], cdf=True), "no_cache": _stats(base[m])} for name, m in classes.items()},
        "cdf_quantiles": [float(q) for q in qs],
        "gpu_seconds_prefill": gpu_s_total,
        "gpu_seconds_no_cache": gpu_s_total + sum(gpu_s_tier),
        "gpu_seconds_avoided": {rt.tier.name: s for rt, s in zip(tiers, gpu_s_tier)},
    }
    if compute.gpu_hour_usd:
        out["usd_avoided"] = {k: v / 3600 * compute.gpu_hour_usd for k, v in out["gpu_seconds_avoided"].items()}
    return out
