"""The optional C scanner (tracecomm/ingest/_scan.c). Everything else is in pyproject.toml.

``optional=True``: without a C compiler the package still installs, and reads traces with the
pure-Python decoder (slower, same results)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracecomm.ingest._scan",
            ["tracecomm/ingest/_scan.c"],
            optional=True,
            extra_compile_args=["-O3"],
        )
    ]
)
