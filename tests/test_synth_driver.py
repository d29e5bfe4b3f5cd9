"""The session-process driver shared by ``kvtrace synth`` and ``kvtrace simulate``."""

from __future__ import annotations

from kvtrace.synth.engine import Driver, Note, Request, Spawn


def test_the_driver_follows_the_action_protocol_on_a_callers_clock():
    log = []
    queue = []  # (process, value) to resume "later"
    d = Driver(
        sleep=lambda proc, ms: log.append(("sleep", ms)) or queue.append((proc, None)),
        request=lambda proc, r: log.append(("request", r.prompt_id)) or queue.append((proc, r.prompt_id + "!")),
        note=lambda n: log.append(("note", n.kind)),
        resume=lambda proc, val: queue.append((proc, val)),
    )

    def child(name):
        got = yield Request(None, [], 1, "text", "end_turn", [], "sdk", name, 1)
        return got

    def parent():
        yield Note("user_prompt", None)  # recorded, the process goes on at once
        yield 250
        results = yield Spawn([child("a"), child("b")])
        log.append(("children", results))
        return "done"

    d.step(parent(), None)
    while queue:
        proc, val = queue.pop(0)
        d.step(proc, val)
    assert log == [
        ("note", "user_prompt"),
        ("sleep", 250),
        ("request", "a"),
        ("request", "b"),
        ("children", ["a!", "b!"]),
    ]
