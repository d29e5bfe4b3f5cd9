"""The quantities people type and read: token counts, byte sizes, durations/TTLs, rates, shares.

Parsing: token counts take K/M/G suffixes (powers of 1000: ``15M`` = 15,000,000 tokens). Byte
sizes take decimal units (``KB``, ``MB``, ``GB``, ``TB``, ``PB``) or binary ones (``KiB`` ...
``PiB``), as drive and DIMM vendors print them. A duration typed as text always has a unit:
``ms``, ``s``, ``m``/``min``, ``h``, ``d``, ``w`` or the words (``90s``, ``5m``, ``1 hour``,
``2 days``); a bare ``60`` is refused (seconds? minutes?), ``0`` excepted. A number passed as a
number (from code, or a TOML number) is seconds. Where a TTL is asked for, ``none``/``inf`` means
no TTL. Every parser raises :class:`~kvtrace.errors.ConfigError` with a hint of the syntax.

Formatting follows one rule for each quantity, whatever the command or the output:

* a length of time (a TTL, a span, a gap, an age) is spelled as people type a TTL when it is a
  whole number of minutes, hours or days, or of seconds below 100 (``90s``, ``5m``, ``1h``,
  ``2d``), and otherwise with three significant digits and a unit (``1.86 h``, ``250 ms``,
  ``12.3 s``);
* a byte size has decimal units (``KB`` ... ``PB``, as drive vendors print them) and three
  significant digits (``1.92 TB``, ``127 KB``).

Token counts come in two spellings, kept apart on purpose because both are printed and asserted:
the report style (``fmt_tokens`` -> ``"15.12 M"``) and the compact style of the replay tools
(``fmt_tokens_compact`` -> ``"15.1M"``).
"""

from __future__ import annotations

import math
import re

from kvtrace.errors import ConfigError

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
_TOKEN_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9, "T": 10**12}
_BYTE_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
    "PIB": 2**50,
}
_DURATION_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_WORDS = {
    "sec": "s",
    "secs": "s",
    "second": "s",
    "seconds": "s",
    "mins": "min",
    "minute": "min",
    "minutes": "min",
    "hr": "h",
    "hrs": "h",
    "hour": "h",
    "hours": "h",
    "day": "d",
    "days": "d",
    "wk": "w",
    "week": "w",
    "weeks": "w",
}
_DURATION = re.compile(_NUM + r"\s*([a-z]*)")
_SPAN = re.compile(r"\s*" + _NUM + r"\s*(ms|s|min|m|h|d|w)\s*", re.IGNORECASE)
UNLIMITED = ("none", "inf", "infinite", "unlimited", "off", "never")
DASH = "–"


# -- parsing ---------------------------------------------------------------------------------------


def parse_tokens(text: str | int | float, *, what: str = "token count") -> int:
    """``"1.5M"`` -> 1,500,000. Plain numbers are tokens."""
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(_NUM + r"\s*([kKmMgGbBtT]?)", str(text).strip())
    if not m:
        raise ConfigError(
            f"{what} {text!r} is not a number of tokens", hint="use e.g. 500000, 500K, 1.5M or 2G (powers of 1000)"
        )
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
        raise ConfigError(
            f"{what} {text!r} is not a byte size",
            hint="use e.g. 512GB, 12.8TB or 96GiB (KB/MB/GB/TB are powers of 1000)",
        )
    return int(round(float(m.group(1)) * _BYTE_UNITS.get(unit, 1)))


def parse_rate(text: str | int | float, *, what: str = "rate") -> float:
    """A byte rate: ``"1.9GB/s"`` -> 1.9e9 bytes per second (``/s`` optional)."""
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip()
    if s.lower().endswith("/s"):
        s = s[:-2]
    return float(parse_bytes(s, what=what))


def is_span(text: str) -> bool:
    """True when text is a number with a duration unit (``"7d"``), not a bare number or a date."""
    return bool(_SPAN.fullmatch(str(text)))


def parse_duration(text: str | int | float | None, *, what: str = "", unlimited: bool = False) -> float:
    """``"5m"`` / ``"5 minutes"`` -> 300.0 seconds. Text needs a unit (``"0"`` excepted); a
    number passed as a number is seconds.

    Args:
        text: the duration as typed.
        what: the option or field it came from, named in the error.
        unlimited: accept ``None`` and ``none``/``inf``/``never``... as "no limit" (``math.inf``),
            as a TTL does; elsewhere they are errors.
    """
    if unlimited and (text is None or str(text).strip().lower() in UNLIMITED):
        return math.inf
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    m = _DURATION.fullmatch(str(text).strip().lower())
    unit = _DURATION_WORDS.get(m.group(2), m.group(2)) if m else None
    if m and not unit:
        if float(m.group(1)) == 0:
            return 0.0
        n = m.group(1)
        raise ConfigError(
            f"{what + ' ' if what else ''}{text!r} has no unit",
            hint=f"write {n}s, {n}m or {n}h: a bare number could be any of them",
        )
    if not m or unit not in _DURATION_UNITS:
        hint = (
            "use e.g. 30s, 5m, 1h, 2d, or 'none' for no TTL"
            if unlimited
            else "use a number with s, m, h, d or w, e.g. 30s, 5m, 1h, 2d"
        )
        raise ConfigError(f"{what + ' ' if what else ''}{text!r} is not a duration", hint=hint)
    return float(m.group(1)) * _DURATION_UNITS[unit]


