"""``kvtrace serve``: a resident process with kvtrace loaded that forks a process per forwarded command.

``server`` and ``runner`` are the daemon; the socket's place, the frames and the client are in
``kvtrace.wire`` (standard library only: the launcher imports them on every command).
"""
