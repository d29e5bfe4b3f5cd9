"""Shared fixtures. Helpers that build warehouse rows live in tests/builders.py."""

from __future__ import annotations

import os
import shutil

import pytest

from kvtrace.store import Store


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="Rewrite golden files from the current output.")


@pytest.fixture
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")


@pytest.fixture
def store():
    """An empty in-memory warehouse."""
    s = Store(memory=True)
    yield s
    s.close()


@pytest.fixture
def db_path(tmp_path):
    """A path for an on-disk warehouse (not created yet)."""
    return tmp_path / "kv.duckdb"


def require_tool(name: str) -> str:
    """The path of an external tool; skip if missing, unless CI demands every tool (KVTRACE_REQUIRE_TOOLS=1)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("KVTRACE_REQUIRE_TOOLS") == "1":
            pytest.fail(f"{name} is required in CI but not installed (see .ci/run)")
        pytest.skip(f"{name} not installed")
    return path


def require_module(name: str):
    """An optional Python package (an extra of kvtrace's); skip if missing, unless CI demands
    every tool (KVTRACE_REQUIRE_TOOLS=1)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("KVTRACE_REQUIRE_TOOLS") == "1":
            pytest.fail(f"the Python package {name} is required in CI but not installed (see .ci/run)")
        pytest.skip(f"{name} not installed")


def require_other_uid() -> int:
    """A second uid to act as another local user (``nobody``), for tests that need root to take it
    on; skip where there is none, unless CI demands it (KVTRACE_REQUIRE_TOOLS=1)."""
    import pwd

    problem = None
    if os.geteuid() != 0:
        problem = "needs root to act as a second user"
    else:
        try:
            return pwd.getpwnam("nobody").pw_uid
        except KeyError:
            problem = "no user 'nobody' to act as a second user"
    if os.environ.get("KVTRACE_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{problem}: required in CI (see .ci/run)")
    pytest.skip(problem)


@pytest.fixture
def small_tmpfs(tmp_path):
    """``mount(size)`` a tmpfs of ``size`` (e.g. "8m") and return its folder: a volume a test
    can fill and empty. Needs root; skipped where mounting is refused, unless CI demands it
    (KVTRACE_REQUIRE_TOOLS=1). Unmounted when the test ends."""
    import subprocess

    mounted = []

    def mount(size: str):
        folder = tmp_path / f"tmpfs{len(mounted)}"
        folder.mkdir()
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(folder)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            why = f"cannot mount a tmpfs to fill: {r.stderr.strip() or r.returncode}"
            if os.environ.get("KVTRACE_REQUIRE_TOOLS") == "1":
                pytest.fail(f"{why}: required in CI (see .ci/run)")
            pytest.skip(why)
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder) -> "os.PathLike":
    """Fill the volume of ``folder`` with one file until writes fail; returns that file."""
    filler = os.path.join(folder, "filler")
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
        try:
            while True:
                fh.write(b"\0" * 512)
        except OSError:
            pass
    return filler
