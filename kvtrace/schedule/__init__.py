"""Scheduled reports: profiles (TOML), one run per period, the index of runs, the cron loop."""

from kvtrace.schedule.periods import Period, period_for
from kvtrace.schedule.profile import Profile, load_profile
from kvtrace.schedule.run import RunResult, run_profile

__all__ = ["Period", "Profile", "RunResult", "load_profile", "period_for", "run_profile"]
