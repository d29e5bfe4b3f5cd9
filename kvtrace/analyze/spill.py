"""Per-request arrays kept on disk: a fleet's derived trace need not fit in memory.

A month of a large organisation is 100 M requests; each per-request array of a derived trace is
400-800 MB of it. :func:`spill` moves such an array into a temporary file that is unlinked at
once (nothing is left behind, even if the process is killed) and maps it back, shared: it still
reads as a numpy array, so every consumer works unchanged, but its pages belong to the page
cache, which the kernel writes back and reclaims under pressure, not to the process. (Each
mapping keeps one file descriptor open until its array is gone.)

A pass over a spilled array takes it a range at a time (:func:`read`) and gives the range's
pages back as it goes, so the process's resident memory follows the range, not the array.
Where a pass looks up other requests at random (a chain's previous request), it gives every
page it touched back after each range (:func:`release`).

The files go to ``TMPDIR`` when it is set, else to the system's temporary folder (``/tmp``)
unless that is held in memory (tmpfs, as on Debian 13, Fedora and Arch), where the numbers
would stay in RAM: then to the user's cache folder (``~/.cache/kvtrace/spill``). Their space is
reserved when they are made (where the system can), so a full disk is an error then, not a
crash on a later write.
"""

from __future__ import annotations

import functools
import mmap
import os
import tempfile
from pathlib import Path

import numpy as np

from kvtrace.errors import KvtraceError

# Requests per range of a pass over spilled arrays: a few MB each, many passes per array.
RANGE_ROWS = 1 << 20


def folder() -> str:
    """Where spilled files go (see the module's docstring)."""
    return _folder(os.environ.get("TMPDIR"), tempfile.gettempdir(), os.environ.get("XDG_CACHE_HOME"))


@functools.cache
def _folder(tmpdir: str | None, tmp: str, cache_home: str | None) -> str:
    # cached on what it reads but the mounts and HOME: /proc/mounts is read once, not per array
    if tmpdir or not in_memory(tmp):
        return tmp
    cache = Path(cache_home or Path.home() / ".cache") / "kvtrace" / "spill"
    cache.mkdir(parents=True, exist_ok=True)
    return str(cache)


def in_memory(path: str) -> bool:
    """Whether ``path`` lies on a file system held in memory (tmpfs, ramfs), per /proc/mounts."""
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    real, best, kind = os.path.realpath(path), "", ""
    for m in mounts:
        if len(m) < 3:
            continue
        point = m[1].replace("\\040", " ")
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, m[2]
    return kind in ("tmpfs", "ramfs")


def empty(n: int, dtype) -> np.ndarray:
    """A writable spilled array of ``n`` zeros."""
    dtype = np.dtype(dtype)
    size = max(1, dtype.itemsize * n)
    fd, path = tempfile.mkstemp(prefix="kvtrace-numbers-", dir=folder())
    try:
        os.unlink(path)
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)
            else:  # (macOS) a sparse file: a full disk shows on a later write
                os.ftruncate(fd, size)
        except OSError as e:
            raise KvtraceError(
                f"cannot reserve {size / 2**20:,.0f} MiB of per-request numbers in {os.path.dirname(path)}: "
                f"{e.strerror}",
                hint="free disk space there, or point TMPDIR at a disk with room",
            ) from None
        # shared, so that pages given back (madvise) keep their numbers in the file
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
    finally:
        os.close(fd)  # the mapping holds the file
    return np.frombuffer(mm, dtype=dtype, count=n)


def spill(a: np.ndarray) -> np.ndarray:
    """``a`` copied to a spilled, read-only array (written a range at a time)."""
    a = np.asarray(a)
    if spilled(a):
        return a
    out = empty(len(a), a.dtype)
    for lo, hi in ranges(len(a)):
        put(out, lo, a[lo:hi])
    return frozen(out)


def frozen(a: np.ndarray) -> np.ndarray:
    """A writable spilled array as read-only from here on (the pages stay where they are)."""
    a.flags.writeable = False
    return a


def spilled(a) -> bool:
    """Whether ``a`` is a whole spilled array (made by this module)."""
    return isinstance(a, np.ndarray) and _mapping(a) is not None


def _mapping(a: np.ndarray):
    base = a.base
    if isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap) and len(a) * a.itemsize <= len(base.obj):
        return base.obj
    return None


def release(*arrays) -> None:
    """Give back the pages of spilled arrays that a range of a pass touched (a no-op for an
    array in memory); the numbers stay in their files."""
    for a in arrays:
        mm = _mapping(a) if isinstance(a, np.ndarray) else None
        if mm is not None:
            mm.madvise(mmap.MADV_DONTNEED)


def _give_back(a: np.ndarray, lo: int, hi: int) -> None:
    mm = _mapping(a)
    if mm is not None and hi > lo:
        page = mmap.PAGESIZE
        start = lo * a.itemsize // page * page
        end = min(len(mm), -(-hi * a.itemsize // page) * page)
        mm.madvise(mmap.MADV_DONTNEED, start, end - start)


def read(a: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``a[lo:hi]`` as an array in memory; for a spilled ``a``, the range's pages are given back."""
    out = np.array(a[lo:hi])
    _give_back(a, lo, hi)
    return out


def put(a: np.ndarray, lo: int, values) -> np.ndarray:
    """``values`` written at ``a[lo:]`` (a writable spilled array), the range's pages given back.
    An integer ``a`` too narrow for them is widened first (a copy, returned instead of ``a``)."""
    values = np.asarray(values)
    if len(values) and a.dtype.kind == "i" and values.dtype.kind in "iu" and not np.can_cast(values.dtype, a.dtype):
        info = np.iinfo(a.dtype)
        if int(values.min()) < info.min or int(values.max()) > info.max:
            a = widened(a, np.int64)
    a[lo : lo + len(values)] = values
    _give_back(a, lo, lo + len(values))
    return a


def widened(a: np.ndarray, dtype) -> np.ndarray:
    """A writable spilled copy of ``a`` as ``dtype``."""
    out = empty(len(a), dtype)
    for lo, hi in ranges(len(a)):
        put(out, lo, read(a, lo, hi))
    return out


def filled(n: int, dtype, value) -> np.ndarray:
    """A writable spilled array of ``n`` times ``value``."""
    out = empty(n, dtype)
    for lo, hi in ranges(n):
        put(out, lo, np.full(hi - lo, value, dtype=dtype))
    return out


def ranges(n: int, rows: int = RANGE_ROWS):
    """``(lo, hi)`` ranges of ``rows`` covering ``0..n``."""
    for lo in range(0, n, max(1, rows)):
        yield lo, min(n, lo + rows)


def total(a: np.ndarray) -> int:
    """The exact integer sum of ``a``, a range at a time."""
    return sum(int(read(a, lo, hi).sum(dtype=np.int64)) for lo, hi in ranges(len(a)))
