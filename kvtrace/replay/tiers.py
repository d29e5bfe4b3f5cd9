"""Tier hierarchies as data: HBM, DRAM, flash, HDD/object; presets and TOML files.

A tier file (or a preset under ``kvtrace/replay/data/tiers/``) is one TOML document::

    name = "my-node"
    mode = "exclusive"            # or "inclusive" (write-through, as LMCache and Dynamo KVBM)
    [compute]                     # for the TTFT model (optional)
    gpus = 4
    tflops = 989                  # dense, per GPU
    mfu = 0.4
    # prefill_tokens_per_s = 20000   (instead of the FLOPs model)
    [[tier]]                      # fastest first
    name = "HBM"
    gpus = 4
    gpu_memory = "96GB"
    usable_fraction = 0.9
    subtract_weights = true       # HBM left for KV = gpus x memory x fraction - model weights
    read_gbps = 13400
    [[tier]]
    name = "NVMe"
    read_gbps = 40
    write_gbps = 16
    [tier.drives]
    count = 8
    size = "12.8TB"
    raid = "10"                   # 0, 1 or 10; usable capacity and writes per drive follow
    dwpd_rating = 3.0
    waf = 1.0                     # the drive's write amplification

A tier's ``capacity`` is bytes (``512GB``) or tokens (``2M``); drives give it when it is missing.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from kvtrace.errors import ConfigError
from kvtrace.replay.catalog import KVModel
from kvtrace.units import is_bytes, parse_bytes, parse_tokens

RAID_WRITE_FACTOR = {"0": 1, "1": 2, "10": 2}


@dataclass
class Drives:
    """The drives behind a tier: count, size, RAID level, endurance rating, write amplification."""

    count: int
    size_bytes: int
    raid: str = "0"
    dwpd_rating: float | None = None
    waf: float = 1.0

    @property
    def raid_factor(self) -> int:
        """Physical bytes written per logical byte (mirroring writes twice)."""
        return RAID_WRITE_FACTOR[self.raid]

    @property
    def usable_bytes(self) -> int:
        return self.count * self.size_bytes // self.raid_factor

    def dwpd(self, bytes_per_s: float) -> float:
        """Drive writes per day, per drive, of a sustained logical write rate."""
        return bytes_per_s * 86400 * self.raid_factor * self.waf / (self.count * self.size_bytes)


@dataclass
class Tier:
    """One level of the hierarchy (see the module docstring for the fields)."""

    name: str
    kind: str = "dram"
    capacity_bytes: int | None = None
    capacity_tokens: int | None = None
    read_gbps: float = 0.0
    write_gbps: float = 0.0
    latency_us: float = 0.0
    usd_per_tb: float | None = None
    drives: Drives | None = None
    gpus: int = 0
    gpu_memory_bytes: int = 0
    usable_fraction: float = 1.0
    subtract_weights: bool = False

    def bytes_for(self, model: KVModel | None) -> int | None:
        """Bytes this tier gives to KV (HBM: the GPUs' budget less the model's weights)."""
        if self.capacity_bytes is not None:
            return self.capacity_bytes
        if self.gpus:
            total = self.gpus * self.gpu_memory_bytes * self.usable_fraction
            if self.subtract_weights:
                if model is None or model.weights_bytes is None:
                    raise ConfigError(
                        f"tier {self.name}: the KV budget subtracts the weights, but the model's size is unknown",
                        hint="pick a catalog model with --model, or give the tier a capacity",
                    )
                total -= model.weights_bytes
            if total <= 0:
                raise ConfigError(
                    f"tier {self.name}: the model's weights do not fit in "
                    f"{self.gpus} x {self.gpu_memory_bytes / 1e9:g} GB",
                    hint="use more or larger GPUs, or an FP8 checkpoint",
                )
            return int(total)
        if self.drives is not None:
            return self.drives.usable_bytes
        return None


@dataclass
class Compute:
    """What prefill runs on (for TTFT and GPU-seconds)."""

    gpus: int = 1
    gpu: str = ""
    tflops: float | None = None
    mfu: float = 0.4
    prefill_tokens_per_s: float | None = None
    gpu_hour_usd: float | None = None


@dataclass
class TierSet:
    """An ordered hierarchy, fastest first."""

    name: str
    tiers: list[Tier]
    mode: str = "exclusive"
    description: str = ""
    compute: Compute = field(default_factory=Compute)

    def to_dict(self) -> dict:
        return asdict(self)


def preset_names() -> list[str]:
    files = resources.files("kvtrace.replay").joinpath("data/tiers")
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".toml"))


def load_tiers(spec: str) -> TierSet:
    """A preset name (``seed-testbed``, ``h100``, ...) or a TOML file path."""
    path = Path(spec)
    if spec in preset_names():
        text = resources.files("kvtrace.replay").joinpath(f"data/tiers/{spec}.toml").read_text()
        where = f"preset {spec}"
    elif path.exists():
        text, where = path.read_text(), str(path)
    elif spec.endswith(".toml") or "/" in spec or os.sep in spec:
        raise ConfigError(
            f"{spec}: no such tiers file", hint="check the path, or use a preset (" + ", ".join(preset_names()) + ")"
        )
    else:
        raise ConfigError(
            f"unknown tiers {spec!r}", hint="use a preset (" + ", ".join(preset_names()) + ") or a TOML file path"
        )
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(
            f"{where}: not valid TOML: {e}", hint="see `kvtrace replay --help` for the tier format"
        ) from e
    return tiers_from_dict(doc, where)


def tiers_from_dict(doc: dict, where: str = "tiers") -> TierSet:
    mode = str(doc.get("mode", "exclusive"))
    if mode not in ("exclusive", "inclusive"):
        raise ConfigError(
            f"{where}: mode {mode!r}", hint="use exclusive (demote on evict) or inclusive (write-through)"
        )
    raw = doc.get("tier") or []
    if not raw:
        raise ConfigError(f"{where}: no [[tier]] entries", hint="list the tiers fastest first, one [[tier]] each")
    tiers = [_tier(t, f"{where}, tier {k + 1}") for k, t in enumerate(raw)]
    comp = doc.get("compute") or {}
    known = set(Compute.__dataclass_fields__)
    bad = set(comp) - known
    if bad:
        raise ConfigError(
            f"{where}: [compute] field '{sorted(bad)[0]}' is unknown", hint="known: " + ", ".join(sorted(known))
        )
    return TierSet(
        name=str(doc.get("name", Path(where).stem)),
        tiers=tiers,
        mode=mode,
        description=str(doc.get("description", "")),
        compute=Compute(**comp),
    )


def _tier(t: dict, where: str) -> Tier:
    t = dict(t)
    if "name" not in t:
        raise ConfigError(f"{where}: field 'name' is missing", hint='e.g. name = "DRAM"')
    kw: dict = {"name": str(t.pop("name"))}
    cap = t.pop("capacity", None)
    if cap is not None:
        if isinstance(cap, str) and not is_bytes(cap):
            kw["capacity_tokens"] = parse_tokens(cap, what=f"{where}: capacity")
        else:
            kw["capacity_bytes"] = parse_bytes(cap, what=f"{where}: capacity")
    if "gpu_memory" in t:
        kw["gpu_memory_bytes"] = parse_bytes(t.pop("gpu_memory"), what=f"{where}: gpu_memory")
    drives = t.pop("drives", None)
    if drives is not None:
        d = dict(drives)
        raid = str(d.get("raid", "0"))
        if raid not in RAID_WRITE_FACTOR:
            raise ConfigError(f"{where}: drives.raid {raid!r}", hint="use 0, 1 or 10")
        try:
            kw["drives"] = Drives(
                count=int(d["count"]),
                size_bytes=parse_bytes(d["size"], what=f"{where}: drives.size"),
                raid=raid,
                dwpd_rating=d.get("dwpd_rating"),
                waf=float(d.get("waf", 1.0)),
            )
        except KeyError as e:
            raise ConfigError(f"{where}: drives.{e.args[0]} is missing", hint="drives need count and size") from e
    known = set(Tier.__dataclass_fields__)
    for k, v in t.items():
        if k not in known:
            raise ConfigError(f"{where}: field '{k}' is unknown", hint="known: " + ", ".join(sorted(known)))
        kw[k] = v
    return Tier(**kw)


@dataclass
class ResolvedTier:
    """A tier with its capacity in blocks for one model and block size."""

    tier: Tier
    capacity_blocks: int
    capacity_bytes: float
    bytes_per_block: int


def resolve(ts: TierSet, model: KVModel | None, block_size: int) -> list[ResolvedTier]:
    """Capacities in whole blocks (``floor(bytes / bytes_per_block)`` or ``floor(tokens / B)``)."""
    out = []
    bpb = model.bytes_per_block(block_size) if model is not None else 0
    for t in ts.tiers:
        if t.capacity_tokens is not None:
            blocks = t.capacity_tokens // block_size
        else:
            nbytes = t.bytes_for(model)
            if nbytes is None:
                raise ConfigError(f"tier {t.name} has no capacity", hint='give it capacity = "512GB" (or tokens, "2M")')
            if model is None:
                raise ConfigError(
                    f"tier {t.name} is sized in bytes, so its capacity in tokens needs a model",
                    hint="pass --model (a catalog name or a config.json)",
                )
            blocks = int(math.floor(nbytes / bpb))
        out.append(ResolvedTier(t, blocks, blocks * bpb if bpb else float("nan"), bpb))
    if ts.mode == "inclusive":
        caps = [r.capacity_blocks for r in out]
        if any(b < a for a, b in zip(caps, caps[1:])):
            raise ConfigError(
                f"tiers {ts.name}: in inclusive mode every tier holds the ones above it",
                hint="make each tier at least as large as the one before, or use mode = exclusive",
            )
    return out
