"""``kvtrace collect``: a durable OTLP/HTTP + gRPC receiver that spools and ingests."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvtrace.cli._options import DbOpt, guarded
from kvtrace.units import parse_duration
from kvtrace.collect.config import CollectorConfig, parse_every, parse_size
from kvtrace.collect.segments import spool_status


def collect(
    host: Annotated[
        str, typer.Option("--host", help="Address to bind. Anything but loopback needs --token (or --insecure).")
    ] = "127.0.0.1",
    http_port: Annotated[int, typer.Option("--http-port", help="OTLP/HTTP port (0: any free port).")] = 4318,
    grpc_port: Annotated[
        int, typer.Option("--grpc-port", help="OTLP/gRPC port (0: any free port; -1: no gRPC).")
    ] = 4317,
    spool: Annotated[
        Path,
        typer.Option(
            "--spool", envvar="KVTRACE_SPOOL", help="Spool folder: accepted batches are fsynced here before the answer."
        ),
    ] = Path("kvtrace-spool"),
    db: DbOpt = None,
    ingest_every: Annotated[
        str,
        typer.Option(
            "--ingest-every",
            help="Ingest closed segments into --db this often (30s, 5m); 'off' leaves them for `kvtrace ingest SPOOL`.",
        ),
    ] = "60s",
    token: Annotated[
        Optional[str],
        typer.Option(
            "--token",
            envvar="KVTRACE_COLLECT_TOKEN",
            help="Bearer token clients must send (env KVTRACE_COLLECT_TOKEN keeps it out of `ps`).",
        ),
    ] = None,
    insecure: Annotated[bool, typer.Option("--insecure", help="Allow a non-loopback --host without --token.")] = False,
    max_body: Annotated[
        str, typer.Option("--max-body", help="Largest request, after decompression (413 above).")
    ] = "16MiB",
    segment_size: Annotated[str, typer.Option("--segment-size", help="Seal a spool segment at this size.")] = "64MiB",
    segment_age: Annotated[
        str, typer.Option("--segment-age", help="Seal a spool segment this long after its first write.")
    ] = "60s",
    max_queue: Annotated[
        str, typer.Option("--max-queue", help="Batches waiting for fsync above this size get 429 + Retry-After.")
    ] = "64MiB",
    max_spool: Annotated[
        str,
        typer.Option("--max-spool", help="Spool bytes not yet ingested above which requests get 503 + Retry-After."),
    ] = "10GiB",
    keep_ingested: Annotated[
        str, typer.Option("--keep-ingested", help="Keep ingested segments (SPOOL/ingested/) this long.")
    ] = "7d",
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log every request line (method, path, status; never contents).")
    ] = False,
    status: Annotated[
        bool,
        typer.Option(
            "--status",
            help="Print what the spool holds (waiting, ingested, set aside with reasons) as JSON and exit; exit 1 if a segment is set aside. Example: kvtrace collect --status --spool /srv/kvtrace/spool",
        ),
    ] = False,
) -> None:
    """Receive OpenTelemetry (OTLP/HTTP and gRPC) from Claude Code and other agents into the warehouse.

    Every accepted batch is fsynced to a spool segment before the 200; closed segments are
    ingested into --db every --ingest-every (the warehouse is held only during an ingest, so
    reports can run beside the collector). SIGTERM or Ctrl-C stops it cleanly.
    Point Claude Code at it with collectors/claude-code.env.

    Example: kvtrace collect --db team.duckdb --spool /var/lib/kvtrace/spool --ingest-every 60s
    """
    import logging

    if status:
        import json

        state = spool_status(spool)
        typer.echo(json.dumps(state, indent=2))
        raise typer.Exit(1 if state["set_aside"] else 0)
    from kvtrace.collect.server import Collector
    from kvtrace.store.store import default_db_path

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s kvtrace collect: %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S",
    )
    if not verbose:
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    every = parse_every(ingest_every)
    config = CollectorConfig(
        spool=spool,
        db=(db or default_db_path()) if every > 0 else None,
        host=host,
        http_port=http_port,
        grpc_port=None if grpc_port < 0 else grpc_port,
        ingest_every=every,
        token=token,
        insecure=insecure,
        max_body=parse_size(max_body),
        segment_bytes=parse_size(segment_size),
        segment_age=parse_duration(segment_age),
        max_queue=parse_size(max_queue),
        max_spool=parse_size(max_spool),
        keep_ingested=parse_duration(keep_ingested),
        access_log=verbose,
    )
    collector = Collector(config)
    log = logging.getLogger("kvtrace.collect")

    def announce() -> None:
        grpc = f", OTLP/gRPC {host}:{collector.grpc_port}" if collector.grpc_port else ""
        into = f"ingest every {ingest_every} into {config.db}" if config.db else "no ingest (kvtrace ingest SPOOL)"
        log.info("OTLP/HTTP http://%s:%s%s; spool %s; %s", host, collector.http_port, grpc, spool, into)

    collector.run(on_ready=announce)
    log.info("stopped cleanly")


def register(app: typer.Typer) -> None:
    app.command("collect")(guarded(collect))
