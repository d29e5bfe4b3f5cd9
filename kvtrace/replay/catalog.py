"""The model catalog: KV-cache geometry, bytes per token, weights and prefill FLOPs.

Models are data (``kvtrace/replay/data/models.toml``); a Hugging Face ``config.json`` path works
too. Bytes per token count K and V of every layer that keeps KV for the whole context:

- GQA/MHA: ``2 x layers x kv_heads x head_dim x dtype_bytes``;
- MLA (DeepSeek-V2/V3): ``(kv_lora_rank + qk_rope_head_dim) x layers x dtype_bytes`` (one latent
  plus the shared RoPE key per token and layer);
- sliding-window layers keep only the last ``sliding_window`` tokens of a sequence, and
  linear-attention layers a fixed recurrent state: neither grows with the context, so they are
  not in ``bytes_per_token``. A cached *block* still needs them to resume from its boundary, so
  ``bytes_per_block`` adds the window's KV (at most one block's worth) and one state snapshot.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from kvtrace.errors import ConfigError

DTYPE_BYTES = {
    "bf16": 2,
    "fp16": 2,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
    "fp32": 4,
    "float32": 4,
}


@dataclass(frozen=True)
class KVModel:
    """KV geometry of one model at one KV dtype (see the module docstring for the formulas)."""

    name: str
    layers: int
    attention: str = "gqa"  # "gqa" (also MHA) or "mla"
    kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    attention_heads: int = 0
    hidden_size: int = 0
    sliding_layers: int = 0
    sliding_window: int = 0
    linear_layers: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    params_total: float | None = None
    params_active: float | None = None
    experts: int = 0  # routed experts per MoE layer (0: a dense model)
    experts_active: int = 0  # experts each token is routed to (top-k)
    expert_params: float | None = None  # parameters of all routed experts together
    weight_bytes: float = 2.0
    kv_dtype: str = "bf16"
    state_dtype_bytes: int = 2
    source: str = "catalog"

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def full_layers(self) -> int:
        """Layers whose KV grows with the context."""
        return self.layers - self.sliding_layers - self.linear_layers

    def _per_layer_token_bytes(self) -> int:
        if self.attention == "mla":
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.dtype_bytes
        return 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def bytes_per_token(self) -> int:
        """KV bytes each context token adds (the layers that keep the whole context)."""
        return self.full_layers * self._per_layer_token_bytes()

    @property
    def sliding_bytes_per_seq(self) -> int:
        """KV of the sliding-window layers for one sequence (bounded by the window)."""
        return self.sliding_layers * self.sliding_window * self._per_layer_token_bytes()

    @property
    def state_bytes_per_seq(self) -> int:
        """Recurrent state of the linear-attention layers for one sequence (conv + temporal)."""
        if not self.linear_layers:
            return 0
        temporal = self.linear_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        conv = max(self.linear_conv_kernel - 1, 0) * (
            2 * self.linear_key_heads * self.linear_key_head_dim + self.linear_value_heads * self.linear_value_head_dim
        )
        return self.linear_layers * (temporal + conv) * self.state_dtype_bytes

    def bytes_per_block(self, block_size: int) -> int:
        """Bytes one cached block of ``block_size`` tokens occupies, with what resuming from its
        boundary needs besides its own KV (sliding window, one recurrent-state snapshot)."""
        window = min(self.sliding_window, block_size) * self.sliding_layers * self._per_layer_token_bytes()
        return block_size * self.bytes_per_token + window + self.state_bytes_per_seq

    @property
    def weights_bytes(self) -> float | None:
        return None if self.params_total is None else self.params_total * self.weight_bytes

    def prefill_flops(self, n: np.ndarray | float) -> np.ndarray:
        """FLOPs to prefill the first ``n`` tokens of a prompt from scratch.

        ``2 x active params`` per token for the matrix multiplies, plus attention: every
        (query, key) pair costs ``2 x heads x (d_qk + d_v)`` per layer, with ``n(n+1)/2`` causal
        pairs (capped by the window on sliding layers). Prefilling tokens ``p..n`` on top of a
        cached prefix of ``p`` costs ``prefill_flops(n) - prefill_flops(p)``.
        """
        n = np.asarray(n, dtype=np.float64)
        if self.params_active is None:
            raise ConfigError(
                f"model {self.name} has no parameter count",
                hint="pick a catalog model, or use a prefill rate (--prefill-rate)",
            )
        if self.attention == "mla":
            pair = 2 * self.attention_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)
        else:
            pair = 4 * self.attention_heads * self.head_dim
        full = n * (n + 1) / 2
        flops = 2.0 * self.params_active * n + self.full_layers * pair * full
        if self.sliding_layers:
            w = float(self.sliding_window)
            capped = np.where(n <= w, full, w * (w + 1) / 2 + (n - w) * w)
            flops = flops + self.sliding_layers * pair * capped
        return flops

    def to_dict(self, block_size: int | None = None) -> dict:
        d = asdict(self)
        d.update(
            bytes_per_token=self.bytes_per_token,
            full_layers=self.full_layers,
            sliding_bytes_per_seq=self.sliding_bytes_per_seq,
            state_bytes_per_seq=self.state_bytes_per_seq,
            weights_bytes=self.weights_bytes,
        )
        if block_size:
            d["block_size"] = block_size
            d["bytes_per_block"] = self.bytes_per_block(block_size)
        return d


@lru_cache(maxsize=1)
def _catalog() -> dict[str, dict]:
    text = resources.files("kvtrace.replay").joinpath("data/models.toml").read_text()
    out = {}
    for entry in tomllib.loads(text)["model"]:
        entry = dict(entry)
        also = entry.pop("also", [])
        for alias in [entry["name"], *also, *entry.pop("aliases", [])]:
            # A model is named as asked (MiniMax-M2.7 shares MiniMax-M2's geometry), HF ids aside.
            out[alias.lower()] = {**entry, "name": entry["name"] if "/" in alias else alias}
        out[entry["name"].lower()]["_canonical"] = True
        for name in also:
            out[name.lower()]["_also"] = True
    return out


def catalog_names() -> list[str]:
    """Every model of the catalog by name: each entry's own and the released models that share
    its geometry (``also``); other spellings (Hugging Face ids, shorthands) left out."""
    return sorted({e["name"] for e in _catalog().values() if e.get("_canonical") or e.get("_also")}, key=str.lower)


def load_model(spec: str, kv_dtype: str = "bf16") -> KVModel:
    """A catalog name (case-insensitive, Hugging Face ids accepted) or a ``config.json`` path.

    Raises:
        ConfigError: unknown name, unreadable config, or an unknown KV dtype.
    """
    dtype = kv_dtype.lower()
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"unknown KV dtype {kv_dtype!r}", hint="use bf16 or fp8")
    entry = _catalog().get(spec.strip().lower())
    if entry is not None:
        return KVModel(**{k: v for k, v in entry.items() if not k.startswith("_")}, kv_dtype=dtype)
    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        return replace(model_from_hf_config(path), kv_dtype=dtype)
    raise ConfigError(
        f"unknown model {spec!r}", hint="use one of " + ", ".join(catalog_names()) + ", or a config.json path"
    )


def _split_dtype(spec: str) -> tuple[str, str | None]:
    """``"NAME:fp8"`` -> ``("NAME", "fp8")``; a spec without a dtype suffix (or a path that
    exists as written) -> ``(spec, None)``."""
    name, sep, dtype = spec.rpartition(":")
    if sep and dtype.lower() in DTYPE_BYTES and not Path(spec).exists():
        return name, dtype.lower()
    return spec, None


def model_spec(model: str, kv_dtype: str | None = None) -> str:
    """One spelling of a model and its KV cache dtype, ``NAME`` or ``NAME:DTYPE`` (a config.json
    path for NAME too), from a model that may carry its dtype as a suffix and a separate dtype.

    Raises:
        ConfigError: an unknown dtype, or two different dtypes.
    """
    name, suffix = _split_dtype(model)
    if kv_dtype is not None and kv_dtype.lower() not in DTYPE_BYTES:
        raise ConfigError(f"unknown KV dtype {kv_dtype!r}", hint="use " + " or ".join(DTYPE_BYTES))
    if suffix and kv_dtype and kv_dtype.lower() != suffix:
        raise ConfigError(
            f"--model {model} says {suffix}, --kv-dtype says {kv_dtype}",
            hint=f"give the dtype once: --model {name}:{kv_dtype.lower()}, or drop --kv-dtype",
        )
    dtype = suffix or (kv_dtype.lower() if kv_dtype else None)
    return f"{name}:{dtype}" if dtype else name


def resolve_model(spec: str, kv_dtype: str | None = None) -> KVModel:
    """Like :func:`load_model`, the dtype also as a suffix: ``"MiniMax-M2.7:fp8"`` (bf16 when
    neither gives one; see :func:`model_spec`)."""
    name, dtype = _split_dtype(model_spec(spec, kv_dtype))
    return load_model(name, dtype or "bf16")


def model_from_hf_config(path: str | Path) -> KVModel:
    """Read KV geometry from a Hugging Face ``config.json`` (text config of multimodal ones too)."""
    path = Path(path)
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(
            f"{path}: cannot read the model config: {e}", hint="pass a Hugging Face config.json or a catalog model name"
        ) from e
    cfg = cfg.get("text_config", cfg) if isinstance(cfg, dict) else {}
    layers = cfg.get("num_hidden_layers")
    heads = cfg.get("num_attention_heads")
    if not isinstance(layers, int) or not isinstance(heads, int):
        raise ConfigError(
            f"{path}: field 'num_hidden_layers'/'num_attention_heads' missing",
            hint="is this a decoder model's config.json?",
        )
    hidden = int(cfg.get("hidden_size") or 0)
    kw: dict = dict(
        name=str(cfg.get("_name_or_path") or path.parent.name or path.stem),
        layers=layers,
        attention_heads=heads,
        hidden_size=hidden,
        source=str(path),
        params_total=cfg.get("num_parameters"),
        params_active=cfg.get("num_parameters"),
    )
    if cfg.get("kv_lora_rank"):
        kw.update(
            attention="mla",
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            qk_rope_head_dim=int(cfg.get("qk_rope_head_dim", 64)),
            qk_nope_head_dim=int(cfg.get("qk_nope_head_dim", 128)),
            v_head_dim=int(cfg.get("v_head_dim", 128)),
        )
    else:
        head_dim = cfg.get("head_dim") or (hidden // heads if heads else 0)
        kw.update(kv_heads=int(cfg.get("num_key_value_heads") or heads), head_dim=int(head_dim))
    kinds = _layer_kinds(cfg, layers)
    kw["sliding_layers"] = kinds.count("sliding")
    kw["linear_layers"] = kinds.count("linear")
    if kw["sliding_layers"]:
        kw["sliding_window"] = int(cfg.get("sliding_window") or 0)
    if kw["linear_layers"]:
        kw.update(
            linear_key_heads=int(cfg.get("linear_num_key_heads", 0)),
            linear_value_heads=int(cfg.get("linear_num_value_heads", 0)),
            linear_key_head_dim=int(cfg.get("linear_key_head_dim", 0)),
            linear_value_head_dim=int(cfg.get("linear_value_head_dim", 0)),
            linear_conv_kernel=int(cfg.get("linear_conv_kernel_dim", 0)),
        )
    return KVModel(**kw)


def _layer_kinds(cfg: dict, layers: int) -> list[str]:
    """Per layer: "full", "sliding" or "linear", from whichever field the config uses."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        return [
            "sliding" if "sliding" in str(t) else "linear" if "linear" in str(t) or "mamba" in str(t) else "full"
            for t in types
        ]
    attn = cfg.get("attn_type_list")  # MiniMax: 1 = softmax attention, 0 = lightning (linear)
    if isinstance(attn, list) and len(attn) == layers:
        return ["full" if int(a) == 1 else "linear" for a in attn]
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 1 and "linear_num_value_heads" in cfg:
        return ["full" if (k + 1) % interval == 0 else "linear" for k in range(layers)]
    return ["full"] * layers


def tokens_for_bytes(nbytes: float, model: KVModel, block_size: int) -> int:
    """Tokens a byte capacity holds: whole blocks only, ``floor(bytes / bytes_per_block) x block``."""
    return int(math.floor(nbytes / model.bytes_per_block(block_size))) * block_size
