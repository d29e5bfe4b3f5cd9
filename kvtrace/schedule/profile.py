"""Report profiles: TOML files naming the inputs, window, analyses, outputs and cron schedule of a
periodic report. Examples: ``reports/profiles/daily.toml`` and ``weekly.toml``.

Relative paths are relative to the working directory of the process (cron's ``cd``, systemd's
``WorkingDirectory=``, the container's ``workingDir``); ``~`` and ``$VARS`` are expanded.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kvtrace.analyze.token_mix import check_timezone
from kvtrace.errors import ConfigError
from kvtrace.schedule.periods import check_window

OUTPUT_FORMATS = ("html", "json", "md", "png", "svg")
DEFAULT_FORMATS = ["html", "json", "md", "png"]
# The TOML tables of a profile ("" is the top level) and the keys each may hold.
_TABLES = {
    "": {"name", "title", "inputs", "window", "analysis", "output", "schedule"},
    "inputs": {"warehouse", "spool", "files"},
    "window": {"period", "timezone"},
    "analysis": {"ttls", "model", "tiers", "tier_ttl", "group_by", "capacities", "simulate"},
    "output": {"root", "formats", "write_empty"},
    "schedule": {"cron"},
}


@dataclass
class Profile:
    """One report profile. Each field is the TOML key of the same name in its table."""

    name: str
    title: str = "kvtrace report"
    source: Path | None = None  # the TOML file it came from
    warehouse: Path | None = None  # [inputs] (None: $KVTRACE_DB or ./kvtrace.duckdb)
    spool: Path | None = None  # [inputs] closed spool segments of `kvtrace collect`
    files: list[Path] = field(default_factory=list)  # [inputs] files, folders or globs to ingest
    window: str = "last 1d"  # [window] period
    timezone: str = "UTC"  # [window] IANA zone of the period's days and of cron
    ttls: list[str] = field(default_factory=list)  # [analysis]
    model: str | None = None  # [analysis]
    tiers: str | None = None  # [analysis]
    tier_ttl: str | None = None  # [analysis] idle TTL of the tier replay ("1h", "none")
    group_by: list[str] = field(default_factory=list)  # [analysis]
    capacities: list[float] = field(default_factory=list)  # [analysis] tokens
    simulate: list[str] = field(
        default_factory=list
    )  # [analysis] serving-model configurations ([NAME=]TIERS[:TIER,...])
    output_root: Path = Path("reports/out")  # [output] root
    formats: list[str] = field(default_factory=lambda: list(DEFAULT_FORMATS))  # [output]
    write_empty: bool = False  # [output] write a report for a period without requests
    cron: str | None = None  # [schedule] cron expression, in [window] timezone


def profiles_dir() -> Path:
    """The example profiles: the source tree's ``reports/profiles`` or the packaged copy."""
    src = Path(__file__).resolve().parents[2] / "reports" / "profiles"
    if src.is_dir():
        return src
    return Path(str(resources.files("kvtrace") / "_profiles"))


def _path(v) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(str(v))))


def _list(v, where: str) -> list:
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list):
        raise ConfigError(f"{where} must be a list")
    return v


def _simulate_configs(v, where: str) -> list[str]:
    """The ``simulate`` configurations, each as ``kvtrace report --simulate`` takes it, checked now
    (tier file, tiers, distinct names) so a bad one fails when the profile is read, not at its run."""
    specs = _list(v, where)
    if not all(isinstance(x, str) for x in specs):
        raise ConfigError(
            f"{where} must be a list of strings",
            hint='e.g. simulate = ["gpu=seed-testbed:HBM", "dram=seed-testbed:HBM,DRAM"]',
        )
    if specs:
        from kvtrace.simulate.run import check_configs, parse_config  # here: the simulate package loads numpy

        try:
            check_configs([parse_config(x, option="") for x in specs], option="")
        except ConfigError as e:
            raise ConfigError(f"{where}: {e.args[0]}", hint=e.hint) from None
    return specs


