"""The wire between a command and the ``kvtrace serve`` process that holds its warehouse: where
the socket is and who may use it (``paths``), the frames (``protocol``) and the client
(``client``). Standard library only: the launcher imports them on every command, and the
warehouse and the collector (which find a warehouse held by a server) sit below ``serve``.
"""
