"""OTLP/gRPC front end: the logs, metrics and trace ``Export`` methods (grpcio).

Handlers take the raw request bytes (no deserializer), so the bytes are validated by the same
code as OTLP/HTTP protobuf bodies and a malformed message is INVALID_ARGUMENT rather than
grpcio's INTERNAL. gRPC enforces ``max_receive_message_length`` after decompression, which gives
RESOURCE_EXHAUSTED for oversized or gzip-bomb messages. A full spool answers RESOURCE_EXHAUSTED
with a ``google.rpc.RetryInfo`` (the OTLP way to say "retry later"), or UNAVAILABLE.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from kvtrace.collect import otlp
from kvtrace.collect.http_app import authorized
from kvtrace.collect.spool import SpoolFull, SpoolWriteError

log = logging.getLogger("kvtrace.collect")


def _retry_details(code: int, message: str, seconds: int) -> bytes:
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import error_details_pb2, status_pb2

    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds)))
    return status_pb2.Status(code=code, message=message, details=[detail]).SerializeToString()


def _handler(collector, signal: otlp.Signal):
    import grpc

    cfg, spool, metrics = collector.config, collector.spool, collector.metrics

    def export(request: bytes, context: grpc.ServicerContext):
        code = grpc.StatusCode.OK
        try:
            if cfg.token:
                md = dict(context.invocation_metadata() or ())
                if not authorized(md.get("authorization"), cfg.token):
                    code = grpc.StatusCode.UNAUTHENTICATED
                    context.abort(code, "missing or wrong bearer token")
            try:
                batch = otlp.decode_protobuf(signal, request)
            except otlp.BadPayload as e:
                code = grpc.StatusCode.INVALID_ARGUMENT
                context.abort(code, f"cannot decode {signal.name} request: {e}")
            metrics.inc("kvtrace_collect_received_bytes_total", len(request), signal=signal.name)
            metrics.inc("kvtrace_collect_received_records_total", batch.records, signal=signal.name)
            if batch.records:
                try:
                    spool.submit(batch.frame_kind, batch.payload, batch.records).result()
                except SpoolFull as e:
                    code = grpc.StatusCode.RESOURCE_EXHAUSTED if e.status == 429 else grpc.StatusCode.UNAVAILABLE
                    context.set_trailing_metadata(
                        [("grpc-status-details-bin", _retry_details(code.value[0], str(e), e.retry_after))]
                    )
                    context.abort(code, str(e))
                except SpoolWriteError as e:
                    code = grpc.StatusCode.UNAVAILABLE
                    context.abort(code, str(e))
                metrics.inc("kvtrace_collect_stored_records_total", batch.records, signal=signal.name)
            return otlp.response_message(signal)
        finally:
            metrics.inc(
                "kvtrace_collect_requests_total",
                protocol="grpc",
                encoding="protobuf",
                signal=signal.name,
                code=code.name,
            )

    return grpc.unary_unary_rpc_method_handler(
        export, request_deserializer=None, response_serializer=lambda m: m.SerializeToString()
    )


GRPC_IDLE_MS = 60_000


def start_grpc(collector, host: str, port: int):
    """Start the gRPC server; returns ``(server, bound_port)``.

    Raises:
        OSError: the address cannot be bound.
    """
    import grpc

    cfg = collector.config
    server = grpc.server(
        ThreadPoolExecutor(max_workers=cfg.grpc_workers, thread_name_prefix="kvtrace-grpc"),
        # A connection that never completes its handshake is closed after the HTTP front end's
        # header deadline, and one idle between exports after a minute, so idle sockets cannot
        # hold the collector's file descriptors (exporters reconnect on their own).
        options=[
            ("grpc.max_receive_message_length", cfg.max_body),
            ("grpc.so_reuseport", 0),
            ("grpc.server_handshake_timeout_ms", int(cfg.header_timeout * 1000)),
            ("grpc.max_connection_idle_ms", GRPC_IDLE_MS),
        ],
    )
    for signal in otlp.SIGNALS.values():
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(signal.grpc_service, {"Export": _handler(collector, signal)}),)
        )
    addr = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(addr)
    except RuntimeError as e:
        raise OSError(f"cannot listen on {addr} (gRPC): {e}") from None
    if not bound:
        raise OSError(f"cannot listen on {addr} (gRPC): address in use?")
    server.start()
    return server, bound
