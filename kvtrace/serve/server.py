"""``kvtrace serve``: keep kvtrace's libraries loaded and run forwarded commands, one at a time.

The server imports what commands use, then listens on the warehouse's Unix socket
(``kvtrace.wire.paths``; mode 0600, and a peer of another uid is refused). Each connection gets a
thread: it answers at once (so a client can tell a live server from a stale socket) and then
waits for its turn at the command lock. A command runs in a fork of the server
(``kvtrace.serve.runner``): the child takes the client's stdin/stdout/stderr descriptors,
environment, working folder and umask, runs the command line as ``kvtrace`` does, opens the
warehouse itself and exits with the command's code, which the server sends back. The server
never holds the warehouse and never changes its own process state for a command. Every Ctrl-C
of the client reaches the child as a SIGINT (a client that goes away sends one too), so a
forwarded command ends exactly as a local one would.

A fork copies only the thread that forks, so the server only imports: DuckDB, polars and numba
start their worker pools on first use, which must be in the fork. (Importing pyarrow, polars and
numpy starts a few native threads, jemalloc's background threads and OpenBLAS's, which both
handle a fork themselves.) A command cancelled before its turn never runs; one refused because
the server stops runs in its client.

Stops on SIGTERM / SIGINT, ``kvtrace serve --stop`` or ``--idle-exit``: the socket is removed
first (new commands then run in their own process), the running command finishes (it runs in a
session of its own, so a signal to the server's process group is not its), and the pid file is
removed.
"""

from __future__ import annotations

import json
import marshal
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kvtrace.errors import ConfigError
from kvtrace.serve.runner import run_child
from kvtrace.wire import client, paths, protocol

# Imported before the first command so that none pays for them. Imports only: see the module.
WARM_MODULES = (
    "kvtrace.cli",
    "kvtrace.ingest.pipeline",
    "kvtrace.ingest.formats",
    "kvtrace.ingest.claude_transcripts",
    "kvtrace.ingest.otlp_json",
    "kvtrace.report.build",
    "kvtrace.report.render",
    "kvtrace.analyze.token_mix",
    "kvtrace.replay",
    "duckdb",
    "pyarrow",
    "polars",
)


