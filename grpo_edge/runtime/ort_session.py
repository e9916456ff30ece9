"""onnxruntime CPU session set-up, shared by the library (export checks, simulations) and the device
runners. numpy + onnxruntime only; Python 3.6-valid."""


def ort_session(model, reference=False, threads=1):
    """An onnxruntime CPU InferenceSession of a file path or serialized model bytes.

    reference=True runs the graph as written (graph optimizations off): an int8 QDQ graph then computes
    exactly the quantization it describes. False uses ORT's fused kernels, the fast path on a device.
    (On x86 CPUs without VNNI, ORT's fused u8s8 kernels can saturate intermediate sums, so int8
    accuracy is judged with reference=True; ARM kernels do not take that path.)
    """
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL if reference
                                   else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), so,
                                providers=["CPUExecutionProvider"])
