"""Buffer-lifetime planner: place every intermediate tensor in one static arena.

Each stored tensor (reshape outputs share their input's storage) lives from the op that writes it to
the last op that reads it. The model input is read straight from the caller's `in` pointer and the
model output written straight to `out`, so neither takes arena space. Buffers are placed greedily,
largest first, at the lowest 4-byte-aligned offset where they overlap no buffer whose lifetime
intersects theirs. No op works in place, so an op's inputs and output never share bytes.
"""
from dataclasses import dataclass
from typing import Dict, List

ALIGN = 4


@dataclass
class Buffer:
    name: str          # storage root tensor
    size: int          # bytes
    first: int         # index of the op that writes it
    last: int          # index of the last op that reads it
    offset: int = -1

    def overlaps_in_time(self, other: "Buffer") -> bool:
        return self.first <= other.last and other.first <= self.last

    def overlaps_in_space(self, other: "Buffer") -> bool:
        return self.offset < other.offset + other.size and other.offset < self.offset + self.size


@dataclass
class Plan:
    buffers: Dict[str, Buffer]     # by storage root name, arena buffers only
    arena_bytes: int
    root: Dict[str, str]           # tensor -> storage root tensor
    naive_bytes: int               # sum of all buffer sizes (what no reuse would cost)

    def location(self, tensor: str, graph) -> str:
        """'in', 'out' or 'arena' for a tensor's storage."""
        r = self.root[tensor]
        if r == self.root[graph.input]:
            return "in"
        if r == self.root[graph.output]:
            return "out"
        return "arena"


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def lifetimes(graph) -> (Dict[str, Buffer], Dict[str, str]):
    root = graph.storage_root()
    bufs: Dict[str, Buffer] = {}
    for i, op in enumerate(graph.ops):
        r = root[op.output]
        if r not in bufs:
            bufs[r] = Buffer(r, graph.tensors[r].nbytes, i, i)
        for name in op.inputs:
            if name in root:
                rr = root[name]
                if rr in bufs:
                    bufs[rr].last = max(bufs[rr].last, i)
        bufs[r].last = max(bufs[r].last, i)
    for i, op in enumerate(graph.ops):
        n = scratch_bytes(op, graph)
        if n:
            bufs["scratch%d" % i] = Buffer("scratch%d" % i, n, i, i)
    return bufs, root


def scratch_bytes(op, graph) -> int:
    """Temporary bytes an op needs during its own run (its OpSpec's scratch: a conv's two im2col columns)."""
    from .ops import OPS
    return int(OPS[op.kind].scratch(op)) if op.kind in OPS else 0


def plan(graph) -> Plan:
    bufs, root = lifetimes(graph)
    in_root, out_root = root[graph.input], root[graph.output]
    if in_root == out_root:
        from grpo_edge.errors import ExportError
        raise ExportError("model output aliases its input: nothing to compute")
    arena = [b for r, b in bufs.items() if r not in (in_root, out_root)]
    place(arena)
    size = max([b.offset + b.size for b in arena] + [0])
    return Plan({b.name: b for b in arena}, _align(size), root, sum(_align(b.size) for b in arena))


def place(buffers: List[Buffer]) -> None:
    """Greedy first fit, largest first (ties: earliest first), assigning .offset in place."""
    placed: List[Buffer] = []
    for b in sorted(buffers, key=lambda b: (-b.size, b.first, b.name)):
        live = sorted((p for p in placed if p.overlaps_in_time(b)), key=lambda p: p.offset)
        offset = 0
        for p in live:
            if offset + b.size <= p.offset:
                break
            offset = max(offset, _align(p.offset + p.size))
        b.offset = offset
        placed.append(b)


def check(buffers: List[Buffer]) -> List[str]:
    """Problems in a placement: two buffers live at the same time sharing bytes, or misalignment."""
    problems = []
    for i, a in enumerate(buffers):
        if a.offset % ALIGN:
            problems.append("%s at unaligned offset %d" % (a.name, a.offset))
        for b in buffers[i + 1:]:
            if a.overlaps_in_time(b) and a.overlaps_in_space(b):
                problems.append("%s [%d,%d) and %s [%d,%d) overlap while both live"
                                % (a.name, a.offset, a.offset + a.size, b.name, b.offset, b.offset + b.size))
    return problems
