"""``kvtrace serve`` and the launcher: forwarded commands print the same bytes and exit codes as
local runs, in the client's cwd, with its stdin; the server's own process is never changed by a
command and never holds the warehouse; a stale socket falls back to a local run; the server
survives failing commands and stops cleanly.

Servers run as child processes on Unix sockets in tmp folders and are always stopped by the
fixture's finalizer.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtrace.launch import db_arg, forward_target
from kvtrace.wire import paths
from kvtrace.serve.server import status

pytestmark = pytest.mark.slow  # end-to-end: real processes, servers or long runs (make test-all)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
KV = [sys.executable, "-m", "kvtrace"]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("KVTRACE_DB", "KVTRACE_NO_SERVE")}
    env.update(extra)
    return env


def kv(*args, cwd: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(KV + [str(a) for a in args], cwd=cwd, env=_env(**env), capture_output=True, timeout=120)


class Served:
    """A running ``kvtrace serve`` child process."""

    def __init__(self, db: Path, *extra: str):
        self.db = db
        self.log = open(db.parent / (db.name + ".test-serve.log"), "wb")
        self.proc = subprocess.Popen(
            KV + ["serve", "--db", str(db), *extra],
            cwd=db.parent,
            env=_env(),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while (info := status(db)) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail("kvtrace serve did not start: " + (db.parent / (db.name + ".test-serve.log")).read_text())
            time.sleep(0.05)
        self.pid = info["pid"]

    def commands(self) -> int:
        return status(self.db)["commands"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server on warehouse A; B is the same data without a server (the local twin)."""
    root = tmp_path_factory.mktemp("serve")
    shutil.copytree(SAMPLES / "otlp", root / "traces")
    srv = Served(root / "a.duckdb")
    try:
        yield srv, root
    finally:
        srv.stop()


def _same(served, *args, strip_generated: bool = False, **env) -> subprocess.CompletedProcess:
    """Run ``args`` on A (through the server) and on B (locally, on a copy of A made first: other
    tests of the module change A alone); assert the same bytes and exit code."""
    srv, root = served
    for suffix in ("", ".wal"):  # the server holds no warehouse between commands: A can be copied
        src, dst = root / f"a.duckdb{suffix}", root / f"b.duckdb{suffix}"
        if src.exists():
            shutil.copyfile(src, dst)
        elif dst.exists():
            dst.unlink()
    before = srv.commands()
    a = kv(*args, "--db", "a.duckdb", cwd=root, **env)
    assert srv.commands() == before + 1, "the command was not forwarded"
    b = kv(*args, "--db", "b.duckdb", cwd=root, **env)
    out_a, out_b = a.stdout, b.stdout
    if strip_generated:
        out_a, out_b = (
            json.dumps({k: v for k, v in json.loads(o).items() if k != "generated_at"}) for o in (out_a, out_b)
        )
    assert (out_a, a.stderr, a.returncode) == (out_b, b.stderr, b.returncode)
    return a


