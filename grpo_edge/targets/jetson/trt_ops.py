"""ONNX operators the TensorRT ONNX parser imports, per TensorRT release (data, not logic).

Source: the operator support matrix `docs/operators.md` of github.com/onnx/onnx-tensorrt, branches
`8.2-GA` (TensorRT 8.2, JetPack 4.6.x on the Jetson Nano) and `10.1-GA` (the newest branch in that repo
when this table was made; JetPack 6 ships TensorRT 10.3, which imports at least these). Op names were
read from the matrix's "Supported = Y / N" column; the notes are ours, shortened.
An op absent from both lists is unknown to that parser version (custom domains need a plugin).
"""

TRT_OPS = {
    "8.2": {
        "source": "onnx/onnx-tensorrt branch 8.2-GA, docs/operators.md",
        "opset_max": 13,   # "TensorRT 8.2 supports operators up to Opset 13"
        "supported": """
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization Cast Ceil Celu
Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Div
Dropout Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements GatherND Gemm
GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GRU HardSigmoid Identity If
ImageScaler InstanceNormalization IsNaN LeakyRelu Less LessOrEqual Log LogSoftmax Loop LRN LSTM
LpNormalization LpPool MatMul Max MaxPool Mean Min Mul Neg NonMaxSuppression Not Or Pad ParametricSoftplus
Pow PRelu QuantizeLinear RandomUniform RandomUniformLike Range ReduceL1 ReduceL2 ReduceLogSum
ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize
ReverseSequence RNN Round ScaledTanh Scan Scatter ScatterElements ScatterND Selu Shape Sigmoid Sign Sin
Sinh Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh
ThresholdedRelu Tile TopK Transpose Unsqueeze Upsample Where
""".split(),
        "unsupported": """
BitShift Compress ConcatFromSequence ConvInteger Det DynamicQuantizeLinear Hardmax IsInf MatMulInteger
MaxRoiPool MaxUnpool MeanVarianceNormalization Mod Multinomial NegativeLogLikelihoodLoss NonZero OneHot
QLinearConv QLinearMatMul RandomNormal RandomNormalLike Reciprocal RoiAlign SequenceAt SequenceConstruct
SequenceEmpty SequenceErase SequenceInsert SequenceLength Shrink SoftmaxCrossEntropyLoss SplitToSequence
StringNormalizer TfIdfVectorizer Unique Xor
""".split(),
    },
    "10.1": {
        "source": "onnx/onnx-tensorrt branch 10.1-GA, docs/operators.md",
        "opset_max": 20,   # "opset 9 to opset 20"
        "supported": """
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization Cast CastLike
Ceil Celu Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DeformConv DepthToSpace
DequantizeLinear Div Dropout Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements
GatherND Gelu Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GridSample
GroupNormalization GRU HardSigmoid HardSwish Hardmax Identity If ImageScaler InstanceNormalization IsInf
IsNaN LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax Loop LRN LSTM LpNormalization LpPool
MatMul Max MaxPool Mean MeanVarianceNormalization Min Mish Mod Mul Neg NonMaxSuppression NonZero Not
OneHot Or Pad ParametricSoftplus Pow PRelu QuantizeLinear RandomNormal RandomNormalLike RandomUniform
RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean
ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize ReverseSequence RNN RoiAlign Round
ScaledTanh Scan Scatter ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh Size Slice
Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK
Transpose Trilu Unsqueeze Upsample Where Xor
""".split(),
        "unsupported": """
AffineGrid Bernoulli BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor BlackmanWindow Col2Im
CenterCropPad Compress ConcatFromSequence ConvInteger DFT Det DynamicQuantizeLinear HammingWindow
HannWindow ImageDecoder MatMulInteger MaxRoiPool MaxUnpool MelWeightMatrix Multinomial
NegativeLogLikelihoodLoss Optional OptionalGetElement OptionalHasElement QLinearConv QLinearMatMul
RegexFullMatch STFT SequenceAt SequenceConstruct SequenceEmpty SequenceErase SequenceInsert
SequenceLength SequenceMap SoftmaxCrossEntropyLoss SplitToSequence StringConcat StringNormalizer
StringSplit TfIdfVectorizer Unique
""".split(),
    },
}

# Restrictions the matrix states that a small exported policy can hit (our wording).
RESTRICTIONS = {
    "Conv": "weights must be an initializer; 2D/3D only",
    "ConvTranspose": "weights must be an initializer; 2D/3D only",
    "QuantizeLinear": "zero point must be 0 (symmetric int8)",
    "DequantizeLinear": "zero point must be 0 (symmetric int8)",
    "AveragePool": "2D/3D pooling only",
    "MaxPool": "2D/3D pooling only; no Indices output",
}


def table_for(trt_version: str) -> dict:
    """The table for a TensorRT version string: 8.x -> the 8.2 table, 10.x or newer -> the 10.1 table."""
    major = int(str(trt_version).split(".")[0])
    if major >= 10:
        return TRT_OPS["10.1"]
    if major == 8:
        return TRT_OPS["8.2"]
    raise KeyError("no TensorRT op table for version %s (have 8.2 and 10.1)" % trt_version)
