"""Write the golden files again: ``python -m tests.golden.regen [NAME ...]``."""

from __future__ import annotations

import sys

from tests.golden.cases import cases, run, write


def main(names: list[str]) -> None:
    for case in cases():
        if names and case.name not in names:
            continue
        code, output = run(case)
        write(case, code, output)
        print(f"{case.name}: exit {code}")


if __name__ == "__main__":
    main(sys.argv[1:])
