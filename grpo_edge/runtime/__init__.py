"""Code that runs on the device, shipped as-is: the library imports these modules, and deploy copies the
same files, byte for byte, into the artifact, so the code the tests exercise is the code that ships.

Rules for a module here: Python 3.6-valid; imports only the standard library, numpy and onnxruntime (and,
for the Jetson scripts, tensorrt/torch on the device, inside functions); never grpo_edge. A module that
needs a sibling imports it relatively, falling back to a plain import when it runs as a loose file in a
deploy folder:

    try:
        from .ort_session import ort_session
    except ImportError:        # a loose file next to its siblings in a deploy folder
        from ort_session import ort_session

Modules:
    ort_session     onnxruntime CPU session set-up (reference arithmetic or fused kernels, threads)
    char_tokenizer  the character tokenizer of the built-in text tasks
    textgen         greedy text generation with exported text models (KV cache / encoder-decoder)
    pi_runner       the Raspberry Pi runner (deploy folder's runner.py)
    tegrastats      Jetson tegrastats line parser and background power sampler
    build_engine    Jetson: build TensorRT engines with the Python API
    run_engine      Jetson: load, check, time an engine, sample power via tegrastats
"""
import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


def path_of(module: str) -> Path:
    """The file of runtime module `module` (e.g. "pi_runner")."""
    return HERE / (module + ".py")


def ship(out, files: dict) -> list:
    """Copy runtime modules into deploy folder `out` unchanged: {name in the artifact: module}. Scripts
    with a shebang get mode 0755, the others 0644. Returns the names written."""
    out = Path(out)
    for name, module in files.items():
        src, dst = path_of(module), out / name
        tmp = dst.with_name("." + name + ".tmp")
        shutil.copyfile(str(src), str(tmp))
        os.chmod(str(tmp), 0o755 if src.read_bytes().startswith(b"#!") else 0o644)
        os.replace(str(tmp), str(dst))
    return list(files)
