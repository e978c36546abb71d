"""Which framework ran the job, from the ranks' marks (engine.framework), and the knobs each
framework gives for what a finding found (metrics.md §14a). A finding's advice is the first
detected framework's that has advice for its cause; with none detected, the generic advice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Annotated, Literal, cast

from msgspec import Meta

from tracecomm.doc import Doc
from tracecomm.engine.model import RankBreakdown
from tracecomm.frameworks import INFERENCE, LABELS, PRIORITY

EVIDENCE_NAMES = 3


FrameworkKey = Literal[
    "vllm", "sglang", "torchtitan", "megatron", "deepspeed", "fsdp2", "fsdp1", "torchrec", "ddp"
]


class DetectedFramework(Doc, frozen=True):
    """One framework the traces name: ``key`` (``megatron``, ``fsdp2``, ...), its label, how
    many analyzed ranks hold a mark of it, and the first names that say so."""

    key: FrameworkKey
    label: str
    ranks: Annotated[int, Meta(ge=1, description="analyzed ranks whose trace holds a mark of it")]
    names: Annotated[
        tuple[str, ...], Meta(description="the first names in the traces that only it writes")
    ]


class Frameworks(Doc, frozen=True):
    """What ran the job (metrics.md §14a): the frameworks detected, most specific first."""

    detected: Annotated[
        tuple[DetectedFramework, ...],
        Meta(description="most specific first: the first with advice for a cause gives it"),
    ]
    inference: Annotated[
        bool, Meta(description="a serving engine's trace (vLLM, SGLang): no training advice")
    ]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(f.key for f in self.detected)

    def describe(self) -> str:
        """ "Megatron-LM (forward-compute, dp_stage0 on 64 of 64 ranks)"."""
        return "; ".join(
            f"{f.label} ({', '.join(f.names)}{'' if f.ranks == 1 else f' on {f.ranks} ranks'})"
            for f in self.detected
        )


# what a framework named by the run's settings rather than by a trace cites
DECLARED = "tracecomm.toml [run] framework"


def detect_frameworks(
    ranks: Mapping[int, RankBreakdown], declared: str | None = None
) -> Frameworks | None:
    """The frameworks whose marks any analyzed rank holds; with none, the one the settings
    file declares (a key of ``frameworks.PRIORITY``); None when neither says one."""
    holders: Counter[str] = Counter()
    names: dict[str, dict[str, None]] = {}
    for r in ranks.values():
        seen = {m.framework for m in r.frameworks}
        holders.update(seen)
        for m in r.frameworks:
            names.setdefault(m.framework, {})[m.name] = None
    if not holders:
        if declared is None:
            return None
        found = DetectedFramework(
            cast(FrameworkKey, declared), LABELS[declared], len(ranks), (DECLARED,)
        )
        return Frameworks((found,), inference=declared in INFERENCE)
    detected = tuple(
        DetectedFramework(
            cast(FrameworkKey, key),
            _label(key, names[key]),
            holders[key],
            tuple(sorted(names[key]))[:EVIDENCE_NAMES],
        )
        for key in PRIORITY
        if key in holders
    )
    return Frameworks(detected, inference=any(f.key in INFERENCE for f in detected))


def _label(key: str, names: dict[str, None]) -> str:
    """The framework's label; DeepSpeed's with its ZeRO stage when a name says it."""
    if key == "deepspeed":
        text = " ".join(names).lower()
        if "stage3" in text:
            return "DeepSpeed ZeRO-3"
        if "stage_1_and_2" in text:
            return "DeepSpeed ZeRO-1/2"
    return LABELS[key]