def find_profile(ref: str | Path) -> Path:
    """A profile file: a path, or the name of a profile in ``reports/profiles``."""
    p = _path(ref)
    if p.is_file():
        return p
    named = profiles_dir() / f"{ref}.toml"
    if named.is_file():
        return named
    known = ", ".join(sorted(q.stem for q in profiles_dir().glob("*.toml"))) or "none"
    raise ConfigError(f"no profile '{ref}'", hint=f"pass a TOML file path, or one of: {known}")


def load_profile(ref: str | Path) -> Profile:
    """Read and check a profile (path or example name); errors name the file and key."""
    path = find_profile(ref)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}", hint="check quotes and [table] headers") from e
    return profile_from_dict(doc, name=path.stem, source=path)


def profile_from_dict(doc: dict, name: str, source: Path | None = None) -> Profile:
    where = str(source) if source else name
    for table, allowed in _TABLES.items():
        body = doc.get(table, {}) if table else doc
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: [{table}] must be a table")
        for key in body:
            if key not in allowed:
                raise ConfigError(
                    f"{where}: unknown key '{key}'" + (f" in [{table}]" if table else ""),
                    hint="known keys: " + ", ".join(sorted(allowed)),
                )
    inputs, win = doc.get("inputs", {}), doc.get("window", {})
    ana, out, sched = doc.get("analysis", {}), doc.get("output", {}), doc.get("schedule", {})
    prof = Profile(name=str(doc.get("name", name)), title=str(doc.get("title", "kvtrace report")), source=source)
    if "/" in prof.name or prof.name.startswith("."):
        raise ConfigError(f"{where}: name '{prof.name}' cannot be a folder name", hint="use letters, digits, - and _")
    prof.warehouse = _path(inputs["warehouse"]) if "warehouse" in inputs else None
    prof.spool = _path(inputs["spool"]) if "spool" in inputs else None
    prof.files = [_path(f) for f in _list(inputs.get("files", []), f"{where}: [inputs] files")]
    try:
        prof.window = check_window(win.get("period", "last 1d"))
    except ConfigError as e:
        raise ConfigError(f"{where}: [window] period: {e}", hint=e.hint) from None
    prof.timezone = str(win.get("timezone", "UTC"))
    try:
        check_timezone(prof.timezone)
    except ConfigError as e:
        raise ConfigError(f"{where}: [window] timezone: unknown zone '{prof.timezone}'", hint=e.hint) from None
    prof.ttls = [str(t) for t in _list(ana.get("ttls", []), f"{where}: [analysis] ttls")]
    prof.model, prof.tiers = ana.get("model"), ana.get("tiers")
    prof.tier_ttl = None if ana.get("tier_ttl") is None else str(ana["tier_ttl"])
    prof.group_by = [str(g) for g in _list(ana.get("group_by", []), f"{where}: [analysis] group_by")]
    prof.capacities = [float(c) for c in _list(ana.get("capacities", []), f"{where}: [analysis] capacities")]
    prof.simulate = _simulate_configs(ana.get("simulate", []), f"{where}: [analysis] simulate")
    prof.output_root = _path(out.get("root", "reports/out"))
    prof.formats = [str(f) for f in _list(out.get("formats", DEFAULT_FORMATS), f"{where}: [output] formats")]
    bad = [f for f in prof.formats if f not in OUTPUT_FORMATS]
    if bad:
        raise ConfigError(
            f"{where}: [output] formats: unknown {', '.join(bad)}", hint="choose from " + ", ".join(OUTPUT_FORMATS)
        )
    prof.write_empty = out.get("write_empty", False)
    if not isinstance(prof.write_empty, bool):
        raise ConfigError(f"{where}: [output] write_empty must be true or false")
    prof.cron = sched.get("cron")
    if prof.cron is not None:
        from croniter import croniter

        if not croniter.is_valid(prof.cron):
            raise ConfigError(
                f"{where}: [schedule] cron '{prof.cron}' is not a cron expression",
                hint="five fields: minute hour day-of-month month day-of-week, e.g. '15 0 * * *'",
            )
    return prof
