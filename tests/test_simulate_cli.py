"""``kvtrace simulate``: configurations side by side, the JSON schema, errors, calibration."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvtrace.cli import app
from kvtrace.errors import ConfigError
from kvtrace.simulate.run import load_scenario, parse_config

FIXTURES = Path(__file__).parent / "fixtures" / "kv-cache-tester"
runner = CliRunner()


def _run(*args):
    return runner.invoke(app, ["simulate", *args])


def test_two_configs_side_by_side_json_has_the_documented_fields(tmp_path):
    out = tmp_path / "sim.json"
    r = _run(
        "--config",
        "gpu=seed-testbed:HBM",
        "--config",
        "dram=seed-testbed:HBM,DRAM",
        "--duration",
        "15m",
        "--gpu-kv",
        "400K",
        "--format",
        "json",
        "-o",
        str(out),
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "kvtrace.simulate/1"
    assert [c["name"] for c in doc["configs"]] == ["gpu", "dram"]
    for c in doc["configs"]:
        assert c["peak_tokens_per_s"] >= c["steady_tokens_per_s"] > 0
        assert len(c["series"]) == 15
        assert max(s["processed_tokens_per_s"] for s in c["series"]) == pytest.approx(c["peak_tokens_per_s"], abs=0.1)
        for t in c["tiers"]:
            assert {"name", "first_full_s", "read_bytes_per_s", "write_bytes_per_s"} <= set(t)
        for k in ("new", "continuing", "resumed"):
            assert {"p50_s", "p90_s", "p99_s", "max_s"} <= set(c["ttft"][k])
    assert doc["configs"][0]["ratio_peak"] == 1.0
    # cost: 4 GPUs at the catalog's $1.60/h for 15 min, plus 512 GB DRAM at $5,000/TB over 3 years
    gpu, dram = doc["configs"]
    assert gpu["cost"]["usd_per_million_processed_tokens"] == pytest.approx(
        4 * 1.6 * 0.25 / gpu["processed_tokens"] * 1e6
    )
    assert dram["cost"]["tier_usd_per_hour"] == pytest.approx(
        dram["tiers"][1]["capacity_bytes"] / 1e12 * 5000 / (3 * 8766)
    )
    assert [t["name"] for t in doc["configs"][1]["tiers"]] == ["GPU", "DRAM"]
    # the same sessions run under both: the same new sessions
    assert doc["configs"][0]["ttft"]["new"]["count"] == doc["configs"][1]["ttft"]["new"]["count"]


def test_the_table_names_every_config_and_the_same_inputs_give_the_same_bytes(tmp_path):
    args = ("--config", "seed-testbed:HBM,NVMe", "--duration", "10m", "--gpu-kv", "300K")
    r1 = _run(*args, "--format", "json")
    r2 = _run(*args, "--format", "json")
    assert r1.exit_code == 0 and r1.stdout == r2.stdout
    r = _run(*args)
    assert r.exit_code == 0 and "seed-testbed:HBM,NVMe" in r.stdout and "TTFT" in r.stdout


def test_kv_cache_tester_traces_run_closed_loop():
    files = ",".join(str(p) for p in sorted(FIXTURES.glob("trace_000*.json.gz")))
    r = _run(
        "--sessions",
        files,
        "--rate",
        "1",
        "--config",
        "gpu=h100:HBM",
        "--duration",
        "10m",
        "--model",
        "Llama-3.1-70B",
        "--gpu",
        "H100",
        "--gpus",
        "8",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)["configs"][0]
    assert c["ttft"]["new"]["count"] > 0 and c["ttft"]["continuing"]["count"] > 0
    assert c["tiers"][0]["hit_ratio"] > 0.5  # conversations reuse their prefixes


@pytest.mark.parametrize(
    "args, message",
    [
        (("--config", "x=seed-testbed:HBM,FOO"), "tier 'FOO' is not in seed-testbed"),
        (("--config", "seed-testbed", "--load", "sometimes"), "load policy"),
        (("--config", "seed-testbed", "--gpu", "TPU"), "unknown GPU"),
        (("--scenario", "nope"), "unknown scenario"),
        (("--config", "seed-testbed", "--sessions", "missing-file.json"), "not a synth preset"),
        (("--config", "seed-testbed", "--gpu-kv", "10"), "holds no block"),
        (("--config", "h100", "--sessions", str(FIXTURES / "README.md")), "README.md:1: not a kv-cache-tester trace"),
    ],
)
def test_bad_options_are_one_line_errors_before_anything_runs(args, message):
    r = _run(*args)
    assert r.exit_code == 1
    assert message in r.output and "simulating" not in r.output


def test_config_specs_and_the_seed_study_scenario():
    c = parse_config("dram=seed-testbed:HBM,DRAM")
    assert (c.name, c.tiers, c.use) == ("dram", "seed-testbed", ["HBM", "DRAM"])
    assert parse_config("h100").use is None
    sc = load_scenario("seed-study")
    assert [c.name for c in sc.configs] == ["gpu", "dram", "flash"]
    assert sc.duration_s == 7200 and sc.gpu_kv_tokens == 400_000


def test_warehouse_threads_run_closed_loop_with_their_recorded_gaps(tmp_path):
    from kvtrace.store import open_store
    from tests.report_samples import load_rows

    db = tmp_path / "w.duckdb"
    # one session, one thread: requests end at minute 0, 1 and 2 and took 10 s each, so the user
    # waited 50 s after each response; the third prompt is shorter (a compaction): a new chain
    rows = [
        {
            "request_key": f"r{i}",
            "ts": float(i),
            "duration_ms": 10_000.0,
            "cache_read_tokens": p - 200,
            "input_tokens": 200,
            "output_tokens": 100,
        }
        for i, p in enumerate((20_000, 20_500, 3_000))
    ]
    with open_store(db) as store:
        load_rows(store, rows)
    r = _run(
        "--sessions",
        "warehouse",
        "--db",
        str(db),
        "--config",
        "gpu=seed-testbed:HBM",
        "--gpu-kv",
        "400K",
        "--duration",
        "10m",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)["configs"][0]
    assert c["sessions"] == 1 and c["requests_started"] == 3
    assert c["ttft"]["new"]["count"] == 1 and c["ttft"]["continuing"]["count"] == 2
    assert c["processed_tokens"] == 20_000 + 20_500 + 3_000 + 300
    # the second turn hits the first (prompt + output, whole blocks); the third starts over
    assert c["tiers"][0]["hit_ratio"] == pytest.approx(20_096 / 43_500)


def test_a_fleet_splits_sessions_by_affinity_and_workers_do_not_change_results():
    args = (
        "--config",
        "gpu=seed-testbed:HBM",
        "--gpu-kv",
        "200K",
        "--duration",
        "20m",
        "--rate",
        "5",
        "--format",
        "json",
    )
    one = json.loads(_run(*args).stdout)["configs"][0]
    r1 = _run(*args, "--nodes", "2")
    r2 = _run(*args, "--nodes", "2", "--jobs", "2")
    assert r1.exit_code == 0 and r1.stdout == r2.stdout
    two = json.loads(r1.stdout)["configs"][0]
    assert two["nodes"] == 2 and two["sessions"] == one["sessions"]
    assert (
        one["ttft"]["new"]["count"] + one["ttft"]["unserved"]
        >= two["ttft"]["new"]["count"]
        > one["ttft"]["new"]["count"]
    )
    assert two["tiers"][0]["capacity_tokens"] == 2 * one["tiers"][0]["capacity_tokens"]
    assert two["ttft"]["all"]["p90_s"] < one["ttft"]["all"]["p90_s"]


def test_nodes_auto_finds_the_fewest_nodes_meeting_the_ttft_target():
    r = _run(
        "--config",
        "gpu=seed-testbed:HBM",
        "--gpu-kv",
        "200K",
        "--duration",
        "20m",
        "--rate",
        "5",
        "--nodes",
        "auto",
        "--ttft-p90",
        "2",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)["configs"][0]
    tried = {t["nodes"]: t for t in c["sizing"]["tried"]}
    n = c["nodes"]
    late = {k: (v["unserved_max_wait_s"] or 0) > 2 for k, v in tried.items()}
    assert tried[n]["ttft_p90_s"] <= 2 and not late[n]
    assert n == 1 or tried[n - 1]["ttft_p90_s"] > 2 or late[n - 1]
    # a request still waiting at the end counts as a miss only once it has waited past the target
    assert all(v["unserved"] > 0 or v["unserved_max_wait_s"] is None for v in tried.values())
    assert n > 1  # one node is overloaded at this rate: the search ran
    r = _run("--config", "seed-testbed", "--nodes", "auto")
    assert r.exit_code == 1 and "--ttft-p90" in r.output


def test_html_page_embeds_the_three_charts_offline(tmp_path):
    out = tmp_path / "sim.html"
    r = _run(
        "--config",
        "gpu=seed-testbed:HBM",
        "--config",
        "dram=seed-testbed:HBM,DRAM",
        "--duration",
        "5m",
        "--gpu-kv",
        "400K",
        "--format",
        "html",
        "-o",
        str(out),
    )
    assert r.exit_code == 0, r.output
    text = out.read_text()
    for cid in ("sim-throughput", "sim-occupancy", "sim-ttft"):
        assert f'id="spec-{cid}"' in text
    assert "Serving model" in text and "http://" not in text.split("<script")[0]


def test_kv_dtype_halves_bytes_per_token_so_tiers_hold_twice_the_tokens():
    def tiers(*args):
        r = _run("--config", "dram=seed-testbed:HBM,DRAM", "--duration", "2m", "--format", "json", *args)
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        return doc["node"]["kv_dtype"], doc["configs"][0]["tiers"]

    dtype16, bf16 = tiers("--kv-dtype", "bf16")  # the scenario's model, in bf16
    dtype8, fp8 = tiers("--model", "MiniMax-M2.7:fp8")
    assert (dtype16, dtype8) == ("bf16", "fp8")
    assert tiers("--model", "MiniMax-M2.7", "--kv-dtype", "fp8")[1] == fp8
    gpu16, dram16 = bf16
    gpu8, dram8 = fp8
    # the same bytes (HBM less the weights; 512 GB of DRAM) hold twice the tokens
    assert gpu8["capacity_tokens"] == 2 * gpu16["capacity_tokens"]
    assert abs(dram8["capacity_tokens"] - 2 * dram16["capacity_tokens"]) <= 256  # whole chunks of each
    assert dram8["capacity_bytes"] == pytest.approx(dram16["capacity_bytes"], rel=1e-4)
    r = _run("--config", "seed-testbed", "--model", "MiniMax-M2.7:fp8", "--kv-dtype", "bf16")
    assert r.exit_code == 1 and "--kv-dtype says bf16" in r.output


def test_html_axes_show_tokens_and_bytes_with_units():
    r = _run("--config", "dram=seed-testbed:HBM,DRAM", "--duration", "3m", "--gpu-kv", "400K", "--format", "html")
    assert r.exit_code == 0, r.output
    assert '"format": "~s"' not in r.stdout and '"format":"~s"' not in r.stdout
    assert "' GB'" in r.stdout and "' K'" in r.stdout  # the report's byte and token axis labels


def _warehouse_rows(n_sessions=40, seed=3):
    """Rows as ``WarehouseSource`` takes them: sessions over two hours, each a thread of three
    requests a minute apart (and some with a second thread)."""
    import random

    rng = random.Random(seed)
    rows = []
    for s in range(n_sessions):
        t0 = rng.uniform(0, 7200) * 1e6
        for thread in ("main", "agent") if s % 4 == 0 else ("main",):
            for i in range(3):
                rows.append((f"s{s}", thread, int(t0 + i * 60e6), 5_000.0, 10_000 + 500 * i, 100))
    return sorted(rows, key=lambda r: r[2])


def _sessions_db(tmp_path, sessions, requests, start_min, every_min, took_ms):
    """A warehouse of ``sessions`` sessions (the k-th begins at minute ``k * start_min``), each of
    ``requests`` requests ``every_min`` minutes apart that took ``took_ms`` and grow by 300 tokens."""
    from kvtrace.store import open_store
    from tests.report_samples import load_rows

    db = tmp_path / "w.duckdb"
    rows = [
        {
            "request_key": f"r{s}-{i}",
            "ts": float(start_min * s + every_min * i),
            "session_id": f"s{s}",
            "duration_ms": took_ms,
            "cache_read_tokens": 8_000 + 300 * i,
            "input_tokens": 100,
            "output_tokens": 50,
        }
        for s in range(sessions)
        for i in range(requests)
    ]
    with open_store(db) as store:
        load_rows(store, rows)
    return db


def _instances(src):
    """``{(session, copy): {thread: turns}}`` of a warehouse source."""
    out: dict = {}
    for (inst, thread), turns in src.threads.items():
        out.setdefault(inst, {})[thread] = turns
    return out


def test_warehouse_sessions_scale_by_whole_copies_moved_in_time():
    from kvtrace.simulate.sources import COPY_SPREAD_S, WarehouseSource

    rows = _warehouse_rows()
    base = WarehouseSource(rows)
    assert WarehouseSource(rows, scale=1.0, seed=9).threads == base.threads
    orig = _instances(base)
    assert len(orig) == 40 and all(copy == 0 for _, copy in orig)
    tripled = _instances(WarehouseSource(rows, scale=3.0))
    assert len(tripled) == 120
    shifted = 0
    for (session, copy), threads in tripled.items():
        recorded = orig[(session, 0)]
        assert threads.keys() == recorded.keys()
        # one offset moves the whole session (all its threads): sizes and gaps are kept
        offsets = {round(t[0] - r[0], 6) for th in threads for t, r in zip(threads[th], recorded[th])}
        offsets |= {round(t[1] - r[1], 6) for th in threads for t, r in zip(threads[th], recorded[th])}
        assert len(offsets) == 1
        d = offsets.pop()
        assert [(p, o) for th in threads for *_, p, o in threads[th]] == [
            (p, o) for th in recorded for *_, p, o in recorded[th]
        ]
        if copy == 0:
            assert d == 0
        else:
            assert abs(d) <= COPY_SPREAD_S and min(t[0][0] for t in threads.values()) >= 0
            assert max(t[-1][1] for t in threads.values()) <= base.span_s + 1e-6
            shifted += d != 0
    assert shifted > 60  # copies do not arrive with their original


def test_warehouse_scale_keeps_sessions_at_random_below_one_and_shards_deal_instances():
    from kvtrace.simulate.sources import WarehouseSource

    rows = _warehouse_rows()
    orig = _instances(WarehouseSource(rows))
    half = _instances(WarehouseSource(rows, scale=0.5, seed=1))
    assert 8 <= len(half) <= 32 and all(orig[k] == v for k, v in half.items())  # kept whole, unmoved
    assert half == _instances(WarehouseSource(rows, scale=0.5, seed=1))
    assert half != _instances(WarehouseSource(rows, scale=0.5, seed=2))
    more = _instances(WarehouseSource(rows, scale=2.5, seed=1))
    per_session: dict = {}
    for s, _ in more:
        per_session[s] = per_session.get(s, 0) + 1
    assert set(per_session.values()) == {2, 3} and len(per_session) == 40
    # the shards of a fleet hold every instance once, all its threads on one node
    whole = WarehouseSource(rows, scale=2.5, seed=1).threads
    parts = [WarehouseSource(rows, scale=2.5, seed=1, shard=(i, 3)).threads for i in range(3)]
    assert sum(len(p) for p in parts) == len(whole) and {k: v for p in parts for k, v in p.items()} == whole
    owners = [{inst for inst, _ in p} for p in parts]
    assert all(owners[i].isdisjoint(owners[j]) for i in range(3) for j in range(i + 1, 3))
    assert all(len(o) >= 30 for o in owners)
    # the draws of a session depend on its id and the seed, not on where its rows come
    assert _instances(WarehouseSource(rows[::-1], scale=2.5, seed=1)) == more
    with pytest.raises(ConfigError, match="must be > 0"):
        WarehouseSource(rows, scale=0.0)
    with pytest.raises(ConfigError, match="keeps none of the 40 recorded sessions"):
        WarehouseSource(rows, scale=0.001)


def test_warehouse_copies_multiply_the_traffic_evenly_to_the_ends_of_the_span():
    import random

    from kvtrace.simulate.sources import WarehouseSource

    rng = random.Random(5)
    rows = sorted(
        ((f"s{k}", "main", int(rng.uniform(0, 6 * 3600) * 1e6), 1_000.0, 5_000, 50) for k in range(20_000)),
        key=lambda r: r[2],
    )
    src = WarehouseSource(rows, scale=2.0, seed=3)
    starts = {copy: [] for copy in (0, 1)}
    for ((_, copy), _), turns in src.threads.items():
        starts[copy].append(turns[0][0])
    bins = 36  # of 10 minutes
    count = [[0] * bins for _ in (0, 1)]
    for copy in (0, 1):
        for t in starts[copy]:
            count[copy][min(int(t / src.span_s * bins), bins - 1)] += 1
    ratios = [c / o for c, o in zip(count[1], count[0])]
    assert min(ratios) > 0.8 and max(ratios) < 1.2, ratios


def test_rate_multiples_on_the_command_line(tmp_path):
    db = _sessions_db(tmp_path, sessions=6, requests=3, start_min=5, every_min=2, took_ms=1_000.0)
    args = ("--sessions", "warehouse", "--db", str(db), "--config", "gpu=seed-testbed:HBM", "--gpu-kv", "400K")
    one = json.loads(_run(*args, "--format", "json").stdout)
    r = _run(*args, "--rate", "2x", "--format", "json")
    assert r.exit_code == 0, r.output
    two = json.loads(r.stdout)
    assert two["rate_scale"] == 2.0 and one["rate_scale"] is None
    c1, c2 = one["configs"][0], two["configs"][0]
    assert (c1["sessions"], c1["requests_started"]) == (6, 18)
    assert (c2["sessions"], c2["requests_started"]) == (12, 36)
    assert c2["processed_tokens"] == 2 * c1["processed_tokens"]
    r = _run(*args, "--rate", "5")
    assert r.exit_code == 1 and "--rate 2x" in r.output
    for bad in ("fast", "0x", "-2", "nanx"):
        r = _run(*args, "--rate", bad)
        assert r.exit_code == 1 and "not a positive number" in r.output, bad
    # copies are drawn from --seed
    frac = ("--rate", "1.5x", "--format", "json")
    runs = [json.loads(_run(*args[:-2], *frac, "--seed", str(k)).stdout)["configs"] for k in (1, 1, 2)]
    assert runs[0] == runs[1] != runs[2]
    # without --duration, warehouse sessions run over the window and 5 minutes more
    assert one["duration_s"] == 2100.0  # the last request ends 29 min 1 s after the first began
    # a synth workload: 2x its rate is the same run as its rate doubled
    synth = ("--config", "gpu=seed-testbed:HBM", "--gpu-kv", "400K", "--duration", "10m", "--format", "json")
    doubled = json.loads(_run(*synth, "--rate", "5").stdout)["configs"]
    assert json.loads(_run(*synth, "--rate", "2x").stdout)["configs"] == doubled
    assert json.loads(_run(*synth).stdout)["configs"] != doubled
    # kv-cache-tester conversations: 2x their default of 2.5 a minute
    files = ",".join(str(p) for p in sorted(FIXTURES.glob("trace_000*.json.gz")))
    tester = ("--sessions", files, "--config", "gpu=h100:HBM", "--duration", "10m", "--model", "Llama-3.1-70B")
    tester += ("--gpu", "H100", "--gpus", "8", "--format", "json")
    five = json.loads(_run(*tester, "--rate", "5").stdout)["configs"]
    assert json.loads(_run(*tester, "--rate", "2x").stdout)["configs"] == five


@pytest.mark.parametrize(
    "line, error",
    [
        ('rate = "2x"', None),
        ("rate = 5", None),
        ("rate_scale = true", "rate_scale must be a positive number"),
        ('rate_scale = "2x"', "rate_scale must be a positive number"),
        ("rate = 0", "rate 0: not a positive number"),
        ('warmup = "10m"', None),
    ],
)
def test_scenario_files_take_a_rate_and_a_warm_up(tmp_path, line, error):
    path = tmp_path / "s.toml"
    path.write_text(f'name = "t"\nduration = "10m"\n{line}\n[[config]]\nname = "gpu"\ntiers = "seed-testbed"\n')
    if error:
        with pytest.raises(ConfigError, match=error):
            load_scenario(str(path))
        return
    sc = load_scenario(str(path))
    assert (sc.rate_scale, sc.rate_per_min, sc.warmup_s) == {
        'rate = "2x"': (2.0, None, 0.0),
        "rate = 5": (None, 5.0, 0.0),
        'warmup = "10m"': (None, None, 600.0),
    }[line]


def test_a_warm_up_is_simulated_and_left_out_of_every_figure():
    common = ("--config", "dram=seed-testbed:HBM,DRAM", "--gpu-kv", "300K", "--rate", "6", "--format", "json")
    whole = json.loads(_run(*common, "--duration", "20m").stdout)
    r = _run(*common, "--duration", "12m", "--warmup", "8m")
    assert r.exit_code == 0, r.output
    warm = json.loads(r.stdout)
    assert warm["warmup_s"] == 480 and warm["duration_s"] == 720 and whole["warmup_s"] == 0
    a, b = whole["configs"][0], warm["configs"][0]
    # the same run, seen from minute 8: its last 12 minutes, bin for bin
    assert len(b["series"]) == 12
    for x, y in zip(a["series"][8:], b["series"]):
        assert y["t_s"] == x["t_s"] - 480
        for k in ("processed_tokens_per_s", "computed_tokens_per_s", "running", "waiting", "occupancy_bytes"):
            assert y[k] == pytest.approx(x[k], rel=1e-9), k
    assert b["processed_tokens"] == pytest.approx(sum(s["processed_tokens_per_s"] * 60 for s in b["series"]))
    # turns issued in the warm-up are not counted; the sessions are those begun after it
    assert 0 < b["requests_started"] < a["requests_started"]
    assert b["ttft"]["new"]["count"] <= b["sessions"] < a["sessions"]
    gpu_a, gpu_b = a["tiers"][0], b["tiers"][0]
    assert gpu_b["first_full_s"] == max(gpu_a["first_full_s"] - 480, 0)
    # every array of the node's metrics, and totals counted from the warm-up's end
    from kvtrace.simulate.run import Scenario, parse_config, run_node

    sc = Scenario(duration_s=1200.0, rate_per_min=6.0, gpu_kv_tokens=300_000)
    cfg = parse_config("dram=seed-testbed:HBM,DRAM")
    m_whole = run_node(sc, cfg).metrics
    m_warm = run_node(replace(sc, duration_s=720.0, warmup_s=480.0), cfg).metrics
    for name in ("prompt_tok", "output_tok", "computed_tok", "busy_s", "steps", "running", "waiting"):
        assert getattr(m_warm, name) == pytest.approx(getattr(m_whole, name)[8:], rel=1e-12), name
    assert m_warm.read == pytest.approx(m_whole.read[:, 8:], rel=1e-12)
    assert m_warm.occupancy == pytest.approx(m_whole.occupancy[:, 8:], rel=1e-12)
    for cause, w in m_warm.write.items():
        assert w == pytest.approx(m_whole.write[cause][:, 8:], rel=1e-12), cause
    assert 0 < m_warm.prompt_total < m_whole.prompt_total and (m_warm.hit_tokens < m_whole.hit_tokens).all()
    assert [r[1] + 480 for r in m_warm.ttft] == pytest.approx([r[1] for r in m_whole.ttft if r[1] >= 480])


def test_a_warm_up_reads_the_warehouse_before_the_window(tmp_path):
    from kvtrace.store import open_store

    # four sessions of twenty requests a minute apart, begun at minutes 0-3; the window opens at 10
    db = _sessions_db(tmp_path, sessions=4, requests=20, start_min=1, every_min=1, took_ms=2_000.0)
    with open_store(db, read_only=True) as store:
        since = str(store.scalar("SELECT min(ts) + INTERVAL 10 MINUTE FROM requests"))
    args = ("--sessions", "warehouse", "--db", str(db), "--since", since, "--config", "dram=seed-testbed:HBM,DRAM")
    args += ("--gpu-kv", "400K", "--duration", "20m", "--format", "json")
    cold = json.loads(_run(*args).stdout)["configs"][0]
    r = _run(*args, "--warmup", "15m")
    assert r.exit_code == 0, r.output
    warm = json.loads(r.stdout)["configs"][0]
    # cut by the window, the sessions look new and cold; with the minutes before it, they are not
    assert (cold["sessions"], cold["ttft"]["new"]["count"], cold["requests_started"]) == (4, 4, 46)
    assert (warm["sessions"], warm["ttft"]["new"]["count"]) == (0, 0)
    assert 40 <= warm["requests_started"] <= 46
    assert warm["tiers"][0]["hit_ratio"] > cold["tiers"][0]["hit_ratio"] + 0.05
    # the measured window starts at --since, however long before the first request it is
    early = str(datetime.fromisoformat(since) - timedelta(hours=1))
    late = ("--sessions", "warehouse", "--db", str(db), "--since", early, "--config", "gpu=seed-testbed:HBM")
    r = _run(*late, "--gpu-kv", "400K", "--warmup", "10m", "--format", "json")
    doc = json.loads(r.stdout)
    # from 50 min before the first request to 5 min after the last (at minute 22)
    assert doc["configs"][0]["requests_started"] == 80 and doc["duration_s"] == 60 * (50 + 22 + 5)
    # a warm-up of warehouse sessions needs the time before --since
    r = _run("--sessions", "warehouse", "--db", str(db), "--config", "gpu=seed-testbed:HBM", "--warmup", "10m")
    assert r.exit_code == 1 and "give --since" in r.output


def test_warehouse_sessions_give_one_answer_whatever_the_workers(tmp_path):
    """The recorded sessions are read once and handed to every node, in worker processes too."""
    db = _sessions_db(tmp_path, sessions=9, requests=4, start_min=2, every_min=1, took_ms=1_500.0)
    args = ("--sessions", "warehouse", "--db", str(db), "--config", "gpu=seed-testbed:HBM", "--gpu-kv", "100K")
    args += ("--rate", "1.5x", "--nodes", "3", "--format", "json")
    one, two = _run(*args), _run(*args, "--jobs", "2")
    assert one.exit_code == 0, one.output
    assert one.stdout == two.stdout
    c = json.loads(one.stdout)["configs"][0]
    assert c["nodes"] == 3 and c["requests_started"] == 4 * c["sessions"] > 4 * 9


def test_a_command_reads_the_warehouse_once(tmp_path, monkeypatch):
    from kvtrace.simulate.sources import WarehouseSource

    db = _sessions_db(tmp_path, sessions=6, requests=3, start_min=2, every_min=1, took_ms=1_000.0)
    reads = []
    rows = WarehouseSource.rows
    monkeypatch.setattr(WarehouseSource, "rows", staticmethod(lambda *a, **k: reads.append(1) or rows(*a, **k)))
    base = ("--sessions", "warehouse", "--db", str(db), "--config", "gpu=seed-testbed:HBM", "--gpu-kv", "100K")
    for extra in ((), ("--nodes", "auto", "--ttft-p90", "5"), ("--calibrate", "100"), ("--nodes", "3")):
        reads.clear()
        r = _run(*base, *extra, "--format", "json")
        assert r.exit_code == 0, r.output
        assert len(reads) == 1, extra
    # refusals come before any read
    reads.clear()
    for extra, message in (
        (("--warmup", "10m"), "give --since"),
        (("--duration", "0s"), "duration must be > 0"),
        (("--since", "not-a-time"), "not a time"),
    ):
        r = _run(*base, *extra)
        assert r.exit_code == 1 and message in r.output, (extra, r.output)
    assert not reads
