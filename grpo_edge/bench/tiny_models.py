"""MLPerf Tiny reference architectures as full-integer int8 .tflite files, written without TensorFlow.

    buf = build("ds_cnn", seed=0)                  # bytes of the .tflite
    info = write_model("resnet8", "resnet8.tflite")
    x = sample_inputs("resnet8", 8)                # int8 input codes, (8, 32, 32, 3)

Models ("ds_cnn", "fc_autoencoder", "resnet8", "mobilenet_v1_025", "kws_streaming"; see MODELS) get
random float weights (He-normal, BatchNorm with random gamma/beta/mean/var folded into the conv / FC
weights and bias), are calibrated by a NumPy float32 forward pass (NHWC) on CALIB_N standard-normal
inputs and quantized as TensorFlow's converter does for inference_input_type = inference_output_type =
int8, so a TFLite front end can be tested on them against TFLite Micro:

- activations per-tensor asymmetric int8 from the calibrated min/max widened to include 0:
  scale = (max - min) / 255, zero_point = round(-128 - min / scale); ReLU / ReLU6 are fused into the op
  (fusedActivationFunction), so the op's output range is the post-activation one (zero point -128);
- CONV_2D weights OHWI, per-channel symmetric on axis 0 (scale = max|w| / 127, zero point 0);
  DEPTHWISE_CONV_2D weights (1, KH, KW, C*M) per-channel on axis 3; FULLY_CONNECTED weights (OUT, IN)
  per-tensor (one scale), or per-channel on axis 0 with per_channel_fc=True;
- bias int32 with scale float32(input_scale * weight_scale[c]), zero point 0;
- AVERAGE_POOL_2D and RESHAPE keep their input's scale / zero point; RESHAPE takes a constant int32
  shape tensor and ReshapeOptions.newShape; SOFTMAX (beta 1) outputs at scale 1/256, zero point -128;
- operator codes carry the versions the converter gives these int8 ops (CONV_2D 3, DEPTHWISE_CONV_2D
  3, FULLY_CONNECTED 4, AVERAGE_POOL_2D / SOFTMAX / ADD 2, RESHAPE 1) and deprecated_builtin_code.

The last FULLY_CONNECTED of each classifier is normalized on the calibration set (logits centred per
class and scaled to unit spread), otherwise a random network puts almost every input in one class and
an argmax comparison says nothing. float_model=True writes the same network in float32 (no
quantization). Everything is deterministic for a seed; nothing is trained. Besides build / write_model /
sample_inputs: model_info (shapes, op names, params = weight + bias elements after folding),
float_forward (the float network, the reference the int8 file approximates), input_quantization and
dequantize_inputs.
"""
import os
from functools import lru_cache

import numpy as np

CALIB_N = 64
BN_EPS = 1e-3
_VERSIONS_INT8 = {"CONV_2D": 3, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 4, "AVERAGE_POOL_2D": 2,
                  "SOFTMAX": 2, "ADD": 2, "RESHAPE": 1}
# 16x8: the int16 rows of TensorFlow's op_version table (ADD 3 = int16 with pot_scale_int16 false)
_VERSIONS_INT16 = {"CONV_2D": 4, "DEPTHWISE_CONV_2D": 5, "FULLY_CONNECTED": 7, "AVERAGE_POOL_2D": 3,
                   "SOFTMAX": 3, "ADD": 3, "RESHAPE": 1}
_WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
ACTIVATIONS = ("int8", "int16")


# ----------------------------------------------------------------------------------------- float graph

