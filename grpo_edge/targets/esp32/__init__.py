"""ESP32 target: int8 QDQ ONNX -> generated C99 (no malloc, no interpreter) in an ESP-IDF project.

Public API:
    deploy(source, profile, out_dir, options) -> grpo_edge.report.Report
    onnx2c(int8_onnx_path, out_dir, prefix) -> dict      (pure exporter)
    reference                                            (NumPy int8 reference of every kernel)
    flash(dir, port) / monitor(port)                     (esptool + serial monitor)
See docs/esp32.md.
"""
from . import reference  # noqa: F401  (light: numpy only)


def deploy(source, profile, out_dir, options=None):
    from .deploy import deploy as _deploy
    return _deploy(source, profile, out_dir, options)


def onnx2c(int8_onnx_path, out_dir, prefix=None):
    from .deploy import onnx2c as _onnx2c
    return _onnx2c(int8_onnx_path, out_dir, prefix)


def flash(dir, port, **kwargs):  # noqa: A002 - the CLI's name for it
    from .flash import flash as _flash
    return _flash(dir, port, **kwargs)


__all__ = ["deploy", "onnx2c", "reference", "flash"]
