"""OTLP/HTTP front end (Starlette): ``POST /v1/logs|metrics|traces``, ``/healthz``, ``/metrics``.

The protocol contract (docs/formats.md §7): 200 with an empty
``Export*ServiceResponse`` in the request's media type once the batch is stored; 400 with a
``google.rpc.Status`` body for an undecodable body; 401 without the bearer token; 404; 405 for
other methods; 413 over the size limit (checked on the wire and again while decompressing); 415
for other media types or encodings; 429/503 with ``Retry-After`` when the spool cannot take the
batch. Request contents are never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from kvtrace.collect import otlp
from kvtrace.collect.spool import SpoolFull, SpoolWriteError

log = logging.getLogger("kvtrace.collect")
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _status(code: int, message: str, media: str | None = None, headers: dict | None = None) -> Response:
    body, ctype = otlp.status_body(code, message, media)
    return Response(body, status_code=code, media_type=ctype, headers=headers)


def authorized(header: str | None, token: str | None) -> bool:
    """Constant-time check of ``Authorization: Bearer <token>`` (always true without a token)."""
    if not token:
        return True
    if not header:
        return False
    scheme, _, value = header.strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


DRAIN_FACTOR = 4  # read (and drop) an oversized body up to this many times the limit


async def _read_capped(request: Request, limit: int) -> bytes | None:
    """The raw body, or None if it is over ``limit``.

    An oversized body is read on and dropped (never buffered) up to ``DRAIN_FACTOR x limit``, so
    the client gets to read the 413 instead of a broken pipe, which exporters would retry.
    """
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            chunks = []
            if size > DRAIN_FACTOR * limit:
                return None
            continue
        chunks.append(chunk)
    return None if size > limit else b"".join(chunks)


def make_app(collector) -> Starlette:
    """The ASGI app over a running :class:`kvtrace.collect.server.Collector`."""
    cfg, spool, metrics = collector.config, collector.spool, collector.metrics

    def count(signal: str, code: int, content_type: str | None) -> None:
        media = otlp.media_type_of(content_type)
        encoding = "json" if media == otlp.JSON_TYPE else "protobuf" if media else "other"
        metrics.inc("kvtrace_collect_requests_total", protocol="http", encoding=encoding, signal=signal, code=str(code))

    async def export(request: Request) -> Response:
        name = request.path_params["signal"]
        signal = otlp.SIGNALS.get(name)
        if signal is None:
            return _status(404, f"no such endpoint {request.url.path}; use /v1/logs, /v1/metrics or /v1/traces")
        response = await _export(request, signal)
        count(name, response.status_code, request.headers.get("content-type"))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s %s -> %d", request.method, request.url.path, response.status_code)
        return response

    async def _export(request: Request, signal: otlp.Signal) -> Response:
        if request.method != "POST":
            return _status(405, f"{request.method} is not allowed; OTLP exports use POST", headers={"Allow": "POST"})
        if not authorized(request.headers.get("authorization"), cfg.token):
            return _status(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
        media = otlp.media_type_of(request.headers.get("content-type"))
        if media is None:
            return _status(
                415,
                f"unsupported media type '{request.headers.get('content-type', '')}'; "
                "use application/x-protobuf or application/json",
            )
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > DRAIN_FACTOR * cfg.max_body:
            return _status(
                413,
                f"body of {length} bytes is over the {cfg.max_body}-byte limit",
                media,
                headers={"Connection": "close"},
            )
        try:
            async with asyncio.timeout(cfg.body_timeout):
                raw = await _read_capped(request, cfg.max_body)
        except TimeoutError:
            return _status(
                408, f"the body did not arrive within {cfg.body_timeout:.0f} s", media, headers={"Connection": "close"}
            )
        except ClientDisconnect:
            # Nobody is left to answer: one line, no traceback (the exporter retries the batch).
            log.info("a client went away before sending its whole %s body", signal.name)
            return _status(400, "the client went away before sending the whole body", media)
        if raw is None:
            return _status(413, f"body is over the {cfg.max_body}-byte limit", media, headers={"Connection": "close"})
        try:
            data = otlp.decompress(raw, request.headers.get("content-encoding"), cfg.max_body)
            batch = otlp.decode(signal, media, data)
        except otlp.TooLarge as e:
            return _status(413, str(e), media)
        except otlp.UnsupportedEncoding as e:
            return _status(415, str(e), media)
        except otlp.BadPayload as e:
            return _status(400, f"cannot decode {signal.name} request: {e}", media)
        metrics.inc("kvtrace_collect_received_bytes_total", len(data), signal=signal.name)
        metrics.inc("kvtrace_collect_received_records_total", batch.records, signal=signal.name)
        if batch.records:
            try:
                fut = spool.submit(batch.frame_kind, batch.payload, batch.records)
                await asyncio.wrap_future(fut)
            except SpoolFull as e:
                return _status(e.status, str(e), media, headers={"Retry-After": str(e.retry_after)})
            except SpoolWriteError as e:
                return _status(503, str(e), media, headers={"Retry-After": "5"})
            metrics.inc("kvtrace_collect_stored_records_total", batch.records, signal=signal.name)
        return Response(otlp.success_body(signal, media), media_type=media)

    async def healthz(request: Request) -> Response:
        ok = collector.healthy()
        last = metrics.get("kvtrace_collect_last_ingest_timestamp_seconds")
        collector.update_gauges()
        body = {
            "status": "ok" if ok else "unhealthy",
            "spool_bytes": spool.backlog_bytes,
            "queue_bytes": spool.queue_bytes,
            "segments_retrying": int(metrics.get("kvtrace_collect_segments_retrying")),
            "segments_set_aside": int(metrics.get("kvtrace_collect_segments_set_aside")),
            "last_ingest_age_s": round(time.time() - last, 3) if last else None,
        }
        return JSONResponse(body, status_code=200 if ok else 503)

    async def prometheus(request: Request) -> Response:
        if not authorized(request.headers.get("authorization"), cfg.token):
            return _status(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
        collector.update_gauges()
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    async def not_found(request: Request, exc) -> Response:
        return _status(404, f"no such endpoint {request.url.path}; use /v1/logs, /v1/metrics or /v1/traces")

    async def not_allowed(request: Request, exc) -> Response:
        return _status(405, f"{request.method} is not allowed here")

    routes = [
        Route("/v1/{signal}", export, methods=_ALL_METHODS),
        Route("/v1/{signal}/", export, methods=_ALL_METHODS),  # a trailing slash: no redirect for a POST
        Route("/healthz", healthz, methods=["GET", "HEAD"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})
