"""Bounded-memory passes give the results of the whole: prefix chains derived from partitions of
whole sessions (randomized request sets split every way: one session per partition, random
groups, one partition; the warehouse's own partitioned reader over the sample traces), and the
reuse, TTL and working-set passes over the runs in chunks of any size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.analyze.access import access_runs
from kvtrace.analyze.chains import ChainParams, PartitionError, derive_chains, derive_partitioned, materialize_ids
from kvtrace.analyze.load import chain_partitions, load_block_trace
from kvtrace.analyze.reuse import reuse_profile
from kvtrace.analyze.reuse_report import ReuseOptions, reuse_report
from kvtrace.analyze.ttl import hit_ratios, ttl_section
from kvtrace.analyze.working_set import working_set
from tests.chain_frames import frame
from tests.ttl_oracle import block_traces

META = ("chain", "thread", "cached", "head", "chain_prev", "shared", "head_prev", "compaction", "compact_request")
RUNS = ("req", "first", "blocks", "tokens", "prev", "next", "dup")


def random_rows(seed: int, sessions: int = 16) -> pl.DataFrame:
    """Growing conversations of several orgs, models and threads: subagents, auxiliary calls,
    compactions, 1 h writes, shared heads and reads that end or rewrite a prefix."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(sessions):
        org = int(rng.integers(2))
        t = float(rng.uniform(0, 3600))
        cached = 0
        head = (3000, 5000)[org] if rng.random() < 0.85 else int(rng.integers(0, 6000))
        for _ in range(int(rng.integers(1, 14))):
            t += float(rng.choice([0.0, rng.exponential(20), rng.exponential(900)]))
            thread = "main" if rng.random() < 0.7 else f"agent-{rng.integers(2)}"
            model = "opus" if rng.random() < 0.8 else "haiku"
            grow = int(rng.integers(50, 4000))
            kind = rng.random()
            if cached == 0 or kind < 0.15:
                read = head if rng.random() < 0.7 else 0
            elif kind < 0.25:
                read = int(rng.integers(0, cached))  # a rewrite or a shrink
            else:
                read = cached
            write = max(grow, head - read if read < head else grow)
            cached = read + write
            rows.append(
                dict(
                    t=round(t, 3),
                    read=read,
                    write=write,
                    write_1h=write if rng.random() < 0.1 else 0,
                    org_id=f"org{org}",
                    session_id=f"s{s:03d}",
                    thread_id=thread,
                    model=model,
                    query_source="auxiliary" if rng.random() < 0.05 else "main",
                    is_compact_request=bool(rng.random() < 0.03),
                    after_compaction=bool(rng.random() < 0.02),
                    output_tokens=int(rng.integers(1, 900)),
                )
            )
    return frame(*rows)


def splits(f: pl.DataFrame, rng: np.random.Generator):
    """Partitions of whole sessions: one per session, random groups, and one for everything."""
    f = f.with_row_index("gidx")
    sessions = f.get_column("session_id").unique().sort().to_list()
    yield [f.filter(pl.col("session_id") == s) for s in sessions]
    for _ in range(3):
        group = dict(zip(sessions, rng.integers(0, rng.integers(1, len(sessions) + 1), size=len(sessions))))
        labels = f.get_column("session_id").replace_strict(group)
        parts = [f.filter(labels == g) for g in sorted(set(group.values()))]
        rng.shuffle(parts)
        yield [p.sample(fraction=1.0, shuffle=True, seed=int(rng.integers(1 << 30))) for p in parts]
    yield [f]


def assert_same(a, b) -> None:
    assert a.n_requests == b.n_requests
    for x, y in ((a.ts, b.ts), (a.input_length, b.input_length), (a.output_length, b.output_length)):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_array_equal(a.session, b.session)
    for k in META:
        np.testing.assert_array_equal(a.meta[k], b.meta[k], err_msg=k)
    assert a.meta["thread_names"].to_pylist() == b.meta["thread_names"].to_pylist()
    assert a.meta["model_names"] == b.meta["model_names"]
    for k, v in a.meta["columns"].items():
        np.testing.assert_array_equal(v, b.meta["columns"][k], err_msg=k)
    for k in RUNS:
        np.testing.assert_array_equal(getattr(access_runs(a), k), getattr(access_runs(b), k), err_msg=k)
    np.testing.assert_array_equal(materialize_ids(a).hash_ids, materialize_ids(b).hash_ids)


