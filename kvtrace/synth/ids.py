"""Seeded identifiers shaped like Claude Code's, and the filler text of synthetic transcripts.

Everything draws from a ``random.Random`` passed in, so ids are a pure function of the seed.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def uuid4(rng: random.Random) -> str:
    """A random (version 4, RFC 4122 variant) UUID string."""
    n = rng.getrandbits(128)
    n = (n & ~(0xF000 << 64)) | (0x4000 << 64)  # version 4
    n = (n & ~(0xC000 << 48)) | (0x8000 << 48)  # variant 10xx
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _b58(rng: random.Random, n: int) -> str:
    return "".join(_B58[rng.randrange(58)] for _ in range(n))


def request_id(rng: random.Random) -> str:
    """An Anthropic API request id: ``req_011C`` + 20 base58 characters."""
    return "req_011C" + _b58(rng, 20)


def message_id(rng: random.Random) -> str:
    """An Anthropic message id: ``msg_011C`` + 20 base58 characters."""
    return "msg_011C" + _b58(rng, 20)


def tool_use_id(rng: random.Random) -> str:
    """A tool_use block id: ``toolu_01`` + 22 base58 characters."""
    return "toolu_01" + _b58(rng, 22)


def agent_id(rng: random.Random) -> str:
    """A subagent id as used in ``subagents/agent-<id>.jsonl``."""
    return f"a{rng.getrandbits(64):016x}"


def user_hash(rng: random.Random) -> str:
    """Claude Code's anonymous ``user.id``: 64 hex characters."""
    return f"{rng.getrandbits(256):064x}"


def iso_ms(t_ms: int) -> str:
    """Epoch milliseconds -> ``2026-03-02T09:15:42.628Z``."""
    t = datetime.fromtimestamp(t_ms // 1000, tz=timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t_ms % 1000:03d}Z"


# Filler text: a fixed pseudo-code corpus (independent of the run seed) sliced at random offsets,
# so transcript sizes are realistic (~4 characters per token) without generating text per record.
CHARS_PER_TOKEN = 4
_WORDS = (
    "the of and to in is for that with on as this are be by from it at an or if not "
    "def return import class self None True False const let function await async yield "
    "token cache prefix request model session agent context window reuse block tier "
    "config path file line error value result test assert data index count buffer"
).split()
_CORPUS: str | None = None


def corpus() -> str:
    """The shared filler corpus (about 1 MB, built once)."""
    global _CORPUS
    if _CORPUS is None:
        r = random.Random(0x6B767472)
        parts = []
        for _ in range(200_000):
            parts.append(_WORDS[r.randrange(len(_WORDS))])
            parts.append("\n" if r.random() < 0.09 else " ")
        _CORPUS = "".join(parts)
    return _CORPUS


def filler(rng: random.Random, tokens: int) -> str:
    """About ``tokens`` tokens of filler text."""
    c = corpus()
    n = min(max(tokens, 1) * CHARS_PER_TOKEN, len(c) // 2)
    i = rng.randrange(0, len(c) - n - 64)
    i = c.find(" ", i, i + 64) + 1  # start on a word
    return c[i : i + n]
