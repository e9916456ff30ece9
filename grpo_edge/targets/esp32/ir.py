"""A small IR of int8 / int16 ops with TFLite-style parameters, shared by the reference, codegen and TFLM export.

Layout: tensors keep the ONNX layout (NCHW for images, (N, F) for vectors), batch N = 1.
Each Op holds every parameter a kernel needs, computed once ("Prepare"), so the NumPy reference,
the generated C and the TFLite Micro export read the same numbers.

Op kinds and their attrs:
  fc       weights (OUT, IN) int8, bias (OUT,) int32, multiplier/shift (OUT,), input_offset,
           output_offset, activation_min/max
  conv     weights (OC, C/group, KH, KW) int8, bias, multiplier/shift (OC,), strides, pads
           (top, left, bottom, right), dilations, group, input_offset, output_offset, activation_min/max
  add      input1/2_offset, input1/2_multiplier/shift, output_multiplier/shift, left_shift (20),
           output_offset, activation_min/max; constants {name: int8 array} for a constant operand
  lut      table (256,) int8: out = table[x + 128] (tanh, sigmoid, relu, clip, requantize)
  maxpool  kernel, strides, pads, activation_min/max (same in/out quantization)
  avgpool  kernel, strides, pads, mode "round_div" | "mean" (+ mean_multiplier/shift, count, input_zero_point, output_offset)
  reshape  none: the output shares the input's storage
  softmax  TFLite int8 softmax parameters (input_multiplier, input_left_shift, diff_min, tflite_output,
           output_multiplier/shift when the output scale is not 1/256)
  argmax   none (last axis; int8 output, any input type)

16x8 graphs (TFLite's int16-activation mode, for small models whose decisions int8 activations flip):
every activation tensor is int16 with zero point 0 (the argmax output stays int8), weights int8.
  fc16      weights (OUT, IN) int8, bias (OUT,) int32, multiplier/shift (OUT,), activation_min/max;
            acc = sum(w * x) + bias in int32 (proven not to overflow), the int8 requantization, no offsets
            (TFLM: an int32 bias selects its int32 accumulator)
  tanh16    input_multiplier, input_left_shift: TFLM's int16 tanh (sigmoid table + interpolation);
  sigmoid16 output scale 1/32768, zero point 0
  requant16 function (relu | clip | requantize), multiplier/shift (s_in / s_out), act_min/act_max: a relu,
            clip or requantize between int16 tensors, clamp(MBQM(x)) (TFLite's Requantize rule)
"""
import hashlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import numpy as np


@dataclass
class TensorInfo:
    name: str
    shape: Tuple[int, ...]
    scale: float = 1.0          # float32 value
    zero_point: int = 0
    dtype: str = "int8"         # "int8" | "int16" | "int32" (token ids: the input of an embedding)
    limit: int = 0              # token ids: how many rows the embedding has (ids run 0 .. limit - 1)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape))

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype][1]

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def np_dtype(self):
        return np.dtype(self.dtype)

    @property
    def ctype(self) -> str:
        return DTYPES[self.dtype][0]

    @property
    def qmin(self) -> int:
        return 0 if self.limit else int(np.iinfo(self.dtype).min)

    @property
    def qmax(self) -> int:
        return self.limit - 1 if self.limit else int(np.iinfo(self.dtype).max)


DTYPES = {"int8": ("int8_t", 1), "int16": ("int16_t", 2), "int32": ("int32_t", 4)}


@dataclass
class Op:
    kind: str
    name: str                   # the ONNX node name (for messages)
    inputs: List[str]
    output: str
    attrs: Dict[str, Any] = field(default_factory=dict)

    def param_bytes(self) -> int:
        """Bytes of constant data this op puts in flash."""
        n = 0
        for k, v in self.attrs.items():
            if isinstance(v, np.ndarray) and k != "weight_scales":   # scales are not stored in C
                n += v.nbytes
            elif k == "constants":
                n += sum(a.nbytes for a in v.values())
            elif isinstance(v, list):          # per-input arrays (concat's requantization tables)
                n += sum(a.nbytes for a in v if isinstance(a, np.ndarray))
        return n

    def macs(self, tensors) -> int:
        """Multiply-accumulates (or elementwise work) per inference: the op's own count (ops/)."""
        from .ops import OPS
        return int(OPS[self.kind].macs(self, tensors))


@dataclass
class Graph:
    tensors: Dict[str, TensorInfo]
    ops: List[Op]
    input: str
    output: str
    model_hash: str = ""
    source: str = ""
    io_layout: str = "onnx"     # "onnx": 4-D input / output NCHW; "tflite": in TFLite's shapes and byte order
    owners: Any = None          # from a .tflite: owners[k] = the index of the op computing TFLite operator k
    layout: str = "nchw"        # images: "nchw", or "nhwc" (from a .tflite for ESP-NN: conv / pool ops say so)
    esp_nn: bool = False        # the C calls ESP-NN's kernels where GX_USE_ESP_NN is defined (the S3 firmware)
    float_edges: Any = (False, False)   # from a .tflite: its input / output is float32 (QUANTIZE / DEQUANTIZE)

    def storage_root(self) -> Dict[str, str]:
        """Map each tensor to the tensor whose storage it uses (reshape outputs alias their input)."""
        root = {self.input: self.input}
        for op in self.ops:
            if op.kind == "reshape":
                root[op.output] = root.get(op.inputs[0], op.inputs[0])
            else:
                root[op.output] = op.output
        return root

    @property
    def activation_dtype(self) -> str:
        """"int16" for a 16x8 graph, else "int8" (token ids in, int32, are not activations)."""
        t = self.tensors[self.input]
        if t.limit:
            return "int16" if any(x.dtype == "int16" for x in self.tensors.values()) else "int8"
        return t.dtype

    def weight_bytes(self) -> int:
        return sum(op.param_bytes() for op in self.ops)

    def summary(self) -> List[dict]:
        rows = []
        for op in self.ops:
            t = self.tensors[op.output]
            rows.append({"op": op.kind, "node": op.name, "output": list(t.shape),
                         "macs": op.macs(self.tensors), "param_bytes": op.param_bytes()})
        return rows


def file_hash(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def concat_blocks(op, tensors):
    """(outer, [inner of each input], inner of the output) of a concat op (its constant inputs included): the
    output is `outer` rows, each the inputs' blocks of `inner` elements side by side."""
    consts, axis = op.attrs["constants"], op.attrs["axis"]
    shapes = [consts[t].shape if t in consts else tensors[t].shape for t in op.inputs]
    outer = int(np.prod(shapes[0][:axis]))
    inner = [int(np.prod(s[axis:])) for s in shapes]
    return outer, inner, int(sum(inner))
