"""Timing a child process, the one way every benchmark does it.

Wall time is taken around the process; its CPU time and peak RSS come from its own rusage
(``os.wait4``), with no timer process in between (``/usr/bin/time``'s own fork and exec cost
~1 ms, which matters for a command of tens of milliseconds). Output goes to temporary files, so a
child that writes a lot never blocks on a full pipe while it is waited for.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Child:
    wall_s: float
    cpu_s: float  # user + system
    maxrss_mb: float
    stdout: bytes
    stderr: bytes


def run(argv: list, *, cwd: Path, env: dict | None = None) -> Child:
    """Run ``argv`` to completion; raise ``RuntimeError`` with the end of its stderr if it fails."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=err, cwd=cwd, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        raise RuntimeError(
            f"{' '.join(map(str, argv))} exited {p.returncode}: {stderr.decode(errors='replace')[-2000:]}"
        )
    return Child(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, stdout, stderr)
