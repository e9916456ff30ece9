"""ESP32 target: int8 QDQ ONNX -> generated C99 (no malloc, no interpreter) in an ESP-IDF project.

Public API:
    deploy(source, profile, out_dir, options) -> grpo_edge.report.Report
    onnx2c(int8_onnx_path, out_dir, prefix) -> dict      (pure exporter)
    reference                                            (NumPy int8 reference of every kernel)
    flash.flash(dir, port) / flash.monitor(port)         (esptool + serial monitor; submodule)
See docs/esp32.md.
"""
from . import reference  # noqa: F401  (numpy only)
# Imported eagerly on purpose: `from .deploy import deploy` rebinds the package attribute `deploy`
# to the function (a lazy wrapper would be replaced by the submodule on first import).
from .deploy import deploy, onnx2c  # noqa: E402  (numpy at import; onnx/onnxruntime lazily)

from .deploy import DEFAULTS as _DEFAULTS  # noqa: E402
from grpo_edge.targets.esp32_pipeline import OPTIONS as _PIPELINE_OPTIONS  # noqa: E402

from .text_deploy import DEFAULTS as _TEXT_DEFAULTS  # noqa: E402  (text checkpoints: text_deploy.py)

OPTIONS = tuple(_DEFAULTS) + _PIPELINE_OPTIONS + tuple(k for k in _TEXT_DEFAULTS if k not in _DEFAULTS)  # `--option` keys
__all__ = ["deploy", "onnx2c", "reference", "OPTIONS"]
