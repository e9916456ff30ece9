"""The online trainer on the Jetson Nano's stack (Python 3.6.15 + torch 1.10.2): what ci/py36.sh runs.

    PYTHONPATH=. .venv36/bin/python tests/py36_online_check.py

1. `import grpo_edge.core.trainer` and `import grpo_edge.online` with only torch and numpy installed;
2. benchmarks/online_demo.py --quick: pretrain, serve, change the pole mid-run, kill -9 twice, restart, check;
3. the stdin record stream: a short run of JSON lines through `python -m grpo_edge.online --stream stdin`.
Prints "py36 check: ok" and exits 0 when all pass. Plain Python 3.6 (no pytest on that interpreter).
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    import numpy as np
    import torch
    import grpo_edge.core.trainer  # noqa: F401
    import grpo_edge.online  # noqa: F401
    from grpo_edge.core.checkpoint import load_policy
    from grpo_edge.online.envs import CartPole
    for mod in ("typer", "rich", "gymnasium"):
        assert mod not in sys.modules, "%s was imported" % mod
    print("py36: imports ok (python %s, torch %s)" % (sys.version.split()[0], torch.__version__))
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = tempfile.mkdtemp(prefix="py36_online_")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "online_demo.py"), "--quick", "--out", out,
                        "--run-dir", os.path.join(out, "run")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True)
    print(r.stdout[-2500:])
    assert r.returncode == 0, "online demo failed on this interpreter"
    res = json.load(open(os.path.join(out, "online_demo_quick.json")))
    assert res["torch"].startswith(torch.__version__.split("+")[0])

    policy, _ = load_policy(os.path.join(out, "run", "served.pt"))
    lines, rng, cp = [], np.random.RandomState(0), CartPole()
    for ep in range(48):
        obs, _ = cp.reset(seed=ep)
        while True:
            with torch.no_grad():
                p1 = float(torch.softmax(policy(torch.as_tensor(obs)[None]), -1)[0, 1])
            a = int(rng.rand() < p1)
            nxt, rew, term, trunc, _ = cp.step(a)
            rec = {"obs": [float(x) for x in obs], "action": a, "reward": rew, "done": term, "truncated": trunc}
            lines.append(json.dumps(rec))
            obs = nxt
            if term or trunc:
                break
    r = subprocess.run([sys.executable, "-m", "grpo_edge.online", "--quiet", "--stream", "stdin", "--policy",
                        os.path.join(out, "run", "served.pt"), "--save-dir", os.path.join(out, "stream"),
                        "--set", "online.gate_every=2"], cwd=ROOT, env=env, input="\n".join(lines) + "\n",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert s["stopped"] == "end of stream" and s["episodes"] == 48 and s["update"] >= 2, s
    load_policy(os.path.join(out, "stream", "served.pt"))
    print("py36: stream ok: %s" % json.dumps(s))
    print("py36 check: ok")


if __name__ == "__main__":
    main()
