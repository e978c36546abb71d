"""The run: discovery, the per-rank unit and where it runs (a local pool, Dask), the cache, the
summaries, settings, and one request object for the CLI and the Python API.

Nothing heavy is imported here: the CLI reaches in for what it needs, when it needs it.
"""
