"""Hostile-input cases for deploy / quantize / export / calibrate and the listings (issue 11).

A case is a dict:
  name     unique, short
  args     the grpo-edge command line (after `grpo-edge`); FIX/ names a fixture file, copied into the
           case folder first (so every case starts from the same files)
  expect   "error" (exit 2, one `error:` line on stderr, no traceback, no file left behind) or
           "ok" (exit 0)
  setup    optional: shell-free steps before the command: ("run", args) runs grpo-edge with the code
           under test, ("write", path, text) writes a file, ("append", path, text), ("mkdir", path),
           ("tmpfs", path, size, "rw"|"ro") mounts a small tmpfs (root only; the case is skipped without)
  keep     optional: files whose content must be the same afterwards (data loss if not)
  check    optional: name of a check in run_deploy.CHECKS, run on success ("ok" cases)
"""

RPI_FAST = ["--option", "runs=30", "--option", "warmup=3", "--option", "eval_n=2"]
ESP_FAST = ["--option", "rv32=false", "--option", "tflm=false", "--option", "callgrind=false",
            "--option", "n_check=200"]
JET_FAST = ["--option", "evaluate=false"]


def _deploy(target, *rest):
    fast = RPI_FAST if target.startswith("rpi") else ESP_FAST if target.startswith("esp32") else JET_FAST
    return ["deploy", "--target", target] + list(rest) + fast


