"""Where a warehouse's ``kvtrace serve`` listens and records itself (standard library only).

The launcher imports this on every command, so it must cost nothing: no kvtrace, no third-party
imports. A warehouse ``W`` is served through the socket ``W.serve.sock`` beside it (mode 0600),
and the server writes ``W.serve.pid`` (JSON: pid, socket, started) so that a process that finds
the warehouse locked can say who holds it.

A socket is trusted only when :func:`socket_problem` finds nothing wrong with it and its folder
(the client then also checks the peer's uid, ``SO_PEERCRED``, before sending anything): another
user who can create a file beside a warehouse, or the private folder first, must never receive a
command, its working folder and its environment.
"""

from __future__ import annotations

import os
import stat

DEFAULT_DB = "kvtrace.duckdb"  # as kvtrace.store.store.DEFAULT_DB
SOCKET_SUFFIX = ".serve.sock"
PID_SUFFIX = ".serve.pid"
# sun_path holds 108 bytes on Linux (104 on macOS): a longer socket path goes to a private folder.
_MAX_SOCKET_PATH = 100


def resolve_db(db: str | os.PathLike | None, env=None, cwd: str | None = None) -> str:
    """The real path of the warehouse a command means: ``--db``, else ``$KVTRACE_DB``, else
    ``./kvtrace.duckdb``, taken relative to ``cwd`` as the command would (no ``~`` expansion:
    the CLI does not expand it either)."""
    env = os.environ if env is None else env
    raw = os.fspath(db) if db else (env.get("KVTRACE_DB") or DEFAULT_DB)
    return os.path.realpath(os.path.join(cwd or os.getcwd(), raw))


def socket_path(db_real: str) -> str:
    """The serve socket of a warehouse (its real path, see :func:`resolve_db`)."""
    beside = db_real + SOCKET_SUFFIX
    if len(os.fsencode(beside)) <= _MAX_SOCKET_PATH:
        return beside
    import hashlib

    digest = hashlib.sha256(os.fsencode(db_real)).hexdigest()[:24]
    return os.path.join(private_dir(), f"{digest}.sock")


def served(db: str | os.PathLike | None, env=None) -> tuple[str, str] | None:
    """``(socket path, warehouse real path)`` when a server's socket is beside warehouse ``db``
    (None from a working folder that no longer exists: the command, run here, says so)."""
    try:
        db_real = resolve_db(db, env)
    except FileNotFoundError:
        return None
    sock = socket_path(db_real)
    return (sock, db_real) if os.path.exists(sock) else None


def private_dir() -> str:
    """A folder only this user can enter, for sockets whose path beside the warehouse is too long."""
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return os.path.join(base, f"kvtrace-serve-{os.getuid()}")


def folder_problem(folder: str, private: bool = False) -> str | None:
    """Why the folder of a serve socket cannot be trusted, or None: it must belong to this user
    (or root), and no other user may replace what is in it (not writable by group or others,
    unless the sticky bit keeps their hands off our files). A ``private`` folder (see
    :func:`private_dir`) must be ours and closed to everyone else (mode 0700)."""
    try:
        st = os.stat(folder)
    except OSError as e:
        return f"cannot read the folder {folder}: {e.strerror}"
    me = os.geteuid()
    if private and (st.st_uid != me or st.st_mode & 0o077):
        return (
            f"the folder {folder} belongs to uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):04o}; "
            f"it must be yours (uid {me}) with mode 0700"
        )
    if st.st_uid not in (me, 0):
        return f"the folder {folder} belongs to uid {st.st_uid}, not to you (uid {me}) or root"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return (
            f"the folder {folder} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"they could replace the socket"
        )
    return None


def socket_problem(sock: str) -> str | None:
    """Why the serve socket ``sock`` cannot be trusted, or None: it must be a socket of this user
    with mode 0600 (as ``kvtrace serve`` makes it) in a folder :func:`folder_problem` accepts."""
    folder = os.path.dirname(sock)
    problem = folder_problem(folder, private=folder == private_dir())
    if problem:
        return problem
    try:
        st = os.lstat(sock)
    except OSError as e:
        return f"cannot read {sock}: {e.strerror}"
    me = os.geteuid()
    if not stat.S_ISSOCK(st.st_mode):
        return f"{sock} is not a socket"
    if st.st_uid != me:
        return f"{sock} belongs to uid {st.st_uid}, not to you (uid {me})"
    if st.st_mode & 0o077:
        return f"{sock} has mode {stat.S_IMODE(st.st_mode):04o}, not 0600"
    return None


def pid_path(db_real: str) -> str:
    return db_real + PID_SUFFIX


def read_pid_file(db_real: str) -> dict | None:
    """The serve record of a warehouse if its process is still alive, else None."""
    import json

    try:
        with open(pid_path(db_real), encoding="utf-8") as fh:
            info = json.load(fh)
        pid = int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return info
