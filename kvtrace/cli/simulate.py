"""``kvtrace simulate``: closed-loop serving model, several tier configurations side by side."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import (
    DbOpt,
    KvDtypeOpt,
    ModelOpt,
    OutOpt,
    SinceOpt,
    UntilOpt,
    emit_text,
    guarded,
    model_option,
    progress_bar,
)
from kvtrace.errors import ConfigError
from kvtrace.report.simulate_page import render_simulate_html
from kvtrace.units import parse_duration, parse_tokens
from kvtrace.synth.config import set_field


def simulate(
    scenario: Annotated[
        Optional[str],
        typer.Option(
            "--scenario", help="A committed scenario (seed-study) or a scenario TOML file; other options override it."
        ),
    ] = None,
    config: Annotated[
        Optional[list[str]],
        typer.Option(
            "--config",
            "-c",
            help="A configuration: [NAME=]TIERS[:TIER,TIER], e.g. dram=seed-testbed:HBM,DRAM (the first tier is the GPU's). Repeat to compare; ratios are to the first.",
        ),
    ] = None,
    sessions: Annotated[
        Optional[str],
        typer.Option(
            "--sessions",
            help="Workload: a kvtrace synth preset (seed-study, sample-week), warehouse (the requests of --db), or kv-cache-tester trace files (comma list) or a folder of them.",
        ),
    ] = None,
    db: DbOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    rate: Annotated[
        Optional[str],
        typer.Option(
            "--rate",
            help="New sessions per minute (5), or a multiple of the workload's rate (2x, 0.5x); warehouse sessions take a multiple: their sessions copied, or kept at random.",
        ),
    ] = None,
    set_: Annotated[
        Optional[list[str]],
        typer.Option(
            "--set",
            help="Override a synth workload parameter: name=value (JSON value), repeatable; see kvtrace synth --params.",
        ),
    ] = None,
    duration: Annotated[
        Optional[str],
        typer.Option(
            "--duration",
            help="Measured simulated time: 30m, 2h (sessions arrive throughout); default: the scenario's, else 2h, for warehouse sessions the window's (from its first request, or --since after a warm-up, to 5 minutes after its last).",
        ),
    ] = None,
    warmup: Annotated[
        Optional[str],
        typer.Option(
            "--warmup",
            help="Simulated before --duration and not measured, so that caches hold what they would and sessions under way are running: 30m, 1h (warehouse sessions: the requests of that time before --since).",
        ),
    ] = None,
    seed: Annotated[
        Optional[int], typer.Option("--seed", help="Random seed of the workload (and of --rate Nx copies).")
    ] = None,
    model: ModelOpt = None,
    kv_dtype: KvDtypeOpt = None,
    gpu: Annotated[
        Optional[str], typer.Option("--gpu", help="GPU of the hardware catalog: RTX-PRO-6000, H100, H200, B200, GH200.")
    ] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="GPUs per node (tensor parallel).")] = None,
    gpu_kv: Annotated[
        Optional[str],
        typer.Option(
            "--gpu-kv",
            help="GPU KV cache capacity in tokens (vLLM logs it as 'GPU KV cache size'), e.g. 400K; default: the tier file's HBM less the weights.",
        ),
    ] = None,
    prefill_efficiency: Annotated[
        Optional[float], typer.Option("--prefill-efficiency", help="Share of the datasheet FLOPS prefill reaches.")
    ] = None,
    decode_efficiency: Annotated[
        Optional[float], typer.Option("--decode-efficiency", help="Share of the memory bandwidth decode reaches.")
    ] = None,
    gpu_usd_hour: Annotated[
        Optional[float],
        typer.Option("--gpu-usd-hour", help="Price of one GPU per hour (default: the hardware catalog's)."),
    ] = None,
    max_num_seqs: Annotated[
        Optional[int], typer.Option("--max-num-seqs", help="Most sequences running at once.")
    ] = None,
    max_batched_tokens: Annotated[
        Optional[int], typer.Option("--max-batched-tokens", help="Token budget of a step (decode + chunked prefill).")
    ] = None,
    chunk: Annotated[
        Optional[int], typer.Option("--chunk", help="Offload chunk size in tokens (LMCache: 256).")
    ] = None,
    load: Annotated[
        Optional[str],
        typer.Option("--load", help="Offload loads: block (the step waits) or overlap (only the request waits)."),
    ] = None,
    store: Annotated[
        Optional[str],
        typer.Option(
            "--store",
            help="What a prompt writes to each offload tier: missing (chunks it lacks) or all (every chunk again).",
        ),
    ] = None,
    tier_mode: Annotated[
        Optional[str],
        typer.Option(
            "--tier-mode",
            help="Offload tiers: inclusive (write-through: every prompt's chunks to every tier, as LMCache) or exclusive (a chunk lives in one tier: written to the next tier when evicted from the one above, moved up to the GPU on a hit).",
        ),
    ] = None,
    no_write_back: Annotated[
        bool, typer.Option("--no-write-back", help="Do not copy chunks loaded from a lower tier into the tiers above.")
    ] = False,
    nodes: Annotated[
        str,
        typer.Option(
            "--nodes",
            help="Identical nodes behind the --router (a number), or auto: the fewest that meet --ttft-p90 per configuration.",
        ),
    ] = "1",
    router: Annotated[
        Optional[str],
        typer.Option(
            "--router",
            help="How a fleet's requests find a node: affinity (a session stays on one node; nodes run independently), round-robin or least-loaded (per request, fewest outstanding requests; a session's turns may land on other nodes, whose caches miss them).",
        ),
    ] = None,
    max_in_flight: Annotated[
        Optional[int],
        typer.Option(
            "--max-in-flight",
            help="A load generator's admission control: at most this many requests in flight per node (kv-cache-tester --max-concurrent-requests, vllm bench --max-concurrency); later turns wait at the client and TTFT is timed from when they are sent (the client wait is reported apart). Under --router affinity each node has its own cap; round-robin and least-loaded share one of N x nodes. 0: no cap.",
        ),
    ] = None,
    ttft_p90: Annotated[
        Optional[float],
        typer.Option("--ttft-p90", help="With --nodes auto: the p90 TTFT target in seconds, over every request."),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            help="Worker processes for the nodes of a fleet under --router affinity (results do not depend on it).",
        ),
    ] = 1,
    calibrate: Annotated[
        Optional[float],
        typer.Option(
            "--calibrate",
            help="Fit the efficiency factors so the first configuration's steady processed tokens/s equals this measured value (the prefill factor; the decode factor follows from the scenario's measured decode step); print them and exit.",
        ),
    ] = None,
    fit: Annotated[
        str,
        typer.Option(
            "--fit", help="With --calibrate: prefill (fit the prefill factor) or both (scale both by one multiplier)."
        ),
    ] = "prefill",
    format: Annotated[
        str, typer.Option("--format", "-f", help="table, json or html (a self-contained page with charts).")
    ] = "table",
    out: OutOpt = None,
) -> None:
    """Simulate an inference node closed loop: throughput, TTFT by cohort and tier fills per configuration.

    Sessions send their next turn when the previous response completes plus their tool/think time;
    a step-level model of a vLLM-V1-like node with a GPU prefix cache and LMCache-like offload tiers
    serves them. Processed tokens/s count every prompt token (cached included) plus output.

    Example: kvtrace simulate --scenario seed-study --format json -o seed.json

    Example: kvtrace simulate --scenario seed-study --nodes 2 --router least-loaded

    Example: kvtrace simulate --config dram=seed-testbed:HBM,DRAM --model MiniMax-M2.7 --kv-dtype bf16

    Example: kvtrace simulate --scenario seed-study --tier-mode exclusive

    Example: kvtrace simulate --scenario seed-study --max-in-flight 16

    Example: kvtrace simulate --sessions warehouse --db kv.duckdb --since 1d --warmup 1h --rate 2x --config h100 --nodes auto --ttft-p90 2
    """
    from kvtrace.simulate.run import Scenario, calibrate as fit_factors, load_scenario, parse_config, parse_rate
    from kvtrace.simulate.run import check_max_in_flight, read_recorded, simulate as run

    if format not in ("table", "json", "html"):
        raise ConfigError(f"unknown --format '{format}'", hint="choose table, json or html")
    sc = load_scenario(scenario) if scenario else Scenario()
    changes: dict = {}
    for key, value in (
        ("sessions", sessions),
        ("db", str(db) if db else None),
        ("since", since),
        ("until", until),
        ("seed", seed),
        ("model", _model(sc.model, model, kv_dtype)),
        ("gpu", gpu),
        ("gpus", gpus),
        ("prefill_efficiency", prefill_efficiency),
        ("decode_efficiency", decode_efficiency),
        ("max_num_seqs", max_num_seqs),
        ("gpu_usd_per_hour", gpu_usd_hour),
        ("router", router),
        ("max_in_flight", max_in_flight),
        ("max_num_batched_tokens", max_batched_tokens),
    ):
        if value is not None:
            changes[key] = value
    if max_in_flight is not None:
        check_max_in_flight(max_in_flight)
    if rate is not None:
        changes.update(parse_rate(rate))
    if duration is not None:
        changes["duration_s"] = parse_duration(duration, what="--duration")
    if warmup is not None:
        changes["warmup_s"] = parse_duration(warmup, what="--warmup")
    if gpu_kv is not None:
        changes["gpu_kv_tokens"] = parse_tokens(gpu_kv, what="--gpu-kv")
    if config:
        changes["configs"] = [parse_config(c) for c in config]
    if set_:
        workload = dict(sc.workload)
        for assignment in set_:
            set_field(workload, assignment)
        changes["workload"] = workload
    policy = dict(sc.policy)
    for key, value in (("chunk_tokens", chunk), ("load", load), ("store", store), ("tier_mode", tier_mode)):
        if value is not None:
            policy[key] = value
    if no_write_back:
        policy["write_back"] = False
    changes["policy"] = policy
    sc = replace(sc, **changes)
    sc.policy_obj()
    sc.cost()
    recorded = read_recorded(sc)  # warehouse sessions: read once, here
    if recorded is not None and duration is None and scenario is None:
        span = recorded.span_s()
        if span is None:
            raise ConfigError(
                "the warehouse has no requests in the window", hint="ingest telemetry first, or widen --since/--until"
            )
        sc = replace(sc, duration_s=span)
    if calibrate is not None:
        res = fit_factors(sc, calibrate, fit=fit, recorded=recorded)
        _emit(
            res,
            format,
            out,
            lambda c: c.print(
                f"{res['config']}: prefill_efficiency = {res['prefill_efficiency']}, "
                f"decode_efficiency = {res['decode_efficiency']} "
                f"(steady {res['target_tokens_per_s']:g} tokens/s)"
            ),
        )
        return
    if nodes == "auto":
        if ttft_p90 is None:
            raise ConfigError("--nodes auto needs a target", hint="add --ttft-p90 2 (seconds)")
        n_nodes, target = 1, ttft_p90
    else:
        try:
            n_nodes = int(nodes)
        except ValueError:
            raise ConfigError(f"--nodes {nodes!r}", hint="a number of nodes, or auto with --ttft-p90") from None
        if ttft_p90 is not None:
            raise ConfigError("--ttft-p90 sizes a fleet", hint="use it with --nodes auto")
        target = None
    names = [c.name for c in sc.configs]
    with progress_bar("simulating", total=len(names), count=True, step=names[0]) as report:
        # a configuration's share of its simulated time, on a bar over the configurations
        progress = (lambda name, share: report(names.index(name) + share, name)) if report else None
        res = run(sc, progress=progress, nodes=n_nodes, ttft_p90_s=target, jobs=jobs, recorded=recorded)

    def table(console):
        from kvtrace.simulate.render import render_table

        render_table(res, console)

    _emit(res, format, out, table)


def _model(current: str, model: str | None, kv_dtype: str | None) -> str | None:
    """The served model from ``--model``/``--kv-dtype``; ``--kv-dtype`` alone changes the dtype of
    the scenario's model."""
    if model is None and kv_dtype is not None:
        from kvtrace.replay.catalog import DTYPE_BYTES  # here: the replay package costs every command 0.1 s

        name, sep, dtype = current.rpartition(":")
        model = name if sep and dtype.lower() in DTYPE_BYTES else current
    return model_option(model, kv_dtype)


def _emit(res: dict, format: str, out, table) -> None:
    if format == "html" and "configs" in res:
        emit_text(render_simulate_html(res), out)
        return
    if format in ("json", "html"):
        import json

        emit_text(json.dumps(res, indent=1) + "\n", out)
        return
    from rich.console import Console

    if out is None:
        table(Console(width=150))
        return
    with open(out, "w") as fh:
        table(Console(file=fh, width=150))


def register(app: typer.Typer) -> None:
    app.command("simulate")(guarded(simulate))
