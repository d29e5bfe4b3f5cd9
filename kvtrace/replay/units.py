"""Parsing the quantities people type: token counts, byte sizes, durations and rates.

Token counts take K/M/G suffixes (powers of 1000: ``15M`` = 15,000,000 tokens). Byte sizes take
decimal units (``KB``, ``MB``, ``GB``, ``TB``, ``PB``) or binary ones (``KiB`` ... ``PiB``), as
drive and DIMM vendors print them. Durations take ``ms``, ``s``, ``m``, ``h``, ``d`` (``90s``,
``5m``, ``1h``, ``2d``); ``none``/``inf`` means no TTL.
"""

from __future__ import annotations

import math
import re

from kvtrace.errors import ConfigError

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
_TOKEN_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9, "T": 10**12}
_BYTE_UNITS = {
    "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "PIB": 2**50,
}
_DURATION_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
UNLIMITED = ("none", "inf", "infinite", "unlimited", "off", "never")


def parse_tokens(text: str | int | float, *, what: str = "token count") -> int:
    """``"1.5M"`` -> 1,500,000. Plain numbers are tokens."""
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(_NUM + r"\s*([kKmMgGbBtT]?)", str(text).strip())
    if not m:
        raise ConfigError(f"{what} {text!r} is not a number of tokens",
                          hint="use e.g. 500000, 500K, 1.5M or 2G (powers of 1000)")
    return int(round(float(m.group(1)) * _TOKEN_SUFFIX[m.group(2).upper()]))


def is_bytes(text: str) -> bool:
    """True when a size names a byte unit (``"512GB"``, ``"1.5 TiB"``) rather than tokens."""
    return bool(re.fullmatch(_NUM + r"\s*([kKmMgGtTpP]i?[bB])", str(text).strip()))


def parse_bytes(text: str | int | float, *, what: str = "size") -> int:
    """``"512GB"`` -> 512e9, ``"96GiB"`` -> 96 * 2**30. A plain number is bytes."""
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(_NUM + r"\s*([a-zA-Z]*)", str(text).strip())
    unit = m.group(2).upper() if m else None
    if not m or unit not in _BYTE_UNITS and unit != "":
        raise ConfigError(f"{what} {text!r} is not a byte size",
                          hint="use e.g. 512GB, 12.8TB or 96GiB (KB/MB/GB/TB are powers of 1000)")
    return int(round(float(m.group(1)) * _BYTE_UNITS.get(unit, 1)))


def parse_duration(text: str | int | float | None, *, what: str = "duration") -> float:
    """``"5m"`` -> 300.0 seconds; ``"none"``/``"inf"`` -> ``math.inf``. A plain number is seconds."""
    if text is None:
        return math.inf
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip().lower()
    if s in UNLIMITED:
        return math.inf
    m = re.fullmatch(_NUM + r"\s*(ms|s|min|m|h|d|w)?", s)
    if not m:
        raise ConfigError(f"{what} {text!r} is not a duration",
                          hint="use e.g. 30s, 5m, 1h, 2d, or 'none' for no TTL")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"]


def parse_rate(text: str | int | float, *, what: str = "rate") -> float:
    """A byte rate: ``"1.9GB/s"`` -> 1.9e9 bytes per second (``/s`` optional)."""
    s = str(text).strip()
    if s.lower().endswith("/s"):
        s = s[:-2]
    return float(parse_bytes(s, what=what)) if not isinstance(text, (int, float)) else float(text)


def fmt_duration(seconds: float | None) -> str:
    """300 -> ``"5m"``, 5400 -> ``"1.5h"``, inf/None -> ``"none"``."""
    if seconds is None or math.isinf(seconds):
        return "none"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            v = seconds / size
            return f"{v:g}{unit}" if abs(v - round(v, 2)) < 1e-9 else f"{v:.2f}{unit}"
    return f"{seconds * 1000:g}ms"


def fmt_bytes(n: float | None) -> str:
    """Decimal units, 3 significant digits: 1.92e12 -> ``"1.92 TB"``."""
    if n is None:
        return "-"
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_tokens(n: float | None) -> str:
    """15_120_000 -> ``"15.1M"``."""
    if n is None:
        return "unlimited"
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"