def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _out_len(n, k, s, d, pad):
    """Output length and (before, after) padding of one spatial axis, TensorFlow's SAME / VALID."""
    eff = d * (k - 1) + 1
    if pad == "VALID":
        return (n - eff) // s + 1, (0, 0)
    out = -(-n // s)
    total = max((out - 1) * s + eff - n, 0)
    return out, (total // 2, total - total // 2)


class _Net:
    """A float network being described: tensor shapes and layers in execution order."""

    def __init__(self, input_shape, rng):
        self.rng = rng
        self.input = "input"
        self.shapes = {"input": tuple(input_shape)}
        self.layers = []

    def _layer(self, op, inputs, shape, **params):
        out = "%s_%d" % (op.lower(), len(self.layers))
        self.shapes[out] = tuple(shape)
        self.layers.append(dict(op=op, inputs=list(inputs), out=out, **params))
        return out

    def _bn_fold(self, w, b, axis):
        """Fold a BatchNorm with random statistics into weights w (output channels on `axis`) and bias b."""
        n = w.shape[axis]
        gamma, beta = self.rng.uniform(0.5, 1.5, n), self.rng.normal(0.0, 0.1, n)
        mean, var = self.rng.normal(0.0, 0.1, n), self.rng.uniform(0.5, 1.5, n)
        k = gamma / np.sqrt(var + BN_EPS)
        shape = [1] * w.ndim
        shape[axis] = n
        return w * k.reshape(shape), (b - mean) * k + beta

    def _spatial(self, x, k, stride, dil, pad, cout):
        _, H, W, _ = self.shapes[x]
        oh, _ = _out_len(H, k[0], stride[0], dil[0], pad)
        ow, _ = _out_len(W, k[1], stride[1], dil[1], pad)
        return (1, oh, ow, cout)

    def conv(self, x, cout, k, stride=1, pad="SAME", act="RELU", dil=1, bn=True):
        k, stride, dil = _pair(k), _pair(stride), _pair(dil)
        cin = self.shapes[x][3]
        w = self.rng.normal(0.0, np.sqrt(2.0 / (k[0] * k[1] * cin)), (cout, k[0], k[1], cin))
        b = np.zeros(cout) if bn else self.rng.normal(0.0, 0.05, cout)
        if bn:
            w, b = self._bn_fold(w, b, 0)
        return self._layer("CONV_2D", [x], self._spatial(x, k, stride, dil, pad, cout), w=w, b=b,
                           stride=stride, pad=pad, act=act, dil=dil)

    def dw(self, x, k=3, stride=1, pad="SAME", act="RELU", mult=1, dil=1, bn=True):
        k, stride, dil = _pair(k), _pair(stride), _pair(dil)
        cout = self.shapes[x][3] * mult
        w = self.rng.normal(0.0, np.sqrt(2.0 / (k[0] * k[1])), (1, k[0], k[1], cout))
        b = np.zeros(cout)
        if bn:
            w, b = self._bn_fold(w, b, 3)
        return self._layer("DEPTHWISE_CONV_2D", [x], self._spatial(x, k, stride, dil, pad, cout), w=w, b=b,
                           stride=stride, pad=pad, act=act, dil=dil, mult=mult)

    def fc(self, x, n, act=None, bn=False):
        cin = self.shapes[x][-1]
        w = self.rng.normal(0.0, np.sqrt(2.0 / cin), (n, cin))
        b = np.zeros(n)
        if bn:
            w, b = self._bn_fold(w, b, 0)
        return self._layer("FULLY_CONNECTED", [x], (1, n), w=w, b=b, act=act)

    def add(self, a, b, act=None):
        return self._layer("ADD", [a, b], self.shapes[a], act=act)

    def global_pool(self, x):
        """AVERAGE_POOL_2D over the whole map, VALID, strides = filter (Keras' default)."""
        _, H, W, C = self.shapes[x]
        return self._layer("AVERAGE_POOL_2D", [x], (1, 1, 1, C), filter=(H, W), stride=(H, W), pad="VALID",
                           act=None)

    def reshape(self, x, shape):
        return self._layer("RESHAPE", [x], shape, new_shape=tuple(shape))

    def softmax(self, x):
        return self._layer("SOFTMAX", [x], self.shapes[x])

    def head(self, x, classes):
        """Global average pool, flatten, FULLY_CONNECTED, SOFTMAX: the classifiers' common ending."""
        x = self.global_pool(x)
        x = self.reshape(x, (1, self.shapes[x][3]))
        return self.softmax(self.fc(x, classes))

    @property
    def output(self):
        return self.layers[-1]["out"]


# --------------------------------------------------------------------------------------- architectures

def _ds_cnn(net):
    x = net.conv(net.input, 64, (10, 4), stride=2)
    for _ in range(4):
        x = net.conv(net.dw(x, 3), 64, 1)
    return net.head(x, 12)


def _fc_autoencoder(net):
    x = net.input
    for n in [128] * 4 + [8] + [128] * 4:
        x = net.fc(x, n, act="RELU", bn=True)
    return net.fc(x, 640)


def _resnet_stack(net, x, ch, stride):
    y = net.conv(x, ch, 3, stride=stride)
    y = net.conv(y, ch, 3, act=None)
    shortcut = x if stride == 1 else net.conv(x, ch, 1, stride=stride, act=None, bn=False)
    return net.add(shortcut, y, act="RELU")


def _resnet8(net):
    x = net.conv(net.input, 16, 3)
    for ch, stride in ((16, 1), (32, 2), (64, 2)):
        x = _resnet_stack(net, x, ch, stride)
    return net.head(x, 10)


MOBILENET_CHANNELS = [16, 32, 32, 64, 64, 128, 128, 128, 128, 128, 128, 256, 256]
MOBILENET_STRIDES = [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1]


def _mobilenet_v1_025(net):
    x = net.conv(net.input, 8, 3, stride=2, act="RELU6")
    for ch, stride in zip(MOBILENET_CHANNELS, MOBILENET_STRIDES):
        x = net.dw(x, 3, stride=stride, act="RELU6")
        x = net.conv(x, ch, 1, act="RELU6")
    return net.head(x, 2)


def _kws_streaming(net):
    x = net.conv(net.input, 32, (3, 1), pad="VALID")
    x = net.dw(x, (3, 1), pad="VALID", mult=2, dil=(2, 1))
    x = net.conv(x, 32, 1)
    return net.head(x, 12)


MODELS = {
    "ds_cnn": dict(task="keyword spotting (DS-CNN small)", input_shape=(1, 49, 10, 1), net=_ds_cnn,
                   classifier=True),
    "fc_autoencoder": dict(task="anomaly detection (ToyADMOS FC autoencoder)", input_shape=(1, 640),
                           net=_fc_autoencoder, classifier=False),
    "resnet8": dict(task="image classification, CIFAR-10 (ResNet-8)", input_shape=(1, 32, 32, 3),
                    net=_resnet8, classifier=True),
    "mobilenet_v1_025": dict(task="visual wake words (MobileNetV1 0.25, 96x96)", input_shape=(1, 96, 96, 3),
                             net=_mobilenet_v1_025, classifier=True),
    "kws_streaming": dict(task="streaming keyword spotting over 16 feature frames", input_shape=(1, 16, 1, 40),
                          net=_kws_streaming, classifier=True),
}


# ----------------------------------------------------------------------------------- float forward pass

def _act(y, act):
    if act == "RELU":
        return np.maximum(y, 0.0)
    if act == "RELU6":
        return np.clip(y, 0.0, 6.0)
    return y


def _taps(x, k, stride, dil, pad):
    """Yield (i, j, view) per kernel tap: the (N, OH, OW, C) input cells that tap multiplies."""
    _, H, W, _ = x.shape
    oh, ph = _out_len(H, k[0], stride[0], dil[0], pad)
    ow, pw = _out_len(W, k[1], stride[1], dil[1], pad)
    xp = np.pad(x, ((0, 0), ph, pw, (0, 0)))
    for i in range(k[0]):
        for j in range(k[1]):
            r, c = i * dil[0], j * dil[1]
            yield i, j, xp[:, r:r + stride[0] * (oh - 1) + 1:stride[0], c:c + stride[1] * (ow - 1) + 1:stride[1], :]


def _conv(x, L):
    w = L["w"]
    y = 0.0
    for i, j, v in _taps(x, w.shape[1:3], L["stride"], L["dil"], L["pad"]):
        y = y + v @ w[:, i, j, :].T
    return y + L["b"]


def _depthwise(x, L):
    w = L["w"]
    x = np.repeat(x, L["mult"], axis=3) if L["mult"] > 1 else x      # output channel c * M + m reads c
    y = 0.0
    for i, j, v in _taps(x, w.shape[1:3], L["stride"], L["dil"], L["pad"]):
        y = y + v * w[0, i, j, :]
    return y + L["b"]


def _pool(x, L):             # VALID only (a SAME average pool would divide by the cells inside the map)
    taps = list(_taps(x, L["filter"], L["stride"], (1, 1), L["pad"]))
    return sum(v for _, _, v in taps) / len(taps)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _run_layer(L, args):
    op, x = L["op"], args[0]
    if op == "CONV_2D":
        y = _conv(x, L)
    elif op == "DEPTHWISE_CONV_2D":
        y = _depthwise(x, L)
    elif op == "FULLY_CONNECTED":
        y = x @ L["w"].T + L["b"]
    elif op == "ADD":
        y = x + args[1]
    elif op == "AVERAGE_POOL_2D":
        y = _pool(x, L)
    elif op == "RESHAPE":
        return x.reshape((len(x),) + L["new_shape"][1:])          # batch 1 in the file, N here
    elif op == "SOFTMAX":
        return _softmax(x)
    else:
        raise ValueError("no float kernel for %s" % op)
    return _act(y, L.get("act"))


def _forward(net, x, upto=None):
    """All tensors of the float32 network on batch x (N, *input_shape[1:]): name -> array."""
    vals = {net.input: np.asarray(x, np.float32)}
    for L in net.layers:
        if upto is not None and L["out"] == upto:
            break
        out = _run_layer(L, [vals[t] for t in L["inputs"]])
        vals[L["out"]] = out.astype(np.float32)
    return vals


# ------------------------------------------------------------------------------------------ calibration

def _normalize_classifier(net, calib):
    """Centre the last FC's logits per class on the calibration set and scale them to unit spread."""
    fc = [L for L in net.layers if L["op"] == "FULLY_CONNECTED"][-1]
    feats = _forward(net, calib, upto=fc["out"])[fc["inputs"][0]].astype(np.float64)
    logits = feats @ fc["w"].T + fc["b"]
    spread = logits.std(axis=0).mean() + 1e-12
    fc["w"] = (fc["w"] / spread).astype(np.float32)
    fc["b"] = ((fc["b"] - logits.mean(axis=0)) / spread).astype(np.float32)


def _act_qparams(lo, hi, act=None):
    """Per-tensor asymmetric int8 (scale, zero point) of a calibrated float range, as the converter."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if act == "RELU6":
        hi = min(hi, 6.0)
    if hi - lo < 1e-6:              # a tensor that is 0 on every calibration input
        hi = lo + 1e-6
    scale = np.float32((hi - lo) / 255.0)
    zp = int(np.clip(np.round(-128.0 - lo / float(scale)), -128, 127))
    return scale, zp


def _act_qparams16(lo, hi, act=None):
    """Per-tensor symmetric int16 (scale, zero point 0) of a calibrated float range, as the converter's 16x8
    mode: scale = max(|min|, |max|) / 32767."""
    lo, hi = float(lo), float(hi)
    if act == "RELU6":
        hi = min(hi, 6.0)
    m = max(abs(lo), abs(hi))
    if m < 1e-6:                    # a tensor that is 0 on every calibration input
        m = 1e-6
    return np.float32(m / 32767.0), 0


def _ranges(net, calib):
    """name -> (min, max) of every tensor of the float network on the calibration set."""
    vals = _forward(net, calib)
    return {k: (float(v.min()), float(v.max())) for k, v in vals.items()}


def _calibrate(net, ranges, activations="int8"):
    """name -> (scale, zero point) of every activation tensor, int8 (asymmetric) or int16 (symmetric)."""
    qparams = _act_qparams if activations == "int8" else _act_qparams16
    softmax = (np.float32(1.0 / 256.0), -128) if activations == "int8" else (np.float32(1.0 / 32768.0), 0)
    q = {net.input: qparams(*ranges[net.input])}
    for L in net.layers:
        out = L["out"]
        if L["op"] in ("AVERAGE_POOL_2D", "RESHAPE"):
            q[out] = q[L["inputs"][0]]
        elif L["op"] == "SOFTMAX":
            q[out] = softmax
        else:
            q[out] = qparams(*ranges[out], L.get("act"))
    return q


def _rng(seed, stream):
    return np.random.default_rng([int(seed), stream])


def _draw(name, n, rng):
    """n float32 inputs of the calibration distribution: standard normal per element."""
    return rng.standard_normal((int(n),) + MODELS[name]["input_shape"][1:]).astype(np.float32)


def _check_activations(activations):
    if activations not in ACTIVATIONS:
        raise ValueError("activations must be one of %s, not %r" % (", ".join(ACTIVATIONS), activations))


@lru_cache(maxsize=16)
def _network(name, seed):
    """(float network, calibrated (min, max) of every tensor) for a model name and seed."""
    if name not in MODELS:
        raise KeyError("unknown model %r (known: %s)" % (name, ", ".join(MODELS)))
    spec = MODELS[name]
    net = _Net(spec["input_shape"], _rng(seed, 0))
    spec["net"](net)
    for L in net.layers:                       # weights as float32, the precision the file can hold
        for key in ("w", "b"):
            if key in L:
                L[key] = np.asarray(L[key], np.float32)
    calib = _draw(name, CALIB_N, _rng(seed, 1))
    if spec["classifier"]:
        _normalize_classifier(net, calib)
    return net, _ranges(net, calib)


@lru_cache(maxsize=32)
def _model(name, seed, activations="int8"):
    """(float network, activation quantization) for a model name, seed and activation type."""
    _check_activations(activations)
    net, ranges = _network(name, seed)
    return net, _calibrate(net, ranges, activations)


# ----------------------------------------------------------------------------------- weight quantizing

def _weight_scales(w, op, per_channel_fc):
    """(scales float32, quantized dimension or None) of a layer's weights."""
    a = np.abs(w)
    if op == "CONV_2D" or (op == "FULLY_CONNECTED" and per_channel_fc):
        m, axis = a.reshape(len(w), -1).max(axis=1), 0
    elif op == "DEPTHWISE_CONV_2D":
        m, axis = a.reshape(-1, w.shape[3]).max(axis=0), 3
    else:
        m, axis = np.array([a.max()]), None
    return np.maximum(m / 127.0, 1e-12).astype(np.float32), axis


def _quantize_weights(w, scales, axis):
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = len(scales)
    return np.clip(np.round(w / scales.reshape(shape)), -127, 127).astype(np.int8)


def _quantize_bias(b, in_scale, w_scales, bits=32):
    """(int32 or int64 bias, float32 scales): scale[c] = float32(input scale * weight scale[c])."""
    s = (np.float32(in_scale) * w_scales).astype(np.float32)
    q = np.round(b.astype(np.float64) / s.astype(np.float64))
    if bits == 64:                  # |q| far below 2**63 for any float32 bias / scale ratio we make
        return q.astype(np.int64), s
    return np.clip(q, -2 ** 31, 2 ** 31 - 1).astype(np.int32), s


# ------------------------------------------------------------------------------------- flatbuffer write

class _Writer:
    """Turns a calibrated _Net into model_editor tensors and operators."""

    def __init__(self, net, q, float_model, per_channel_fc, activations="int8"):
        from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
        from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
        self.me, self.tfl = me, tfl
        self.net, self.q, self.float, self.per_channel_fc = net, q, float_model, per_channel_fc
        self.int16 = activations == "int16"
        self.tensors, self.ops, self.codes = {}, [], {}

    def act(self, name):
        if name not in self.tensors:
            shape = self.net.shapes[name]
            if self.float:
                t = self.me.Tensor(shape=shape, dtype=self.tfl.TensorType.FLOAT32, name=name)
            else:
                s, zp = self.q[name]
                dtype = self.tfl.TensorType.INT16 if self.int16 else self.tfl.TensorType.INT8
                t = self.me.Tensor(shape=shape, dtype=dtype, name=name,
                                   quantization=self.me.Quantization(scales=[float(s)], zero_points=[int(zp)]))
            self.tensors[name] = t
        return self.tensors[name]

    def const(self, arr, name, dtype, scales=None, axis=None):
        qz = None
        if scales is not None:
            qz = self.me.Quantization(scales=[float(s) for s in scales], zero_points=[0] * len(scales), axis=axis)
        return self.me.Tensor(shape=arr.shape, dtype=dtype, data=np.ascontiguousarray(arr), quantization=qz,
                              name=name)

    def weights(self, L):
        """The weight and bias tensors of a CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED."""
        T = self.tfl.TensorType
        w, b, name = L["w"], L["b"], L["out"]
        if self.float:
            return (self.const(w.astype(np.float32), name + "/weights", T.FLOAT32),
                    self.const(b.astype(np.float32), name + "/bias", T.FLOAT32))
        scales, axis = _weight_scales(w, L["op"], self.per_channel_fc)
        wq = _quantize_weights(w, scales, axis)
        bq, bs = _quantize_bias(b, self.q[L["inputs"][0]][0], scales, 64 if self.int16 else 32)
        return (self.const(wq, name + "/weights", T.INT8, scales, axis),
                self.const(bq, name + "/bias", T.INT64 if self.int16 else T.INT32, bs, 0))

    def op(self, kind, inputs, output, opt_name=None, opts=None):
        code = getattr(self.tfl.BuiltinOperator, kind)
        o = self.me.Operator(opcode=code, inputs=inputs, outputs=[output])
        if opt_name is not None:
            o._fb.builtinOptionsType = getattr(self.tfl.BuiltinOptions, opt_name)
            o._fb.builtinOptions = opts
        self.ops.append(o)
        version = 1 if self.float else (_VERSIONS_INT16 if self.int16 else _VERSIONS_INT8)[kind]
        if self.float and kind == "DEPTHWISE_CONV_2D" and opts.dilationHFactor * opts.dilationWFactor != 1:
            version = 2
        self.codes.setdefault(code, version)

    def activation(self, act):
        return getattr(self.tfl.ActivationFunctionType, act or "NONE")

    def padding(self, pad):
        return getattr(self.tfl.Padding, pad)

    def layer(self, L):
        tfl, x, y = self.tfl, self.act(L["inputs"][0]), self.act(L["out"])
        op = L["op"]
        if op in _WEIGHTED:
            w, b = self.weights(L)
            self.op(op, [x, w, b], y, *self._weighted_options(L))
        elif op == "ADD":
            opts = tfl.AddOptionsT(fusedActivationFunction=self.activation(L["act"]))
            if self.int16:
                opts.potScaleInt16 = False      # general rescaling, as the converter's 16x8 mode writes it
            self.op(op, [x, self.act(L["inputs"][1])], y, "AddOptions", opts)
        elif op == "AVERAGE_POOL_2D":
            opts = tfl.Pool2DOptionsT(padding=self.padding(L["pad"]), strideH=L["stride"][0], strideW=L["stride"][1],
                                      filterHeight=L["filter"][0], filterWidth=L["filter"][1],
                                      fusedActivationFunction=self.activation(None))
            self.op(op, [x], y, "Pool2DOptions", opts)
        elif op == "RESHAPE":
            shape = np.array(self.net.shapes[L["out"]], np.int32)
            s = self.const(shape, L["out"] + "/shape", tfl.TensorType.INT32)
            self.op(op, [x, s], y, "ReshapeOptions", tfl.ReshapeOptionsT(newShape=[int(v) for v in shape]))
        elif op == "SOFTMAX":
            self.op(op, [x], y, "SoftmaxOptions", tfl.SoftmaxOptionsT(beta=1.0))

    def _weighted_options(self, L):
        tfl, op, act = self.tfl, L["op"], self.activation(L["act"])
        if op == "FULLY_CONNECTED":
            return "FullyConnectedOptions", tfl.FullyConnectedOptionsT(fusedActivationFunction=act)
        common = dict(padding=self.padding(L["pad"]), strideH=L["stride"][0], strideW=L["stride"][1],
                      fusedActivationFunction=act, dilationHFactor=L["dil"][0], dilationWFactor=L["dil"][1])
        if op == "CONV_2D":
            return "Conv2DOptions", tfl.Conv2DOptionsT(**common)
        return "DepthwiseConv2DOptions", tfl.DepthwiseConv2DOptionsT(depthMultiplier=L["mult"], **common)

    def build(self, description):
        for L in self.net.layers:
            self.layer(L)
        codes = []
        for code, version in self.codes.items():
            oc = self.me.OperatorCode(builtin_code=code, version=version)
            oc._fb.deprecatedBuiltinCode = min(code, 127)      # as the converter: old readers look here
            codes.append(oc)
        sg = self.me.Subgraph(operators=self.ops, inputs=[self.act(self.net.input)],
                              outputs=[self.act(self.net.output)], name="main")
        return bytes(self.me.Model(subgraphs=[sg], operator_codes=codes, description=description).build())


# ---------------------------------------------------------------------------------------------- public

def build(name, seed=0, per_channel_fc=False, float_model=False, activations="int8") -> bytes:
    """The .tflite bytes of model `name`: int8 full-integer, 16x8 (int16 activations, int8 weights, int64
    biases) with activations="int16", or float32 with float_model=True."""
    _check_activations(activations)
    if float_model and activations != "int8":
        raise ValueError("float_model=True has no quantized activations; leave activations at 'int8'")
    net, q = _model(name, int(seed), activations)
    kind = "float32" if float_model else ("int8" if activations == "int8" else "16x8")
    return _Writer(net, q, float_model, per_channel_fc, activations).build(
        "grpo-edge tiny_models %s seed %d (%s, random weights)" % (name, int(seed), kind))


def model_info(name, seed=0):
    """{"input_shape", "output_shape", "ops", "params"} of a model (params: weight + bias elements)."""
    net, _ = _network(name, int(seed))
    params = sum(L[k].size for L in net.layers for k in ("w", "b") if k in L)
    return {"input_shape": net.shapes[net.input], "output_shape": net.shapes[net.output],
            "ops": [L["op"] for L in net.layers], "params": int(params)}


def write_model(name, path, seed=0, **kw) -> dict:
    """Write build(name, seed, **kw) to `path` atomically (temp file in the same folder, os.replace)."""
    from grpo_edge.report import atomic_write_bytes
    buf = build(name, seed=seed, **kw)
    atomic_write_bytes(path, buf)
    return dict(name=name, path=os.fspath(path), bytes=len(buf), **model_info(name, seed))


def input_quantization(name, seed=0, activations="int8"):
    """(scale, zero point) of the quantized model's input tensor (int8, or int16 with activations="int16")."""
    s, zp = _model(name, int(seed), activations)[1]["input"]
    return float(s), int(zp)


def sample_inputs(name, n, seed=0, model_seed=None, activations="int8") -> np.ndarray:
    """n inputs drawn from the calibration distribution (standard normal; a stream other than the
    calibration set's), quantized with the input scale / zero point of the model built with
    `model_seed` (default: seed): int8 codes of shape (n, *input_shape[1:]), or int16 codes (np.int16) of
    the 16x8 model with activations="int16"."""
    model_seed = seed if model_seed is None else model_seed
    scale, zp = input_quantization(name, model_seed, activations)
    x = _draw(name, n, _rng(seed, 2))
    info = np.iinfo(np.int8 if activations == "int8" else np.int16)
    return np.clip(np.round(x / scale) + zp, info.min, info.max).astype(info.dtype)


def float_forward(name, x, seed=0) -> np.ndarray:
    """The float32 network's output (softmax probabilities for the classifiers) on float inputs x of
    shape (N, *input_shape[1:]): the reference the int8 model approximates."""
    net, _ = _network(name, int(seed))
    return _forward(net, x)[net.output]


def dequantize_inputs(name, codes, seed=0, activations="int8") -> np.ndarray:
    """Float values of int8 (or, with activations="int16", int16) input codes, as sample_inputs returns
    them, for float_forward."""
    scale, zp = input_quantization(name, seed, activations)
    return ((np.asarray(codes, np.float32) - zp) * np.float32(scale)).astype(np.float32)


def main(argv=None):
    """python -m grpo_edge.bench.tiny_models NAME OUT.tflite [--seed N] [--per-channel-fc] [--float | --int16]:
    write one of the MLPerf Tiny architectures (MODELS) as an int8 (or 16x8) .tflite, e.g. for
    `grpo-edge deploy --tflite`."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m grpo_edge.bench.tiny_models", description=main.__doc__)
    ap.add_argument("name", choices=list(MODELS))
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-channel-fc", action="store_true")
    kind = ap.add_mutually_exclusive_group()
    kind.add_argument("--float", dest="float_model", action="store_true", help="float32 instead of int8")
    kind.add_argument("--int16", action="store_true", help="16x8: int16 activations, int8 weights, int64 biases")
    a = ap.parse_args(argv)
    info = write_model(a.name, a.out, seed=a.seed, per_channel_fc=a.per_channel_fc, float_model=a.float_model,
                       activations="int16" if a.int16 else "int8")
    print("wrote %s: %s, %d bytes, %d parameters, input %s, output %s" % (
        info["path"], a.name, info["bytes"], info["params"], list(info["input_shape"]), list(info["output_shape"])))
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
