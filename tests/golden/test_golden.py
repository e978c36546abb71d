"""Golden outputs: the sample run, the gloo run, every shared trace and NCCL log, as the CLI
prints them. A change here must be deliberate (``python -m tests.golden.regen``)."""

from __future__ import annotations

import math

import pytest

from tests.golden.cases import SHARED, Case, cases, read, run


def _first_difference(want: object, got: object, where: str = "") -> str | None:
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got)):
            if key not in want or key not in got:
                return f"{where}.{key}: only in {'golden' if key in want else 'output'}"
            found = _first_difference(want[key], got[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return f"{where}: {len(want)} items in the golden file, {len(got)} now"
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            found = _first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(want, float) and isinstance(got, float):
        # a least-squares fit may round its last bit differently from run to run
        return None if math.isclose(want, got, rel_tol=1e-12) else f"{where}: {want!r} -> {got!r}"
    return None if want == got else f"{where}: golden {want!r}, now {got!r}"


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
def test_output_is_unchanged(case: Case) -> None:
    if case.shared and not SHARED.is_dir():
        pytest.skip("../shared is not present")
    if not case.file.is_file():
        pytest.fail(f"no golden file for {case.name}: python -m tests.golden.regen {case.name}")
    want_code, want = read(case)
    code, got = run(case)
    assert code == want_code
    if case.kind == "text":
        assert got.splitlines() == want.splitlines()
    else:
        assert _first_difference(want, got) is None, _first_difference(want, got)
