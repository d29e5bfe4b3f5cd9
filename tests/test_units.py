"""kvtrace.units: the one place quantities are parsed and formatted."""

import math

import pytest
from hypothesis import given, strategies as st

from kvtrace.errors import ConfigError
from kvtrace.units import (
    fmt_age,
    fmt_bytes,
    fmt_bytes_compact,
    fmt_duration,
    fmt_seconds,
    fmt_span,
    fmt_tokens,
    fmt_tokens_compact,
    fmt_ttl,
    is_span,
    parse_bytes,
    parse_duration,
    parse_durations,
    parse_rate,
    parse_tokens,
    parse_ttls,
)


def test_parse_quantities():
    assert parse_tokens("1.5M") == 1_500_000 and parse_tokens(42) == 42
    assert parse_bytes("512GB") == 512 * 10**9 and parse_bytes("96GiB") == 96 * 2**30
    assert parse_rate("1.9GB/s") == 1.9e9
    assert parse_duration("5m") == 300 and parse_duration("250ms") == 0.25 and parse_duration("1w") == 604800
    assert parse_duration(90) == 90 and parse_duration("2D") == 172800 and parse_duration("0") == 0
    # one rule: text has a unit (a symbol or a word); a bare number could be seconds or minutes
    assert (
        parse_duration("1 hour") == 3600 and parse_duration("5 minutes") == 300 and parse_duration("2 days") == 172800
    )
    for bare in ("90", "60", "1.5"):
        with pytest.raises(ConfigError, match=f"'{bare}' has no unit.*{bare}s, {bare}m or {bare}h"):
            parse_duration(bare, what="--ttl")


def test_unlimited_only_where_a_ttl_is_asked_for():
    assert parse_duration("none", unlimited=True) == math.inf and parse_duration(None, unlimited=True) == math.inf
    with pytest.raises(ConfigError) as e:
        parse_duration("none", what="--idle")
    assert "--idle" in str(e.value) and "30s" in e.value.hint and "no TTL" not in e.value.hint
    with pytest.raises(ConfigError) as e:
        parse_duration("5 parsecs", unlimited=True)
    assert "no TTL" in e.value.hint


@pytest.mark.parametrize("bad, parse", [("12 apples", parse_tokens), ("3 furlongs", parse_bytes), ("", parse_duration)])
def test_parse_errors_name_the_syntax(bad, parse):
    with pytest.raises(ConfigError) as e:
        parse(bad)
    assert repr(bad) in str(e.value) and e.value.hint


def test_lists():
    assert parse_ttls(["2d", "5m,none", "5m"]) == [300.0, 172800.0, None]
    assert parse_durations("1h, 30s,1h") == [30.0, 3600.0] and parse_durations(None) == []
    assert is_span("7d") and not is_span("2026-11-02") and not is_span("30")


def test_two_styles_stay_apart():
    assert (fmt_tokens(15_120_000), fmt_tokens_compact(15_120_000)) == ("15.12 M", "15.1M")


def test_one_rule_for_bytes_and_time():
    # bytes: decimal units, three significant digits, whichever function prints them
    assert fmt_bytes(19.2e12) == fmt_bytes_compact(19.2e12) == "19.2 TB"
    assert fmt_bytes(126_976) == "127 KB" and fmt_bytes(512) == "512 B"
    # time: a TTL's spelling when whole minutes/hours/days (or seconds below 100), else 3 digits
    for f in (fmt_duration, fmt_age, fmt_seconds, fmt_span):
        assert (f(300), f(5400), f(3600), f(90)) == ("5m", "90m", "1h", "90s")
        assert (f(6707), f(0.25), f(12.34), f(200_000)) == ("1.86 h", "250 ms", "12.3 s", "2.31 d")
    assert fmt_ttl(5400) == fmt_duration(5400)
    assert (fmt_tokens(None), fmt_tokens_compact(None), fmt_ttl(None), fmt_duration(math.inf)) == (
        "–",
        "unlimited",
        "none",
        "none",
    )


@given(st.integers(min_value=1, max_value=999_999), st.sampled_from([1, 60, 3600, 86400]))
def test_ttl_spelling_round_trips(n, unit):
    # :g keeps six significant digits, so whole seconds below 10**6 spell exactly
    assert parse_duration(fmt_ttl(n * unit)) == n * unit
