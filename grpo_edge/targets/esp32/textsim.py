"""Host and rv32 simulation of the generated text C: bit-exact with text_ref on every generated token.

host:  gcc -std=c99 -Wall -Wextra -Werror -pedantic (-O2, and -O0 with -fsanitize=address,undefined when
       libasan links) builds <prefix>_text.c + a harness that reads prompts (one per line) and prints
       "<rc> <logit hash> <ids> |<answer>" per prompt. rc, ids and the hash of every decision step's int16
       logits must equal text_ref.run_prompts.
rv32:  riscv64-unknown-elf-gcc -march=rv32imc (the ESP32-C3's ISA) builds the same C into a bare ELF;
       unicorn runs <prefix>_prefill / <prefix>_decode directly and counts instructions exactly (prefill
       and each decode step separately).
"""
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from grpo_edge.errors import TargetError

from . import rv32
from .cc import CFLAGS, SANITIZE, gcc, sanitizers_available  # noqa: F401  (CFLAGS: the text report's figures)
from .text_model import run_prompts, write_c



def harness_c(prefix) -> str:
    p, P = prefix, prefix.upper()
    return """#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "%(p)s_text.h"

/* argv[1] == "gen": only <prefix>_generate with answer buffers of argv[2] bytes (device-side checks) */
int main(int argc, char **argv)
{
    static char line[4096];
    char answer[512];
    int16_t ids[%(P)s_INPUT_LEN];
    int gen_only = argc > 1 && strcmp(argv[1], "gen") == 0;
    int cap = argc > 2 ? atoi(argv[2]) : (int)sizeof answer;
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strlen(line);
        int rc, s, tok, out[%(P)s_MAX_NEW], k = 0;
        while (n && (line[n - 1] == '\\n' || line[n - 1] == '\\r')) line[--n] = '\\0';
        if (gen_only) {
            rc = %(p)s_generate(line, answer, cap);
            printf("%%d |%%s\\n", rc, rc >= 0 || rc == %(P)s_ERR_SPACE ? answer : %(p)s_error(rc));
            continue;
        }
        rc = %(p)s_encode(line, ids);
        if (rc < 0) { printf("%%d 0 - |%%s\\n", rc, %(p)s_error(rc)); continue; }
        tok = %(p)s_prefill(ids);
        for (s = 0; s < %(P)s_MAX_NEW; ++s) {
            out[k++] = tok;
            if (tok == 2 || s == %(P)s_MAX_NEW - 1) break;
            tok = %(p)s_decode(tok, %(P)s_FIRST_POS + s);
        }
        printf("%%d %%u ", k, (unsigned)%(p)s_logit_hash);
        for (s = 0; s < k; ++s) printf(s ? ",%%d" : "%%d", out[s]);
        rc = %(p)s_generate(line, answer, (int)sizeof answer);
        printf(" |%%s\\n", rc >= 0 ? answer : %(p)s_error(rc));
    }
    return 0;
}
""" % {"p": p, "P": P}


def build_host(q, prefix, workdir, opt="-O2", sanitize=False) -> Path:
    work = Path(workdir)
    files = write_c(q, work, prefix)
    (work / "harness.c").write_text(harness_c(prefix))
    exe = work / ("textsim%s%s" % (opt.replace("-", "_"), "_san" if sanitize else ""))
    cmd = ([gcc()] + CFLAGS + [opt] + (SANITIZE if sanitize else []) +
           ["-I", str(work), "-o", str(exe), str(work / "harness.c"), str(files["source"])])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise TargetError("gcc failed on the generated text C (%s): %s" % (opt, (r.stderr.strip().splitlines() or ["?"])[0]))
    return exe


def run_host(exe, prompts, args=(), timeout=600):
    """Run the harness on prompts; returns its output lines (one per prompt)."""
    data = "".join(p + "\n" for p in prompts).encode("utf-8")
    r = subprocess.run([str(exe)] + list(args), input=data, capture_output=True, timeout=timeout)
    if r.returncode != 0:
        raise TargetError("text harness exited with code %d: %s" % (r.returncode, r.stderr.decode(errors="replace")[-400:]))
    return r.stdout.decode("utf-8").splitlines()


def parse_line(line):
    head, answer = line.split(" |", 1)
    k, h, ids = head.split(" ")
    return {"n": int(k), "hash": int(h), "ids": [int(v) for v in ids.split(",")] if ids != "-" else [],
            "answer": answer}


def host_check(q, prefix, prompts, opts=("-O2",), sanitize=None, n_sanitize=100) -> dict:
    """Every prompt: C ids, logit hash and answer == the reference's. sanitize None = when available; the
    sanitizer build (-O0, ~10x slower) runs the first n_sanitize prompts."""
    ref = run_prompts(q, prompts)
    san = sanitizers_available() if sanitize is None else bool(sanitize)
    builds = [(o, False) for o in opts] + ([("-O0", True)] if san else [])
    res = {"n_prompts": len(prompts), "builds": {}, "sanitizers": san}
    with tempfile.TemporaryDirectory(prefix="gxtext_") as d:
        for opt, s in builds:
            exe = build_host(q, prefix, d, opt, s)
            ps = prompts[:n_sanitize] if s else prompts
            got = [parse_line(x) for x in run_host(exe, ps)]
            bad = [i for i, (g, r) in enumerate(zip(got, ref))
                   if g["ids"] != r["ids"] or g["hash"] != r["hash"] or g["answer"] != r["answer"]]
            if len(got) != len(ps):
                bad.append(len(got))
            res["builds"]["%s%s" % (opt, " asan+ubsan" if s else "")] = {
                "bit_exact": not bad, "mismatched_prompts": len(bad), "n_prompts": len(ps),
                "first_mismatch": None if not bad or bad[0] >= len(got) else
                {"prompt": prompts[bad[0]], "c": got[bad[0]], "ref": ref[bad[0]]}}
    res["bit_exact"] = all(b["bit_exact"] for b in res["builds"].values())
    res["tokens_compared"] = int(sum(len(r["ids"]) for r in ref))
    res["answers"] = [r["answer"] for r in ref]
    return res


