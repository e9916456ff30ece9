"""User-facing errors: the CLI prints these as one line, without a traceback."""


class GrpoEdgeError(Exception):
    """Base class: bad input the user can fix (config, file, target, checkpoint...)."""


class ConfigError(GrpoEdgeError):
    """A config key, type, value or combination is wrong."""


class CheckpointError(GrpoEdgeError):
    """A checkpoint is missing, corrupt, or not a grpo-edge checkpoint."""


class ExportError(GrpoEdgeError):
    """A model cannot be exported / quantized / converted (names the op or node at fault)."""


class TargetError(GrpoEdgeError):
    """Unknown target, or a model that does not fit / cannot run on the target."""


class OutOfMemoryError(GrpoEdgeError):
    """A training step needed more memory than the device (or training.max_memory) allows."""


class NonFiniteError(GrpoEdgeError):
    """A reward, loss, gradient or weight became NaN / inf during training (nothing non-finite is saved)."""
