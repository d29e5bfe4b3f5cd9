"""``kvtrace serve``: keep one warehouse open and run forwarded commands, one at a time.

The server opens the warehouse for writing (one ``Store``), imports what commands use, then
listens on the warehouse's Unix socket (``kvtrace.wire.paths``; mode 0600, and a peer of
another uid is refused). Each connection gets a thread: it answers at once (so a client can tell
a live server from a stale socket) and then waits for its turn at the command lock. A command
runs through the same click command as ``kvtrace`` itself, with the client's cwd, environment and
terminal (``kvtrace.serve.runner``), and every ``open_store`` of this warehouse inside it gets the
server's Store. A client that goes away cancels its command (rolled back like a Ctrl-C).
After each command the server checks the warehouse is still usable: DuckDB invalidates a database
after a fatal error (a commit on a full disk), and the server then closes and reopens it, at once
or, while that still fails, before each later command (which runs in its own process meanwhile).

Stops on SIGTERM / SIGINT, ``kvtrace serve --stop`` or ``--idle-exit``: the socket is removed
first (new commands then run in their own process), the running command finishes, the
warehouse is closed and the pid file removed.
"""

from __future__ import annotations

import ctypes
import json
import marshal
import os
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from kvtrace.errors import ConfigError
from kvtrace.wire import client, paths, protocol
from kvtrace.serve.runner import client_view, invoke

# Imported before the first command so that none pays for them (the repeat report's path).
WARM_MODULES = (
    "kvtrace.cli", "kvtrace.ingest.pipeline", "kvtrace.ingest.formats", "kvtrace.ingest.claude_transcripts",
    "kvtrace.ingest.otlp_json", "kvtrace.report.build", "kvtrace.report.render", "kvtrace.analyze.token_mix",
    "pyarrow", "polars",
)


