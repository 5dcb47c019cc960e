"""Multi-row writes: moved to ``minruntime.store.bulk`` (kept here for the podgroup projection)."""

from minruntime.store.bulk import insert_many, unnest_insert

__all__ = ["insert_many", "unnest_insert"]
