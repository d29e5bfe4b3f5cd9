"""One scheduled run: ingest new inputs, build the period's report, write its folder, update the index.

``OUTROOT/<profile>/<period>/`` holds ``report.html`` (self-contained), ``report.json``,
``report.md``, ``charts/<chart>.png`` (and ``.svg``) and ``summary.json`` (what the index reads).
A period folder is never overwritten unless ``force``; then the new folder is built beside it and
swapped in with one atomic exchange, so a reader sees the old report or the new one, never a mix.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kvtrace.errors import ConfigError, ReportExists
from kvtrace.schedule.periods import Period, period_for
from kvtrace.schedule.profile import Profile
from kvtrace.collect.config import CollectorConfig
from kvtrace.collect.worker import finish_segments, ingest_segments
from kvtrace.units import parse_duration, parse_durations
from kvtrace.report.files import write_atomic
from kvtrace.report.output import write_report
from kvtrace.report.registry import build_charts
from kvtrace.schedule.index import summarize, write_index


@dataclass
class RunResult:
    """What :func:`run_profile` did."""

    profile: str
    period: Period
    folder: Path
    files: list[Path] = field(default_factory=list)
    replaced: bool = False
    ingest: dict = field(default_factory=dict)  # "files" and/or "spool" summaries
    index: Path | None = None
    no_data: str | None = None  # the period had no requests and nothing was written (see write_empty)
    summary: dict = field(default_factory=dict)  # the headline numbers (summary.json's ``summary``)


def period_folder(profile: Profile, period: Period, output_root: Path | None = None) -> Path:
    return Path(output_root or profile.output_root) / profile.name / period.label


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _ingest_spool(spool: Path, db: Path | None) -> dict:
    """Ingest the closed segments of a ``kvtrace collect`` spool, as the collector's own worker does
    (under the spool's lock, so a running collector and this run never ingest the same segment)."""
    from kvtrace.store.store import default_db_path

    if not spool.is_dir():
        raise ConfigError(
            f"spool folder {spool} does not exist",
            hint="point inputs.spool at the --spool folder of `kvtrace collect`, or remove it",
        )
    finish_segments(str(spool))
    return ingest_segments(str(spool), str(db or default_db_path()), CollectorConfig().keep_ingested)


def _ingest_files(store, profile: Profile) -> dict:
    from kvtrace.ingest import ingest

    return ingest(store, profile.files).to_dict()


def report_options(profile: Profile, period: Period):
    """The report options of one period of ``profile`` (its ``[analysis]`` table enables the
    report's sections)."""
    from kvtrace.report.build import ReportOptions

    since, until = period.iso()
    tier_ttl = (
        None
        if profile.tier_ttl is None
        else parse_duration(profile.tier_ttl, what="[analysis] tier_ttl", unlimited=True)
    )
    return ReportOptions(
        since=since,
        until=until,
        group_by=list(profile.group_by),
        ttls=parse_durations(profile.ttls),
        model=profile.model,
        tiers=profile.tiers,
        tier_ttl=tier_ttl,
        capacities=list(profile.capacities),
        timezone=profile.timezone,
        title=f"{profile.title} · {period.label}",
        simulate=list(profile.simulate),
    )


def _report(store, profile: Profile, period: Period):
    from kvtrace.report.build import build_report

    return build_report(store, report_options(profile, period)).data


def _write_outputs(data: dict, folder: Path, profile: Profile, period: Period, ingest: dict) -> list[Path]:

    fmts = set(profile.formats)
    charts = build_charts(data) if fmts & {"html", "png", "svg"} else None  # built once for all
    written = []
    for fmt, name in (
        ("html", "report.html"),
        ("json", "report.json"),
        ("md", "report.md"),
        ("png", "charts"),
        ("svg", "charts"),
    ):
        if fmt in fmts:
            written += write_report(data, fmt, folder / name, charts)
    since, until = period.iso()
    summary = {
        "profile": profile.name,
        "period": period.label,
        "since": since,
        "until": until,
        "window": profile.window,
        "generated_at": data["generated_at"],
        "files": sorted(str(p.relative_to(folder)) for p in written),
        "ingest": ingest,
        "summary": summarize(data),
    }
    written.append(write_atomic(folder / "summary.json", json.dumps(summary, indent=2).encode()))
    return written


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _publish(tmp: Path, final: Path, force: bool) -> bool:
    """Move the finished ``tmp`` folder to ``final``; returns True if an earlier report was replaced."""
    if not final.exists():
        try:
            os.rename(tmp, final)  # fails if another run published the period meanwhile
            return False
        except OSError as e:
            if not force:
                raise ReportExists(
                    f"{final} appeared while this run was writing it",
                    hint="another run of the same period finished first; pass --force to replace it",
                ) from e
    if _exchange(tmp, final):
        shutil.rmtree(tmp)  # tmp now holds the old report
        return True
    # No atomic exchange on this system: move the old folder aside, then the new one in.
    aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
    os.rename(final, aside / final.name)
    try:
        os.rename(tmp, final)
    except BaseException:
        os.rename(aside / final.name, final)
        raise
    shutil.rmtree(aside)
    return True


def run_profile(
    profile: Profile,
    *,
    at: datetime | None = None,
    force: bool = False,
    warehouse: Path | None = None,
    output_root: Path | None = None,
    write_empty: bool | None = None,
) -> RunResult:
    """Report one period of ``profile``: the last complete period before ``at`` (default: now).

    Args:
        profile: the loaded profile.
        at: the run's notional time (the schedule's slot; a past time re-runs an old period).
        force: replace the period's folder if it exists (atomically).
        warehouse: overrides ``[inputs] warehouse``.
        output_root: overrides ``[output] root``.
        write_empty: write a report for a period without requests too (default: the profile's
            ``[output] write_empty``, else no: the result's ``no_data`` says why nothing was written).

    Raises:
        ReportExists: the period's folder exists and ``force`` is off.
    """
    from kvtrace.store import open_store

    period = period_for(profile.window, at or _now(), profile.timezone)
    final = period_folder(profile, period, output_root)
    if final.exists() and not force:
        raise ReportExists(
            f"{final} already exists: the {period.label} report of '{profile.name}' was written before",
            hint="pass --force to replace it, or --at to run another period",
        )
    db = warehouse or profile.warehouse
    ingested = {}
    if profile.spool is not None:
        ingested["spool"] = _ingest_spool(profile.spool, db)
    with open_store(db, read_only=not (profile.files or profile.spool)) as store:
        if profile.files:
            ingested["files"] = _ingest_files(store, profile)
        data = _report(store, profile, period)
    if data["no_data"] and not (profile.write_empty if write_empty is None else write_empty):
        return RunResult(profile.name, period, final, [], False, ingested, None, no_data=data["no_data"])
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{period.label}.new.", dir=final.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the published folder should read like any other
    try:
        files = _write_outputs(data, tmp, profile, period, ingested)
        replaced = _publish(tmp, final, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = [final / p.relative_to(tmp) for p in files]
    index = write_index(Path(output_root or profile.output_root))
    return RunResult(profile.name, period, final, files, replaced, ingested, index, summary=summarize(data))
