"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) -> one row per response.

A batch parser: Codex writes one rollout file per session (``codex exec resume`` appends to it),
so the pipeline hands it many files at once. The per-record work is SQL
(``queries/ingest/codex_rollout.sql``) over the candidate lines.

Normalization (``docs/agents.md``): the OpenAI Responses API counts cached and written tokens
inside ``input_tokens``, so uncached input = ``input_tokens`` − ``cached_input_tokens`` −
``cache_write_input_tokens`` (clipped at 0; a clip is reported as a ``Reject`` and the row is
kept), cache read = ``cached_input_tokens``, cache write = ``cache_write_input_tokens`` (no TTL
split: ``cache_write_unknown_tokens``), output = ``output_tokens`` (reasoning included). The key is
the content key shared with Codex's OTLP events and spans (``queries/ingest/agent_macros.sql``),
so a response ingested from its rollout and from telemetry is one row.

Counted in ``Parsed.unknown``: ``token_count`` events without usage (rate limits only), usage
records without usage, duplicate copies of a response, and a torn last line. Rejected (the line
is named): malformed JSON on a candidate line, a count that is not a whole number from 0 (the
field is named), an unreadable timestamp. Which lines are copies of one response is told by
their place in the file, not by their counts (``queries/ingest/codex_rollout.sql``).
Lines of other record types are not parsed.
"""

from __future__ import annotations

from pathlib import Path

from kvtrace.ingest.agent_files import BAD_COUNT, connect, line_rejects, read_files, requests_table
from kvtrace.ingest.base import Parsed, Reject
from kvtrace.store import load_query

_REJECTS = {
    "malformed": ("malformed JSON", None),
    "bad_count": BAD_COUNT,
    "bad_timestamp": ("missing or unreadable timestamp (want ISO 8601)", "timestamp"),
}
_NOT_COUNTED = ("usage", "other", "session_meta", "turn_context")


def parse(paths: list[Path]) -> Parsed:
    """Read a batch of rollout files into one ``requests`` table.

    Args:
        paths: rollout files (``.jsonl``, ``.jsonl.gz``), typically ``~/.codex/sessions``.

    Returns:
        A :class:`~kvtrace.ingest.base.Parsed` with ``requests``, rejects naming file and line,
        and counts of records not used.
    """
    paths = [Path(p) for p in paths]
    parsed = Parsed()
    table, parsed.rejects = read_files(paths)
    con = connect()
    try:
        con.execute(load_query("ingest/agent_macros").sql)
        con.register("cx_raw", table)
        con.execute(load_query("ingest/codex_rollout").sql)
        parsed.lines = int(
            con.execute(
                "SELECT coalesce(sum(len(string_split(content, chr(10))) "
                "- CASE WHEN ends_with(content, chr(10)) THEN 1 ELSE 0 END), 0) FROM cx_raw"
            ).fetchone()[0]
        )
        parsed.rejects += line_rejects(con, "cx_lines", paths, _REJECTS)
        for kind, n in con.execute("SELECT kind, count(*) FROM cx_lines GROUP BY kind").fetchall():
            if kind not in _NOT_COUNTED and kind not in _REJECTS:
                parsed.unknown[f"codex-rollout:{kind}"] += int(n)
        used = con.execute("SELECT count(*) FROM cx_requests").fetchone()[0]
        usage_lines = con.execute("SELECT count(*) FROM cx_lines WHERE kind = 'usage'").fetchone()[0]
        if usage_lines > used:
            parsed.unknown["codex-rollout:duplicate_usage"] += int(usage_lines - used)
        for file_idx, lineno, total, cached, written in con.execute(
            "SELECT file_idx, lineno, raw_input, raw_cached, raw_write FROM cx_requests "
            "WHERE clipped ORDER BY file_idx, lineno"
        ).fetchall():
            parsed.rejects.append(
                Reject(
                    lineno,
                    f"input_tokens {total} is less than cached_input_tokens {cached or 0} + "
                    f"cache_write_input_tokens {written or 0}: uncached input stored as 0 (row kept)",
                    field="input_tokens",
                    path=str(paths[file_idx]),
                )
            )
        parsed.requests = requests_table(con, "cx_requests")
    finally:
        con.close()
    return parsed
