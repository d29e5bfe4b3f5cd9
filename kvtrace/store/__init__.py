"""The DuckDB warehouse: one ``Store`` wraps the connection, migrations and named queries."""

from kvtrace.store.store import Store, default_db_path
from kvtrace.store.opener import open_store
from kvtrace.store.queries import NamedQuery, list_queries, load_query

__all__ = ["Store", "default_db_path", "open_store", "NamedQuery", "list_queries", "load_query"]
