"""What one scheduler step costs on a tensor-parallel node: hardware catalog x model catalog.

A step runs ``T`` tokens: one decode token for each of ``B`` decoding sequences (contexts summing
to ``S``) plus prefill chunks (``c`` new tokens on top of ``p`` computed ones). Its time is

- compute: ``2 x active params x T`` FLOPs at the FP8 rate (the checkpoint's linear layers) plus
  causal attention ``4 x heads x head_dim x layers x c x (p + (c+1)/2)`` per chunk and
  ``4 x heads x head_dim x layers x S`` for decode, at the BF16 rate, both times the prefill
  efficiency;
- memory: the weights the step touches (dense weights, and of the routed experts the expected
  share ``1 - (1 - k/E)^T`` that ``T`` tokens route to) plus the KV every token attends over,
  at the HBM bandwidth times the decode efficiency;
- all-reduce (tensor parallel over ``gpus`` > 1): two per layer of ``T x hidden x 2`` bytes at the
  node's all-reduce bandwidth, plus its latency floor per call;
- a fixed per-step overhead (scheduler, sampling, kernel launches).

Compute and memory add (a step is not assumed to overlap them perfectly); the two efficiencies are
the free parameters a calibration fits. Figures are from ``data/hardware.toml`` and the model
catalog (``kvtrace/replay/data/models.toml``).
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from kvtrace.errors import ConfigError
from kvtrace.replay.catalog import KVModel


@dataclass(frozen=True)
class GPU:
    """One GPU model's datasheet figures (see ``data/hardware.toml``)."""

    name: str
    fp8_tflops: float
    bf16_tflops: float
    memory_gb: float
    memory_tbps: float
    pcie_gbps: float
    nvlink_gbps: float
    allreduce_gbps: float
    allreduce_us: float
    usd_per_hour: float | None = None
    source: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@lru_cache(maxsize=1)
def _hardware() -> dict[str, dict]:
    text = resources.files("kvtrace.simulate").joinpath("data/hardware.toml").read_text()
    out: dict[str, dict] = {}
    for entry in tomllib.loads(text)["gpu"]:
        entry = dict(entry)
        for alias in [entry["name"], *entry.pop("aliases", [])]:
            out[alias.lower()] = entry
    return out


def gpu_names() -> list[str]:
    """The hardware catalog's GPU names."""
    return sorted({e["name"] for e in _hardware().values()})


def load_gpu(name: str) -> GPU:
    """A GPU of the hardware catalog by name (case-insensitive, aliases accepted)."""
    entry = _hardware().get(name.strip().lower())
    if entry is None:
        raise ConfigError(f"unknown GPU {name!r}", hint="use one of " + ", ".join(gpu_names()))
    return GPU(**entry)


