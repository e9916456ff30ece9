"""Which micro-gpt sizes answer an arithmetic prompt in < 300 ms on an ESP32-S3 (ESTIMATE)?

For each shape (d_model, n_layer, n_head) an untrained micro-gpt on the arithmetic task (instruction counts
do not depend on the weights' values) goes through the ESP32 text path: integer model, rv32imc build,
exact instructions for the prefill and per decode token in unicorn, then text_deploy.answer_time for
ESP32-S3 (flash) and ESP32-C3, the same model deploy reports use. Answers are taken as 3 decode tokens
(two digits + EOS, the recipe's typical answer). Shapes that deploy would refuse (over the 1.5 MB app
partition of the firmware's single-app partition table) are still measured and flagged.

    PYTHONPATH=$PWD python benchmarks/esp32_text_sizes.py [--shapes 64x2x2,128x4x4,...] [--json out.json]
"""
import argparse
import json
import sys
import tempfile


def measure(d, L, H, decode_tokens=3):
    import torch
    from grpo_edge.core.models import build_model
    from grpo_edge.errors import TargetError
    from grpo_edge.targets.esp32 import text_model, textir, textsim
    from grpo_edge.targets.esp32.text_deploy import answer_time, fit_check
    from grpo_edge.targets.profiles import load_profile
    from grpo_edge.tasks import get_task
    torch.manual_seed(0)
    task = get_task("arithmetic", {"max_operand": 99}, seed=0)
    m = build_model("micro-gpt", **dict(task.model_kwargs(), d_model=d, n_layer=L, n_head=H, max_len=32)).eval()
    state = {"arch": "micro-gpt", "model_config": m.config(), "task": "arithmetic", "task_meta": task.checkpoint_meta(),
             "config": {"task": {"name": "arithmetic"}}}
    ir = textir.checkpoint2textir((m, state))
    row = {"d_model": d, "n_layer": L, "n_head": H, "params": sum(p.numel() for p in m.parameters())}
    try:
        fit_check(None, load_profile("esp32s3"), ir)
    except TargetError as e:               # still measured: the limit is the 1.5 MB app partition, not the chip
        row["does_not_fit"] = str(e)
    q = text_model.textir2int(ir, [p for p, _ in task.train_problems[:32]])
    ids = textir.encode_prompts(q["cfg"], ["12+34="])[0]
    with tempfile.TemporaryDirectory() as work:
        elf = textsim.build_rv32(q, "m", work)
        mach = textsim.TextMachine(elf, "m", q["cfg"]["input_len"])
        mach.uc.mem_write(textsim.rv32.IO_BASE, ids.astype("<i2").tobytes())
        _, n_pre = mach.call("_prefill", textsim.rv32.IO_BASE)
        _, n_dec = mach.call("_decode", 5, q["cfg"]["input_len"])
    wb = textir.weight_bytes(q)
    row.update({"weights_bytes": wb, "rv32_prefill": n_pre, "rv32_decode_token": n_dec})
    for t in ("esp32s3", "esp32c3"):
        e = answer_time(load_profile(t), n_pre, n_dec, decode_tokens, q["cfg"]["input_len"], wb)
        row["%s_answer_ms" % t] = round(1e3 * e["answer_s"], 1)
        row["%s_bound" % t] = e["bound"]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="64x2x2,96x3x4,128x4x4,160x4x4,128x6x4,192x4x4")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rows = []
    for s in a.shapes.split(","):
        d, L, H = (int(v) for v in s.split("x"))
        r = measure(d, L, H)
        rows.append(r)
        if "does_not_fit" in r:
            print("d%d L%d H%d: deploy would refuse it: %s" % (d, L, H, r["does_not_fit"]), flush=True)
        if True:
            print("d%(d_model)d L%(n_layer)d H%(n_head)d params %(params)d weights %(weights_bytes)d B prefill "
                  "%(rv32_prefill)d decode %(rv32_decode_token)d instr; ESTIMATE S3 %(esp32s3_answer_ms)s ms "
                  "(%(esp32s3_bound)s-bound), C3 %(esp32c3_answer_ms)s ms" % r, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
