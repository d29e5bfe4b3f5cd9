"""Hosted prompt-caching prices (``pricing.toml``): per model, and the cache multipliers.

Light on purpose (no NumPy): the token-mix report prices its groups with it inside DuckDB.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kvtrace.errors import ConfigError

WHATIF_TTLS = {"5m": 300.0, "1h": 3600.0}


@dataclass(frozen=True)
class ModelPrice:
    match: tuple[str, ...]
    input: float
    output: float
    min_cacheable: int
    note: str | None = None


@dataclass
class Pricing:
    """Prices per model (USD per million tokens) and the cache multipliers on the input price."""

    models: list[ModelPrice]
    write_5m: float = 1.25
    write_1h: float = 2.0
    read: float = 0.1
    source: str = "built-in"
    _cache: dict = field(default_factory=dict, repr=False)

    def price(self, model: str | None) -> ModelPrice | None:
        """The first entry whose glob matches ``model`` (None if none does)."""
        if model not in self._cache:
            self._cache[model] = next(
                (m for m in self.models if model and any(fnmatch.fnmatchcase(model, g) for g in m.match)), None
            )
        return self._cache[model]

    def write_multiplier(self, ttl_s: float) -> float:
        return self.write_1h if ttl_s > WHATIF_TTLS["5m"] else self.write_5m


def load_pricing(path: str | Path | None = None) -> Pricing:
    """Read a pricing TOML (default: the built-in ``kvtrace/analyze/pricing.toml``)."""
    if path is None:
        text, source = resources.files("kvtrace.analyze").joinpath("pricing.toml").read_text(), "built-in"
    else:
        try:
            text, source = Path(path).read_text(), str(path)
        except OSError as e:
            raise ConfigError(f"cannot read pricing file {path}: {e}") from e
    try:
        doc = tomllib.loads(text)
        mult = doc.get("multipliers", {})
        models = [
            ModelPrice(
                tuple([m["match"]] if isinstance(m["match"], str) else m["match"]),
                float(m["input"]),
                float(m["output"]),
                int(m.get("min_cacheable", 0)),
                m.get("note"),
            )
            for m in doc.get("model", [])
        ]
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(
            f"{source}: not a pricing table ({e})",
            hint="each [[model]] needs match, input and output (USD per million tokens)",
        ) from e
    return Pricing(
        models,
        float(mult.get("cache_write_5m", 1.25)),
        float(mult.get("cache_write_1h", 2.0)),
        float(mult.get("cache_read", 0.1)),
        source,
    )


def price_rows(pricing: Pricing) -> list[dict]:
    """The price table as ``[{pattern, input, output}]`` in match order (first match wins), for SQL."""
    return [{"pattern": g, "input": m.input, "output": m.output} for m in pricing.models for g in m.match]
