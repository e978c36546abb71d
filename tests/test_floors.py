"""The lower bounds of pyproject.toml's dependencies are versions tracecomm runs on: .ci/run
installs exactly the versions .ci/lowest-requirements.txt pins and runs the sample run on them.
Here, the pins are those bounds (a raised bound with a stale pin would test other versions than
the ones declared)."""

from __future__ import annotations

import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

LOWEST = REPO / ".ci" / "lowest-requirements.txt"


def lower_bounds() -> dict[str, Version]:
    """Each dependency's ``>=`` bound, by its normalized name."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    bounds: dict[str, Version] = {}
    for line in project["dependencies"]:
        requirement = Requirement(line)
        floors = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        assert len(floors) == 1, f"{line!r}: one lower bound (>=) wanted"
        bounds[canonicalize_name(requirement.name)] = floors[0]
    return bounds


def pins() -> dict[str, Version]:
    """``name==version`` per line of the lowest-versions file (comments aside)."""
    pinned: dict[str, Version] = {}
    for line in LOWEST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{line!r}: an exact pin (==) wanted"
        pinned[canonicalize_name(requirement.name)] = Version(spec.version)
    return pinned


def test_the_pins_are_the_lower_bounds() -> None:
    assert pins() == lower_bounds()


def test_ci_installs_the_pins() -> None:
    assert ".ci/lowest-requirements.txt" in (REPO / ".ci" / "run").read_text()
