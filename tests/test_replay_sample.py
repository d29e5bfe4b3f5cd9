"""Sampled replay (SHARDS): the estimate against the exact grid and tiers on the Mooncake traces,
exactness at rate 1, determinism, the fixed-size mode, and the CLI options."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from typer.testing import CliRunner

from kvtrace.analyze.blocktrace import BlockTrace
from kvtrace.cli import app
from kvtrace.errors import BadTraceInput, ConfigError
from kvtrace.replay import load_tiers, replay, resolve_model
from kvtrace.replay.sample import Sampling, sampled_replay
from kvtrace.replay.grid import hit_grid
from kvtrace.replay.sample import (
    MODULUS,
    block_hash,
    heavy_blocks,
    parse_rate,
    sampled_distances,
    split_samples,
    threshold_for_rate,
    threshold_for_size,
)
from kvtrace.replay.tracefile import load_npz, read_trace, save_npz
from tests.paths import CONVERSATION, SYNTHETIC


@pytest.fixture(scope="module")
def conv():
    return read_trace(CONVERSATION)


@pytest.fixture(scope="module")
def conv_exact(conv):
    return replay(conv)  # the default grid: 64 capacities + unlimited x 8 TTLs (30 s .. 2 h, none)


def _ratios(res, key="hit_ratio_tokens"):
    return np.array([g[key] for g in res.grid])


def test_one_percent_sample_of_the_conversation_trace(conv, conv_exact):
    """The acceptance figure: MAE of the hit ratio over the default grid (520 cells) <= 0.01 at 1%,
    and the error the output states is at least the error measured."""
    res = sampled_replay(conv, Sampling(rate=0.01))
    assert len(res.grid) == len(conv_exact.grid) == 520
    assert [(g["capacity_tokens"], g["ttl_s"]) for g in res.grid] == [
        (g["capacity_tokens"], g["ttl_s"]) for g in conv_exact.grid
    ]
    for key, err in (("hit_ratio_tokens", "expected_error"), ("hit_ratio_blocks", "expected_error_blocks")):
        mae = float(np.abs(_ratios(res, key) - _ratios(conv_exact, key)).mean())
        assert mae <= 0.01, key
        assert res.sample[err] >= mae, key
    s = res.sample
    assert s["rate"] == pytest.approx(0.01, rel=1e-6) and s["mode"] == "rate" and s["samples"] == 5
    assert s["sampled_accesses"] < conv.n_blocks * 0.1  # a sample, not the trace
    assert res.to_dict()["sample"] == s


def test_without_the_heavy_blocks_a_one_percent_sample_is_far_off(conv, conv_exact):
    """Why the heavy blocks are kept whole: block 0 (the shared system prompt) is in every request,
    4% of the accesses; plain SHARDS misses or over-weights it and every cell moves with it."""
    res = sampled_replay(conv, Sampling(rate=0.01, heavy=False))
    assert res.sample["heavy_blocks"] == 0
    assert float(np.abs(_ratios(res) - _ratios(conv_exact)).mean()) > 0.02


@pytest.mark.parametrize("path", [CONVERSATION, SYNTHETIC])
def test_rate_one_is_the_exact_replay(path):
    trace = read_trace(path)
    m, ts = resolve_model("MiniMax-M2.7:fp8"), load_tiers("seed-testbed")
    exact = replay(trace, ttls=[60.0, 300.0, None], model=m, tiers=ts, tier_ttl=300.0)
    res = sampled_replay(
        trace, Sampling(rate=1.0), ttls=[60.0, 300.0, None], model=m, tiers=load_tiers("seed-testbed"), tier_ttl=300.0
    )
    assert res.grid == exact.grid
    assert res.working_set == exact.working_set
    assert res.sample["expected_error"] == 0.0 and res.sample["samples"] == 1
    assert res.tiers["hit_ratio_tokens"] == exact.tiers["hit_ratio_tokens"]
    for a, b in zip(exact.tiers["tiers"], res.tiers["tiers"]):
        assert a["fills_at"] == b["fills_at"]
        for key in (
            "hit_ratio_tokens",
            "hit_blocks",
            "capacity_blocks",
            "depth_tokens",
            "read_bytes",
            "write_bytes",
            "occupancy_peak_bytes",
            "evicted_bytes",
        ):
            assert (key in a) == (key in b) and a.get(key, 0) == pytest.approx(b.get(key, 0), rel=1e-12), key


@pytest.mark.parametrize("rate", [0.01, 0.2, 1.0])
def test_the_run_walk_equals_the_block_walk(conv, rate):
    """The weighted walk by runs (prefix-closed samples) and block by block agree exactly."""
    T = threshold_for_rate(rate)
    heavy = heavy_blocks(conv.hash_ids, T)
    st, _ = split_samples(conv, T, 1, heavy).sample(0)
    ttls = [60_000_000, 300_000_000]
    a, b = (sampled_distances(st, heavy, T, ttls, keep=ttls, blocks=flag) for flag in (False, True))
    caps = np.array([1, 64, 500, 2000, 20_000, 200_000])
    ttl_arr = np.array(sorted(a.live))
    for part in ("heavy", "light"):
        ga, gb = (hit_grid(getattr(x, part), st.input_length, st.block_size, caps, ttl_arr) for x in (a, b))
        assert all(np.array_equal(x, y) for x, y in zip(ga, gb)), part
    assert a.peak_after == b.peak_after and np.array_equal(a.unique, b.unique)
    assert all(np.array_equal(a.live[k], b.live[k]) for k in a.live)
    assert a.heavy_accesses == b.heavy_accesses and a.light_accesses == b.light_accesses
    if rate == 1.0:  # whole runs: fewer than blocks
        assert len(a.light) < len(b.light) / 2


def test_sampled_tiers_within_their_stated_error(conv):
    m = resolve_model("MiniMax-M2.7:fp8")
    exact = replay(conv, ttls=[300.0], model=m, tiers=load_tiers("seed-testbed"), tier_ttl=300.0)
    res = sampled_replay(
        conv, Sampling(rate=0.01), ttls=[300.0], model=m, tiers=load_tiers("seed-testbed"), tier_ttl=300.0
    )
    err = np.mean(
        [abs(a["hit_ratio_tokens"] - b["hit_ratio_tokens"]) for a, b in zip(exact.tiers["tiers"], res.tiers["tiers"])]
    )
    assert err <= res.sample["expected_error_tiers"]
    assert [t["capacity_bytes"] for t in res.tiers["tiers"]] == [t["capacity_bytes"] for t in exact.tiers["tiers"]]
    assert res.ttft is None and any("TTFT" in w for w in res.warnings)


def test_same_answer_twice_and_whatever_the_id_width(conv, tmp_path):
    a = sampled_replay(conv, Sampling(rate=0.05), ttls=[300.0, None])
    b = sampled_replay(conv, Sampling(rate=0.05), ttls=[300.0, None])
    path = tmp_path / "conv.npz"
    save_npz(conv, path)  # ids stored as int32
    narrow = load_npz(path)
    assert narrow.hash_ids.dtype == np.int32
    c = sampled_replay(narrow, Sampling(rate=0.05), ttls=[300.0, None])
    strip = ("engine",)
    da, db, dc = ({k: v for k, v in r.to_dict().items() if k not in strip} for r in (a, b, c))
    assert da == db
    assert da["grid"] == dc["grid"] and da["sample"] == dc["sample"]


def test_npz_arrays_are_mapped_from_the_file_or_read(conv, tmp_path):
    """save_npz aligns every member, so load_npz maps them (read-only, the page cache's); an
    .npz written by np.savez (members wherever they fall), np.savez_compressed or saved over the
    file a trace is mapped from loads the same."""
    ours, plain, packed = tmp_path / "ours.npz", tmp_path / "plain.npz", tmp_path / "packed.npz"
    save_npz(conv, ours)
    with zipfile.ZipFile(ours) as zf:
        assert zf.testzip() is None  # every member's CRC checks
    with np.load(ours) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(plain, **arrays)
    np.savez_compressed(packed, **arrays)
    mapped = load_npz(ours)
    for key in ("ts", "input_length", "output_length", "offsets", "hash_ids"):
        arr = getattr(mapped, key)
        assert not arr.flags.writeable and arr.flags.aligned, key
    assert load_npz(packed).hash_ids.flags.writeable
    for t in (mapped, load_npz(plain), load_npz(packed)):
        for key in ("ts", "input_length", "output_length", "offsets", "hash_ids"):
            assert np.array_equal(getattr(t, key), getattr(conv, key)), key
    save_npz(mapped, ours)  # over the file it is mapped from: written aside, then renamed
    assert np.array_equal(load_npz(ours).hash_ids, conv.hash_ids) and np.array_equal(mapped.hash_ids, conv.hash_ids)


def test_a_damaged_npz_is_a_clear_error(conv, tmp_path):
    good, cut, short = tmp_path / "good.npz", tmp_path / "cut.npz", tmp_path / "short.npz"
    save_npz(conv, good)
    data = good.read_bytes()
    cut.write_bytes(data[: len(data) // 2])  # no zip directory left
    with pytest.raises(BadTraceInput, match="not a kvtrace .npz trace"):
        load_npz(cut)
    # a header that claims more ids than the file holds (same length, so the zip stays valid)
    n = str(conv.n_blocks).encode()
    claim = b"'shape': (" + n + b",)"
    assert data.count(claim) == 1 and int("9" * len(n)) * 4 > len(data)
    short.write_bytes(data.replace(claim, b"'shape': (" + b"9" * len(n) + b",)"))
    with pytest.raises(BadTraceInput, match="shorter than its array"):
        load_npz(short)


def test_the_samples_do_not_depend_on_how_the_trace_is_cut(conv):
    """The split runs in pieces of whole requests (one per thread): one piece or several, the
    same samples, and each what a plain construction gives: every access of its blocks in trace
    order, each request's tokens those its kept blocks carried, the first and last request kept."""
    big = BlockTrace(  # the conversation trace 16 times over (ids apart), long enough to be cut
        np.arange(16 * conv.n_requests, dtype=np.float64),
        np.tile(conv.input_length, 16),
        np.tile(conv.output_length, 16),
        np.r_[0, np.cumsum(np.tile(np.diff(conv.offsets), 16))],
        np.concatenate([conv.hash_ids + k * (1 << 40) for k in range(16)]),
        conv.block_size,
    )
    assert big.n_blocks > 3 << 20
    T = threshold_for_rate(0.05)
    heavy = heavy_blocks(big.hash_ids, T)
    one, three = (split_samples(big, T, 5, heavy, threads=k) for k in (1, 3))
    h, is_heavy = block_hash(big.hash_ids), np.isin(big.hash_ids, heavy)
    req = np.repeat(np.arange(big.n_requests), np.diff(big.offsets))  # each access's request
    tok = np.clip(
        big.input_length[req] - (np.arange(big.n_blocks) - big.offsets[req]) * big.block_size, 0, big.block_size
    )
    for p in range(5):
        (a, ta), (b, tb) = one.sample(p), three.sample(p)
        in_range = (h >= p * T) & (h < (p + 1) * T)
        want = in_range | is_heavy if p == 0 else in_range & ~is_heavy  # heavy blocks: sample 0's
        count = np.bincount(req[want], minlength=big.n_requests)
        keep = count > 0
        keep[0] = keep[-1] = True
        tokens = np.bincount(req[want], weights=tok[want], minlength=big.n_requests)[keep]
        for s, t in ((a, ta), (b, tb)):
            assert t == int(tokens.sum())
            assert np.array_equal(s.ts, big.ts[keep]) and np.array_equal(s.input_length, tokens)
            assert np.array_equal(s.output_length, big.output_length[keep])
            assert np.array_equal(s.offsets, np.r_[0, np.cumsum(count[keep])])
            assert np.array_equal(s.hash_ids, big.hash_ids[want])


def test_the_hash_is_stable():
    """The sample must not change between versions or machines: pin a few hash values."""
    got = block_hash(np.array([0, 1, 2, 12345678901, -1], dtype=np.int64)).tolist()
    assert got == block_hash(np.array([0, 1, 2, 12345678901, -1], dtype=np.int64)).tolist()
    assert all(0 <= h < MODULUS for h in got)
    assert got == PINNED_HASHES


PINNED_HASHES = [3793791033, 2433363436, 2539140574, 149465084, 3839455607]  # splitmix64, top 32 bits


@pytest.mark.parametrize("size", [500, 2000, 20000])
def test_fixed_size_keeps_at_most_n_blocks(conv, size):
    res = sampled_replay(conv, Sampling(size=size), ttls=[300.0])
    s = res.sample
    assert s["mode"] == "size" and s["size_limit"] == size
    assert s["sampled_blocks"] <= size
    assert s["sampled_blocks"] >= 0.8 * size  # the rate falls only as far as it must


def test_fixed_size_threshold_is_the_walk_of_shards():
    """The threshold after the walk does not depend on how the stream is chunked, and equals the
    hash of the (N+1)-th smallest distinct block (SHARDS fixed-size converges to it)."""
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 50_000, size=200_000)
    want = np.sort(np.unique(block_hash(np.unique(ids))))[1000]
    for chunk in (1_000, 7_777, 1 << 22):
        assert threshold_for_size(ids, 1000, chunk=chunk) == want
    assert threshold_for_size(ids, 10**6) == MODULUS  # everything fits: rate 1


