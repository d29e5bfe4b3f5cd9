"""``kvtrace serve``: a resident process that keeps one warehouse open and runs forwarded commands.

``paths``, ``protocol`` and ``client`` use the standard library only (the launcher imports them
on every command); ``server`` and ``runner`` are the daemon.
"""