def split_items(text: str | list[str] | None) -> list[str]:
    """Repeated option values, each possibly comma-separated, as one flat list of items."""
    if not text:
        return []
    items = text if isinstance(text, list) else [text]
    return [p.strip() for item in items for p in str(item).split(",") if p.strip()]


def parse_durations(text: str | list[str] | None, *, what: str = "") -> list[float]:
    """A comma-separated list (or repeated option values) of durations, sorted, de-duplicated."""
    return sorted({parse_duration(p, what=what) for p in split_items(text)})


def parse_ttls(text: str | list[str] | None, *, what: str = "") -> list[float | None]:
    """``"30s,5m,1h,2d"`` (or repeated values) -> seconds, sorted; ``none``/``inf`` -> ``None`` (last)."""
    out: list[float | None] = []
    for p in split_items(text):
        v = parse_duration(p, what=what, unlimited=True)
        v = None if v == math.inf else v
        if v not in out:
            out.append(v)
    return sorted(out, key=lambda v: math.inf if v is None else v)


# -- formatting: shared ------------------------------------------------------------------------------


def fmt_int(n: int | float | None) -> str:
    """1234567 -> ``"1,234,567"``."""
    return DASH if n is None else f"{int(round(n)):,}"


def fmt_pct(x: float | None, digits: int = 2) -> str:
    """A share: 0.1234 -> ``"12.34%"``."""
    return DASH if x is None else f"{100 * x:.{digits}f}%"


def fmt_usd(v: float | None) -> str:
    """1234.5 -> ``"$1,234.50"``."""
    return DASH if v is None else f"${v:,.2f}"


def fmt_seconds(v: float | None) -> str:
    """A length of time (see the rule above), or a dash: 6707 -> ``"1.86 h"``, 5400 -> ``"90m"``."""
    return fmt_duration(v) if v is not None else DASH


def _fmt_measured(v: float) -> str:
    """Three significant digits, a unit once past 1.5 of it: 6707 -> ``"1.86 h"``, 0.25 -> ``"250 ms"``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if v >= 1.5 * size:
            return f"{v / size:.3g} {unit}"
    if 0 < abs(v) < 1:
        return f"{v * 1000:.3g} ms"
    return f"{v:.3g} s"


def _scaled(n: float, steps: tuple[tuple[str, float], ...]) -> tuple[float, str] | None:
    for unit, size in steps:
        if abs(n) >= size:
            return n / size, unit
    return None


_TOKEN_STEPS = (("G", 1e9), ("M", 1e6), ("K", 1e3))


# -- formatting: report style (report, reuse, schedule index, charts) --------------------------------


def fmt_ttl(s: float | None) -> str:
    """Seconds as the TTL spellings people type: 30s, 5m, 90m, 1h, 2d (``none`` for no TTL)."""
    if s is None:
        return "none"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{int(s // size)}{unit}"
    return f"{s:g}s"


def fmt_tokens(n: float | None) -> str:
    """15_120_000 -> ``"15.12 M"``."""
    if n is None:
        return DASH
    sc = _scaled(n, _TOKEN_STEPS)
    return f"{n:.0f}" if sc is None else f"{sc[0]:.2f} {sc[1]}"


def fmt_bytes(n: float | None) -> str:
    """1.92e12 -> ``"1.92 TB"`` (the byte rule above; None -> a dash)."""
    return DASH if n is None else fmt_bytes_compact(n)


# -- formatting: compact style (replay, size, tiers) --------------------------------------------------


def fmt_duration(seconds: float | None) -> str:
    """The time rule above: 300 -> ``"5m"``, 5400 -> ``"90m"``, 6707 -> ``"1.86 h"``,
    0.25 -> ``"250 ms"``, inf/None -> ``"none"``."""
    if seconds is None or math.isinf(seconds):
        return "none"
    whole = float(seconds).is_integer() and 0 < seconds < 10**7
    if whole and (seconds % 60 == 0 or seconds < 100):
        return fmt_ttl(seconds)
    return _fmt_measured(seconds)


def fmt_tokens_compact(n: float | None) -> str:
    """A capacity, 3 significant digits: 15_120_000 -> ``"15.1M"``; None -> ``"unlimited"``."""
    if n is None:
        return "unlimited"
    sc = _scaled(n, _TOKEN_STEPS)
    return f"{n:.0f}" if sc is None else f"{sc[0]:.3g}{sc[1]}"


def fmt_bytes_compact(n: float | None) -> str:
    """Decimal units up to PB, 3 significant digits: 1.92e12 -> ``"1.92 TB"``; None -> ``"-"``."""
    if n is None:
        return "-"
    sc = _scaled(n, (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)))
    return f"{n:.0f} B" if sc is None else f"{sc[0]:.3g} {sc[1]}"


# One rule for lengths of time; the names the callers know it by.
fmt_age = fmt_seconds
fmt_span = fmt_duration
