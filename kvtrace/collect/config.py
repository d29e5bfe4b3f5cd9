"""The collector's settings, declared once (the CLI, the server and the tests read this)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path

from kvtrace.errors import ConfigError
from kvtrace.units import parse_duration

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.I)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1 << 10,
    "ki": 1 << 10,
    "mib": 1 << 20,
    "mi": 1 << 20,
    "gib": 1 << 30,
    "gi": 1 << 30,
    "tib": 1 << 40,
    "ti": 1 << 40,
}


def parse_size(text: str | int) -> int:
    """``16MiB``, ``64MB``, ``1GiB``, ``500k`` or a number of bytes -> bytes."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"'{text}' is not a size", hint="use bytes or a unit: 512KiB, 16MiB, 1GiB, 64MB")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_every(text: str) -> float:
    """A duration (``60s``, ``5m``) or ``off``/``0`` (no ingest by the collector) -> seconds."""
    if str(text).strip().lower() in ("off", "none", "never", "0"):
        return 0.0

    return parse_duration(text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class CollectorConfig:
    """Everything ``kvtrace collect`` can be told (sizes in bytes, durations in seconds)."""

    spool: Path = field(default=Path("kvtrace-spool"), metadata={"help": "spool folder for accepted batches"})
    db: Path | None = field(default=None, metadata={"help": "warehouse the collector ingests into (None: spool only)"})
    host: str = field(default="127.0.0.1", metadata={"help": "address to bind (HTTP and gRPC)"})
    http_port: int = field(default=4318, metadata={"help": "OTLP/HTTP port (0: any free port)"})
    grpc_port: int | None = field(default=4317, metadata={"help": "OTLP/gRPC port (0: any free port; None: no gRPC)"})
    ingest_every: float = field(
        default=60.0, metadata={"help": "seconds between ingests of closed segments (0: never)"}
    )
    token: str | None = field(default=None, metadata={"help": "bearer token required from clients"})
    insecure: bool = field(default=False, metadata={"help": "allow a non-loopback bind without a token"})
    max_body: int = field(default=16 << 20, metadata={"help": "largest request, after decompression"})
    segment_bytes: int = field(default=64 << 20, metadata={"help": "seal a segment at this size"})
    segment_age: float = field(default=60.0, metadata={"help": "seal a segment this long after its first write"})
    max_queue: int = field(default=64 << 20, metadata={"help": "bytes waiting for fsync above which clients get 429"})
    max_spool: int = field(default=10 << 30, metadata={"help": "bytes not yet ingested above which clients get 503"})
    keep_ingested: float = field(default=7 * 86400.0, metadata={"help": "seconds to keep ingested segments"})
    grpc_workers: int = field(default=16, metadata={"help": "gRPC handler threads"})
    access_log: bool = field(default=False, metadata={"help": "log one line per HTTP request (no contents)"})
    header_timeout: float = field(
        default=10.0, metadata={"help": "seconds a connection may take to send a request's headers"}
    )
    body_timeout: float = field(default=30.0, metadata={"help": "seconds a request may take to send its body"})
    max_connections: int = field(
        default=1000,
        metadata={"help": "open HTTP connections above which new ones get 503 (capped by the open-file limit)"},
    )

    def check(self) -> None:
        """Refuse unsafe or impossible settings.

        Raises:
            ConfigError: a non-loopback bind without ``token`` (unless ``insecure``), or bad sizes.
        """
        if not is_loopback(self.host) and not self.token and not self.insecure:
            raise ConfigError(
                f"refusing to listen on {self.host} without a token: anyone who can reach it could write telemetry",
                hint="pass --token SECRET (clients send 'Authorization: Bearer SECRET'), bind 127.0.0.1, "
                "or pass --insecure if a firewall or proxy already guards it",
            )
        if self.max_body <= 0 or self.segment_bytes <= 0:
            raise ConfigError("--max-body and --segment-size must be positive")
        if self.header_timeout <= 0 or self.body_timeout <= 0 or self.max_connections <= 0:
            raise ConfigError("the header and body timeouts and the connection limit must be positive")
        if self.segment_age <= 0:
            raise ConfigError("--segment-age must be positive", hint="e.g. 60s")
        if self.token is not None and not self.token.strip():
            raise ConfigError("--token is empty", hint="pass a non-empty secret")
