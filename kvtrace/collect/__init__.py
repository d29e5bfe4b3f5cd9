"""``kvtrace collect``: a durable OTLP/HTTP + gRPC receiver that spools and ingests.

Data flow: a request is decompressed under a cap and decoded (:mod:`.otlp`), appended to the
open spool segment and fsynced with group commit (:mod:`.spool`) before the success answer;
sealed segments are converted to OTLP JSON lines (:mod:`.segments`, :mod:`.pbjson`) and ingested
into the warehouse by a worker process (:mod:`.worker`), whose ingest alone decides which records
become rows and reports the rest. :class:`Collector` (:mod:`.server`) runs the HTTP (:mod:`.http_app`) and gRPC
(:mod:`.grpc_server`) front ends, the spool and the maintenance loop together.

Example::

    from kvtrace.collect import Collector, CollectorConfig

    Collector(CollectorConfig(spool=Path("spool"), db=Path("team.duckdb"))).run()
"""

from __future__ import annotations

from kvtrace.collect.config import CollectorConfig

__all__ = ["Collector", "CollectorConfig"]


def __getattr__(name: str):
    # The server pulls in the spool, the front ends' helpers and their imports: load it on use.
    if name == "Collector":
        from kvtrace.collect.server import Collector

        return Collector
    raise AttributeError(name)
