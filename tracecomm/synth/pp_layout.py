"""Where each rank of a DP x PP x TP (Megatron-style) job sits, and its process groups.

rank = stage * (dp * tp) + d * tp + t: tensor-parallel ranks are neighbours (inside one host),
then the data-parallel replicas, then the stages. With tp = 1 this is the stage-major layout
of pp.py (rank = stage * dp + d) and the group names are the ones it always had.

Groups: ``dp{s}`` (``dp{s}_t{t}`` with tp > 1) holds the data-parallel ranks of stage s; with
tp > 1, ``tp{s}_d{d}`` holds the tensor-parallel ranks of one stage of one replica; the
send/recv groups are either one per pipeline, ``pp{d}`` (``pp{d}_t{t}``), or — as Megatron and
NDTimeline name them — one per adjacent stage pair and direction, ``pp_fwd_d{d}_s{s}`` (stage
s to s + 1, activations) and ``pp_bwd_d{d}_s{s}`` (stage s + 1 to s, gradients); with the
embedding all-reduce, ``emb{d}`` holds the first and the last stage of a pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracecomm.synth.schedule import ProcessGroup

P2pGroups = Literal["pipeline", "pair"]
PP_DESC = "mesh_pp"
DP_DESC = "mesh_dp"
TP_DESC = "mesh_tp"
EMB_DESC = "embedding"


@dataclass(frozen=True)
class PipelineLayout:
    dp: int
    pp: int
    tp: int = 1
    p2p_groups: P2pGroups = "pipeline"
    embedding: bool = False

    @property
    def world(self) -> int:
        return self.dp * self.pp * self.tp

    def rank(self, stage: int, d: int, t: int = 0) -> int:
        return stage * self.dp * self.tp + d * self.tp + t

    def place(self, rank: int) -> tuple[int, int, int]:
        """(stage, d, t) of a rank."""
        stage, rest = divmod(rank, self.dp * self.tp)
        d, t = divmod(rest, self.tp)
        return stage, d, t

    def _t(self, t: int) -> str:
        return f"_t{t}" if self.tp > 1 else ""

    def dp_group(self, stage: int, t: int) -> str:
        return f"dp{stage}{self._t(t)}"

    def tp_group(self, stage: int, d: int) -> str:
        return f"tp{stage}_d{d}"

    def emb_group(self, d: int, t: int) -> str:
        return f"emb{d}{self._t(t)}"

    def p2p_group(self, channel: str, link: int, d: int, t: int) -> str:
        """The group of a send/recv on the link between stages link and link + 1, carrying
        activations ("act", forward) or gradients ("grad", backward)."""
        if self.p2p_groups == "pipeline":
            return f"pp{d}{self._t(t)}"
        return f"pp_{'fwd' if channel == 'act' else 'bwd'}_d{d}_s{link}{self._t(t)}"

    def groups(self) -> tuple[ProcessGroup, ...]:
        """Data-parallel groups, tensor-parallel ones, send/recv ones, embedding ones."""
        dp, pp, tp = self.dp, self.pp, self.tp
        out = [
            ProcessGroup(self.dp_group(s, t), DP_DESC, tuple(self.rank(s, d, t) for d in range(dp)))
            for s in range(pp)
            for t in range(tp)
        ]
        if tp > 1:
            out += [
                ProcessGroup(
                    self.tp_group(s, d), TP_DESC, tuple(self.rank(s, d, t) for t in range(tp))
                )
                for s in range(pp)
                for d in range(dp)
            ]
        out += self._p2p_groups()
        if self.embedding and pp > 1:
            out += [
                ProcessGroup(
                    self.emb_group(d, t), EMB_DESC, (self.rank(0, d, t), self.rank(pp - 1, d, t))
                )
                for d in range(dp)
                for t in range(tp)
            ]
        return tuple(out)

    def _p2p_groups(self) -> list[ProcessGroup]:
        dp, pp, tp = self.dp, self.pp, self.tp
        if self.p2p_groups == "pipeline":
            return [
                ProcessGroup(
                    self.p2p_group("act", 0, d, t),
                    PP_DESC,
                    tuple(self.rank(s, d, t) for s in range(pp)),
                )
                for d in range(dp)
                for t in range(tp)
            ]
        return [
            ProcessGroup(
                self.p2p_group(channel, s, d, t),
                PP_DESC,
                (self.rank(s, d, t), self.rank(s + 1, d, t)),
            )
            for d in range(dp)
            for t in range(tp)
            for s in range(pp - 1)
            for channel in ("act", "grad")
        ]
