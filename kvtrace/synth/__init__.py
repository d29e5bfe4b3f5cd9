"""``kvtrace synth``: a seeded generator of the agentic coding workload (OTLP JSON lines, transcripts).

Example::

    from kvtrace.synth import preset, generate, simulate
    result = generate(preset("sample-week", seed=7), "out/", formats=("otlp", "transcripts"))
    ledger = simulate(preset("seed-study", days=0.5))      # the exact per-request truth
    table = ledger.to_arrow()
"""

from kvtrace.synth.catalog import MODELS, ModelSpec
from kvtrace.synth.config import PRESETS, SynthConfig, parse_ttl, preset
from kvtrace.synth.generate import FORMATS, SynthResult, generate, simulate
from kvtrace.synth.ledger import Ledger

__all__ = [
    "FORMATS",
    "MODELS",
    "PRESETS",
    "Ledger",
    "ModelSpec",
    "SynthConfig",
    "SynthResult",
    "generate",
    "parse_ttl",
    "preset",
    "simulate",
]
