"""The synthetic workload's parameters, declared once as data (the CLI, docs and tests read them).

Every field carries ``help`` metadata. Token ranges are ``(low, high)`` drawn uniformly and then
jittered by ±``jitter_tokens``; times are ``(median, sigma, max)`` of a log-normal in seconds.
Defaults are the seed study's agentic coding model; ``PRESETS`` holds named variants.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

from kvtrace.errors import ConfigError
from kvtrace.units import parse_duration
from kvtrace.synth.catalog import MODELS


def _f(default: Any, help: str, **kw: Any) -> Any:
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


@dataclass
class SynthConfig:
    """Parameters of the synthetic agentic coding workload (defaults: the seed study)."""

    seed: int = _f(0, "Random seed; the same seed and parameters give the same bytes.")
    start: str = _f("2026-03-02T00:00:00Z", "Simulated start time (ISO 8601, UTC).")
    days: float = _f(7.0, "Length of the arrival window in days (sessions then run to completion).")
    arrival_rate_per_min: float = _f(2.5, "Poisson session arrival rate (sessions per minute) while active.")
    active_hours: tuple[int, int] | None = _f(None, "UTC hours [from, to) when sessions arrive; None = all day.")
    active_weekdays: tuple[int, ...] = _f((0, 1, 2, 3, 4, 5, 6), "Weekdays (0=Monday) when sessions arrive.")
    users: int = _f(40, "Size of the user pool (anonymous user.id hashes, no emails).")
    orgs: int = _f(2, "Organizations; users are spread over them; the prompt cache is isolated per org.")
    model_mix: dict = _f(
        {"claude-sonnet-4-6": 0.6, "claude-opus-4-6": 0.3, "claude-haiku-4-5": 0.1},
        "Share of sessions per main model (names from kvtrace.synth.catalog).",
    )
    shared_heads: bool = _f(
        True,
        "Whether sessions of a model share its prompt head (system prompt + tools), as Claude Code's do; "
        "false gives each session a head of its own, as a load generator's random prompts do.",
    )
    cache_ttl_s: int = _f(300, "Prompt-cache idle TTL in seconds, refreshed on use: 300 (5m) or 3600 (1h).")
    context_cap_tokens: int = _f(64_000, "Context size at which the session compacts.")
    session_turns: tuple[float, float] = _f((18.0, 0.6), "Requests per session: log-normal (median, sigma).")
    returning_fraction: float = _f(0.3, "Share of sessions in the returning cohort (pause, then resume).")
    returning_after_turns: tuple[int, int] = _f((17, 23), "The returning cohort pauses after this many requests.")
    returning_idle_s: tuple[float, float] = _f((12 * 60.0, 18 * 60.0), "Idle time of a pause, uniform seconds.")
    returning_resumes: int = _f(1, "How many times a returning session pauses and resumes.")
    requests_per_prompt: float = _f(4.0, "Mean API requests per user prompt (geometric).")
    user_prompt_tokens: tuple[int, int] = _f((20, 300), "Tokens of a user prompt.")
    tool_result_tokens: tuple[int, int] = _f((250, 600), "Tokens of a tool/command result appended per turn.")
    file_read_tokens: tuple[int, int] = _f((1_500, 3_500), "Tokens of a file read (instead of a tool result).")
    file_read_prob: float = _f(0.2, "Probability that a turn's tool result is a file read.")
    output_tokens: tuple[int, int] = _f((40, 200), "Tokens of a model answer.")
    code_block_tokens: tuple[int, int] = _f((400, 900), "Tokens of an answer that writes a code block.")
    code_block_prob: float = _f(0.15, "Probability that an answer is a code block.")
    jitter_tokens: int = _f(100, "Every drawn length is jittered by up to ± this many tokens.")
    tail_tokens: tuple[int, int] = _f((1, 10), "Uncached input: tokens after the last cache breakpoint.")
    tool_time_s: tuple[float, float, float] = _f((5.0, 0.9, 60.0), "Tool/think time between requests of a prompt.")
    user_think_s: tuple[float, float, float] = _f((30.0, 1.1, 1_800.0), "User time between prompts.")
    subagent_prob: float = _f(0.03, "Probability that a tool turn spawns subagents.")
    subagent_parallel: tuple[int, int] = _f((1, 3), "Subagents spawned at once (uniform).")
    subagent_turns: tuple[int, int] = _f((3, 12), "Requests per subagent thread.")
    subagent_task_tokens: tuple[int, int] = _f((150, 600), "Tokens of the task a subagent receives.")
    subagent_answer_tokens: tuple[int, int] = _f((300, 1_200), "Tokens of a subagent's final answer.")
    subagent_model_mix: dict = _f(
        {"inherit": 0.6, "claude-haiku-4-5": 0.4}, "Subagent model: 'inherit' (the session's) or a catalog name."
    )
    compact_instruction_tokens: tuple[int, int] = _f((500, 700), "Tokens of the compaction instruction.")
    compact_summary_tokens: tuple[int, int] = _f((1_500, 3_000), "Tokens of the compaction summary (its output).")
    model_switch_prob: float = _f(0.01, "Probability, per user prompt, of switching the session's model.")
    ttft_base_ms: tuple[float, float, float] = _f((450.0, 0.35, 10_000.0), "TTFT floor: log-normal ms.")
    log_export_interval_s: float = _f(5.0, "OTLP logs export interval (Claude Code default 5 s): one line each.")
    metric_export_interval_s: float = _f(60.0, "OTLP metrics export interval (default 60 s), DELTA temporality.")
    cc_versions: tuple[str, ...] = _f(("2.1.122", "2.1.126", "2.1.131"), "Claude Code versions in the fleet.")

    def __post_init__(self) -> None:
        self.validate()

    @property
    def start_ms(self) -> int:
        """The start time as integer epoch milliseconds."""
        return int(parse_start(self.start).timestamp() * 1000)

    def validate(self) -> None:
        """Raise ConfigError on values the model cannot run with."""

        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"synth parameter '{name}': {why}", hint="see `kvtrace synth --params`")

        parse_start(self.start)
        if self.days <= 0:
            raise bad("days", "must be > 0")
        if self.arrival_rate_per_min <= 0:
            raise bad("arrival_rate_per_min", "must be > 0")
        if self.users < 1 or self.orgs < 1 or self.orgs > self.users:
            raise bad("users", "need users >= orgs >= 1")
        if not isinstance(self.shared_heads, bool):
            raise bad("shared_heads", "must be true or false")
        if self.cache_ttl_s <= 0:
            raise bad("cache_ttl_s", "must be > 0")
        for mix_name in ("model_mix", "subagent_model_mix"):
            mix = getattr(self, mix_name)
            if not mix or any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
                raise bad(mix_name, "needs positive weights")
            for m in mix:
                if m not in MODELS and not (mix_name == "subagent_model_mix" and m == "inherit"):
                    raise bad(mix_name, f"unknown model '{m}' (known: {', '.join(MODELS)})")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name.endswith("_tokens") and isinstance(v, tuple) and (v[0] < 0 or v[0] > v[1]):
                raise bad(f.name, "needs 0 <= low <= high")
            if f.name.endswith("_prob") or f.name == "returning_fraction":
                if not 0.0 <= v <= 1.0:
                    raise bad(f.name, "must be in [0, 1]")
        if self.context_cap_tokens < 2 * max(m.main_head_tokens for m in MODELS.values()):
            raise bad("context_cap_tokens", "must leave room above the prompt head (>= 2x head)")
        if self.active_hours is not None and not 0 <= self.active_hours[0] < self.active_hours[1] <= 24:
            raise bad("active_hours", "needs 0 <= from < to <= 24")

    def replace(self, **changes: Any) -> SynthConfig:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)


def parse_start(s: str) -> datetime:
    """Parse an ISO start time; naive means UTC."""
    try:
        t = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"synth parameter 'start': cannot parse '{s}'", hint="use ISO 8601, e.g. 2026-03-02T00:00:00Z"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def parse_ttl(s: str | int) -> int:
    """'5m' / '1h' / '300s' -> seconds (text needs a unit; an int is seconds)."""
    if isinstance(s, int):
        return s
    return int(parse_duration(s, what="cache TTL"))


PRESETS: dict[str, dict[str, Any]] = {
    # The seed study: a large fleet around the clock, 2.5 sessions/min.
    "seed-study": {},
    # A small team's working week: about 50 sessions, a few MB of telemetry and transcripts.
    "sample-week": {
        "arrival_rate_per_min": 0.02,
        "active_hours": (9, 18),
        "active_weekdays": (0, 1, 2, 3, 4),
        "users": 6,
        "orgs": 1,
        "days": 7.0,
    },
}


def preset(name: str, **overrides: Any) -> SynthConfig:
    """A preset's config with overrides applied."""
    if name not in PRESETS:
        raise ConfigError(f"unknown synth preset '{name}'", hint="use one of " + ", ".join(PRESETS))
    return SynthConfig(**{**PRESETS[name], **overrides})


def set_field(cfg_kwargs: dict[str, Any], assignment: str) -> None:
    """Apply one ``name=value`` override (value parsed as JSON, else a string) to kwargs."""
    import json

    name, sep, raw = assignment.partition("=")
    name = name.strip().replace("-", "_")
    known = {f.name: f for f in fields(SynthConfig)}
    if not sep or name not in known:
        raise ConfigError(f"--set '{assignment}': unknown parameter '{name}'", hint="parameters: " + ", ".join(known))
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    if isinstance(value, list):
        value = tuple(value)
    cfg_kwargs[name] = value


def describe() -> list[tuple[str, str, str]]:
    """(name, default, help) for every parameter, for help text and docs."""
    base = SynthConfig()
    return [(f.name, repr(getattr(base, f.name)), f.metadata["help"]) for f in fields(SynthConfig)]
