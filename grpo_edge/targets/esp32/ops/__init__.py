"""The ESP32 compiler's ops, one module each: the one registry (OPS) that the reference interpreter
(reference.run), the C generator (codegen), the 16x8 conversion (int16_ref), the TFLite Micro baseline (tflm)
and the per-op figures walk.

Each op module holds, for its kinds (int8 and 16x8 side by side):
  ONNX = {onnx_type: from_x}               from_x(parser, node): the node's shape checks and its kernel
                                           parameters, computed once (TFLM's Prepare) -> one Op in the IR
                                           (parse.py walks the graph and gives the shared QDQ helpers)
  reference(*inputs, attrs) -> output      NumPy integers, TFLite's rules bit for bit (the oracle)
  emit(em, i, op, name) -> C call or None  its constant data into em.data (codegen._Emitter), the kernel call
                                           (the kernel itself is C in csrc/gx_kernels*.h)
  tflm(b, i, op)                           the TFLite operators for the baseline (tflm._Builder)
  macs(op, tensors) -> int                 multiply-accumulates (or elementwise work) per inference
  int16                                    True when the 16x8 path (int16 activations) has the kind
  to_int16(graph, op)                      turns an int8 op of the kind into its 16x8 kind in place (int16_ref
                                           .to_16x8 calls it; the older kinds are converted there)
  ort_lsb                                  the most LSB the kind may differ from onnxruntime's QDQ run (1; TFLM's
                                           int16 tanh: 3, its 256-entry table at 2^-15; or a function of (op, tensors)),
                                           the bound simulate.ort_check and the deploy's figure ort_ops_over_bound
                                           hold each op to
  scratch(op) -> int                       temporary bytes the kernel needs while it runs (planner.py puts
                                           them in the arena); none by default
  in_place(op) -> bool                     True when the kernel may write op's output over an input of the
                                           same size (out[k] depends on element k of the inputs only, and
                                           the C takes no `restrict` on them): planner.py then lets it
                                           when nothing reads that input afterwards; never by default
The 16x8 variants are made from the int8 graph after parsing (int16_ref.to_16x8).

Adding an op: its module here (listed in MODULES) with its ONNX rule and SPECS, its kernel in
csrc/gx_kernels.h (or gx_kernels16.h), and its tests (reference vs onnxruntime or TFLM; C vs reference on host and
rv32). docs/architecture.md has the worked steps.
"""


class OpSpec(object):
    """What one op kind brings: see the module docstring."""

    def __init__(self, kind, reference, emit, tflm, macs, int16=False, scratch=None, in_place=False, to_int16=None,
                 ort_lsb=1):
        self.kind, self.reference, self.emit, self.tflm, self.macs, self.int16 = kind, reference, emit, tflm, macs, int16
        self.to_int16, self.ort_lsb = to_int16, ort_lsb
        self.scratch = scratch or no_scratch
        self.in_place = in_place if callable(in_place) else (always if in_place else never)

    def bound_lsb(self, op, tensors) -> int:
        """ort_lsb for op: a number, or a function of the op and the graph's tensors."""
        return int(self.ort_lsb(op, tensors) if callable(self.ort_lsb) else self.ort_lsb)

    def __repr__(self):
        return "OpSpec(%r)" % self.kind


def no_scratch(op):
    return 0


def always(op):
    return True


def never(op):
    return False


def elementwise_macs(op, tensors):
    """One unit of work per output element (activations, adds, pools)."""
    return int(tensors[op.output].size)


MODULES = ("fully_connected", "matmul", "conv", "add", "concat", "lut", "layer_norm", "pool", "argmax", "softmax",
           "reshape", "split", "transpose", "pad", "mul", "embedding")


def _registry():
    """(OPS {kind: OpSpec}, ONNX_RULES {ONNX op type: from_x}) from the modules."""
    import importlib
    ops, rules = {}, {}
    for name in MODULES:
        mod = importlib.import_module("%s.%s" % (__name__, name))
        for spec in mod.SPECS:
            ops[spec.kind] = spec
        rules.update(mod.ONNX)
    return ops, rules


OPS, ONNX_RULES = _registry()
