"""The sample week in both forms (OTLP events with user and organization, transcripts with the
project and thread): the warehouse rows are the same whatever the order and batching of the
ingests, and every request gets its user."""

import gzip
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtrace.ingest import ingest
from kvtrace.store import Store

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces"
TRANSCRIPTS = sorted((SAMPLE / "claude" / "projects").rglob("*.jsonl.gz"))
LOG_LINES = gzip.decompress((SAMPLE / "otlp" / "logs.jsonl.gz").read_bytes()).splitlines(keepends=True)
REQUESTS = 1947  # sample_traces/README.md

ROWS_SQL = "SELECT * FROM requests ORDER BY request_key"


def _tree(root: Path) -> tuple[Path, list[Path]]:
    """The sample week under ``root`` (the same paths in every run: ``ingested_from`` names them),
    the OTLP logs uncompressed so they can be written in pieces as a growing file."""
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(SAMPLE / "claude", root / "claude")
    (root / "otlp").mkdir()
    shutil.copy(SAMPLE / "otlp" / "metrics.jsonl.gz", root / "otlp" / "metrics.jsonl.gz")
    return root / "otlp" / "logs.jsonl", [root / p.relative_to(SAMPLE) for p in TRANSCRIPTS]


def _rows(store: Store) -> tuple[list, list]:
    return store.query(ROWS_SQL), store.query("SELECT * FROM metric_points ORDER BY point_key")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Events first, everything in one ingest each: the rows every other order must give."""
    root = tmp_path_factory.mktemp("order") / "week"
    logs, _ = _tree(root)
    logs.write_bytes(b"".join(LOG_LINES))
    s = Store(memory=True)
    ingest(s, [root / "otlp"])
    ingest(s, [root / "claude"])
    rows = _rows(s)
    s.close()
    return root, rows


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_order_and_batching_of_the_sources_gives_the_same_rows(reference, data):
    root, expected = reference
    logs, transcripts = _tree(root)
    # The transcripts in 1-4 batches; the events as a file that grows in 1-3 pieces (each ingest
    # reads on from where the last stopped); the metrics whole.
    n_tx = data.draw(st.integers(1, 4), label="transcript batches")
    order = data.draw(st.permutations(range(len(transcripts))), label="transcript order")
    batches = [[transcripts[k] for k in order[i::n_tx]] for i in range(n_tx)]
    cuts = sorted(data.draw(st.lists(st.integers(1, len(LOG_LINES) - 1), max_size=2, unique=True), label="log cuts"))
    pieces = list(zip([0] + cuts, cuts + [len(LOG_LINES)]))
    units = [("tx", b) for b in batches] + [("logs", p) for p in pieces] + [("metrics", None)]
    units = [units[k] for k in data.draw(st.permutations(range(len(units))), label="order")]
    log_ends = iter(end for _, end in pieces)  # the file only grows: pieces in line order
    s = Store(memory=True)
    for kind, what in units:
        if kind == "tx":
            ingest(s, what)
        elif kind == "logs":
            logs.write_bytes(b"".join(LOG_LINES[: next(log_ends)]))
            ingest(s, [logs])
        else:
            ingest(s, [root / "otlp" / "metrics.jsonl.gz"])
    got = _rows(s)
    s.close()
    assert len(got[0]) == REQUESTS
    differ = [(a, b) for a, b in zip(got[0], expected[0]) if a != b]
    assert not differ, f"{len(differ)} rows differ, first: {differ[0]}"
    assert got == expected


@pytest.mark.parametrize("order", ["folder", "transcripts-first", "events-first"])
def test_every_request_of_the_sample_week_gets_its_user_and_project(order):
    """``make demo`` ingests the folder (the walk reaches claude/ before otlp/); the README
    names the transcripts first."""
    s = Store(memory=True)
    if order == "folder":
        ingest(s, [SAMPLE])
    else:
        parts = [[SAMPLE / "claude" / "projects"], sorted((SAMPLE / "otlp").glob("*.jsonl.gz"))]
        for paths in parts if order == "transcripts-first" else parts[::-1]:
            ingest(s, paths)
    assert s.query("SELECT count(*), count(user_id), count(org_id), count(DISTINCT user_id) FROM requests") == [
        (REQUESTS, REQUESTS, REQUESTS, 6)
    ]
    # the 4 compaction requests are only in the events: no transcript names their project
    assert s.scalar("SELECT count(project) FROM requests") == REQUESTS - 4
    s.close()


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.sampled_from(["none", "main", "side", "both"]),
            st.integers(1, 9),
            st.booleans(),
            st.booleans(),
            st.booleans(),
        ),
        min_size=1,
        max_size=5,
    ),
    st.data(),
)
def test_two_sources_merge_to_the_same_rows_in_any_order_and_batching(requests, data):
    """Property over the merge itself: an event (user, organization, cost, a write of unknown
    split, its own attributes; with or without its request id) and transcript copies (the
    main-thread copy and a sidechain replay of it; project, thread, 5m split; with the request id
    or, as behind a gateway that drops it, keyed by the message id; a sidechain replay may carry
    a request id of its own) of each request, in batches of one source as the pipeline makes
    them, in any order: the same rows, every column."""
    from kvtrace.ingest.pipeline import IngestSummary, _merge
    from tests.builders import parsed

    copies = {"otlp-log": [], "claude-transcript": []}
    for i, (event, tx, out, event_has_id, tx_has_id, side_own_id) in enumerate(requests):
        common = dict(ts=100 * i, session_id="s", input_tokens=3, cache_read_tokens=1000 * i)
        rid = f"req_{i}"
        if event:
            copies["otlp-log"].append(
                dict(
                    common,
                    request_key=rid if event_has_id else f"otlp:{i}",
                    request_id=rid if event_has_id else None,
                    source="otlp-log",
                    user_id="u1",
                    org_id="o1",
                    cost_usd=0.5 + i,
                    cache_write_unknown_tokens=40,
                    output_tokens=out,
                    thread_id="main",
                    attributes=f'{{"prompt.id": "p{i}", "query_source": "main"}}',
                )
            )
        transcript = dict(
            common,
            message_id=f"msg_{i}",
            source="claude-transcript",
            project="/src/app",
            cache_write_5m_tokens=40,
            attributes=f'{{"cwd": "/src/app", "version": "2.1.{i}"}}',
        )
        if tx in ("main", "both"):
            copies["claude-transcript"].append(
                dict(
                    transcript,
                    request_key=rid if tx_has_id else f"msg_{i}",
                    request_id=rid if tx_has_id else None,
                    output_tokens=out,
                    thread_id="main",
                )
            )
        if tx in ("side", "both"):
            side_id = f"req_{i}_side" if side_own_id else rid
            copies["claude-transcript"].append(
                dict(
                    transcript,
                    request_key=side_id if tx_has_id else f"msg_{i}",
                    request_id=side_id if tx_has_id else None,
                    output_tokens=out + 1,
                    is_sidechain=True,
                    thread_id="agent-a",
                )
            )
    batches = []
    for source, rows in copies.items():
        k = data.draw(st.integers(1, 2), label=f"{source} batches")
        batches += [rows[j::k] for j in range(k) if rows[j::k]]

    def run(order):
        s = Store(memory=True)
        for b in order:
            with s.transaction():
                _merge(s, parsed(*b), IngestSummary())
        rows = s.query(ROWS_SQL)
        s.close()
        return rows

    first = run(batches)
    again = run([batches[k] for k in data.draw(st.permutations(range(len(batches))), label="order")])
    assert again == first
    assert run(batches + batches) == first  # repeats change nothing


def test_a_sidechain_copy_under_its_own_request_id_folds_into_its_request_in_every_order():
    """The event (request id), the main-thread transcript copy (the same request id and the
    message id) and a sidechain replay under a request id of its own (the same message id): when
    the replay and the event are stored first, nothing links them until the main copy arrives,
    which then shows the two stored rows to be one request. Every order gives one row, the same."""
    import itertools

    from kvtrace.ingest.pipeline import IngestSummary, _merge
    from tests.builders import parsed

    common = dict(ts=0, session_id="s", input_tokens=3, cache_read_tokens=0)
    event = dict(
        common,
        request_key="req_0",
        request_id="req_0",
        source="otlp-log",
        user_id="u1",
        cost_usd=0.25,
        cache_write_unknown_tokens=40,
        output_tokens=5,
        thread_id="main",
    )
    copy = dict(common, message_id="msg_0", source="claude-transcript", project="/src/app", cache_write_5m_tokens=40)
    main = dict(copy, request_key="req_0", request_id="req_0", output_tokens=5, thread_id="main")
    side = dict(
        copy, request_key="req_0_side", request_id="req_0_side", output_tokens=6, is_sidechain=True, thread_id="agent-a"
    )
    results = set()
    for order in itertools.permutations([event, main, side]):
        s = Store(memory=True)
        summaries = []
        for row in order:
            summaries.append(IngestSummary())
            with s.transaction():
                _merge(s, parsed(row), summaries[-1])
        results.add(tuple(s.query(ROWS_SQL)))
        # the counts add up: rows added less rows folded is what is stored, and none is negative
        assert all(x.requests_added >= 0 and x.requests_folded >= 0 for x in summaries)
        assert sum(x.requests_added - x.requests_folded for x in summaries) == 1
        s.close()
    assert len(results) == 1
    (rows,) = results
    assert len(rows) == 1


def test_requests_that_only_share_their_counts_are_never_folded_together():
    """Two requests of one session with the same prompt-side counts a minute apart, their events
    without request ids: a transcript copy may be matched to either event by counts, but a match
    by counts is a guess and links nothing: every order keeps two requests."""
    from kvtrace.ingest.pipeline import IngestSummary, _merge
    from tests.builders import parsed

    common = dict(session_id="s", input_tokens=3, cache_read_tokens=1000)
    ev1 = dict(
        common, ts=0, request_key="h1", source="otlp-log", output_tokens=5, user_id="u1", cache_write_unknown_tokens=40
    )
    ev2 = dict(ev1, ts=2, request_key="h2", output_tokens=9)
    tx1 = dict(
        common,
        ts=1,
        request_key="req_1",
        request_id="req_1",
        message_id="msg_1",
        source="claude-transcript",
        output_tokens=5,
        thread_id="main",
        cache_write_5m_tokens=40,
    )
    tx2 = dict(tx1, ts=3, request_key="req_2", request_id="req_2", message_id="msg_2", output_tokens=9)
    for batches in (
        [[ev1, ev2], [tx1], [tx2]],
        [[tx1, tx2], [ev1, ev2]],
        [[ev1, ev2], [tx1, tx2]],
        [[tx1], [ev1, ev2], [tx2]],
    ):
        s = Store(memory=True)
        for b in batches:
            with s.transaction():
                _merge(s, parsed(*b), IngestSummary())
        assert s.scalar("SELECT count(*) FROM requests") == 2, batches
        s.close()
