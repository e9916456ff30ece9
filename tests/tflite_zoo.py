"""A hand-made int8 .tflite that uses every TFLite operator the front end reads besides the MLPerf Tiny ones (float
QUANTIZE in, DEQUANTIZE out, HARD_SWISH, LOGISTIC, TANH, RELU, RELU6, MUL of two activations and by a scalar,
ADD of a broadcast constant, SUB, CONCATENATION, TRANSPOSE, STRIDED_SLICE, MEAN, a requantizing QUANTIZE,
MAX_POOL_2D, PAD), written with tflite-micro's model_editor. Scales are arbitrary but legal: the test is TFLM's
arithmetic on the very same file, not accuracy."""
import numpy as np


def build(seed=0) -> bytes:
    from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
    rng = np.random.default_rng(seed)
    I8, I32, F32 = tfl.TensorType.INT8, tfl.TensorType.INT32, tfl.TensorType.FLOAT32
    B = tfl.BuiltinOperator
    ops = []

    def act(name, shape, s, zp, dtype=I8):
        q = None if dtype == F32 else me.Quantization(scales=[float(s)], zero_points=[int(zp)])
        return me.Tensor(shape=shape, dtype=dtype, quantization=q, name=name)

    def const(name, arr, dtype, scales=None, axis=None):
        q = None if scales is None else me.Quantization(scales=[float(v) for v in scales],
                                                         zero_points=[0] * len(scales), axis=axis)
        return me.Tensor(shape=arr.shape, dtype=dtype, data=np.ascontiguousarray(arr), quantization=q, name=name)

    def op(code, ins, outs, opt_type=None, opts=None):
        o = me.Operator(opcode=code, inputs=ins, outputs=outs)
        if opt_type is not None:
            o._fb.builtinOptionsType, o._fb.builtinOptions = opt_type, opts
        ops.append(o)

    x = act("x", (1, 8, 8, 4), 0, 0, F32)
    t1 = act("q", (1, 8, 8, 4), 0.05, 3)
    op(B.QUANTIZE, [x], [t1])
    w = rng.integers(-127, 128, size=(8, 3, 3, 4)).astype(np.int8)
    ws = rng.uniform(0.002, 0.01, 8).astype(np.float32)
    b = rng.integers(-500, 500, size=8).astype(np.int32)
    t2 = act("conv", (1, 8, 8, 8), 0.04, -128)
    op(B.CONV_2D, [t1, const("w", w, I8, ws, 0), const("b", b, I32, np.float32(0.05) * ws, 0)], [t2],
       tfl.BuiltinOptions.Conv2DOptions, tfl.Conv2DOptionsT(padding=tfl.Padding.SAME, strideW=1, strideH=1,
                                                           fusedActivationFunction=tfl.ActivationFunctionType.RELU))
    padded = act("pad", (1, 10, 9, 8), 0.04, -128)
    op(B.PAD, [t2, const("paddings", np.array([[0, 0], [1, 1], [0, 1], [0, 0]], np.int32), I32)], [padded])
    pooled = act("pool", (1, 8, 8, 8), 0.04, -128)
    op(B.MAX_POOL_2D, [padded], [pooled], tfl.BuiltinOptions.Pool2DOptions,
       tfl.Pool2DOptionsT(padding=tfl.Padding.VALID, strideW=1, strideH=1, filterWidth=2, filterHeight=3))
    dw = rng.integers(-127, 128, size=(1, 3, 3, 8)).astype(np.int8)
    dws = rng.uniform(0.01, 0.03, 8).astype(np.float32)
    t3 = act("dw", (1, 8, 8, 8), 0.05, 5)
    op(B.DEPTHWISE_CONV_2D, [pooled, const("dw_w", dw, I8, dws, 3), const("dw_b", np.zeros(8, np.int32), I32,
                                                                            np.float32(0.04) * dws, 0)], [t3],
       tfl.BuiltinOptions.DepthwiseConv2DOptions, tfl.DepthwiseConv2DOptionsT(
           padding=tfl.Padding.SAME, strideW=1, strideH=1, depthMultiplier=1))
    t4 = act("hswish", (1, 8, 8, 8), 0.03, -10)
    op(B.HARD_SWISH, [t3], [t4])
    t5 = act("sigmoid", (1, 8, 8, 8), 1 / 256.0, -128)
    op(B.LOGISTIC, [t2], [t5])
    t6 = act("mul", (1, 8, 8, 8), 0.02, 1)
    op(B.MUL, [t4, t5], [t6], tfl.BuiltinOptions.MulOptions, tfl.MulOptionsT())
    c = rng.integers(-100, 100, size=(1, 1, 1, 8)).astype(np.int8)
    cq = me.Tensor(shape=c.shape, dtype=I8, data=c, name="bias_c",
                   quantization=me.Quantization(scales=[0.01], zero_points=[4]))
    t7 = act("add", (1, 8, 8, 8), 0.03, -2)
    op(B.ADD, [t6, cq], [t7], tfl.BuiltinOptions.AddOptions, tfl.AddOptionsT())
    t8 = act("sub", (1, 8, 8, 8), 0.05, 7)
    op(B.SUB, [t7, t2], [t8], tfl.BuiltinOptions.SubOptions, tfl.SubOptionsT())
    t9 = act("tanh", (1, 8, 8, 8), 1 / 128.0, 0)
    op(B.TANH, [t8], [t9])
    t9b = act("relu6", (1, 8, 8, 8), 1 / 128.0, 0)
    op(B.RELU6, [t9], [t9b])
    t10 = act("concat", (1, 8, 8, 16), 1 / 128.0, 0)
    op(B.CONCATENATION, [t9, t9b], [t10], tfl.BuiltinOptions.ConcatenationOptions,
       tfl.ConcatenationOptionsT(axis=3))
    t11 = act("transpose", (1, 8, 8, 16), 1 / 128.0, 0)
    op(B.TRANSPOSE, [t10, const("perm", np.array([0, 2, 1, 3], np.int32), I32)], [t11])
    t12 = act("slice", (1, 3, 3, 12), 1 / 128.0, 0)
    op(B.STRIDED_SLICE, [t11, const("begin", np.array([0, 1, 0, 2], np.int32), I32),
                         const("end", np.array([1, 7, 8, 14], np.int32), I32),
                         const("strides", np.array([1, 2, 3, 1], np.int32), I32)], [t12],
       tfl.BuiltinOptions.StridedSliceOptions, tfl.StridedSliceOptionsT())
    t13 = act("mean", (1, 12), 0.004, -3)
    op(B.MEAN, [t12, const("axes", np.array([1, 2], np.int32), I32)], [t13], tfl.BuiltinOptions.ReducerOptions,
       tfl.ReducerOptionsT(keepDims=False))
    k = me.Tensor(shape=(1,), dtype=I8, data=np.array([-77], np.int8), name="k",
                  quantization=me.Quantization(scales=[0.02], zero_points=[0]))
    t14 = act("scaled", (1, 12), 0.006, 2)
    op(B.MUL, [t13, k], [t14], tfl.BuiltinOptions.MulOptions, tfl.MulOptionsT())
    t15 = act("requant", (1, 12), 0.009, -20)
    op(B.QUANTIZE, [t14], [t15])
    t16 = act("relu", (1, 12), 0.005, -128)
    op(B.RELU, [t15], [t16])
    fw = rng.integers(-127, 128, size=(5, 12)).astype(np.int8)
    t17 = act("fc", (1, 5), 0.1, 0)
    op(B.FULLY_CONNECTED, [t16, const("fc_w", fw, I8, [0.01]), const("fc_b", np.zeros(5, np.int32), I32,
                                                                     [np.float32(0.005) * np.float32(0.01)])],
       [t17], tfl.BuiltinOptions.FullyConnectedOptions, tfl.FullyConnectedOptionsT())
    y = act("y", (1, 5), 0, 0, F32)
    op(B.DEQUANTIZE, [t17], [y])
    sg = me.Subgraph(operators=ops, inputs=[x], outputs=[y])
    return bytes(me.Model(subgraphs=[sg], description="grpo-edge tests: tflite_zoo").build())


def float_inputs(n, seed=1):
    return np.random.default_rng(seed).uniform(-4, 4, size=(n, 1, 8, 8, 4)).astype(np.float32)