class Server:
    """One warehouse's server.

    Args:
        db: the warehouse file (it need not exist: the first command creates it).
        run: runs ``sys.argv`` as the ``kvtrace`` command does, given the program name for usage
            lines, and never returns (``kvtrace.launch.run_here``); called in the forked child of
            each command.
        idle_exit: stop after this many seconds without a command (None: never).
        log: where the server writes its own lines (never a client's).
    """

    def __init__(self, db: str | os.PathLike, *, run: Callable[[str], None], idle_exit: float | None = None, log=None):
        self.run = run
        self.db_real = paths.resolve_db(db)
        self.sock_path = paths.socket_path(self.db_real)
        self.idle_exit = idle_exit
        self.log = log or sys.stderr
        self.started = time.time()
        self.commands = 0
        self._listener: socket.socket | None = None
        self._command_lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._last_active = time.monotonic()
        self._waiting = 0  # accepted commands waiting for their turn
        self._count_lock = threading.Lock()

    # -- life ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Take the socket (removing a stale one), warm up."""
        answer = client.call(self.sock_path, protocol.PING) if os.path.exists(self.sock_path) else None
        if answer is not None and answer[0] == protocol.INFO:
            pid = json.loads(answer[1]).get("pid")
            raise ConfigError(
                f"{self.db_real} is already served (pid {pid}) on {self.sock_path}",
                hint=f"stop it first: kvtrace serve --stop --db {self.db_real}",
            )
        try:
            self._warm()
            self._listen()
            self._write_pid()
        except BaseException:
            self._cleanup()
            raise

    def _warm(self) -> None:
        import importlib

        for name in WARM_MODULES:
            try:
                importlib.import_module(name)
            except ImportError as e:  # a module renamed since: only its commands pay
                self._say(f"kvtrace serve: not preloaded: {name}: {e}")

    def _listen(self) -> None:
        folder = os.path.dirname(self.sock_path)
        private = folder == paths.private_dir()
        if private:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            if os.stat(folder).st_uid == os.geteuid():
                os.chmod(folder, 0o700)
        # Clients trust the socket only in a folder no other user controls: say so now, not on
        # every command.
        problem = paths.folder_problem(folder, private=private)
        if problem:
            raise ConfigError(
                f"cannot serve {self.db_real}: {problem}",
                hint=f"remove {folder} if it is not yours"
                if private
                else f"move the warehouse to a folder only you can write, or chmod go-w {folder}",
            )
        if os.path.exists(self.sock_path):
            os.unlink(self.sock_path)  # stale: nothing answered the ping above
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file is created 0600
        try:
            s.bind(self.sock_path)
        finally:
            os.umask(old)
        os.chmod(self.sock_path, 0o600)
        s.listen(16)
        s.settimeout(0.25)
        self._listener = s

    def _write_pid(self) -> None:
        p = paths.pid_path(self.db_real)
        tmp = f"{p}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"pid": os.getpid(), "socket": self.sock_path, "db": self.db_real, "started": self.started}, fh)
        os.replace(tmp, p)

    def serve_forever(self) -> None:
        """Accept connections until stopped (the calling thread must be the main thread for signals)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._stopping.set())
        self._say(f"kvtrace serve: pid {os.getpid()} serving {self.db_real} on {self.sock_path}")
        self._last_active = time.monotonic()
        try:
            while not self._stopping.is_set():
                if self._idle_too_long():
                    self._say("kvtrace serve: idle, stopping")
                    break
                try:
                    conn, _ = self._listener.accept()
                except (TimeoutError, socket.timeout):
                    continue
                except OSError:
                    if self._stopping.is_set():
                        break
                    raise
                self._last_active = time.monotonic()  # an idle exit must not race a command arriving
                t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
                self._threads.add(t)
                t.start()
        finally:
            self._shutdown()

    def _idle_too_long(self) -> bool:
        if self.idle_exit is None or self._command_lock.locked():
            return False
        return time.monotonic() - self._last_active >= self.idle_exit

    def _shutdown(self) -> None:
        self._stopping.set()
        self._close_listener()
        # Let a running command finish (it holds the lock); later ones are refused.
        got = self._command_lock.acquire(timeout=600)
        try:
            self._cleanup()
        finally:
            if got:
                self._command_lock.release()
            self._stopped.set()
        # Let the `--stop` caller and queued clients hear back before the process ends.
        deadline = time.monotonic() + 2.0
        for t in list(self._threads):
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        self._say("kvtrace serve: stopped")

    def _close_listener(self) -> None:
        if self._listener is not None:
            try:
                os.unlink(self.sock_path)
            except FileNotFoundError:
                pass
            self._listener.close()
            self._listener = None

    def _cleanup(self) -> None:
        self._close_listener()
        info = paths.read_pid_file(self.db_real)
        if info is not None and info.get("pid") == os.getpid():
            try:
                os.unlink(paths.pid_path(self.db_real))
            except FileNotFoundError:
                pass

    def _say(self, line: str) -> None:
        try:
            print(line, file=self.log, flush=True)
        except (OSError, ValueError):
            pass

    # -- one connection --------------------------------------------------------------------------
    def _handle(self, conn: socket.socket) -> None:
        fds: list[int] = []
        try:
            with conn:
                if not self._peer_is_us(conn):
                    protocol.send(conn, protocol.REFUSED, b"another user's server")
                    return
                conn.settimeout(client.HELLO_TIMEOUT_S)
                frame, fds = protocol.recv_with_fds(conn)
                conn.settimeout(None)
                if frame is None:
                    return
                kind, payload = frame
                if kind == protocol.PING:
                    protocol.send(conn, protocol.INFO, json.dumps(self.status()).encode())
                elif kind == protocol.STOP:
                    self._stopping.set()
                    self._stopped.wait(timeout=660)
                    protocol.send(conn, protocol.EXIT, b"0")
                elif kind == protocol.REQUEST:
                    req = marshal.loads(payload)
                    if not isinstance(req, dict):
                        raise ValueError("a request is a dict")
                    self._command(conn, req, fds)
        except Exception as e:  # noqa: BLE001 - one bad connection must not stop the server
            self._say(f"kvtrace serve: connection failed: {type(e).__name__}: {e}")
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._threads.discard(threading.current_thread())

    @staticmethod
    def _peer_is_us(conn: socket.socket) -> bool:
        cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", cred)
        return uid == os.getuid()

    def status(self) -> dict:
        return {
            "pid": os.getpid(),
            "db": self.db_real,
            "socket": self.sock_path,
            "started": self.started,
            "uptime_s": round(time.time() - self.started, 1),
            "commands": self.commands,
            "busy": self._command_lock.locked(),
            "waiting": self._waiting,
            "idle_exit_s": self.idle_exit,
        }

    def _refusal(self, req: dict, fds: list[int]) -> str | None:
        argv = req.get("argv") or []
        if req.get("v") != protocol.VERSION:
            return "another protocol version"
        if req.get("db") != self.db_real:
            return f"this server serves {self.db_real}"
        if not argv or argv[0] not in protocol.FORWARDED or protocol.runs_here(argv):
            return "not a command the server runs"
        if len(fds) != 3:
            return "the request came without the client's stdin, stdout and stderr"
        if self._stopping.is_set():
            return "stopping"
        return None

    def _command(self, conn: socket.socket, req: dict, fds: list[int]) -> None:
        why = self._refusal(req, fds)
        if why:
            protocol.send(conn, protocol.REFUSED, why.encode())
            return
        protocol.send(conn, protocol.ACCEPTED)
        child = _Child()
        # From now on a cancel or the end of the connection counts, while queued too: a command
        # cancelled before its turn is answered at once and never runs.
        threading.Thread(target=_watch, args=(conn, child, fds), daemon=True).start()
        with self._count_lock:
            self._waiting += 1
        with self._command_lock:
            with self._count_lock:
                self._waiting -= 1
            if child.cancelled():
                return
            if self._stopping.is_set():
                # Nothing ran or printed yet: the client runs the command itself.
                protocol.send(conn, protocol.REFUSED, b"stopping")
                return
            self._last_active = time.monotonic()
            try:
                code = child.run(lambda: self._fork(conn, req, fds))
            finally:
                self.commands += 1
                self._last_active = time.monotonic()
        if code is None:
            return  # cancelled while the fork was being set up: answered already
        try:
            protocol.send(conn, protocol.EXIT, str(code).encode())
        except OSError:
            pass  # the client went away

    def _fork(self, conn: socket.socket, req: dict, fds: list[int]) -> int:
        """Fork the command's process (SIGINT blocked across the fork: the child unblocks it once
        its own handler is in place); returns its pid. The request's descriptors are the child's
        alone afterwards: closed here at once, so no later command's fork inherits them."""
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            pid = os.fork()
            if pid == 0:
                run_child(req, fds, [self._listener, conn], self.run, os.getppid())  # never returns
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        for fd in fds:
            os.close(fd)
        fds.clear()
        return pid


