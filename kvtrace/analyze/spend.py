"""API spend what-if for hosted prompt caching: the same traffic under a 5 min and a 1 h TTL.

Per request, the prompt splits into cache read, cache write and uncached input. What a TTL
changes is only the split of the cacheable part (``read + write``) between read and write:

- a trace derived from telemetry reads token-exactly what its chain model says a provider
  would have served (``kvtrace.analyze.chains.chain_reads``): the previous request's cached
  prefix if it is young enough, else the shared head, else nothing;
- a block-hash trace (no breakpoints) takes a ``model`` for prices, treats its whole prompt as
  cacheable and reads the what-if's hit tokens.

Spend = base input price x (input + write x write multiplier + read x read multiplier) + output
x output price. Observed spend prices the reported tokens (writes of unknown TTL as 5 min).
"""

from __future__ import annotations

import numpy as np

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.analyze.spill import ranges, read
from kvtrace.analyze.pricing import WHATIF_TTLS, ModelPrice, Pricing, load_pricing  # noqa: F401 (re-exported)
from kvtrace.errors import ConfigError


def spend_whatif(trace: BlockTrace, pricing: Pricing | None = None, model: str | None = None) -> dict:
    """Spend under a 5 min and a 1 h TTL, and what moving from one to the other changes.

    Prices are per model, so every figure is priced from per-model token sums (exact integers),
    never from per-request arrays of dollars.

    Args:
        trace: a derived trace (per-request models and token splits), or a block-hash trace
            with ``model``.
        pricing: the price table (default: built-in).
        model: price every request as this model (required for block-hash traces).

    Returns:
        ``ttl`` (per TTL: read, write, input, output tokens and ``spend_usd``), ``observed``
        (derived traces), ``writes_that_would_be_reads`` (5 min writes a 1 h TTL would read),
        ``net_difference_usd`` (1 h minus 5 min; negative means 1 h is cheaper), ``cheaper``,
        ``by_model`` and ``unpriced`` (models without a price, with their prompt tokens).
    """
    pricing = pricing or load_pricing()
    n = trace.n_requests
    derived = "chain_prev" in trace.meta
    if not derived and model is None:
        raise ConfigError(
            "a block-hash trace has no model to price", hint="pass --price-model NAME (a model of the pricing table)"
        )
    if derived and model is None:
        names, code = list(trace.meta["model_names"]), trace.meta["columns"]["model"]
    else:
        names, code = [model], np.zeros(n, dtype=np.int64)
    prices = [pricing.price(m) for m in names]
    priced = np.array([p is not None for p in prices], dtype=bool)
    p_in = np.array([p.input if p else 0.0 for p in prices])
    p_out = np.array([p.output if p else 0.0 for p in prices])

    def per_model(x) -> np.ndarray:
        """Per-model sums of a per-request count of tokens (an array, or a function of a range
        of requests), exact; a range at a time, so spilled arrays stay on disk."""
        from kvtrace.analyze._kernels import sums_by_code

        out = np.zeros(len(names), dtype=np.int64)
        for lo, hi in ranges(n):
            out += sums_by_code(read(code, lo, hi), x(lo, hi) if callable(x) else read(x, lo, hi), len(names))
        return out

    prompt = trace.input_length
    if derived:
        cached = trace.meta["cached"]
    else:  # the whole prompt is cacheable once it reaches the model's minimum
        min_c = np.array([p.min_cacheable if p else 0 for p in prices], dtype=np.int64)
        cached = np.where(prompt >= min_c[code], prompt, 0)
    prompt_m, cached_m, out_m = per_model(prompt), per_model(cached), per_model(trace.output_length)
    inp_m = prompt_m - cached_m

    def usd(inp, write, read, out, w_mult, r_mult) -> np.ndarray:
        return (p_in * (inp + write * w_mult + read * r_mult) + p_out * out) / 1e6

    result: dict = {"pricing": pricing.source, "model": model, "ttl": []}
    per_ttl = {}
    for label, ttl in WHATIF_TTLS.items():
        if derived:
            from kvtrace.analyze.chains import chain_reads

            read_m = per_model(lambda lo, hi, ttl=ttl: chain_reads(trace, ttl, lo, hi))
        else:
            from kvtrace.analyze.ttl import request_hits

            read_m = per_model(np.minimum(request_hits(trace, ttl)[1], cached))
        write_m = cached_m - read_m
        usd_m = usd(inp_m, write_m, read_m, out_m, pricing.write_multiplier(ttl), pricing.read)
        per_ttl[label] = (write_m, usd_m)
        result["ttl"].append(
            {
                "ttl": label,
                "ttl_s": ttl,
                "write_multiplier": pricing.write_multiplier(ttl),
                "read_tokens": int(read_m[priced].sum()),
                "write_tokens": int(write_m[priced].sum()),
                "input_tokens": int(inp_m[priced].sum()),
                "output_tokens": int(out_m[priced].sum()),
                "spend_usd": float(usd_m[priced].sum()),
            }
        )
    if derived and model is None:
        col = {k: per_model(v) for k, v in trace.meta["columns"].items() if k.endswith("_tokens")}
        w5 = col["write_tokens"] - col["write_1h_tokens"]  # writes of unknown TTL priced as 5 min
        observed = (
            p_in
            * (
                col["input_tokens"]
                + w5 * pricing.write_5m
                + col["write_1h_tokens"] * pricing.write_1h
                + col["read_tokens"] * pricing.read
            )
            + p_out * out_m
        ) / 1e6
        result["observed"] = {
            "read_tokens": int(col["read_tokens"][priced].sum()),
            "write_tokens": int(col["write_tokens"][priced].sum()),
            "spend_usd": float(observed[priced].sum()),
        }
    (w5, s5), (w1, s1) = per_ttl["5m"], per_ttl["1h"]
    s5, s1 = float(s5[priced].sum()), float(s1[priced].sum())
    result["writes_that_would_be_reads"] = int((w5 - w1)[priced].sum())
    result["net_difference_usd"] = s1 - s5
    result["cheaper"] = "1h" if s1 < s5 else "5m"
    requests = per_model(lambda lo, hi: np.ones(hi - lo, dtype=np.int64))
    result["by_model"] = [
        {
            "model": str(name),
            "requests": int(requests[k]),
            "spend_5m_usd": float(per_ttl["5m"][1][k]),
            "spend_1h_usd": float(per_ttl["1h"][1][k]),
        }
        for k, name in enumerate(names)
        if priced[k]
    ]
    result["unpriced"] = [
        {"model": str(name), "prompt_tokens": int(prompt_m[k])} for k, name in enumerate(names) if not priced[k]
    ]
    return result
