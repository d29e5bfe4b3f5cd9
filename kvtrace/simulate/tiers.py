"""KV residency of one tier as prefix lengths: O(objects), not O(blocks).

Sessions are append-only, so what a tier holds of one conversation chain (or of a shared head)
is a prefix of it: ``tokens`` resident, a multiple of the tier's unit (a GPU block, an LMCache
chunk). Unpinned residencies form an LRU list; making room trims the least recently used one from
its tail (the block-level LRU of a chain whose blocks were all touched at once, tail first, frees
them tail first), then the next. ``pinned`` counts what running sequences hold (GPU only).
"""

from __future__ import annotations

from collections import OrderedDict


class Residency:
    """One tier's contents: ``lru`` maps an object to its resident, unpinned prefix tokens."""

    __slots__ = ("name", "capacity", "unit", "lru", "cached", "pinned", "evicted", "first_full_at", "now", "on_evict")

    def __init__(self, name: str, capacity: int, unit: int):
        self.name, self.capacity, self.unit = name, int(capacity), int(unit)
        self.lru: OrderedDict = OrderedDict()
        self.cached = 0  # tokens in lru
        self.pinned = 0  # tokens held by running sequences (never evicted)
        self.evicted = 0  # tokens evicted so far
        self.first_full_at: float | None = None
        self.now = 0.0
        self.on_evict = None  # called as on_evict(obj, tokens before, tokens after) for each eviction

    @property
    def used(self) -> int:
        return self.cached + self.pinned

    @property
    def free(self) -> int:
        return self.capacity - self.cached - self.pinned

    def get(self, obj) -> int:
        return self.lru.get(obj, 0)

    def make_room(self, n: int) -> bool:
        """Evict LRU tails until ``n`` tokens are free; False if even an empty cache is too small."""
        need = n - self.free
        if need <= 0:
            return True
        if self.first_full_at is None:
            self.first_full_at = self.now
        lru, unit = self.lru, self.unit
        while need > 0 and lru:
            obj, tok = next(iter(lru.items()))
            cut = min(tok, -(-need // unit) * unit)
            before, tok = tok, tok - cut
            self.cached -= cut
            self.evicted += cut
            need -= cut
            if tok:
                lru[obj] = tok
            else:
                del lru[obj]
            if self.on_evict is not None:
                self.on_evict(obj, before, tok)
        return need <= 0

    def put(self, obj, tokens: int) -> int:
        """Hold ``tokens`` (rounded down to the unit) of ``obj`` as the most recent; returns the
        tokens added (what had to be written). Evicts others to make room; never shrinks."""
        tokens = min(tokens, self.capacity) // self.unit * self.unit
        have = self.lru.pop(obj, 0)
        self.cached -= have
        if tokens > have and not self.make_room(tokens - have):
            tokens = have + max(self.free, 0) // self.unit * self.unit
        keep = max(tokens, have)
        if keep:
            self.lru[obj] = keep
            self.cached += keep
        return keep - have

    def touch(self, obj) -> None:
        if obj in self.lru:
            self.lru.move_to_end(obj)

    def cut(self, obj, tokens: int) -> None:
        """The object's content changed after ``tokens``: drop what is resident beyond them."""
        have = self.lru.get(obj, 0)
        keep = min(have, tokens // self.unit * self.unit)
        if keep < have:
            self.cached -= have - keep
            if keep:
                self.lru[obj] = keep
            else:
                del self.lru[obj]

    def pin(self, obj) -> int:
        """Take ``obj``'s cached prefix out of the LRU for a running sequence (returns its tokens)."""
        tok = self.lru.pop(obj, 0)
        self.cached -= tok
        self.pinned += tok
        return tok

    def unpin(self, obj, pinned: int, keep: int) -> None:
        """Release ``pinned`` tokens; ``keep`` of them (whole units) stay cached as most recent."""
        self.pinned -= pinned
        keep = min(keep, pinned) // self.unit * self.unit
        if keep:
            old = self.lru.pop(obj, 0)
            self.cached -= old
            keep = max(keep, old)
            self.lru[obj] = keep
            self.cached += keep
