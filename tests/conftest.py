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