CASES = [
    # --- output folders: existing file, foreign folder, edits, relative paths, modes ------------------
    dict(name="out-is-file", args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "FIX/m.onnx"),
         expect="error", keep=["m.onnx"]),
    dict(name="out-under-file", args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "FIX/cp.pt/sub"),
         expect="error", keep=["cp.pt"]),
    dict(name="out-foreign-folder", setup=[("mkdir", "mine"), ("write", "mine/runner.py", "# my own runner\n")],
         args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "mine"), expect="error", keep=["mine/runner.py"]),
    dict(name="redeploy-rpi-edited", setup=[("run", _deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "d")),
                                            ("append", "d/requirements.txt", "scipy\n")],
         args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "d"), expect="ok",
         keep=["d/requirements.txt"], check="new_next_to:d/requirements.txt"),
    dict(name="redeploy-esp32-edited-main-c",
         setup=[("run", _deploy("esp32", "--checkpoint", "FIX/cp.pt", "--out", "d")),
                ("append", "d/firmware/main/main.c", "/* my change */\n")],
         args=_deploy("esp32", "--checkpoint", "FIX/cp.pt", "--out", "d"), expect="ok",
         keep=["d/firmware/main/main.c"], check="new_next_to:d/firmware/main/main.c"),
    dict(name="redeploy-jetson-edited-script",
         setup=[("run", _deploy("jetson-nano", "--checkpoint", "FIX/cp.pt", "--out", "d")),
                ("append", "d/build_engine.sh", "# my flags\n")],
         args=_deploy("jetson-nano", "--checkpoint", "FIX/cp.pt", "--out", "d"), expect="ok",
         keep=["d/build_engine.sh"], check="new_next_to:d/build_engine.sh"),
    dict(name="redeploy-unchanged", setup=[("run", _deploy("jetson-nano", "--checkpoint", "FIX/cp.pt", "--out", "d"))],
         args=_deploy("jetson-nano", "--checkpoint", "FIX/cp.pt", "--out", "d"), expect="ok", check="no_new:d"),
    dict(name="out-relative-nested-rpi", args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "rel/a/b"),
         expect="ok", check="exists:rel/a/b/runner.py"),
    dict(name="modes-jetson", args=_deploy("jetson-nano", "--checkpoint", "FIX/cp.pt", "--out", "d"),
         expect="ok", check="readable:d"),
    dict(name="modes-esp32", args=_deploy("esp32", "--checkpoint", "FIX/cp.pt", "--out", "d"),
         expect="ok", check="readable:d"),
    dict(name="modes-export", args=["export", "FIX/cp.pt", "--out", "x.onnx"], expect="ok", check="readable:x.onnx"),
    dict(name="modes-calibrate", args=["calibrate", "FIX/cp.pt", "--out", "c.npz", "--n", "64"], expect="ok",
         check="readable:c.npz"),
    dict(name="modes-quantize", args=["quantize", "FIX/m.onnx", "--calibration", "FIX/c.npz", "--out", "q.onnx"],
         expect="ok", check="readable:q.onnx"),
    # --- full disk / read-only file system ---------------------------------------------------------
    dict(name="full-disk-rpi", setup=[("tmpfs", "mnt", "32k", "rw")],
         args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "mnt/d"), expect="error"),
    dict(name="full-disk-esp32", setup=[("tmpfs", "mnt", "64k", "rw")],
         args=_deploy("esp32", "--checkpoint", "FIX/cp.pt", "--out", "mnt/d"), expect="error"),
    dict(name="full-disk-jetson", setup=[("tmpfs", "mnt", "32k", "rw")],
         args=_deploy("jetson-nano", "--checkpoint", "FIX/cp.pt", "--out", "mnt/d"), expect="error"),
    dict(name="full-disk-export", setup=[("tmpfs", "mnt", "8k", "rw")],
         args=["export", "FIX/cp.pt", "--out", "mnt/x.onnx"], expect="error"),
    dict(name="full-disk-quantize", setup=[("tmpfs", "mnt", "8k", "rw")],
         args=["quantize", "FIX/m.onnx", "--calibration", "FIX/c.npz", "--out", "mnt/q.onnx"], expect="error"),
    dict(name="full-disk-calibrate", setup=[("tmpfs", "mnt", "4k", "rw"), ("write", "mnt/fill", "x" * 4000)],
         args=["calibrate", "FIX/cp.pt", "--out", "mnt/c.npz", "--n", "512"], expect="error", keep=["mnt/fill"]),
    dict(name="read-only-rpi", setup=[("tmpfs", "mnt", "1m", "ro")],
         args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "mnt/d"), expect="error"),
    dict(name="read-only-export", setup=[("tmpfs", "mnt", "1m", "ro")],
         args=["export", "FIX/cp.pt", "--out", "mnt/x.onnx"], expect="error"),
    dict(name="export-out-is-folder", setup=[("mkdir", "x.onnx")], args=["export", "FIX/cp.pt", "--out", "x.onnx"],
         expect="error"),
    dict(name="quantize-out-is-folder", setup=[("mkdir", "q.onnx")],
         args=["quantize", "FIX/m.onnx", "--calibration", "FIX/c.npz", "--out", "q.onnx"], expect="error"),
    # issue 30: quantize never writes over its input, and a quantized input is one line
    dict(name="quantize-over-its-input", args=["quantize", "FIX/m.onnx", "--calibration", "FIX/c.npz", "--out",
                                               "FIX/m.onnx"], expect="error", keep=["FIX/m.onnx"]),
    dict(name="quantize-a-quantized-model", args=["quantize", "FIX/q.onnx", "--calibration", "FIX/c.npz", "--out",
                                                  "q2.onnx"], expect="error"),
    # --- options ---------------------------------------------------------------------------------------
    dict(name="option-unknown-jetson", args=_deploy("jetson-nano", "--checkpoint", "FIX/cp.pt", "--out", "d",
                                                    "--option", "workspace=512"), expect="error"),
    dict(name="option-unknown-orin", args=_deploy("jetson-orin-nano", "--checkpoint", "FIX/cp.pt", "--out", "d",
                                                  "--option", "precison=int8"), expect="error"),
    dict(name="option-unknown-rpi", args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "d",
                                                 "--option", "runz=3"), expect="error"),
    dict(name="option-unknown-esp32", args=_deploy("esp32", "--checkpoint", "FIX/cp.pt", "--out", "d",
                                                   "--option", "prefx=a"), expect="error"),
    dict(name="option-bad-yaml", args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "d",
                                              "--option", "runs=[1"), expect="error"),
    dict(name="option-no-equals", args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "d",
                                               "--option", "runs"), expect="error"),
    dict(name="option-empty-key", args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "d",
                                               "--option", "=3"), expect="error"),
    dict(name="activations-on-rpi", args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--out", "d",
                                                 "--activations", "int8"), expect="error"),
    dict(name="precision-bogus", args=_deploy("jetson-nano", "--checkpoint", "FIX/cp.pt", "--out", "d",
                                              "--precision", "fp8"), expect="error"),
    dict(name="target-unknown", args=_deploy("rpi9", "--checkpoint", "FIX/cp.pt", "--out", "d"), expect="error"),
    # --- sources ---------------------------------------------------------------------------------------
    dict(name="both-sources", args=_deploy("rpi4", "--checkpoint", "FIX/cp.pt", "--onnx", "FIX/m.onnx",
                                           "--out", "d"), expect="error"),
    dict(name="no-source", args=_deploy("rpi4", "--out", "d"), expect="error"),
    dict(name="checkpoint-missing", args=_deploy("rpi4", "--checkpoint", "nope.pt", "--out", "d"), expect="error"),
    dict(name="esp32-log-softmax-head", args=_deploy("esp32", "--onnx", "FIX/ls.onnx", "--calibration", "FIX/c.npy",
                                                     "--out", "d", "--activations", "int8"),
         expect="ok", check="exists:d/report.md"),
    dict(name="esp32-log-softmax-int16", args=_deploy("esp32", "--onnx", "FIX/ls.onnx", "--calibration", "FIX/c.npy",
                                                      "--out", "d", "--activations", "int16"), expect="error"),
    dict(name="onnx-garbage", setup=[("write", "bad.onnx", "not a model\n" * 10)],
         args=_deploy("rpi4", "--onnx", "bad.onnx", "--out", "d"), expect="error"),
    dict(name="onnx-is-checkpoint", args=_deploy("esp32", "--onnx", "FIX/cp.pt", "--out", "d"), expect="error"),
    dict(name="calibration-missing", args=_deploy("rpi4", "--onnx", "FIX/m.onnx", "--calibration", "nope.npy",
                                                  "--out", "d"), expect="error"),
    dict(name="calibration-garbage", setup=[("write", "bad.npy", "garbage")],
         args=_deploy("rpi4", "--onnx", "FIX/m.onnx", "--calibration", "bad.npy", "--out", "d"), expect="error"),
    dict(name="calibration-inf-rpi", args=_deploy("rpi4", "--onnx", "FIX/m.onnx", "--calibration", "FIX/inf.npy",
                                                  "--out", "d"), expect="error"),
    dict(name="calibration-inf-esp32", args=_deploy("esp32", "--onnx", "FIX/m.onnx", "--calibration", "FIX/inf.npy",
                                                    "--out", "d"), expect="error"),
    dict(name="calibration-inf-jetson", args=_deploy("jetson-nano", "--onnx", "FIX/m.onnx", "--calibration",
                                                     "FIX/inf.npy", "--precision", "int8", "--out", "d"),
         expect="error"),
    dict(name="calibration-wrong-shape", args=_deploy("rpi4", "--onnx", "FIX/m.onnx", "--calibration",
                                                      "FIX/wide.npy", "--out", "d"), expect="error"),
    dict(name="esp32-fp32-no-calibration", args=_deploy("esp32", "--onnx", "FIX/m.onnx", "--out", "d"),
         expect="error"),
    # --- every target takes an fp32 ONNX + calibration, and a QDQ ONNX as before -----------------------
    dict(name="esp32-fp32-onnx-npy", args=_deploy("esp32", "--onnx", "FIX/m.onnx", "--calibration", "FIX/c.npy",
                                                  "--out", "d"), expect="ok", check="exists:d/firmware/main/main.c"),
    dict(name="esp32s3-fp32-onnx-npz", args=_deploy("esp32s3", "--onnx", "FIX/m.onnx", "--calibration", "FIX/c.npz",
                                                    "--out", "d"), expect="ok", check="exists:d/firmware/main/main.c"),
    dict(name="esp32-qdq-onnx", args=_deploy("esp32", "--onnx", "FIX/q.onnx", "--out", "d"), expect="ok",
         check="exists:d/firmware/main/main.c"),
    dict(name="rpi-fp32-onnx-npy", args=_deploy("rpi5", "--onnx", "FIX/m.onnx", "--calibration", "FIX/c.npy",
                                                "--out", "d"), expect="ok", check="exists:d/model.int8.onnx"),
    dict(name="jetson-fp32-onnx-int8", args=_deploy("jetson-orin-nano", "--onnx", "FIX/m.onnx", "--calibration",
                                                    "FIX/c.npy", "--precision", "int8", "--out", "d"),
         expect="ok", check="exists:d/model.calib.cache"),
    # --- command-line ranges and usage -----------------------------------------------------------------
    dict(name="export-opset-5", args=["export", "FIX/cp.pt", "--opset", "5", "--out", "x.onnx"], expect="error"),
    dict(name="export-opset-99", args=["export", "FIX/cp.pt", "--opset", "99", "--out", "x.onnx"], expect="error"),
    dict(name="export-opset-text", args=["export", "FIX/cp.pt", "--opset", "abc", "--out", "x.onnx"], expect="error"),
    dict(name="export-opset-13-text-model", args=["export", "FIX/arith.pt", "--opset", "13", "--out", "a.onnx"],
         expect="ok", check="exists:a.onnx"),
    dict(name="export-opset-20", args=["export", "FIX/cp.pt", "--opset", "20", "--out", "x.onnx"], expect="ok",
         check="exists:x.onnx"),
    dict(name="calibrate-n-0", args=["calibrate", "FIX/cp.pt", "--n", "0", "--out", "c.npz"], expect="error"),
    dict(name="calibrate-n-negative", args=["calibrate", "FIX/cp.pt", "--n", "-3", "--out", "c.npz"], expect="error"),
    dict(name="eval-n-negative", args=["eval", "FIX/cp.pt", "--n", "-1"], expect="error"),
    # issue 31: a file that is not a checkpoint is one line without torch's advice to load it unsafely
    dict(name="eval-a-yaml-file", setup=[("write", "c.yaml", "training: {steps: 2}\n")], args=["eval", "c.yaml"],
         expect="error"),
    dict(name="eval-an-empty-file", setup=[("write", "e.pt", "")], args=["eval", "e.pt"], expect="error"),
    dict(name="quantize-no-calibration", args=["quantize", "FIX/m.onnx", "--out", "q.onnx"], expect="error"),
    dict(name="quantize-bad-method", args=["quantize", "FIX/m.onnx", "--calibration", "FIX/c.npz", "--method", "mean",
                                           "--out", "q.onnx"], expect="error"),
    dict(name="quantize-not-onnx", args=["quantize", "FIX/cp.pt", "--calibration", "FIX/c.npz", "--out", "q.onnx"],
         expect="error"),
    dict(name="deploy-missing-target", args=["deploy", "--checkpoint", "FIX/cp.pt"], expect="error"),
    dict(name="unknown-command", args=["deplyo", "--target", "rpi4"], expect="error"),
    dict(name="device-cuda-no-gpu", args=["train", "--device", "cuda", "--set", "training.steps=1", "-q",
                                          "--save-dir", "run"], expect="error", needs="no-cuda"),
    dict(name="stream-port-out-of-range", args=["train", "--online", "--set", "online.stream=tcp:99999",
                                                "--set", "online.policy=FIX/cp.pt", "--save-dir", "run"],
         expect="error"),
    # --- listings ------------------------------------------------------------------------------------------
    dict(name="tasks-piped", args=["tasks"], expect="ok", check="listing:zh-en-numbers,tiny-transformer"),
    dict(name="targets-piped", args=["targets"], expect="ok", check="listing:jetson-orin-nano,esp32c3"),
    dict(name="tasks-json", args=["tasks", "--json"], expect="ok", check="json"),
]
