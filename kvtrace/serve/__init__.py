"""``kvtrace serve``: a resident process that keeps one warehouse open and runs forwarded commands.

``server`` and ``runner`` are the daemon; the socket's place, the frames and the client are in
``kvtrace.wire`` (standard library only: the launcher imports them on every command).
"""
