"""The base of every type the saved documents are made of (the analyze Report and the NCCL
summary): msgspec Structs that the analysis builds, msgspec writes as JSON and reads back, and
the JSON Schemas are generated from (``python -m tracecomm.schema``). One set of types: adding
a figure to the document is one field here plus its computation.

A saved document is untrusted input: every field is required unless it says otherwise, no
other field is allowed, and the bounds below are checked when it is read."""

from __future__ import annotations

from typing import Annotated, Final

from msgspec import Meta, Struct
from msgspec.structs import force_setattr

# The analyze document's version: a change of a figure's meaning bumps it, so an older document
# is refused with "analyze the run again", never read with other meanings (2: the step parts
# became means that add up).
SCHEMA_VERSION: Final = 3
NCCL_SCHEMA_VERSION: Final = 2  # ``tracecomm nccl --format json``

NonNegative = Annotated[int, Meta(ge=0)]
Positive = Annotated[int, Meta(ge=1)]
Percent = Annotated[float, Meta(ge=0, le=100)]


class Doc(Struct, forbid_unknown_fields=True, frozen=True):
    """A part of a document: read-only, no unknown field when read (each part says
    ``frozen=True`` again for the type checker, which does not inherit it)."""


def derive(part: Doc, name: str, value: float | None) -> None:
    """Set a figure that follows from the part's other fields (a share from its times), once, in
    ``__post_init__``: built, it is computed; read from a document, the stored value must be the
    one its times give (a ValueError is the reader's one-line refusal)."""
    stored = getattr(part, name)
    if stored is not None and stored != value:
        raise ValueError(f"{name} {stored!r} is not what the part's times give ({value!r})")
    force_setattr(part, name, value)