def test_rates_and_errors():
    assert parse_rate("1%") == pytest.approx(0.01) and parse_rate("0.01") == pytest.approx(0.01)
    assert parse_rate("100%") == 1.0
    for bad in ("0", "0%", "150%", "abc", "-1%", "nan"):
        with pytest.raises(ConfigError):
            parse_rate(bad)
    with pytest.raises(ConfigError):
        Sampling(rate=0.1, size=10)
    with pytest.raises(ConfigError):
        Sampling()


def _cli(*args):
    return CliRunner().invoke(app, ["replay", str(CONVERSATION), *args])


def test_cli_sample_json_and_table():
    r = _cli("--sample", "1%", "--ttl", "5m", "-c", "10M", "-f", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["sample"]["rate"] == pytest.approx(0.01) and out["sample"]["expected_error"] > 0
    assert out["grid"][0]["capacity_tokens"] == 10_000_000
    assert out["grid"][0]["hit_ratio_tokens"] == pytest.approx(0.2934, abs=0.02)
    r = _cli("--sample-size", "3000", "--ttl", "5m", "-c", "10M")
    assert r.exit_code == 0, r.output
    assert "Sampled" in r.output and "expected error" in r.output and "fixed size 3,000 blocks" in r.output


def test_cli_sample_errors():
    r = _cli("--sample", "150%")
    assert r.exit_code == 1 and "--sample" in r.output
    r = _cli("--sample", "1%", "--sample-size", "1000")
    assert r.exit_code == 1 and "not both" in r.output


def test_cli_sample_holding_no_block(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": k, "input_length": 1024, "output_length": 1, "hash_ids": [2 * k, 2 * k + 1]})
            + "\n"
            for k in range(3)
        )
    )
    r = CliRunner().invoke(app, ["replay", str(path), "--block-size", "512", "--sample", "1e-9"])
    assert r.exit_code == 1 and "no block" in r.output and "raise --sample" in r.output