@dataclass(frozen=True)
class StepCost:
    """Step time of one node: ``gpus`` x ``gpu`` serving ``model`` (see the module docstring)."""

    model: KVModel
    gpu: GPU
    gpus: int = 1
    prefill_efficiency: float = 0.5
    decode_efficiency: float = 0.5
    overhead_s: float = 0.002
    zero: bool = False  # every step takes no time (the replay's view)

    def __post_init__(self) -> None:
        m = self.model
        if m.params_active is None or not m.hidden_size or not m.attention_heads:
            raise ConfigError(
                f"model {m.name}: the step cost needs params_active, hidden_size and attention_heads",
                hint="pick a catalog model (kvtrace size --list)",
            )
        if not 0 < self.prefill_efficiency <= 1 or not 0 < self.decode_efficiency <= 1:
            raise ConfigError("efficiencies must be in (0, 1]", hint="e.g. --prefill-efficiency 0.5")

    @property
    def _k(self) -> tuple:
        """The per-step constants of ``step`` (computed once)."""
        k = self.__dict__.get("_k_cache")
        if k is None:
            m = self.model
            total = (m.params_total or m.params_active) * m.weight_bytes
            expert = m.expert_params * m.weight_bytes if m.experts and m.expert_params else 0.0
            keep = 1.0 - m.experts_active / m.experts if expert else 1.0
            calls = 2 * m.layers if self.gpus > 1 else 0
            ar_tok = calls * m.hidden_size * 2 / (self.gpu.allreduce_gbps * 1e9) if calls else 0.0
            ar_fix = calls * self.gpu.allreduce_us * 1e-6
            k = (
                self._linear_s_per_token,
                self._attn_s_per_pair,
                self._mem_s_per_byte,
                total - expert,
                expert,
                keep,
                float(m.bytes_per_token),
                ar_tok,
                ar_fix,
            )
            object.__setattr__(self, "_k_cache", k)
        return k

    # -- per-token constants -----------------------------------------------------------------
    @property
    def _attn_flops_per_pair(self) -> float:
        m = self.model
        d = (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) / 2 if m.attention == "mla" else m.head_dim
        return 4.0 * m.attention_heads * d * m.full_layers

    @property
    def _linear_s_per_token(self) -> float:
        return 2.0 * self.model.params_active / (self.gpus * self.gpu.fp8_tflops * 1e12 * self.prefill_efficiency)

    @property
    def _attn_s_per_pair(self) -> float:
        return self._attn_flops_per_pair / (self.gpus * self.gpu.bf16_tflops * 1e12 * self.prefill_efficiency)

    @property
    def _mem_s_per_byte(self) -> float:
        return 1.0 / (self.gpus * self.gpu.memory_tbps * 1e12 * self.decode_efficiency)

    def weight_bytes(self, tokens: np.ndarray | float) -> np.ndarray:
        """Weight bytes a step of ``tokens`` tokens reads (dense part + the experts it routes to)."""
        m = self.model
        total = (m.params_total or m.params_active) * m.weight_bytes
        if not m.experts or not m.expert_params:
            return np.full_like(np.asarray(tokens, dtype=np.float64), total)
        expert = m.expert_params * m.weight_bytes
        share = 1.0 - (1.0 - m.experts_active / m.experts) ** np.asarray(tokens, dtype=np.float64)
        return (total - expert) + expert * share

    def allreduce_s(self, tokens: np.ndarray | float) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.float64)
        if self.gpus <= 1:
            return np.zeros_like(t)
        calls = 2 * self.model.layers
        return calls * (t * self.model.hidden_size * 2 / (self.gpu.allreduce_gbps * 1e9) + self.gpu.allreduce_us * 1e-6)

    # -- steps --------------------------------------------------------------------------------
    def step(self, decode_seqs: int, decode_ctx: float, chunks: list[tuple[int, int]]) -> float:
        """Seconds of one step: ``decode_seqs`` decoding sequences whose contexts sum to
        ``decode_ctx`` tokens, and prefill ``chunks`` of ``(computed before, new tokens)``."""
        if self.zero:
            return 0.0
        new = 0
        pairs = 0.0
        kv = float(decode_ctx)
        for p, c in chunks:
            new += c
            pairs += c * (p + (c + 1) / 2.0)
            kv += p + c
        tokens = decode_seqs + new
        if tokens == 0:
            return 0.0
        k = self._k
        compute = tokens * k[0] + (pairs + decode_ctx) * k[1]
        weights = k[3] if k[4] == 0 else k[3] + k[4] * (1.0 - k[5] ** tokens)
        memory = (weights + kv * k[6]) * k[2]
        return compute + memory + tokens * k[7] + k[8] + self.overhead_s

    def decode_steps(self, decode_seqs: int, decode_ctx: float, k: int) -> np.ndarray:
        """The times of ``k`` consecutive decode-only steps (every context grows by one per step)."""
        if self.zero:
            return np.zeros(k)
        ctx = decode_ctx + decode_seqs * np.arange(k, dtype=np.float64)
        kk = self._k  # the terms of ``step`` with no prefill chunk
        weights = kk[3] if kk[4] == 0 else kk[3] + kk[4] * (1.0 - kk[5] ** decode_seqs)
        compute = decode_seqs * kk[0] + ctx * kk[1]
        memory = (weights + ctx * kk[6]) * kk[2]
        return compute + memory + decode_seqs * kk[7] + kk[8] + self.overhead_s

    def fit_decode_efficiency(self, batch: int, context: float, step_s: float) -> float:
        """The decode efficiency at which a decode step of ``batch`` sequences at ``context`` tokens
        each takes ``step_s`` seconds: what the step leaves after compute, all-reduce and overhead
        is the memory traffic's time."""
        k = self._k
        ctx = batch * float(context)
        weights = k[3] if k[4] == 0 else k[3] + k[4] * (1.0 - k[5] ** batch)
        mem_s_at_one = (weights + ctx * k[6]) / (self.gpus * self.gpu.memory_tbps * 1e12)
        rest = step_s - (batch * k[0] + ctx * k[1] + batch * k[7] + k[8] + self.overhead_s)
        if rest <= 0:
            raise ConfigError(
                f"a decode step of {step_s * 1e3:g} ms is faster than its compute and all-reduce alone",
                hint="check the GPU count, the model and the prefill efficiency",
            )
        return mem_s_at_one / rest

    def prefill_s_per_token(self, context: float, chunk: int = 8192) -> float:
        """Seconds per new token of a prefill-only step of ``chunk`` tokens at ``context``."""
        return self.step(0, 0, [(int(context), chunk)]) / chunk

    def describe(self) -> dict:
        return {
            "gpu": self.gpu.name,
            "gpus": self.gpus,
            "model": self.model.name,
            "kv_dtype": self.model.kv_dtype,
            "prefill_efficiency": self.prefill_efficiency,
            "decode_efficiency": self.decode_efficiency,
            "overhead_s": self.overhead_s,
            "zero": self.zero,
        }
