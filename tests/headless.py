"""Open a local HTML file in headless Chromium with networking off and return the rendered DOM.

Networking is off twice over: the browser runs in a fresh network namespace with only loopback
(``unshare -n``, when the machine allows it) and is told to resolve every host to nothing and to
use a dead proxy. The page's own script records chart results and errors in ``#kvtrace-status``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-extensions",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--hide-scrollbars",
]


def _netns_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    return []


def dump_dom(
    chromium: str, page: Path, profile_dir: Path, budget_ms: int = 30_000, timeout_s: float = 120, extra: list[str] = ()
) -> str:
    """The DOM after scripts ran (virtual time lets vega-embed's promises settle); ``extra``: more
    Chromium flags (``--window-size=1400,3000``)."""
    cmd = [
        *_netns_prefix(),
        chromium,
        *FLAGS,
        *extra,
        f"--user-data-dir={profile_dir}",
        f"--virtual-time-budget={budget_ms}",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    assert res.returncode == 0, f"chromium failed ({res.returncode}): {res.stderr[-2000:]}"
    return res.stdout


class Dom(HTMLParser):
    """Just enough of a DOM: attributes by element id, chart nodes, svg counts, visible text."""

    def __init__(self, text: str):
        super().__init__()
        self.by_id: dict[str, dict] = {}
        self.id_text: dict[str, list[str]] = {}
        self.charts: dict[str, dict] = {}
        self.svg_in_chart: dict[str, int] = {}
        self._stack: list[tuple[str, str | None]] = []  # (tag, chart id it belongs to)
        self._open_ids: list[str] = []
        self._skip = 0
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        chart = a.get("data-chart") or (self._stack[-1][1] if self._stack else None)
        if "data-chart" in a:
            self.charts[a["data-chart"]] = a
        if tag == "svg" and chart and "marks" in (a.get("class") or ""):
            self.svg_in_chart[chart] = self.svg_in_chart.get(chart, 0) + 1
        if "id" in a:
            self.by_id[a["id"]] = a
        if tag in ("script", "style"):
            self._skip += 1
        if tag not in ("meta", "br", "img", "input", "link", "hr", "path", "rect", "line", "circle"):
            self._stack.append((tag, chart))

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                del self._stack[i:]
                break
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)

    def visible_text(self) -> str:
        return re.sub(r"\s+", " ", " ".join(self.text))