@pytest.mark.parametrize("seed", range(12))
def test_every_split_of_the_sessions_gives_the_same_chains(seed):
    f = random_rows(seed)
    params = ChainParams(block_size=64, head_min_chains=2)
    whole = derive_chains(f, params, materialize=False)
    assert whole.meta["head"].any()  # heads are exercised
    for parts in splits(f, np.random.default_rng(seed)):
        assert_same(derive_partitioned(parts, f.height, params, materialize=False), whole)


def test_a_partition_may_not_lose_rows():
    f = random_rows(0).with_row_index("gidx")
    with pytest.raises(ValueError, match="hold"):
        derive_partitioned([f.head(5)], f.height)


@pytest.fixture(scope="module")
def sample_store():
    from kvtrace.ingest import ingest
    from kvtrace.store import Store

    root = Path(__file__).resolve().parents[1] / "sample_traces"
    with Store(memory=True) as store:
        ingest(store, [root])
        yield store


@pytest.mark.parametrize("rows", [1, 37, 1000, 10**9])
def test_the_warehouse_reader_partitions_whole_sessions(sample_store, rows):
    times, parts = chain_partitions(sample_store, rows=rows)
    n = len(times)
    parts = list(parts)
    sessions = [set(p.get_column("session_id").unique()) for p in parts]
    assert sum(p.height for p in parts) == n > 1000
    assert sum(len(s) for s in sessions) == len(set().union(*sessions))  # no session is split
    if rows == 1:
        assert all(len(s) == 1 for s in sessions)
    want = derive_chains(pl.concat(parts))
    assert_same(derive_partitioned(parts, n), want)
    # The reader's times become the trace's; times that are not the rows' are refused.
    kept = derive_partitioned(parts, n, times=times)
    assert_same(kept, want)
    assert kept.meta["_ts_us"] is times
    off = times.copy()
    off[n // 2] += 1
    with pytest.raises(PartitionError, match="times"):
        derive_partitioned(parts, n, times=off)
    with pytest.raises(PartitionError, match="times given"):
        derive_partitioned(parts, n, times=np.append(times, times[-1]))


def test_a_missing_session_id_and_an_empty_one_are_one_session_in_one_partition():
    """Rows without a session id are read as session '': with sessions ordered by their start,
    both kinds are one session, never split by another that starts between them."""
    from kvtrace.store import Store

    sessions = [None, "a", "", "a", None]
    with Store(memory=True) as store:
        store.run(
            """
            INSERT INTO requests BY NAME
            SELECT 'k' || i AS request_key, make_timestamp(1767225600000000 + 60000000 * i) AS ts,
                   'test' AS source, 'claude-code' AS agent, s AS session_id, 'main' AS thread_id,
                   'm' AS model, 'main' AS query_source, 10 AS input_tokens, 1000 * i AS cache_read_tokens,
                   1000 AS cache_write_5m_tokens, 0 AS cache_write_1h_tokens, 0 AS cache_write_unknown_tokens,
                   5 AS output_tokens, 'test' AS ingested_from
            FROM (SELECT unnest(range(?)) AS i, unnest(?) AS s)
            """,
            [len(sessions), sessions],
        )
        for rows in (1, 2, 100):
            times, parts = chain_partitions(store, rows=rows)
            parts = list(parts)
            names = [set(p.get_column("session_id").unique()) for p in parts]
            assert sum(len(x) for x in names) == len(set().union(*names)) == 2  # '' and 'a', each whole
            got = derive_partitioned(parts, len(times), times=times, materialize=False)
            assert got.session.tolist() == [0, 1, 0, 1, 0]


def test_compaction_marks_come_from_the_requests_attributes():
    from kvtrace.store import Store

    attrs = [
        None,
        '{"query_source": "compact"}',
        '{"raw_query_source": "compact"}',
        '{"compaction": "true"}',
        '{"compact_boundary": {"trigger": "auto"}}',
        '{"query_source": "main", "compaction": false}',
    ]
    want = [(False, False), (True, False), (True, False), (False, True), (False, True), (False, False)]
    with Store(memory=True) as store:
        store.run(
            """
            INSERT INTO requests BY NAME
            SELECT 'k' || i AS request_key, make_timestamp(1767225600000000 + 1000000 * i) AS ts,
                   'test' AS source, 'claude-code' AS agent, 's' AS session_id, 'main' AS thread_id,
                   'm' AS model, 'main' AS query_source, 1 AS input_tokens, 0 AS cache_read_tokens,
                   0 AS cache_write_5m_tokens, 0 AS cache_write_1h_tokens, 0 AS cache_write_unknown_tokens,
                   i AS output_tokens, CAST(a AS JSON) AS attributes, 'test' AS ingested_from
            FROM (SELECT unnest(range(?)) AS i, unnest(?) AS a)
            """,
            [len(attrs), attrs],
        )
        _, parts = chain_partitions(store)
        rows = pl.concat(list(parts)).sort("output_tokens")
    assert list(zip(rows.get_column("is_compact_request"), rows.get_column("after_compaction"))) == want


def test_metric_groups_that_differ_only_in_which_value_is_missing_stay_two_rows():
    """Token counts from metrics at one time, one with no session and model m, one with session m
    and no model: two requests of their own, each read once."""
    from kvtrace.store import Store

    with Store(memory=True) as store:
        store.run("""
            INSERT INTO metric_points (point_key, metric, series_key, temporality, ts, value, token_type,
                                       source, agent, session_id, model, ingested_from)
            VALUES ('p1', 'claude_code.token.usage', 's1', 1, TIMESTAMP '2026-01-01 00:00:00', 100, 'input',
                    'test', 'claude-code', NULL, 'm', 'test'),
                   ('p2', 'claude_code.token.usage', 's2', 1, TIMESTAMP '2026-01-01 00:00:00', 200, 'input',
                    'test', 'claude-code', 'm', NULL, 'test')
            """)
        keys = store.query("SELECT request_key FROM request_usage")
        times, parts = chain_partitions(store)
        rows = pl.concat(list(parts))
    assert len(keys) == len({k for (k,) in keys}) == 2
    assert len(times) == rows.height == 2
    assert sorted(rows.get_column("input_tokens").to_list()) == [100, 200]


@pytest.mark.parametrize("rows", [1, 7, 10**9])
def test_rows_are_numbered_in_time_then_request_key_order(rows):
    """Requests that share their time to the microsecond (across sessions too) take their place by
    request key, wherever they were stored and however the rows are partitioned."""
    from kvtrace.store import Store

    rng = np.random.default_rng(5)
    n = 60
    keys = [f"k{int(v):06d}" for v in rng.permutation(10**5)[:n]]
    with Store(memory=True) as store:
        store.run(
            """
            INSERT INTO requests BY NAME
            SELECT key AS request_key, make_timestamp(1767225600000000 + 1000 * (i % 4)) AS ts,
                   'test' AS source, 'claude-code' AS agent, 's' || (i % 5) AS session_id, 'main' AS thread_id,
                   'u' AS user_id, 'o' AS org_id, 'm' AS model, 'main' AS query_source, 1 AS input_tokens,
                   0 AS cache_read_tokens, 0 AS cache_write_5m_tokens, 0 AS cache_write_1h_tokens,
                   0 AS cache_write_unknown_tokens, i AS output_tokens, 'test' AS ingested_from
            FROM (SELECT unnest(range(?)) AS i, unnest(?) AS key)
            """,
            [n, keys],
        )
        want = dict(
            store.execute(
                "SELECT output_tokens, row_number() OVER (ORDER BY ts, request_key) - 1 FROM requests"
            ).fetchall()
        )
        times, parts = chain_partitions(store, rows=rows)
        frames = list(parts)
    assert len(times) == n and sum(f.height for f in frames) == n
    rows_seen = pl.concat(frames)
    assert dict(zip(rows_seen.get_column("output_tokens").to_list(), rows_seen.get_column("gidx").to_list())) == want
    assert "tie" not in rows_seen.columns


@pytest.mark.parametrize("rows", [1, 500])
def test_reuse_report_does_not_depend_on_the_partition_size(sample_store, rows):
    ttls = [60.0, 300.0, 3600.0, None]
    want = reuse_report(sample_store, ReuseOptions(ttls=ttls, series=True))
    assert load_block_trace(sample_store, partition_rows=rows).n_requests == want["trace"]["requests"]
    assert reuse_report(sample_store, ReuseOptions(ttls=ttls, series=True, partition_rows=rows)) == want


@settings(max_examples=60, deadline=None)
@given(block_traces(), st.sampled_from([1, 2, 3, 7]))
def test_no_chunking_of_the_passes_changes_a_result(trace, requests):
    ttls = [0.0, 1.0, 5.0, 60.0, None]
    whole = 1 << 30
    for ttl in ttls:
        a = working_set(trace, ttl, 1.0, series_points=7, requests=requests)
        assert a == working_set(trace, ttl, 1.0, series_points=7, requests=whole)
    assert hit_ratios(trace, ttls, requests=requests) == hit_ratios(trace, ttls, requests=whole)
    assert ttl_section(trace, ttls, 2.0, True, requests=requests) == ttl_section(trace, ttls, 2.0, True, requests=whole)
    assert reuse_profile(trace, requests=requests) == reuse_profile(trace, requests=whole)


@pytest.mark.parametrize("seed", range(4))
def test_no_chunking_changes_a_derived_trace_result(seed):
    trace = derive_chains(random_rows(seed, sessions=30), ChainParams(block_size=64), materialize=False)
    for requests in (1, 5, 64):
        assert reuse_profile(trace, requests=requests) == reuse_profile(trace)
        for ttl in (60.0, 300.0, None):
            assert working_set(trace, ttl, requests=requests) == working_set(trace, ttl)


def test_a_partition_may_not_repeat_rows():
    f = random_rows(1).with_row_index("gidx")
    twice = pl.concat([f.head(4), f.slice(3, 1), f.slice(4)])  # row 3 twice, one row missing
    with pytest.raises(ValueError, match="twice"):
        derive_partitioned([twice.head(5), twice.slice(5)], f.height)


def test_an_abandoned_partition_stream_frees_the_warehouse(sample_store):
    before = sample_store.scalar("SELECT current_setting('memory_limit')")
    _, parts = chain_partitions(sample_store, rows=50)
    next(parts)
    parts.close()
    assert sample_store.scalar("SELECT count(*) FROM requests") > 0
    assert sample_store.scalar("SELECT current_setting('memory_limit')") == before


def test_quantiles_of_zero_weight_targets_are_values_present():
    from kvtrace.analyze.quantile import smallest_reaching

    v, w = np.array([969, 2000]), np.array([0.0, 5.0])
    pieces = lambda: ([(v[i : i + 1], w[i : i + 1])] for i in range(len(v)))  # noqa: E731
    assert smallest_reaching(pieces, [[0.0, 1.0, 5.0, 6.0]])[0] == [969, 2000, 2000, None]


def test_a_frame_of_some_warehouse_rows_keeps_their_order(sample_store):
    _, parts = chain_partitions(sample_store, rows=10**9)
    (f,) = list(parts)
    some = f.filter(pl.col("session_id").is_in(f.get_column("session_id").unique().sort().head(5).implode()))
    tr = derive_chains(some)
    assert tr.n_requests == some.height and (np.diff(tr.ts) >= 0).all()


def test_thread_ids_wider_than_32_bits_stay_apart():
    from kvtrace.analyze.blocktrace import BlockTrace
    from kvtrace.analyze.reuse import thread_table

    tr = BlockTrace(
        np.arange(4.0),
        np.full(4, 10),
        np.ones(4, np.int64),
        np.arange(5),
        np.arange(4),
        16,
        session=[0, 2**32, 0, 2**32],
    )
    assert sorted(thread_table(tr).get_column("requests").to_list()) == [2, 2]


def test_a_derived_trace_is_freed_without_the_garbage_collector():
    import gc
    import weakref

    gc.disable()
    try:
        tr = derive_chains(random_rows(0), materialize=False)
        ref = weakref.ref(tr)
        del tr
        assert ref() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("rows", [1, 3, 1000])
def test_the_thread_table_does_not_depend_on_its_slices(sample_store, rows):
    from kvtrace.analyze.reuse import thread_table

    trace = load_block_trace(sample_store, materialize=False)
    want = thread_table(trace, slice_rows=10**9)
    assert want.height > 10 and want.get_column("idle_periods").sum() > 0
    assert thread_table(trace, slice_rows=rows).equals(want)


def test_the_thread_table_of_arbitrary_session_ids_does_not_depend_on_its_slices():
    """A block-hash trace's sessions: negative, on both sides of 2**31, hash-like; checked
    against a per-thread reference built row by row."""
    from kvtrace.analyze.blocktrace import BlockTrace
    from kvtrace.analyze.reuse import ReuseParams, _threads

    rng = np.random.default_rng(3)
    n = 400
    ids = np.array([-5, 1, 2, 3, 2**31 - 1, 2**31, 2**40, -(2**62)], dtype=np.int64)
    session = rng.choice(ids, size=n)
    ts = np.cumsum(rng.exponential(100.0, size=n)).round(3)
    prompt = rng.integers(1, 5000, size=n)
    trace = BlockTrace(ts, prompt, np.ones(n, np.int64), np.zeros(n + 1, np.int64), np.zeros(0, np.int64), 16, session)
    want, want_gaps = _threads(trace, ReuseParams(idle_s=300), slice_rows=10**9)
    for rows in (1, 7, 50):
        got, gaps = _threads(trace, ReuseParams(idle_s=300), slice_rows=rows)
        assert got.equals(want), rows
        np.testing.assert_array_equal(gaps, want_gaps)
    assert want.get_column("thread").dtype == pl.Int64
    for row in want.iter_rows(named=True):  # the reference: each thread's requests in time order
        mine = np.flatnonzero(session == row["thread"])
        gap = np.diff(ts[mine] * 1e6).round() / 1e6
        assert row["requests"] == len(mine) and row["prompt_tokens"] == prompt[mine].sum()
        assert row["idle_periods"] == int((gap > 300).sum())
        assert row["max_gap_s"] == (gap.max() if len(gap) else None)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("range_rows", [1, 2, 7, 50])
def test_the_steps_over_all_requests_do_not_depend_on_their_range(seed, range_rows):
    """Chains, heads, head links and runs derived a few requests at a time (the steps after
    linking read and write their numbers on disk a range at a time) equal those of one range."""
    f = random_rows(seed, sessions=24)
    params = ChainParams(block_size=64, head_min_chains=2)
    whole = derive_chains(f, params, materialize=False)
    assert whole.meta["head"].any() and (whole.meta["head_prev"] >= 0).any()
    assert_same(derive_chains(f, params, materialize=False, range_rows=range_rows), whole)
    parts = next(splits(f, np.random.default_rng(seed)))  # one partition per session
    got = derive_partitioned(parts, f.height, params, materialize=False, range_rows=range_rows)
    assert_same(got, whole)


def test_a_token_count_beyond_32_bits_in_a_later_partition_is_kept_exact():
    big = 3_000_000_000
    f = frame(
        dict(t=0, read=0, write=5000, session_id="a"),
        dict(t=10, read=5000, write=200, session_id="a"),
        dict(t=20, read=0, write=big, session_id="b"),
        dict(t=30, read=big, write=100, session_id="b"),
    ).with_row_index("gidx")
    parts = [f.filter(pl.col("session_id") == s) for s in ("a", "b")]  # the small one first
    got = derive_partitioned(parts, f.height, materialize=False, range_rows=1)
    assert got.meta["columns"]["write_tokens"].tolist() == [5000, 200, big, 100]
    assert got.meta["cached"].tolist() == [5000, 5200, big, big + 100]
    assert got.input_length.tolist() == [5002, 5202, big + 2, big + 102]
    assert_same(got, derive_chains(f.drop("gidx"), materialize=False))
