"""Block-hash traces in (Mooncake, Bailian) and out (Mooncake JSONL for Dynamo replay / AIPerf)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from kvtrace.analyze.export import write_mooncake
from kvtrace.analyze.load import load_block_trace, read_block_trace
from kvtrace.analyze.ttl import hit_ratios
from kvtrace.ingest.block_hash import parse_bailian, parse_mooncake, trace_name
from kvtrace.ingest.formats import block_hash_format as sniff
from tests.block_trace_files import BAILIAN_LINES, write_lines
from tests.paths import CONVERSATION, SYNTHETIC, raw


@pytest.mark.parametrize("path, rows", [(CONVERSATION, 12031), (SYNTHETIC, 3993)])
def test_mooncake_real_traces(path, rows):
    p = parse_mooncake(path)
    t = p.block_requests
    assert t.num_rows == rows == p.lines and not p.rejects
    assert t.column("seq").to_pylist()[:3] == [0, 1, 2]
    assert set(t.column("block_size").to_pylist()) == {512}
    assert set(t.column("trace").to_pylist()) == {trace_name(path)}
    lens = np.array([len(h) for h in t.column("hash_ids").to_pylist()])
    assert (lens == -(-t.column("input_length").to_numpy() // 512)).all()
    first = orjson.loads(raw(path).split(b"\n", 1)[0])
    assert t.column("hash_ids")[0].as_py() == first["hash_ids"]
    assert t.column("ingested_from")[1].as_py().endswith(":2")


def test_mooncake_timestamps_are_milliseconds_from_the_epoch(tmp_path):
    f = write_lines(
        tmp_path / "t.jsonl", [{"timestamp": 1500, "input_length": 10, "output_length": 1, "hash_ids": [1]}]
    )
    ts = parse_mooncake(f, block_size=16).block_requests.column("ts")[0].as_py()
    assert ts.isoformat() == "1970-01-01T00:00:01.500000"


def test_bad_lines_are_rejected_with_line_numbers(tmp_path):
    good = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}
    f = write_lines(
        tmp_path / "bad.jsonl",
        [
            orjson.dumps(good).decode(),
            "",
            '{"timestamp": 5, "input_length": "12", "output_length": 1, "hash_ids": [1, 2]}',
            '{"timestamp": 7, "input_length": 12, "hash_ids": [1, 2]}',
            '{"timestamp": 7, "input_length": -3, "output_length": 1, "hash_ids": [1]}',
            '{"timestamp": 7, "input_length": 12, "output_length": 1, "hash_ids": [1, "x"]}',
            "{not json",
        ],
        raw=True,
    )
    p = parse_mooncake(f)
    assert p.block_requests.column("input_length").to_pylist() == [10, 12]  # "12": numbers by name
    assert p.block_requests.column("ingested_from").to_pylist()[1].endswith(":3")
    assert [(r.line, r.field) for r in p.rejects] == [
        (4, "output_length"),
        (5, "input_length"),
        (6, "hash_ids"),
        (7, None),
    ]
    assert "bad.jsonl:4: field 'output_length'" in p.rejects[0].describe(str(f))


def test_blank_lines_keep_line_numbers_on_the_fast_path(tmp_path):
    rec = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}
    f = write_lines(
        tmp_path / "gaps.jsonl", [orjson.dumps(rec).decode(), "", "  ", orjson.dumps(rec).decode()], raw=True
    )
    p = parse_mooncake(f)
    assert not p.rejects
    assert [x.rsplit(":", 1)[1] for x in p.block_requests.column("ingested_from").to_pylist()] == ["1", "4"]


def test_bailian(tmp_path):
    f = write_lines(tmp_path / "qwen_traceA_blksz_16.jsonl.gz", BAILIAN_LINES)
    p = parse_bailian(f)
    t = p.block_requests
    assert t.num_rows == 4 and not p.rejects
    assert t.column("trace")[0].as_py() == "qwen_traceA_blksz_16"
    assert t.column("block_size").to_pylist() == [16] * 4
    assert t.column("chat_id").to_pylist() == ["1", "2", "3", "4"]
    assert t.column("parent_chat_id").to_pylist() == ["-1", "-1", "1", "3"]
    assert t.column("turn").to_pylist() == [1, 1, 2, 3]
    assert t.column("ts")[2].as_py().isoformat() == "1970-01-01T00:01:01"
    tr = read_block_trace(f)
    assert tr.session.tolist() == [0, 1, 0, 0]  # chats 3 and 4 belong to root chat 1


def test_sniff():
    assert sniff({"timestamp": 0, "input_length": 1, "hash_ids": [1]}) == "mooncake"
    assert sniff(BAILIAN_LINES[0]) == "bailian"
    assert sniff({"resourceLogs": []}) is None
    assert sniff([1, 2]) is None


def test_export_round_trips_a_mooncake_trace(tmp_path):
    src = CONVERSATION
    out = tmp_path / "out.jsonl"
    n = write_mooncake(read_block_trace(src), out)
    assert n == 12031
    # Same records, compact JSON, in the same order (the source's times start at 0), each with
    # the block size the trace was read with.
    assert [orjson.loads(x) for x in out.read_bytes().splitlines()] == [
        {**orjson.loads(x), "block_size": 512} for x in raw(src).splitlines()
    ]
    assert b" " not in out.read_bytes()[:200]


def test_export_of_a_derived_trace_is_a_valid_mooncake_trace(tmp_path):
    from tests.chain_frames import frame
    from kvtrace.analyze.chains import ChainParams, derive_chains

    tr = derive_chains(
        frame(dict(t=100, read=0, write=1000), dict(t=100.5, read=1000, write=250), dict(t=160, read=1250, write=10)),
        ChainParams(block_size=64, head_tokens=0),
        materialize=False,
    )
    out = tmp_path / "derived.jsonl"
    write_mooncake(tr, out)
    recs = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert [r["timestamp"] for r in recs] == [0, 500, 60000]
    assert [list(r) for r in recs] == [["timestamp", "input_length", "output_length", "hash_ids", "block_size"]] * 3
    assert {r["block_size"] for r in recs} == {64}
    for r in recs:
        assert len(r["hash_ids"]) == -(-r["input_length"] // 64)
    assert recs[1]["hash_ids"][:15] == recs[0]["hash_ids"][:15]  # 1000 cached tokens = 15 whole blocks
    back = read_block_trace(out)  # the file says 64
    assert back.block_size == 64
    assert hit_ratios(back, [None]) == hit_ratios(tr, [None])


def test_ingest_then_load_from_the_warehouse(store, tmp_path):
    from kvtrace.ingest import ingest

    src = SYNTHETIC
    s1 = ingest(store, [src])
    assert s1.block_requests_added == 3993
    assert ingest(store, [src], force=True).block_requests_added == 0  # idempotent
    bailian = write_lines(tmp_path / "b.jsonl", BAILIAN_LINES)
    ingest(store, [bailian])
    with pytest.raises(Exception, match="block sizes"):
        load_block_trace(store)
    tr = load_block_trace(store, trace="synthetic_trace")
    direct = read_block_trace(src)
    assert tr.n_requests == 3993
    assert hit_ratios(tr, [None, 300]) == hit_ratios(direct, [None, 300])
    with pytest.raises(Exception, match="no block-hash trace named 'nope'"):
        load_block_trace(store, trace="nope")