def test_forwarded_commands_match_local_runs(served):
    r = _same(served, "ingest", "traces", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["requests_added"] > 0
    _same(served, "ingest", "traces")  # a repeat: all unchanged
    _same(served, "report", "--group-by", "day", "--format", "json", strip_generated=True)
    _same(served, "report", "--format", "md", "--ttl", "5m,1h")
    _same(served, "report", COLUMNS="90")
    _same(served, "query", "usage_bounds", "--format", "csv")
    # On a terminal: rich sees one (colours) as wide as the client's.
    srv, root = served
    before = srv.commands()
    a = _in_terminal(["report", "--db", "a.duckdb"], root, cols=93)
    assert srv.commands() == before + 1
    b = _in_terminal(["report", "--db", "b.duckdb"], root, cols=93)
    assert a[1] == b[1] == 0
    # The spinner shows as many frames as the run took time; what stays on screen must match.
    assert _after_progress(a[0]) == _after_progress(b[0])
    assert b"building the report" in a[0] and b"building the report" in b[0]
    assert b"\x1b[" in _after_progress(a[0])
    bad = _same(served, "ingest", "no-such-folder")
    assert bad.returncode == 1 and b"no such file or folder" in bad.stderr
    usage = _same(served, "report", "--no-such-option")
    assert usage.returncode == 2


def test_relative_paths_resolve_in_the_clients_cwd(served):
    srv, root = served
    sub = root / "client-cwd"
    (sub / "more").mkdir(parents=True)
    shutil.copy(next((SAMPLES / "claude").rglob("*.jsonl.gz")), sub / "more" / "session.jsonl.gz")
    before = srv.commands()
    r = kv("report", "--ingest", "more", "--db", "../a.duckdb", "--format", "json", "--out", "r.json", cwd=sub)
    assert r.returncode == 0, r.stderr
    assert srv.commands() == before + 1
    assert json.loads((sub / "r.json").read_text())["requests"] > 0
    assert not (root / "r.json").exists()


def test_server_survives_a_failing_command(served):
    srv, root = served
    assert kv("ingest", "traces", "--db", "a.duckdb", cwd=root).returncode == 0
    r = kv("query", "usage_window", "-p", "since=not-a-date", "--db", "a.duckdb", cwd=root)
    assert r.returncode == 1 and r.stderr.startswith(b"Error: --param since=")  # one line, as a local run
    assert status(srv.db)["pid"] == srv.pid
    ok = kv("query", "usage_bounds", "--format", "csv", "--db", "a.duckdb", cwd=root)
    assert ok.returncode == 0 and ok.stdout.startswith(b"first_ts,")


def test_the_server_never_holds_the_warehouse_nor_changes_for_a_command(served):
    from kvtrace.store import Store

    srv, root = served
    for db in ("a.duckdb", "b.duckdb"):
        assert kv("ingest", "traces", "--db", db, cwd=root).returncode == 0
    cwd = os.readlink(f"/proc/{srv.pid}/cwd")
    sub = root / "elsewhere"
    sub.mkdir(exist_ok=True)
    before = srv.commands()
    r = subprocess.run(
        KV + ["report", "--db", "../a.duckdb", "--format", "json", "--out", "r.json"],
        cwd=sub,
        env=_env(),
        capture_output=True,
        timeout=120,
        preexec_fn=lambda: os.umask(0o077),
    )
    assert r.returncode == 0 and srv.commands() == before + 1, r.stderr
    assert os.stat(sub / "r.json").st_mode & 0o777 == 0o600  # the client's umask
    assert os.readlink(f"/proc/{srv.pid}/cwd") == cwd
    # The environment is the client's, command by command: a width one command set is gone in the next.
    _same(served, "report", COLUMNS="90")
    _same(served, "report")
    t = time.monotonic()
    with Store(srv.db) as s:  # between commands the file is free for anyone
        s.scalar("SELECT count(*) FROM requests")
    assert time.monotonic() - t < 5


class Blocked:
    """A served ``ingest -`` that runs until its stdin is closed: it holds the server's turn."""

    def __init__(self, srv: "Served", cwd: Path, db: str):
        self.p = subprocess.Popen(
            KV + ["ingest", "-", "--db", db, "-q"],
            cwd=cwd,
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while not status(srv.db)["busy"]:
            assert self.p.poll() is None and time.monotonic() < deadline, self.p.stderr.read()
            time.sleep(0.05)
        self.child = _children(srv.pid)[-1]

    def release(self) -> subprocess.CompletedProcess:
        out, err = self.p.communicate(gzip.decompress((SAMPLES / "otlp" / "logs.jsonl.gz").read_bytes()), timeout=60)
        return subprocess.CompletedProcess(self.p.args, self.p.returncode, out, err)


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return sorted(out)


def _queued(srv: "Served", args: list[str], cwd: Path, **popen) -> subprocess.Popen:
    """Start a command that will wait for its turn; return once the server has accepted it."""
    before = status(srv.db)["waiting"]
    popen.setdefault("stdout", subprocess.PIPE)
    p = subprocess.Popen(KV + args, cwd=cwd, env=_env(), stderr=subprocess.PIPE, **popen)
    deadline = time.monotonic() + 30
    while status(srv.db)["waiting"] <= before:
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    return p


def test_a_queued_command_cancelled_before_its_turn_ends_at_once(served):
    srv, root = served
    blocker = Blocked(srv, root, "a.duckdb")
    try:
        q = _queued(srv, ["query", "usage_bounds", "--db", "a.duckdb"], root)
        t = time.monotonic()
        q.send_signal(signal.SIGINT)
        out, err = q.communicate(timeout=20)
        assert time.monotonic() - t < 5 and blocker.p.poll() is None  # answered before its turn
        assert q.returncode == 130 and err.decode().strip().startswith("Interrupted: stopped before"), err
    finally:
        assert blocker.release().returncode == 0


def _open_fds(pid: int) -> dict[int, str]:
    """What a process holds open, fd -> target; a descriptor it closes while we read (or the
    process ending) drops out instead of failing the read."""
    fds = {}
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                fds[int(fd.name)] = os.readlink(fd)
            except FileNotFoundError:
                continue
    except FileNotFoundError:
        pass
    return fds


def test_a_forked_command_holds_no_descriptor_of_the_server_or_another_client(served):
    srv, root = served
    first = Blocked(srv, root, "a.duckdb")
    second = _queued(srv, ["ingest", "-", "--db", "a.duckdb", "-q"], root, stdin=subprocess.PIPE)
    third = _queued(srv, ["query", "usage_bounds", "--db", "a.duckdb"], root)
    try:
        assert first.release().returncode == 0
        deadline = time.monotonic() + 30
        while (kids := _children(srv.pid)) == [] or kids == [first.child]:  # the second one's turn
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # the fork takes the client's streams, then lets go of everything else (in a moment: poll)
        deadline = time.monotonic() + 5
        while True:
            fds = _open_fds(kids[-1])
            foreign = {fd: what for fd, what in fds.items() if fd > 2 and what.startswith(("socket:", "pipe:"))}
            if not foreign or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not foreign, f"the command's process holds {foreign}"
    finally:
        second.communicate(b"", timeout=60)
        out, err = third.communicate(timeout=60)
    assert third.returncode == 0, err


def test_a_queued_command_runs_here_when_the_server_stops(tmp_path):
    shutil.copytree(SAMPLES / "otlp", tmp_path / "traces")
    srv = Served(tmp_path / "kv.duckdb")
    try:
        assert kv("ingest", "traces", "--db", "kv.duckdb", cwd=tmp_path).returncode == 0
        blocker = Blocked(srv, tmp_path, "kv.duckdb")
        q = _queued(srv, ["query", "usage_bounds", "--db", "kv.duckdb", "--format", "csv"], tmp_path)
        srv.proc.send_signal(signal.SIGTERM)
        assert blocker.release().returncode == 0  # the running command finishes
        out, err = q.communicate(timeout=60)
        assert q.returncode == 0 and out.startswith(b"first_ts,"), err
        assert srv.proc.wait(timeout=30) == 0
    finally:
        srv.stop()


def test_stdin_reaches_a_forwarded_ingest(served):
    srv, root = served
    data = gzip.decompress((SAMPLES / "otlp" / "logs.jsonl.gz").read_bytes())
    for db in ("a.duckdb", "b.duckdb"):  # the same state on both, whatever ran before
        assert kv("ingest", "traces", "--db", db, cwd=root).returncode == 0
    before = srv.commands()
    outs = []
    for db in ("a.duckdb", "b.duckdb"):
        r = subprocess.run(
            KV + ["ingest", "-", "--db", db, "--json"],
            input=data,
            cwd=root,
            env=_env(),
            capture_output=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        outs.append({k: v for k, v in json.loads(r.stdout).items() if k != "files"})
    assert srv.commands() == before + 1
    assert outs[0] == outs[1] and outs[0]["requests_added"] + outs[0]["duplicates_skipped"] == 1947


def test_socket_is_private_and_refuses_other_commands(served):
    srv, root = served
    sock = paths.socket_path(str(srv.db))
    assert os.stat(sock).st_mode & 0o777 == 0o600
    # The launcher keeps some commands local: they must not reach the server.
    before = srv.commands()
    r = kv("report", "--help", "--db", "a.duckdb", cwd=root)
    assert r.returncode == 0 and srv.commands() == before


def test_stale_socket_falls_back_to_a_local_run(tmp_path):
    db = tmp_path / "kv.duckdb"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(paths.socket_path(str(db)))
    s.close()  # a socket file nobody listens on (a killed server)
    t = time.monotonic()
    r = kv("ingest", SAMPLES / "otlp", "--db", db, "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t < 30
    assert "requests added" in r.stdout.decode()


def test_stop_and_idle_exit(tmp_path):
    db = tmp_path / "kv.duckdb"
    srv = Served(db)
    try:
        r = kv("serve", "--stop", "--db", db, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert srv.proc.wait(timeout=20) == 0
        assert not os.path.exists(paths.socket_path(str(db))) and not os.path.exists(paths.pid_path(str(db)))
        assert kv("ingest", SAMPLES / "otlp", "--db", db, "--quiet", cwd=tmp_path).returncode == 0  # local again
        r = kv("serve", "--stop", "--db", db, cwd=tmp_path)
        assert r.returncode == 1 and b"no kvtrace serve" in r.stderr
    finally:
        srv.stop()
    idle = Served(db, "--idle-exit", "2s")
    try:
        assert idle.proc.wait(timeout=20) == 0
        assert not os.path.exists(paths.socket_path(str(db)))
    finally:
        idle.stop()


def test_launcher_decides_what_to_forward(tmp_path, monkeypatch):
    assert db_arg(["report", "--db", "x.duckdb"]) == (True, "x.duckdb")
    assert db_arg(["report", "--db=y.duckdb", "--db", "z.duckdb"]) == (True, "z.duckdb")
    assert db_arg(["report"]) == (False, None)
    db = tmp_path / "kv.duckdb"
    sock = paths.socket_path(os.path.realpath(db))
    Path(sock).touch()
    env = {"KVTRACE_DB": str(db)}
    assert forward_target(["report", "--format", "json"], env) == (sock, os.path.realpath(db))
    assert forward_target(["report", "--db", str(db)], {}) == (sock, os.path.realpath(db))
    assert forward_target(["report", "--db", str(tmp_path / "other.duckdb")], env) is None
    for argv in (["report", "--help"], ["serve"], ["collect"], ["synth", "x"], ["run", "daily"], []):
        assert forward_target(argv, env) is None, argv
    # A lake on Spark: its driver and JVM belong to the command's process, not a fork of the server.
    for argv in (["reuse", "--lake", "l/"], ["reuse", "--lake=l/"], ["reuse", "--engine", "spark", "--lake", "l"]):
        assert forward_target(argv, env) is None, argv
    assert forward_target(["ingest", "-"], env) is not None  # stdin travels with the command
    assert forward_target(["report"], env | {"KVTRACE_NO_SERVE": "1"}) is None
    assert forward_target(["run", "daily", "--db", str(db)], {}) is not None


def test_long_warehouse_paths_get_a_short_socket(tmp_path):
    deep = "/tmp/" + "d" * 150 + "/kv.duckdb"
    sock = paths.socket_path(deep)
    assert len(sock) < 108 and sock.startswith(paths.private_dir())
    assert paths.socket_path(str(tmp_path / "kv.duckdb")).endswith("kv.duckdb.serve.sock")


def test_the_collector_ingests_beside_a_server(served):
    from kvtrace.collect import worker

    srv, root = served
    spool = root / "spool"
    spool.mkdir()
    logs = next(p for p in sorted((SAMPLES / "otlp").iterdir()) if "log" in p.name)
    with gzip.open(logs) as src, open(spool / "seg-1.jsonl", "wb") as dst:  # segments are plain JSON lines
        shutil.copyfileobj(src, dst)
    before = srv.commands()
    totals = worker.ingest_segments(str(spool), str(srv.db), 3600)
    assert totals["segments"] == 1 and totals["failed"] == 0
    assert srv.commands() == before  # the worker opens the warehouse itself
    assert (spool / "ingested" / "seg-1.jsonl.done").exists()


def _after_progress(out: bytes) -> bytes:
    """What a terminal keeps once rich's transient progress display (hidden cursor) has ended."""
    shown = out.rfind(b"\x1b[?25h")
    assert shown >= 0, out[:200]
    return out[shown:]


def _in_terminal(args, cwd: Path, cols: int) -> tuple[bytes, int]:
    """Run kvtrace with stdin/stdout/stderr on a pseudo-terminal ``cols`` wide."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    env = _env(TERM="xterm-256color")
    env.pop("COLUMNS", None)
    p = subprocess.Popen(KV + [str(a) for a in args], cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return out, p.wait(timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_a_peer_of_another_uid_is_refused():
    import tempfile

    from kvtrace.wire import client, protocol

    folder = Path(tempfile.mkdtemp(prefix="kvtrace-serve-uid-"))  # reachable by another user
    os.chmod(folder, 0o755)
    srv = Served(folder / "kv.duckdb")
    try:
        sock = paths.socket_path(str(srv.db))
        os.chmod(sock, 0o666)  # let the other user reach the check behind the file mode
        pid = os.fork()
        if pid == 0:  # the child: become nobody and ask for a status
            try:
                os.setgid(65534)
                os.setuid(65534)
                # a bare connection: kvtrace's own client would not even talk to root's socket
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(client.HELLO_TIMEOUT_S)
                    s.connect(sock)
                    try:
                        protocol.send(s, protocol.PING)
                    except OSError:  # refused before it read: the answer is there
                        pass
                    answer = protocol.recv(s)
                os._exit(0 if answer is not None and answer[0] == protocol.REFUSED else 1)
            except BaseException:
                os._exit(2)
        _, code = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(code) == 0
        os.chmod(sock, 0o600)
        assert status(srv.db)["pid"] == srv.pid  # and it still serves its own user
    finally:
        srv.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_served_reads_cannot_write_and_parser_sql_is_not_a_named_query(served):
    srv, root = served
    assert kv("ingest", "traces", "--db", "a.duckdb", cwd=root).returncode == 0
    before = kv("query", "usage_bounds", "--format", "csv", "--db", "a.duckdb", cwd=root).stdout
    # the merge script is the parser's, not a query: refused, served or not, and nothing changes
    for db in ("a.duckdb", "b.duckdb"):
        r = kv("query", "ingest/merge_requests", "--db", db, cwd=root)
        assert r.returncode == 1 and b"no query named" in r.stderr and b"Traceback" not in r.stderr
    assert kv("query", "usage_bounds", "--format", "csv", "--db", "a.duckdb", cwd=root).stdout == before
    assert status(srv.db)["pid"] == srv.pid


# -- a socket planted by someone else is never trusted --------------------------------------------


class Impostor:
    """A process (as ``uid``, or as us) listening on ``sock`` that answers every connection as a
    server that ran the command (accepted, exit 0) and reports the bytes it received."""

    def __init__(self, sock: str, uid: int | None = None, chown_to: int | None = None):
        from kvtrace.wire import protocol

        ready_r, ready_w = os.pipe()
        self.got_r, got_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(ready_r)
                os.close(self.got_r)
                if uid is not None:
                    os.setgid(uid)
                    os.setuid(uid)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.bind(sock)
                os.chmod(sock, 0o600)
                s.listen(8)
                os.write(ready_w, b"1")
                while True:
                    conn, _ = s.accept()
                    conn.settimeout(2)
                    try:
                        data = conn.recv(1 << 16)
                        protocol.send(conn, protocol.ACCEPTED)
                        protocol.send(conn, protocol.EXIT, b"0")
                    except OSError:
                        data = b""
                    os.write(got_w, b"%d\n" % len(data))
                    conn.close()
            finally:
                os._exit(0)
        os.close(ready_w)
        os.close(got_w)
        assert os.read(ready_r, 1) == b"1", "the impostor did not start"
        os.close(ready_r)
        if chown_to is not None:
            os.chown(sock, chown_to, chown_to)

    def received(self) -> list[int]:
        """Bytes received per connection so far (stops the impostor)."""
        self.kill()
        with os.fdopen(self.got_r, "rb") as fh:
            return [int(n) for n in fh.read().split()]

    def kill(self) -> None:
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0


@pytest.fixture
def impostor():
    """Start impostors with ``impostor(sock, ...)``; every one is killed when the test ends."""
    started = []

    def start(*args, **kwargs) -> Impostor:
        started.append(Impostor(*args, **kwargs))
        return started[-1]

    yield start
    for one in started:
        one.kill()


def _ingest_beside(folder: Path, db: Path, **env) -> subprocess.CompletedProcess:
    return kv("ingest", SAMPLES / "otlp", "--db", db, "--json", cwd=folder, **env)


def _refused_and_ran_here(r: subprocess.CompletedProcess, impostor: Impostor, why: bytes) -> None:
    assert r.returncode == 0, r.stderr
    assert b"not using the server socket" in r.stderr and why in r.stderr, r.stderr
    assert json.loads(r.stdout)["requests_added"] > 0  # the ingest really happened, here
    assert sum(impostor.received()) == 0  # and the impostor got nothing


@pytest.fixture
def open_folder():
    """A folder every user can create files in (sticky, like /tmp)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="kvtrace-plant-"))
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_socket_of_another_user_beside_the_warehouse_is_refused(open_folder, impostor):
    from tests.conftest import require_other_uid

    nobody = require_other_uid()
    db = open_folder / "kv.duckdb"
    imp = impostor(paths.socket_path(str(db)), uid=nobody)
    _refused_and_ran_here(_ingest_beside(open_folder, db), imp, b"belongs to uid %d" % nobody)
    r = kv("serve", "--stop", "--db", db, cwd=open_folder)  # nor is a stop sent to it
    assert r.returncode == 1 and b"not stopping what listens" in r.stderr and b"Traceback" not in r.stderr, r.stderr


def test_a_socket_of_ours_with_another_user_behind_it_is_refused(open_folder, impostor):
    from tests.conftest import require_other_uid

    nobody = require_other_uid()
    db = open_folder / "kv.duckdb"
    imp = impostor(paths.socket_path(str(db)), uid=nobody, chown_to=os.geteuid())
    assert os.stat(paths.socket_path(str(db))).st_uid == os.geteuid()  # the file looks like ours
    _refused_and_ran_here(_ingest_beside(open_folder, db), imp, b"runs as uid %d" % nobody)


def test_a_private_socket_folder_made_by_another_user_is_refused(open_folder, impostor, monkeypatch):
    from tests.conftest import require_other_uid

    nobody = require_other_uid()
    work = open_folder / ("w" * 120)  # a long warehouse path: its socket goes to the private folder
    work.mkdir()
    db = work / "kv.duckdb"
    runtime = open_folder / "run"
    runtime.mkdir()
    os.chmod(runtime, 0o1777)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    private, sock = paths.private_dir(), paths.socket_path(os.path.realpath(db))
    assert os.path.dirname(sock) == private
    pid = os.fork()
    if pid == 0:  # the other user creates the folder first
        os.setgid(nobody)
        os.setuid(nobody)
        os.mkdir(private, 0o700)
        os._exit(0)
    os.waitpid(pid, 0)
    imp = impostor(sock, uid=nobody)
    _refused_and_ran_here(
        _ingest_beside(work, db, **env), imp, b"the folder %s belongs to uid %d" % (private.encode(), nobody)
    )
    # and `kvtrace serve` will not put its socket there either
    r = kv("serve", "--db", db, cwd=work, **env)
    assert r.returncode == 1 and b"belongs to uid" in r.stderr, r.stderr


def test_a_socket_with_a_wrong_mode_or_in_a_folder_others_can_write_is_refused(tmp_path, impostor):
    db = tmp_path / "kv.duckdb"
    sock = paths.socket_path(str(db))
    imp = impostor(sock)
    os.chmod(sock, 0o666)
    _refused_and_ran_here(_ingest_beside(tmp_path, db), imp, b"has mode 0666, not 0600")
    os.unlink(sock)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # anyone can replace files here (no sticky bit)
    db = shared / "kv.duckdb"
    imp = impostor(paths.socket_path(str(db)))
    _refused_and_ran_here(_ingest_beside(shared, db), imp, b"is writable by other users")


def test_ctrl_c_on_a_forwarded_ingest_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C in the client of a served ingest: one ``Interrupted:`` line, exit 130; the command's
    process rolls back the file in progress, the server stays up, and the same command again
    stores every request once."""
    src = tmp_path / "traces"
    src.mkdir()
    data = gzip.decompress((SAMPLES / "otlp" / "logs.jsonl.gz").read_bytes())
    for i in range(40):  # the same requests, forty files
        (src / f"logs-{i:02d}.jsonl").write_bytes(data)
    db = tmp_path / "kv.duckdb"
    srv = Served(db)
    try:
        p = subprocess.Popen(
            KV + ["ingest", "traces", "--db", str(db), "-q"],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.5)  # forwarded, and some files in
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        if p.returncode == 0:  # finished before the signal: nothing to check
            pytest.skip("the ingest finished before Ctrl-C")
        assert p.returncode == 130, err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("Interrupted: "), err
        again = kv("ingest", "traces", "--db", str(db), "--json", cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        r = kv("query", "usage_bounds", "--db", str(db), "--format", "json", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert srv.proc.poll() is None  # the server is still up
    finally:
        srv.stop()
    from kvtrace.store import Store

    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM requests") == 1947
        assert s.scalar("SELECT count(*) FROM ingested_files") == 40


def test_a_forwarded_ingest_on_a_full_disk_is_one_line_error(small_tmpfs):
    """A full disk under a served warehouse: the forwarded ingest ends with one ``Error:`` line
    naming the warehouse and a non-zero exit, not a traceback; once space returns the same command
    stores everything, through the same server."""
    from tests.conftest import fill

    vol = small_tmpfs("24m")
    shutil.copytree(SAMPLES / "otlp", vol / "traces")
    db = vol / "kv.duckdb"
    srv = Served(db)
    try:
        filler = fill(vol)
        r = kv("ingest", "traces", "--db", "kv.duckdb", cwd=vol)
        err = r.stderr.decode()
        assert r.returncode != 0 and status(db)["commands"] == 1, err
        assert "Traceback" not in err, err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines[-1].startswith(("Error: ", "Interrupted: ")) and "kv.duckdb" in lines[-1], err
        os.unlink(filler)
        r = kv("ingest", "traces", "--db", "kv.duckdb", "--json", cwd=vol)
        assert r.returncode == 0, r.stderr
        assert status(db)["commands"] == 2
    finally:
        srv.stop()


def test_a_command_from_a_deleted_working_folder_is_one_error_line(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()

    def enter_and_delete():
        os.chdir(gone)
        os.rmdir(gone)

    r = subprocess.run(
        KV + ["report", "--db", "x.duckdb"], env=_env(), capture_output=True, timeout=60, preexec_fn=enter_and_delete
    )
    assert r.returncode == 1 and r.stderr.startswith(b"Error: ") and b"Traceback" not in r.stderr, r.stderr