def device_checks(q, prefix, cases) -> list:
    """Run <prefix>_generate in the sanitizer build (or plain -O0) on (prompt, answer capacity) cases;
    returns [(rc, text)] so tests can check the error codes and that nothing was written out of bounds."""
    san = sanitizers_available()
    out = []
    with tempfile.TemporaryDirectory(prefix="gxtextchk_") as d:
        exe = build_host(q, prefix, d, "-O0", san)
        for prompt, cap in cases:
            line = run_host(exe, [prompt], ["gen", str(cap)])[0]
            rc, text = line.split(" |", 1)
            out.append((int(rc), text))
    return out


# ----------------------------------------------------------------------------- rv32

RV_MAIN = """#include <stdint.h>
#include <stddef.h>
void *memset(void *d, int c, size_t n) { unsigned char *p = (unsigned char *)d; while (n--) *p++ = (unsigned char)c; return d; }
void *memcpy(void *d, const void *s, size_t n) { unsigned char *p = (unsigned char *)d; const unsigned char *q = (const unsigned char *)s; while (n--) *p++ = *q++; return d; }
"""


def build_rv32(q, prefix, workdir, sources=(), extra=()) -> Path:
    """The generated text C (+ sources, with extra flags: text_profile's marks) as a bare rv32 ELF."""
    work = Path(workdir)
    files = write_c(q, work, prefix)
    (work / "rv_libc.c").write_text(RV_MAIN)
    return rv32.cross_compile([files["source"], work / "rv_libc.c"] + list(sources), work / (prefix + "_text_rv32.elf"),
                              prefix + "_prefill", work, extra=extra)


class TextMachine(rv32.Program):
    """The rv32 ELF in unicorn: prefill(ids) and decode(token, pos) with exact instruction counts."""

    def __init__(self, elf_path, prefix, first_pos):
        self.prefix, self.first_pos = prefix, first_pos
        super().__init__(elf_path, [prefix + n for n in ("_prefill", "_decode", "_logits", "_logit_hash")])

    def generate(self, ids, max_new, on_call=None):
        """ids (input_len,) -> (tokens up to and with EOS, logit hash, prefill instructions, [decode instructions]).
        on_call(kind, pos), if given, runs after the prefill ("prefill", 0) and after each decode ("decode", pos)."""
        self.uc.mem_write(rv32.IO_BASE, np.asarray(ids, "<i2").tobytes())
        tok, n_pre = self.call(self.prefix + "_prefill", rv32.IO_BASE)
        if on_call is not None:
            on_call("prefill", 0)
        toks, dec = [tok], []
        for s in range(max_new - 1):
            if tok == 2:
                break
            tok, n = self.call(self.prefix + "_decode", tok, self.first_pos + s)
            if on_call is not None:
                on_call("decode", self.first_pos + s)
            toks.append(tok)
            dec.append(n)
        h = int.from_bytes(bytes(self.uc.mem_read(self.addr[self.prefix + "_logit_hash"], 4)), "little")
        return toks, h, n_pre, dec


def rv32_check(q, prefix, prompts) -> dict:
    """Cross-build, run every prompt in unicorn, compare ids + logit hash with the reference, count."""
    from .textir import encode_prompts
    if not rv32.available():
        raise TargetError(rv32.missing_reason())
    ref = run_prompts(q, prompts)
    ids = encode_prompts(q["cfg"], prompts)
    with tempfile.TemporaryDirectory(prefix="gxtextrv_") as d:
        elf = build_rv32(q, prefix, d)
        sizes = rv32.section_sizes(elf)
        m = TextMachine(elf, prefix, q["cfg"]["input_len"] if q["arch"] == "micro-gpt" else 1)
        bad, pre, dec = 0, [], []
        for r, row in zip(ref, ids):
            toks, h, n_pre, n_dec = m.generate(row, q["cfg"]["max_new_tokens"])
            bad += int(toks != r["ids"] or h != r["hash"])
            pre.append(n_pre)
            dec += n_dec
    return {"n_prompts": len(prompts), "bit_exact": bad == 0, "mismatched_prompts": bad,
            "instructions_prefill": {"mean": float(np.mean(pre)), "min": int(min(pre)), "max": int(max(pre))},
            "instructions_per_decode_token": {"mean": float(np.mean(dec)) if dec else 0.0,
                                              "min": int(min(dec)) if dec else 0, "max": int(max(dec)) if dec else 0,
                                              "n": len(dec)},
            "decode_tokens_per_answer": float(len(dec)) / max(1, len(prompts)),
            "sections": sizes, "stack_bytes": int(m.stack), "compiler": " ".join([rv32.CROSS] + rv32.RV_FLAGS)}
