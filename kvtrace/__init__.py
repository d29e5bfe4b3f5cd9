"""kvtrace: token telemetry of agentic AI traffic -> token mix, reuse, KV-cache TTL and tier sizing."""

__version__ = "0.1.0"
