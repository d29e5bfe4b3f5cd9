"""Per-model data the synthetic workload needs: list prices, minimum cacheable prefix, prompt heads.

Kept as data because every one of these changes per model and per Claude Code release. Prices are
the public list prices in USD per million tokens; cache writes cost ×1.25 (5 min TTL) or ×2 (1 h)
the base input price and cache reads ×0.1. Minimum cacheable prefixes are from the prompt-caching
docs (a shorter prompt is silently not cached). Head sizes (system prompt + tool definitions) are
in the 12-20 K range Claude Code sends; a subagent gets its own, smaller head.
"""

from __future__ import annotations

from dataclasses import dataclass
from kvtrace.errors import ConfigError

WRITE_5M_MULT = 1.25
WRITE_1H_MULT = 2.0
READ_MULT = 0.1


@dataclass(frozen=True)
class ModelSpec:
    """What the generator needs to know about one model.

    Attributes:
        name: the model id as Claude Code reports it.
        input_usd_per_mtok: base (uncached) input price.
        output_usd_per_mtok: output price.
        min_cacheable_tokens: prefixes shorter than this are never cached.
        main_head_tokens: system prompt + tools of a main thread (same for every session).
        subagent_head_tokens: system prompt + tools of a subagent thread.
        decode_tok_s: output tokens per second (drives duration_ms).
        prefill_tok_s: uncached prompt tokens per second (drives ttft_ms).
    """

    name: str
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    min_cacheable_tokens: int
    main_head_tokens: int
    subagent_head_tokens: int
    decode_tok_s: float
    prefill_tok_s: float

    def cost_usd(self, input_tokens: int, read: int, write_5m: int, write_1h: int, output: int) -> float:
        """List-price cost of one request, rounded to 10 decimals (as a client-side estimate)."""
        p = self.input_usd_per_mtok
        usd = (
            input_tokens * p
            + write_5m * p * WRITE_5M_MULT
            + write_1h * p * WRITE_1H_MULT
            + read * p * READ_MULT
            + output * self.output_usd_per_mtok
        ) / 1e6
        return round(usd, 10)


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("claude-sonnet-4-6", 3.0, 15.0, 1024, 16_842, 7_950, 70.0, 9_000.0),
        ModelSpec("claude-opus-4-6", 5.0, 25.0, 4096, 18_406, 8_610, 45.0, 6_000.0),
        ModelSpec("claude-haiku-4-5", 1.0, 5.0, 4096, 13_120, 6_240, 140.0, 16_000.0),
    )
}


def model_spec(name: str) -> ModelSpec:
    """Look a model up in the catalog, with a helpful error."""

    try:
        return MODELS[name]
    except KeyError:
        raise ConfigError(
            f"unknown model '{name}' in the synthetic model mix", hint="use one of " + ", ".join(MODELS)
        ) from None
