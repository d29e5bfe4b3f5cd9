"""The import contract: kvtrace's packages form a stack and imports only go down it.

The order, top first (a package may import its own layer's modules and any layer below it; two
packages of one layer may not import each other):

    cli (with the launcher)
    schedule, serve
    report
    simulate
    replay
    analyze
    collect                       (it stores what it receives with ingest's pipeline)
    ingest, synth                 (sources of requests)
    store
    core: errors, units, window, wire (the socket client), the package's __init__

Every import of a kvtrace module counts, at the top of a file or inside a function. kvtrace's
modules are imported at the top of the file; an import inside a function is kept only where
start-up matters: when what it imports brings a heavy library (``HEAVY``: every command imports
every command-line module, and ``kvtrace.replay`` brings numpy), or for the few reasons listed in
``KEPT_INSIDE``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kvtrace"
LAYERS = [
    {"cli"},
    {"schedule", "serve"},
    {"report"},
    {"simulate"},
    {"replay"},
    {"analyze"},
    {"collect"},
    {"ingest", "synth"},
    {"store"},
    {"core"},
]
CORE_MODULES = {"errors", "units", "window", "wire", "__init__"}
# Imported only inside functions: their import costs tens to hundreds of milliseconds.
HEAVY = (
    "numpy",
    "pyarrow",
    "duckdb",
    "polars",
    "numba",
    "altair",
    "vl_convert",
    "grpc",
    "starlette",
    "uvicorn",
    "croniter",
    "opentelemetry",
    "msgspec",
    "pyspark",
)
# Light imports kept inside a function, with the reason.
KEPT_INSIDE = {
    (
        "kvtrace/launch.py",
        "from kvtrace.wire.client import forward",
    ): "the launcher of a command with no server must not pay for _socket (~5 ms)",
    (
        "kvtrace/launch.py",
        "from kvtrace.cli import main as run_cli",
    ): "a forwarded command's launcher never loads the command line",
    ("kvtrace/cli/serve.py", "from kvtrace.cli import command"): "kvtrace.cli imports kvtrace.cli.serve to register it",
}


def _unit(module: str) -> str:
    """The package (``report``) or ``core``/``cli`` a dotted kvtrace module belongs to."""
    parts = module.split(".")
    if len(parts) == 1:
        return "core"
    name = parts[1]
    if name in ("launch", "__main__"):
        return "cli"
    if name in CORE_MODULES:
        return "core"
    return name


def _is_module(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").exists()


def _imports() -> list[tuple[str, str, str, bool]]:
    """(importing unit, imported unit, where, inside a function) of every kvtrace import."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        me = _unit(".".join(rel.parts))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # ``from kvtrace import x``: the module x, or (``__version__``) the package itself
                names = (
                    [f"kvtrace.{a.name}" if _is_module(a.name) else "kvtrace" for a in node.names]
                    if node.module == "kvtrace"
                    else [node.module]
                )
            else:
                continue
            for name in names:
                if name == "kvtrace" or name.startswith("kvtrace."):
                    out.append((me, _unit(name), f"{rel}.py:{node.lineno}", node.col_offset > 0))
    return out


def _layer(unit: str) -> int:
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    raise AssertionError(f"kvtrace/{unit} is in no layer: add it to LAYERS in {Path(__file__).name}")


def test_every_package_has_a_layer():
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            _layer(_unit(f"kvtrace.{path.name}"))


def test_imports_only_go_down_the_stack():
    wrong = [
        f"{where}: {me} imports {other}"
        for me, other, where, _ in _imports()
        if other != me and _layer(other) <= _layer(me)
    ]
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


_PROBE = """
import json, os, sys
heavy, statements = json.loads(sys.stdin.read())
out = {}
for stmt in statements:            # each in a fork of this bare interpreter: what it alone loads
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            exec(stmt, {})
            os.write(w, json.dumps([m for m in heavy if m in sys.modules]).encode())
        except BaseException as e:
            os.write(w, json.dumps("error: " + repr(e)).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        out[stmt] = json.loads(fh.read() or "null")
    os.waitpid(pid, 0)
print(json.dumps(out))
"""


def test_kvtrace_modules_are_imported_inside_functions_only_when_heavy():
    import json
    import subprocess
    import sys

    inside: dict[str, list[str]] = {}
    kept = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE.parent))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.col_offset == 0:
                continue
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m == "kvtrace" or m.startswith("kvtrace.") for m in mods) and getattr(node, "level", 0) == 0:
                stmt = ast.unparse(node)
                if (rel, stmt) in KEPT_INSIDE:
                    kept.add((rel, stmt))
                else:
                    inside.setdefault(stmt, []).append(f"{rel}:{node.lineno}")
    assert kept == set(KEPT_INSIDE), f"KEPT_INSIDE names imports no longer there: {set(KEPT_INSIDE) - kept}"
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE],
        input=json.dumps([HEAVY, sorted(inside)]),
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
        check=True,
    )
    loads = json.loads(probe.stdout)
    broken = {stmt: got for stmt, got in loads.items() if isinstance(got, str)}
    assert not broken, f"imports that fail on their own: {broken}"
    light = sorted(f"{where}: {stmt}" for stmt, wheres in inside.items() if not loads[stmt] for where in wheres)
    assert not light, (
        "kvtrace imports inside functions that bring no heavy library; import them at the top "
        "of the file (or add the place to KEPT_INSIDE with its reason):\n" + "\n".join(light)
    )


def test_the_command_line_starts_without_the_numeric_libraries():
    """Every command imports every command-line module (the typer app), so none of them may bring
    numpy, pyarrow, DuckDB, polars or numba with it, directly or through a kvtrace package."""
    import subprocess
    import sys

    heavy = ("numpy", "pyarrow", "duckdb", "polars", "numba")
    code = f"import sys, kvtrace.cli; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
