"""The ESP32 text path's entry points for both model kinds: decoder-only micro-gpt (textir, text_ref,
textgen_c) and encoder-decoder tiny-transformer (text_seq2seq_ref, textgen_s2s, which build on the
decoder-only modules' helpers). This module sits above both, so neither imports the other's dispatch.

    q = textir2int(checkpoint2textir(ckpt), calib_prompts)     # integer model, scales from greedy decoding
    run_prompts(q, prompts)                                      # NumPy integer reference, per prompt
    write_c(q, out_dir, prefix)                                  # <prefix>_text.{h,c} + gx_text_kernels.h
"""
from . import text_ref, textgen_c, textir


def _is_gpt(arch) -> bool:
    return arch == "micro-gpt"


def textir2int(ir, calib_prompts) -> dict:
    """The integer model of either kind (see textir.textir2int)."""
    if _is_gpt(ir.arch):
        return textir.textir2int(ir, calib_prompts)
    from .text_seq2seq_ref import textir2int_s2s
    return textir2int_s2s(ir, calib_prompts)


def run_prompts(q, prompts, batch=256) -> list:
    """The integer reference's completions, token ids and logit hashes (see text_ref.run_prompts)."""
    if _is_gpt(q["arch"]):
        return text_ref.run_prompts(q, prompts, batch)
    from .text_seq2seq_ref import generate_s2s
    return text_ref.run_prompts(q, prompts, batch, gen=generate_s2s)


def generate_c(q, prefix) -> dict:
    """Generated C of either kind: {"header", "source", "arena"}."""
    if _is_gpt(q["arch"]):
        return textgen_c.generate_c(q, prefix)
    from .textgen_s2s import generate_c_s2s
    return generate_c_s2s(q, prefix)


def write_c(q, out_dir, prefix) -> dict:
    """Write <prefix>_text.{h,c} and gx_text_kernels.h into out_dir; returns their paths and the arena."""
    return textgen_c.write(generate_c(q, prefix), out_dir, prefix)