def test_rate_one_is_exact_on_a_trace_that_is_not_prefix_closed():
    """Random block lists (ids after different parents, repeats within a request): the walk goes
    block by block, as the exact replay's fallback does, and agrees with it."""
    from kvtrace.analyze.blocktrace import BlockTrace

    rng = np.random.default_rng(7)
    lists = [rng.integers(0, 300, size=rng.integers(1, 12)).tolist() for _ in range(400)]
    ts = np.sort(rng.uniform(0, 3600, size=400))
    L = np.array([len(h) * 16 - int(rng.integers(0, 16)) for h in lists])
    trace = BlockTrace.from_lists(ts, L, np.ones(400, dtype=np.int64), lists, 16, name="random")
    ttls = [30.0, 600.0, None]
    exact = replay(trace, capacities=[16, 160, 1600, None], ttls=ttls)
    assert exact.engine["kernel"] == "numba-blocks"
    res = sampled_replay(trace, Sampling(rate=1.0), capacities=[16, 160, 1600, None], ttls=ttls)
    assert res.grid == exact.grid and res.working_set == exact.working_set
    half = sampled_replay(trace, Sampling(rate=0.5), capacities=[16, 160, 1600, None], ttls=ttls)
    assert half.sample["samples"] == 2 and half.sample["expected_error"] > 0


def test_above_half_the_error_is_not_estimated(conv):
    """No second sample of the same rate fits in the hash range: the output says so, not 0."""
    res = sampled_replay(conv, Sampling(rate=0.6), ttls=[300.0])
    assert res.sample["samples"] == 1 and res.sample["expected_error"] is None
    assert "not estimated" in res.sample["error_basis"]
    r = _cli("--sample", "60%", "--ttl", "5m", "-c", "10M")
    assert r.exit_code == 0, r.output
    assert "not estimated above a 50% rate" in r.output


def test_the_error_samples_give_one_answer_however_many_run_at_once(conv):
    # one thread replays the four error samples in turn; four replay them together
    m = resolve_model("MiniMax-M2.7:fp8")
    kw = dict(ttls=[300.0, None], model=m, tiers=load_tiers("seed-testbed"), tier_ttl=300.0)
    one, four = (sampled_replay(conv, Sampling(rate=0.05), threads=k, **kw) for k in (1, 4))
    assert one.sample["samples"] == 5
    da, db = ({k: v for k, v in r.to_dict().items() if k != "engine"} for r in (one, four))
    assert da == db
