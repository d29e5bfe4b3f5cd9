"""A report in any of its formats, to a file, a folder or a string: the one writer behind
``kvtrace report --out`` and the files of scheduled runs (``kvtrace run``).

Text formats (``table``, ``json``, ``md``, ``html``) are one file each; ``png`` and ``svg`` are
one file per chart in a folder. Every file is written atomically.
"""

from __future__ import annotations

import io
from pathlib import Path

from kvtrace.report import render
from kvtrace.report.files import write_atomic
from kvtrace.report.html import IMAGE_FORMATS, export_images, render_html

TEXT_FORMATS = ("table", "json", "md", "html")
FORMATS = TEXT_FORMATS + IMAGE_FORMATS


def render_text(data: dict, fmt: str, charts: list | None = None) -> str:
    """The report as one text format (``charts``: specs already built from ``data``, for html)."""
    if fmt == "html":
        return render_html(data, charts=charts)
    buf = io.StringIO()
    if fmt == "json":
        render.render_json(data, buf)
    elif fmt == "md":
        render.render_markdown(data, buf)
    elif fmt == "table":
        from rich.console import Console

        render.render_terminal(data, Console(file=buf, width=120))
    else:
        raise ValueError(f"not a text format: {fmt}")
    return buf.getvalue()


def write_report(data: dict, fmt: str, out: str | Path, charts: list | None = None) -> list[Path]:
    """Write the report as ``fmt`` to ``out``: the file for a text format, the folder of chart
    files for ``png``/``svg``. Returns the files written."""
    if fmt in IMAGE_FORMATS:
        return export_images(data, out, formats=(fmt,), charts=charts)
    return [write_atomic(out, render_text(data, fmt, charts).encode())]