class _Child:
    """A command's process: interrupted on request until it has ended, never after it is reaped
    (its pid could be another process's by then); a cancel before it starts means it never does."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self._lock = threading.Lock()
        self._ended = False
        self._cancelled = False

    def cancelled(self) -> bool:
        with self._lock:
            return self._cancelled

    def run(self, fork) -> int | None:
        """Start it with ``fork()`` (returns the pid) unless cancelled meanwhile (None); wait for
        its exit code."""
        with self._lock:
            if self._cancelled:
                return None
            self.pid = fork()
        os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped: its pid is still its own
        with self._lock:
            self._ended = True
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)

    def interrupt(self, answer) -> bool:
        """SIGINT if it runs; if it has not started, it never will and ``answer()`` tells the client
        (under the lock: the command's thread, which owns the client's descriptors, waits for it).
        Returns whether it still runs."""
        with self._lock:
            if self._ended or self._cancelled:
                return False
            if self.pid is None:
                self._cancelled = True
                answer()
                return False
            os.kill(self.pid, signal.SIGINT)
            return True


def _watch(conn: socket.socket, child: _Child, fds: list[int]) -> None:
    """Each cancel frame (the client's Ctrl-C) interrupts the command; so does the end of the
    connection (a client that went away). A command cancelled before its turn is answered here,
    as a local run would end (one line, exit 130), and the client's descriptors are let go at once.
    Ends with the connection or the child."""

    def answer() -> None:
        try:
            os.write(fds[2], b"Interrupted: stopped before the command started; nothing was written\n")
            protocol.send(conn, protocol.EXIT, b"130")
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        fds.clear()

    while True:
        try:
            frame = protocol.recv(conn)
        except OSError:
            frame = None
        if not child.interrupt(answer) or frame is None:
            return


def stop(db: str | os.PathLike | None, timeout: float = 660.0) -> str:
    """Ask the server of ``db`` to stop and wait until it has; returns what happened."""
    db_real = paths.resolve_db(db)
    sock = paths.socket_path(db_real)
    if not os.path.exists(sock):
        raise ConfigError(f"no kvtrace serve runs for {db_real}", hint="start one with: kvtrace serve --db PATH")
    problem = paths.socket_problem(sock)
    if problem is not None:
        raise ConfigError(
            f"not stopping what listens on {sock}: {problem}",
            hint=f"it is not a kvtrace serve of yours; remove it if you may: rm {sock}",
        )
    answer = client.call(sock, protocol.STOP, timeout=timeout)
    if answer is None:
        os.unlink(sock)
        return f"removed the stale socket {sock} (no server answered)"
    return f"stopped the server of {db_real}"


def status(db: str | os.PathLike | None) -> dict | None:
    db_real = paths.resolve_db(db)
    sock = paths.socket_path(db_real)
    answer = client.call(sock, protocol.PING) if os.path.exists(sock) else None
    if answer is None or answer[0] != protocol.INFO:
        return None
    return json.loads(answer[1])


def detach(db: str | os.PathLike | None, idle_exit: str | None, log_path: Path, timeout: float = 60.0) -> dict:
    """Start the server in the background (its own session, output to ``log_path``); return its
    status once it answers."""
    import subprocess

    db_real = paths.resolve_db(db)
    argv = [sys.executable, "-m", "kvtrace", "serve", "--db", db_real]
    if idle_exit:
        argv += ["--idle-exit", idle_exit]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = status(db_real)
        if info is not None and info["pid"] == proc.pid:
            return info
        if proc.poll() is not None:
            raise ConfigError(
                f"kvtrace serve exited with {proc.returncode} before serving {db_real}", hint=f"see {log_path}"
            )
        time.sleep(0.05)
    proc.terminate()
    raise ConfigError(f"kvtrace serve did not answer within {timeout:.0f}s", hint=f"see {log_path}")
