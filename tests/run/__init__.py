"""The run layer (tracecomm/run): sources, the executors and the pool, the cache and the memo,
the summaries `tracecomm ingest` writes."""
