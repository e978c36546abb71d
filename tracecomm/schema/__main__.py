"""``python -m tracecomm.schema``: write the generated JSON Schemas again (see the package)."""

from __future__ import annotations

import sys

from tracecomm.schema import FOLDER, write


def main() -> int:
    changed = write()
    for name in changed:
        print(f"wrote {FOLDER / name}")
    if not changed:
        print("the generated schemas are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
