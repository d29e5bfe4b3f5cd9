"""Gemini CLI chat logs (``~/.gemini/tmp/<project>/chats/session-*.json[l]``) -> one row per response.

A batch parser (one file per session). The per-record work is SQL
(``queries/ingest/gemini_chats.sql``): both the JSONL layout of current versions (a header line,
one line per message, ``$set`` patch lines) and the single JSON document of older ones.

Normalization (``docs/agents.md``): ``tokens.input`` is the API's ``promptTokenCount`` and
includes ``tokens.cached``, so uncached input = input − cached (clipped at 0; a clip is reported
as a ``Reject`` and the row is kept) + ``tokens.tool`` (tool-use prompt tokens, input outside the
prompt count); cache read = cached; no cache write; output = ``tokens.output`` +
``tokens.thoughts`` (thinking is billed as output). The key is the content key shared with the
CLI's ``gemini_cli.api_response`` events (``queries/ingest/agent_macros.sql``), so a response
ingested from its chat log and from telemetry is one row. Chat logs hold only the main
conversation: the CLI's utility calls (its model router) appear only in telemetry.

Counted in ``Parsed.unknown``: gemini messages that never got tokens, prompt-log entries
(``logs.json``), a torn last line. Rejected: malformed JSON on a candidate line, a count that
is not a whole number from 0 (the field is named), an unreadable timestamp. Copies of one
message share its id; two messages with the same counts stay two.
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


def parse(paths: list[Path]) -> Parsed:
    """Read a batch of Gemini CLI chat files into one ``requests`` table.

    Args:
        paths: chat files (``.jsonl``, ``.json``, ``.gz`` too), typically ``~/.gemini/tmp``.

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
        con.register("gm_raw", table)
        con.execute(load_query("ingest/gemini_chats").sql)
        parsed.lines = int(
            con.execute(
                "SELECT coalesce(sum(CASE WHEN json_valid(content) THEN 1 ELSE len(string_split(content, chr(10))) "
                "- CASE WHEN ends_with(content, chr(10)) THEN 1 ELSE 0 END END), 0) FROM gm_raw"
            ).fetchone()[0]
        )
        parsed.rejects += line_rejects(con, "gm_items", paths, _REJECTS)
        for kind, n in con.execute(
            "SELECT kind, sum(n) FROM gm_items WHERE kind IN ('prompt_log', 'torn_last_line') GROUP BY kind"
        ).fetchall():
            parsed.unknown[f"gemini-chat:{kind}"] += int(n)
        # a message written before its tokens were known is not missing if a later copy has them
        untokened = con.execute(
            "SELECT count(DISTINCT coalesce(msg.id, file_idx || ':' || lineno)) FROM gm_items "
            "WHERE kind = 'gemini_without_tokens' AND coalesce(msg.id, '') NOT IN "
            "(SELECT coalesce(msg.id, '') FROM gm_items WHERE kind = 'usage')"
        ).fetchone()[0]
        if untokened:
            parsed.unknown["gemini-chat:gemini_without_tokens"] += int(untokened)
        for file_idx, lineno, total, cached in con.execute(
            "SELECT file_idx, lineno, raw_input, raw_cached FROM gm_requests WHERE clipped ORDER BY file_idx, lineno"
        ).fetchall():
            parsed.rejects.append(
                Reject(
                    lineno,
                    f"tokens.input {total} is less than tokens.cached {cached}: uncached input "
                    "stored as the tool tokens only (row kept)",
                    field="tokens.input",
                    path=str(paths[file_idx]),
                )
            )
        parsed.requests = requests_table(con, "gm_requests")
    finally:
        con.close()
    return parsed
