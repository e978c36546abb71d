"""The optional C scanner (tracecomm/ingest/_scan.c), and the user docs shipped inside the
package. Everything else is in pyproject.toml.

``optional=True``: without a C compiler the package still installs, and reads traces with the
pure-Python decoder (slower, same results)."""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

DOCS = ("metrics.md", "architecture.md")  # what the tool cites ("metrics.md §6")


class build_py_with_docs(build_py):  # noqa: N801 - setuptools' naming
    """docs/ lives at the repository's top; the installed package carries a copy, so every
    "metrics.md §N" the tool prints points at a file the user has (``tracecomm docs``)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "tracecomm" / "docs"
        target.mkdir(parents=True, exist_ok=True)
        for name in DOCS:
            shutil.copyfile(Path("docs") / name, target / name)


setup(
    cmdclass={"build_py": build_py_with_docs},
    ext_modules=[
        Extension(
            "tracecomm.ingest._scan",
            ["tracecomm/ingest/_scan.c"],
            optional=True,
            extra_compile_args=["-O3"],
        )
    ]
)
