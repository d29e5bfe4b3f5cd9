"""Prompt-cache accounting of a hosted API with an idle TTL refreshed on use (pure functions).

Claude Code puts one cache breakpoint on the system prompt + tools (the *head*, identical for
every session of a model, so shared by all sessions of an organization) and one at the end of
the conversation. Request *i* of a thread therefore finds in the cache:

1. the whole cached prefix of request *i−1* (its ``read + write``), if that entry was touched
   (request *i−1* started) no more than ``ttl`` ago; else
2. only the head, if any request of the same organization and model touched it within ``ttl``; else
3. nothing.

Everything of the prompt before the last breakpoint that was not read is written (cache
creation); the few tokens after it are uncached input. A prompt whose cacheable part is shorter
than the model's minimum is not cached at all. An entry's TTL clock starts at the start of the
request that touched it; "within ttl" means an age of at most ``ttl`` (inclusive).
"""

from __future__ import annotations

PREFIX, HEAD, NONE, UNCACHEABLE = "prefix", "head", "none", "uncacheable"


def account(
    prompt: int,
    tail: int,
    prev_cached: int,
    prev_start_ms: int | None,
    head: int,
    head_last_ms: int | None,
    now_ms: int,
    ttl_ms: int,
    min_cacheable: int,
) -> tuple[int, int, int, str]:
    """Split one request's prompt into (cache read, cache write, uncached input, read source).

    Args:
        prompt: prompt tokens of this request.
        tail: tokens after the last breakpoint (uncached input when the prompt is cacheable).
        prev_cached: ``read + write`` of the thread's previous request, 0 if none or a new chain.
        prev_start_ms: start time of that request.
        head: tokens of the shared head (system prompt + tools) of this thread's model.
        head_last_ms: last time any request of the org touched this head, or None.
        now_ms: start time of this request.
        ttl_ms: the idle TTL.
        min_cacheable: the model's minimum cacheable prefix.

    Returns:
        ``(read, write, input, source)`` with ``read + write + input == prompt`` and source one
        of ``prefix``, ``head``, ``none``, ``uncacheable``.
    """
    tail = min(tail, prompt)
    cacheable = prompt - tail
    if cacheable < min_cacheable:
        return 0, 0, prompt, UNCACHEABLE
    if prev_cached > 0 and prev_start_ms is not None and now_ms - prev_start_ms <= ttl_ms:
        read, source = min(prev_cached, cacheable), PREFIX
    elif head_last_ms is not None and head >= min_cacheable and now_ms - head_last_ms <= ttl_ms and head <= cacheable:
        read, source = head, HEAD
    else:
        read, source = 0, NONE
    return read, cacheable - read, tail, source


def touches_head(prompt: int, tail: int, head: int, min_cacheable: int) -> bool:
    """Whether a request refreshes (or creates) its org's head entry."""
    return head >= min_cacheable and prompt - min(tail, prompt) >= head