class Server:
    """One warehouse's server.

    Args:
        db: the warehouse file (created if missing).
        app: the command-line application whose commands it runs (``kvtrace.cli.app``).
        idle_exit: stop after this many seconds without a command (None: never).
        log: where the server writes its own lines (never a client's).
    """

    def __init__(self, db: str | os.PathLike, *, app, idle_exit: float | None = None, log=None):
        self.app = app
        self.db_real = paths.resolve_db(db)
        self.sock_path = paths.socket_path(self.db_real)
        self.idle_exit = idle_exit
        self.log = log or sys.stderr
        self.started = time.time()
        self.commands = 0
        self.store = None
        self._listener: socket.socket | None = None
        self._command_lock = threading.Lock()
        self._cancel_lock = threading.Lock()
        self._running: tuple[int, object] | None = None   # (thread id, connection token) of the command
        self._threads: set[threading.Thread] = set()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._last_active = time.monotonic()
        self._click = None
        self._broken: str | None = None     # why the warehouse could not be reopened (None: it is open)

    # -- life ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Open the warehouse, take the socket (removing a stale one), warm up."""
        from kvtrace.store import Store

        answer = client.call(self.sock_path, protocol.PING) if os.path.exists(self.sock_path) else None
        if answer is not None and answer[0] == protocol.INFO:
            pid = json.loads(answer[1]).get("pid")
            raise ConfigError(f"{self.db_real} is already served (pid {pid}) on {self.sock_path}",
                              hint=f"stop it first: kvtrace serve --stop --db {self.db_real}")
        self.store = Store(self.db_real)
        try:
            self._warm()
            self._listen()
            self._write_pid()
        except BaseException:
            self._cleanup()
            raise

    def _warm(self) -> None:
        import importlib

        import typer.main

        for name in WARM_MODULES:
            try:
                importlib.import_module(name)
            except ImportError as e:      # a module renamed since: only its first command pays
                self._say(f"kvtrace serve: not preloaded: {name}: {e}")
        from kvtrace.ingest import resident

        self._click = typer.main.get_command(self.app)   # typer builds it anew on every app() call
        # The only writer of the warehouse while it runs: ingests may keep the ledger, folder
        # listings and stored keys from one command to the next.
        resident.enable()
        resident.warm(self.store)
        from kvtrace.ingest import claude_transcripts

        claude_transcripts.warm()

    def _store_problem(self) -> str | None:
        """Why the open warehouse can no longer be used, or None. DuckDB invalidates a database
        after a fatal error (a commit that failed on a full disk): every later statement fails."""
        if self.store is None:
            return self._broken or "the warehouse is not open"
        try:
            self.store.con.execute("SELECT 1").fetchall()
        except Exception as e:  # noqa: BLE001 - duckdb.FatalException: "database has been invalidated"
            return f"{type(e).__name__}: {e}"
        return None

    def _reopen(self) -> str | None:
        """Between commands: close a warehouse DuckDB invalidated and open it again (once space
        has returned). Returns why it is still unusable, or None when it is fine."""
        from kvtrace.ingest import resident
        from kvtrace.store import Store

        problem = self._store_problem()
        if problem is None:
            return None
        if self.store is not None:
            self._say(f"kvtrace serve: the warehouse {self.db_real} can no longer be used ({problem}); reopening it")
            resident.forget(self.store)
            try:
                self.store.close()
            except Exception:  # noqa: BLE001 - closing an invalidated database may fail too
                pass
            self.store = None
        try:
            self.store = Store(self.db_real, lock_wait_s=0)
            resident.warm(self.store)
        except Exception as e:  # noqa: BLE001 - still no space, say: tried again before the next command
            if self.store is not None:
                self.store.close()
                self.store = None
            self._broken = f"{type(e).__name__}: {e}"
            self._say(f"kvtrace serve: cannot reopen {self.db_real} yet ({self._broken}); commands run in "
                      f"their own process until it opens")
            return self._broken
        self._broken = None
        self._say(f"kvtrace serve: reopened {self.db_real}; serving again")
        return None

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
            raise ConfigError(f"cannot serve {self.db_real}: {problem}",
                              hint=f"remove {folder} if it is not yours" if private else
                              f"move the warehouse to a folder only you can write, or chmod go-w {folder}")
        if os.path.exists(self.sock_path):
            os.unlink(self.sock_path)           # stale: nothing answered the ping above
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)                    # the socket file is created 0600
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
            json.dump({"pid": os.getpid(), "socket": self.sock_path, "db": self.db_real,
                       "started": self.started}, fh)
        os.replace(tmp, p)

    def serve_forever(self) -> None:
        """Accept connections until stopped (the calling thread must be the main thread for signals)."""
        client.SERVING = True
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
        if self.store is not None:
            self.store.close()
            self.store = None
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
        try:
            with conn:
                if not self._peer_is_us(conn):
                    protocol.send(conn, protocol.REFUSED, b"another user's server")
                    return
                conn.settimeout(client.HELLO_TIMEOUT_S)
                frame = protocol.recv(conn)
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
                    self._command(conn, req)
        except Exception as e:  # noqa: BLE001 - one bad connection must not stop the server
            self._say(f"kvtrace serve: connection failed: {type(e).__name__}: {e}")
        finally:
            self._threads.discard(threading.current_thread())

    @staticmethod
    def _peer_is_us(conn: socket.socket) -> bool:
        cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", cred)
        return uid == os.getuid()

    def status(self) -> dict:
        return {"pid": os.getpid(), "db": self.db_real, "socket": self.sock_path, "started": self.started,
                "uptime_s": round(time.time() - self.started, 1), "commands": self.commands,
                "busy": self._command_lock.locked(), "idle_exit_s": self.idle_exit,
                "warehouse_problem": self._broken}

    def _refusal(self, req: dict) -> str | None:
        argv = req.get("argv") or []
        if req.get("v") != protocol.VERSION:
            return "another protocol version"
        if req.get("db") != self.db_real:
            return f"this server serves {self.db_real}"
        if not argv or argv[0] not in protocol.FORWARDED or any(a in protocol.LOCAL_ARGS for a in argv):
            return "not a command the server runs"
        if self._stopping.is_set():
            return "stopping"
        return None

    def _command(self, conn: socket.socket, req: dict) -> None:
        why = self._refusal(req)
        if why:
            protocol.send(conn, protocol.REFUSED, why.encode())
            return
        protocol.send(conn, protocol.ACCEPTED)
        send_lock = threading.Lock()
        gone = threading.Event()

        def send(kind: bytes, data: bytes) -> bool:
            if gone.is_set():
                return False
            try:
                with send_lock:
                    protocol.send(conn, kind, data)
                return True
            except OSError:
                gone.set()
                return False

        with self._command_lock:
            if self._stopping.is_set():
                # Nothing ran or printed yet: the client runs the command itself.
                send(protocol.REFUSED, b"stopping")
                return
            problem = self._reopen()
            if problem is not None:
                # The warehouse is closed here, so the client's own run can open it (and say why not).
                send(protocol.REFUSED, f"warehouse unavailable: {problem}".encode())
                return
            self._last_active = time.monotonic()
            watcher = threading.Thread(target=self._watch, args=(conn, gone), daemon=True)
            watcher.start()
            try:
                code = self._run(req, send, gone)
            finally:
                self.commands += 1
                self._last_active = time.monotonic()
                self._reopen()      # a command that hit a full disk must not break the next ones
        send(protocol.EXIT, str(code).encode())

    def _run(self, req: dict, send, token: object) -> int:
        from kvtrace.store.opener import sharing

        tid = threading.get_ident()
        try:
            with client_view(req, send), sharing(self.store):
                with self._cancel_lock:
                    self._running = (tid, token)
                try:
                    return invoke(self._click, req["argv"], req.get("prog") or "kvtrace")
                finally:
                    with self._cancel_lock:
                        self._running = None
                        _async_raise(tid, None)   # drop a cancel that came too late to matter
        except KeyboardInterrupt:
            return 130
        except Exception as e:  # noqa: BLE001 - e.g. the client's cwd no longer exists
            send(protocol.STDERR, f"kvtrace serve: {type(e).__name__}: {e}\n".encode())
            return 1
        finally:
            self._rollback()

    def _rollback(self) -> None:
        """A command that failed inside a transaction must not leave it open for the next one."""
        try:
            self.store.con.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - no transaction was open (the normal case), or no warehouse
            pass

    def _watch(self, conn: socket.socket, gone: threading.Event) -> None:
        """The client sends nothing after its request: end-of-stream means it went away."""
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        gone.set()
        with self._cancel_lock:
            if self._running is not None and self._running[1] is gone:
                _async_raise(self._running[0], KeyboardInterrupt)
                try:
                    self.store.con.interrupt()
                except Exception:  # noqa: BLE001
                    pass


def _async_raise(tid: int, exc) -> None:
    """Raise ``exc`` in thread ``tid`` at its next bytecode (None: cancel a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(exc) if exc else None)


def stop(db: str | os.PathLike | None, timeout: float = 660.0) -> str:
    """Ask the server of ``db`` to stop and wait until it has; returns what happened."""
    db_real = paths.resolve_db(db)
    sock = paths.socket_path(db_real)
    if not os.path.exists(sock):
        raise ConfigError(f"no kvtrace serve runs for {db_real}", hint="start one with: kvtrace serve --db PATH")
    problem = paths.socket_problem(sock)
    if problem is not None:
        raise ConfigError(f"not stopping what listens on {sock}: {problem}",
                          hint=f"it is not a kvtrace serve of yours; remove it if you may: rm {sock}")
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
            raise ConfigError(f"kvtrace serve exited with {proc.returncode} before serving {db_real}",
                              hint=f"see {log_path}")
        time.sleep(0.05)
    proc.terminate()
    raise ConfigError(f"kvtrace serve did not answer within {timeout:.0f}s", hint=f"see {log_path}")
