"""Where the suite finds data outside the repository: ``shared/`` beside the checkout (as CI lays
it out), or ``$KVTRACE_SHARED``."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KVTRACE_SHARED") or ROOT.parent / "shared")
TRACES = SHARED / "traces"
