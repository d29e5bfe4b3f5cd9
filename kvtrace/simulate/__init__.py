"""``kvtrace simulate``: a closed-loop, step-level model of an inference node with KV tiers.

``Node`` (``kvtrace.simulate.engine``) schedules as vLLM V1 over a GPU prefix cache and offload
tiers; ``StepCost`` (``kvtrace.simulate.cost``) prices each step from the hardware and model
catalogs; ``SynthSource`` and ``TesterSource`` (``kvtrace.simulate.sources``) are the closed-loop
clients.
"""

from kvtrace.simulate.cost import GPU, StepCost, gpu_names, load_gpu
from kvtrace.simulate.engine import Chain, Head, LowerTier, Node, Policy, Turn
from kvtrace.simulate.sources import SynthSource, TesterSource

__all__ = [
    "GPU",
    "Chain",
    "Head",
    "LowerTier",
    "Node",
    "Policy",
    "StepCost",
    "SynthSource",
    "TesterSource",
    "Turn",
    "gpu_names",
    "load_gpu",
]
