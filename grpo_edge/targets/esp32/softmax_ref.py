"""TFLite int8 softmax (placeholder until implemented)."""
from grpo_edge.errors import ExportError


def softmax_params(x, out, node_label=""):
    raise ExportError("%s: unsupported op Softmax (not implemented yet)" % node_label)


def softmax_int8(x, p):
    raise NotImplementedError


def emit_c(em, i, op, name):
    raise NotImplementedError
