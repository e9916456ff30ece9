"""Buffer-lifetime planner: place every intermediate tensor in one static arena.

Each stored tensor lives from the op that writes it to the last op that reads it. Two kinds of tensor
take no storage of their own (storage_roots): a reshape's output is its input, and an op whose kernel may
write over an input (OpSpec.in_place: the elementwise table lookup and add, a depthwise 1x1 conv of stride
1 without padding, where out[k] depends on the inputs' element k only) writes over that input when the
input is the same size and nothing reads it afterwards. Some kernels may do so at any size (in_place answers
ANY_SIZE: an NCHW 1x1 conv of stride 1, which reads each pixel pair's channels before writing that pair; an NCHW
depthwise conv, which builds each channel's output plane aside first): their buffer is then the larger of the
two. The model input is read straight from the
caller's `in` pointer (never written over) and the model output written straight to `out`, so neither
takes arena space. Buffers are placed greedily, largest first, at the lowest 4-byte-aligned offset where
they overlap no buffer whose lifetime intersects theirs; apart from those in-place ops, an op's inputs and
output never share bytes.

A concat whose parts are contiguous blocks of its output (nothing outside the concat axis but a batch of 1)
takes its parts in place too (concat_parts): an input that only the concat reads is written by its producer
straight into its block of the concat's output, so the concat copies nothing for it (it requantizes the
block in place when that input's parameters differ from the output's).
"""
from dataclasses import dataclass, field
from typing import Dict, List

from .ir import concat_blocks

ALIGN = 4
ANY_SIZE = "any size"      # OpSpec.in_place's answer for a kernel that may write over an input of another size


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
    naive_bytes: int               # every tensor and scratch in its own bytes (no reuse, nothing in place)
    offsets: Dict[str, int] = field(default_factory=dict)   # a concat's part -> its byte offset in the output

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


def storage_roots(graph) -> Dict[str, str]:
    """Each tensor -> the tensor whose storage it uses: itself, its input for a reshape, or the input an
    in-place op writes over (see the module docstring)."""
    last_read = {}
    for i, op in enumerate(graph.ops):
        for t in op.inputs:
            last_read[t] = i
    root = {graph.input: graph.input}
    sharers = {graph.input: [graph.input]}      # storage root -> the tensors stored there so far
    concat_inputs = {t for op in graph.ops if op.kind == "concat" for t in op.inputs}
    for i, op in enumerate(graph.ops):
        if op.kind == "reshape":
            r = root.get(op.inputs[0], op.inputs[0])
        else:
            r = _overwritable_input(graph, i, op, root, sharers, last_read, concat_inputs) or op.output
        root[op.output] = r
        sharers.setdefault(r, []).append(op.output)
    return root


def _overwritable_input(graph, i, op, root, sharers, last_read, concat_inputs=()):
    """The storage root of an input op i may write its output over, or None. An output a concat reads is left its
    own bytes by the any-size rule: concat_parts writes it straight into its block of the concat instead."""
    from .ops import OPS
    mode = OPS[op.kind].in_place(op)
    if not mode or op.output == graph.output or (mode == ANY_SIZE and op.output in concat_inputs):
        return None
    for t in op.inputs:
        r = root.get(t)                          # None: a constant
        same = graph.tensors[t].nbytes == graph.tensors[op.output].nbytes
        if r is None or r == root[graph.input] or not (same or mode == ANY_SIZE):
            continue
        if all(last_read.get(x, -1) <= i for x in sharers[r]):
            return r
    return None


def concat_parts(graph, root) -> Dict[str, tuple]:
    """{input: (concat output, byte offset)} for the concat inputs written straight into their block of the
    concat's output: a concat of contiguous blocks (outer size 1) in the arena, an input with its own storage
    (not the model input, not an alias, not another concat's output: its own parts point into it) that
    nothing but this concat reads."""
    readers = {}
    for op in graph.ops:
        for t in set(op.inputs):
            readers[t] = readers.get(t, 0) + 1
    concats = {op.output for op in graph.ops if op.kind == "concat"}
    parts = {}
    for op in graph.ops:
        if op.kind != "concat" or op.output == graph.output or root[op.output] != op.output:
            continue
        consts = op.attrs["constants"]
        outer, inner, _ = concat_blocks(op, graph.tensors)
        offset = 0
        for t, n in zip(op.inputs, inner):
            if (outer == 1 and t not in consts and t not in concats and t != graph.input and root.get(t) == t
                    and readers[t] == 1 and op.inputs.count(t) == 1):
                parts[t] = (op.output, offset)
            offset += n
    return parts


def lifetimes(graph, root) -> Dict[str, Buffer]:
    """Each storage root's buffer (and each op's scratch), alive from its first writer to its last reader."""
    bufs: Dict[str, Buffer] = {}
    for i, op in enumerate(graph.ops):
        r = root[op.output]
        if r not in bufs:
            bufs[r] = Buffer(r, graph.tensors[r].nbytes, i, i)
        bufs[r].size = max(bufs[r].size, graph.tensors[op.output].nbytes)   # an in-place op may grow its input's
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
    return bufs


def scratch_bytes(op, graph) -> int:
    """Temporary bytes an op needs during its own run (its OpSpec's scratch: a conv's two im2col columns)."""
    from .ops import OPS
    return int(OPS[op.kind].scratch(op)) if op.kind in OPS else 0


def plan(graph) -> Plan:
    root = storage_roots(graph)
    parts = concat_parts(graph, root)
    for t, (whole, _) in parts.items():
        root[t] = root[whole]
    bufs = lifetimes(graph, root)
    in_root, out_root = root[graph.input], root[graph.output]
    if in_root == out_root:
        from grpo_edge.errors import ExportError
        raise ExportError("model output aliases its input: nothing to compute")
    arena = [b for r, b in bufs.items() if r not in (in_root, out_root)]
    place(arena)
    size = max([b.offset + b.size for b in arena] + [0])
    return Plan({b.name: b for b in arena}, _align(size), root, _naive_bytes(graph, bufs),
                {t: off for t, (_, off) in parts.items()})


def _naive_bytes(graph, bufs) -> int:
    """Every stored tensor (reshape outputs excepted) and scratch in its own bytes: no reuse, no op in place."""
    root = graph.storage_root()
    tensors = set(root.values()) - {root[graph.input], root[graph.output]}
    return sum(_align(graph.tensors[t].nbytes) for t in tensors) + sum(
        _align(b.size) for r, b in bufs.items() if r.startswith("scratch"))


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
