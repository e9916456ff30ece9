"""Runs a .tflite model in TFLite Micro (pip tflite-micro) in its own process: a too-small arena can crash the
interpreter, so every caller (tflm.py: arena search, outputs, callgrind; text_tflm.py: op probes and the decode
chain; bench) runs this file as a script.

    python tflm_run.py MODEL ARENA [--zeros N]          zeros into inputs 0..N-1 (N = 1), invoke, print the
                                                        allocations and OK
    python tflm_run.py MODEL ARENA X0.npy [X1.npy ...] [--out Y.npy]
                                                        for each sample i: input j <- Xj[i] (reshaped to the
                                                        input's shape), invoke; --out saves output 0 of every
                                                        sample, flattened, stacked
"""
import sys

import numpy as np


def main(argv):
    from tflite_micro import runtime
    opts = {"--out": None, "--zeros": "1"}
    for key in opts:
        if key in argv:
            k = argv.index(key)
            opts[key], argv = argv[k + 1], argv[:k] + argv[k + 2:]
    out = opts["--out"]
    model, arena, inputs = argv[0], int(argv[1]), [np.load(p) for p in argv[2:]]
    ip = runtime.Interpreter.from_bytes(open(model, "rb").read(), arena_size=arena)
    if not inputs:
        for j in range(int(opts["--zeros"])):
            d = ip.get_input_details(j)
            ip.set_input(np.zeros(d["shape"], dtype=d["dtype"]), j)
        ip.invoke()
        ip.print_allocations()
        print("OK")
        return 0
    ys = []
    for i in range(len(inputs[0])):
        for j, x in enumerate(inputs):
            ip.set_input(x[i].reshape(ip.get_input_details(j)["shape"]), j)
        ip.invoke()
        if out is not None:
            ys.append(np.array(ip.get_output(0)).reshape(-1))
    if out is not None:
        np.save(out, np.stack(ys))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
