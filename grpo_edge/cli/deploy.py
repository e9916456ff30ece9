"""`grpo-edge export / quantize / calibrate / deploy / bench / targets / flash` (filled as targets land)."""


def register(app):
    pass
