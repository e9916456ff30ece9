"""Online training (grpo_edge/online/runner.py): gating, the stdin record stream, kill -9 and resume, memory, Python 3.6.

    .venv/bin/python -m pytest -q tests/test_online.py

Real processes and files: the trainer runs as `python -m grpo_edge.online` subprocesses on the NumPy
CartPole (grpo_edge.online.envs). Policies are hand-made one-layer MLPs: logits = [0, k * c . obs] with
c = (0.1, 0.5, 1, 0.5) balances the pole for 500 steps; -c drops it within about 10 steps.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from grpo_edge.core.checkpoint import load_checkpoint, load_policy, save_checkpoint
from grpo_edge.core.models import build_model
from grpo_edge.errors import ConfigError
from grpo_edge.online.runner import OnlineRunner
from grpo_edge.online.config import load_online_config
from grpo_edge.online.envs import CartPole
from grpo_edge.online.sources import StreamTask

from conftest import ROOT, require_tools

ENV = "grpo_edge.online.envs:CartPole"
GOOD = [0.1, 0.5, 1.0, 0.5]


def linear_policy(path, c, k=20.0):
    model = build_model("mlp", obs_dim=4, n_actions=2, num_layers=1)
    with torch.no_grad():
        model.net[0].weight.zero_()
        model.net[0].bias.zero_()
        model.net[0].weight[1] = k * torch.tensor(c)
    save_checkpoint(path, {"arch": "mlp", "model_config": model.config(), "model": model.state_dict(), "task": "cartpole"})
    return str(path)


def run_online(args, stdin=None, timeout=120, wait=True):
    cmd = [sys.executable, "-m", "grpo_edge.online", "--quiet"] + [str(a) for a in args]
    env = dict(os.environ, PYTHONPATH=ROOT)
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return subprocess.run(cmd, cwd=ROOT, env=env, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout)


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_gate_rolls_back_a_worse_candidate_and_promotes_a_better_one(tmp_path):
    cfg = load_online_config(None, ["online.env=%s" % json.dumps(ENV), "online.margin=10",
                                    "online.policy=%s" % json.dumps(linear_policy(tmp_path / "bad.pt", [-x for x in GOOD]))])
    run = str(tmp_path / "run")
    r = OnlineRunner(cfg, run)
    served_path = os.path.join(run, "served.pt")
    good = load_policy(linear_policy(tmp_path / "good.pt", GOOD))[0]
    bad_sd = dict((k, v.clone()) for k, v in r.served.state_dict().items())

    # served is bad: a better candidate is promoted
    r.trainer.policy.load_state_dict(good.state_dict())
    ino_before = os.stat(served_path).st_ino
    rec = r.gate()
    assert rec["decision"] == "promote" and rec["candidate_eval"] > 400 > rec["served_eval"]
    assert os.stat(served_path).st_ino != ino_before            # replaced by os.replace, not rewritten in place
    model, meta = load_policy(served_path)
    assert meta["online"]["version"] == 1 and torch.equal(model.net[0].weight, good.net[0].weight)
    assert os.path.getsize(os.path.join(run, "served.onnx")) > 0
    assert not [n for n in os.listdir(run) if n.endswith(".tmp")]

    r.trainer.policy.load_state_dict(bad_sd)                    # now a deliberately worse candidate
    before = open(served_path, "rb").read()
    rec = r.gate()
    assert rec["decision"] == "rollback" and rec["candidate_eval"] < rec["served_eval"] - 10
    assert open(served_path, "rb").read() == before             # the served policy is untouched
    assert torch.equal(r.trainer.policy.net[0].weight, good.net[0].weight)   # candidate rolled back
    gates = [d for d in jsonl(os.path.join(run, "decisions.jsonl")) if d["event"] == "gate"]
    assert [g["decision"] for g in gates] == ["promote", "rollback"] and gates[1]["served_version"] == 1
    assert load_checkpoint(os.path.join(run, "state.pt"))["online"]["rollbacks"] == 1


def _records(policy_path, episodes, seed=0, with_logp=False):
    model = load_policy(policy_path)[0]
    env, rng, lines = CartPole(), np.random.RandomState(seed), []
    for ep in range(episodes):
        obs, _ = env.reset(seed=ep)
        while True:
            with torch.no_grad():
                lp = torch.log_softmax(model(torch.as_tensor(obs)[None]), -1)[0].numpy().astype(float)
            a = int(rng.rand() < np.exp(lp[1]))
            nxt, r, term, trunc, _ = env.step(a)
            rec = {"obs": [round(float(x), 6) for x in obs], "action": a, "reward": r}
            if with_logp:
                rec["logp"] = float(lp[a])
            if term or trunc:
                rec["done" if term else "truncated"] = True
            lines.append(json.dumps(rec))
            obs = nxt
            if term or trunc:
                break
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_stdin_stream_trains_gates_and_rejects_bad_records(tmp_path):
    pol = linear_policy(tmp_path / "p.pt", [0.0, 0.1, 1.0, 0.0], k=2.0)   # a mediocre, stochastic start
    text = _records(pol, 96, with_logp=True)
    r = run_online(["--stream", "stdin", "--policy", pol, "--save-dir", tmp_path / "s", "--set", "online.gate_every=2",
                    "--set", "online.max_steps=200"], stdin=text)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert s["stopped"] == "end of stream" and s["episodes"] == 96 and s["update"] >= 3
    gates = [d for d in jsonl(str(tmp_path / "s" / "decisions.jsonl")) if d["event"] == "gate"]
    assert gates and all(g["decision"] in ("promote", "rollback", "defer") for g in gates)
    assert any(g["decision"] != "defer" for g in gates)
    assert all(g["candidate_ess"] > 0 and g["served_ess"] > 0 for g in gates if g["decision"] != "defer")
    load_policy(str(tmp_path / "s" / "served.pt"))
    # a malformed record under online.bad_records=stop: exit 2, one line naming the line, and a `stop` event
    bad = text.splitlines()[:5] + ['{"obs": [0, 0, 0, 0], "action": 7, "reward": 1}']
    r = run_online(["--stream", "stdin", "--policy", pol, "--save-dir", tmp_path / "s2", "--set",
                    'online.bad_records="stop"'], stdin="\n".join(bad) + "\n")
    assert r.returncode == 2 and r.stderr.strip() == "error: stdin line 6: 'action' must be an integer in 0..1, got 7"
    stop = jsonl(str(tmp_path / "s2" / "decisions.jsonl"))[-1]
    assert stop["event"] == "stop" and stop["stopped"].startswith("error: stdin line 6") and stop["bad_records"] == 1


def test_stream_buffers_are_bounded(tmp_path):
    pol = linear_policy(tmp_path / "p.pt", GOOD, k=2.0)
    lines = iter([("line %d" % i, t) for i, t in enumerate(_records(pol, 200).splitlines(), 1)])
    task = StreamTask(lines, "test", 4, 2, group_size=4, max_steps=50, eval_episodes=6, holdout_every=3, buffer_groups=2)
    task.behaviour = load_policy(pol)[0]
    with pytest.raises(Exception) as e:
        while True:
            task._pump()
    assert type(e.value).__name__ == "StreamEnded"
    assert len(task.groups) == 2 and len(task.eval_eps) == 6
    # an episode longer than max_steps is one truncated episode of 50 steps, its later records skipped (issue 30:
    # it used to become several "episodes" that started mid-way)
    assert task.episodes == 200 and task.counts["cut_episodes"] > 0 and task.counts["skipped_records"] > 0
    assert max(len(ep["actions"]) for ep in task.eval_eps) <= 50
    est = task.evaluate(task.behaviour)                      # served on its own episodes: the plain mean return
    mean = float(np.mean([ep["rewards"].sum() for ep in task.eval_eps]))
    assert abs(est["return"] - mean) < 1e-3 and abs(est["ess"] - 6) < 1e-3


@pytest.mark.slow
def test_kill9_then_restart_resumes_exactly(tmp_path):
    """With the defaults (served.onnx exported at every promotion and again at restart): a run killed with
    SIGKILL and restarted ends bit-identical to one never killed (issue 30: the export drew from torch's RNG)."""
    pol = linear_policy(tmp_path / "p.pt", [0.0, 0.1, 1.0, 0.0], k=2.0)
    args = ["--env", ENV, "--policy", pol, "--max-updates", 24, "--set", "online.checkpoint_every=4",
            "--set", "online.gate_every=4", "--set", "online.max_steps=100"]
    ref = run_online(args + ["--save-dir", tmp_path / "ref"])
    assert ref.returncode == 0, ref.stderr
    run = tmp_path / "run"
    p = run_online(args + ["--save-dir", run], wait=False)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 90
    while time.time() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 10):
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    p.stdout.close()
    p.stderr.close()
    killed_at = jsonl(str(metrics))[-1]["update"]
    assert 10 <= killed_at < 24
    load_policy(str(run / "served.pt"))                      # valid right after the kill
    (run / ".state.pt.cut.tmp").write_bytes(b"half a checkpoint")   # what a power cut mid-write leaves
    r = run_online(args + ["--save-dir", run])
    assert r.returncode == 0, r.stderr
    assert not (run / ".state.pt.cut.tmp").exists()
    resume = [d for d in jsonl(str(run / "decisions.jsonl")) if d["event"] == "resume"]
    assert len(resume) == 1 and 0 <= killed_at - resume[0]["update"] <= 4 and resume[0]["dropped_updates"] <= 4
    assert [m["update"] for m in jsonl(str(run / "metrics.jsonl"))] == list(range(1, 25))   # none twice, none lost
    a, b = load_checkpoint(str(run / "state.pt")), load_checkpoint(str(tmp_path / "ref" / "state.pt"))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])        # same as never killed
    assert load_checkpoint(str(run / "served.pt"))["online"] == load_checkpoint(str(tmp_path / "ref" / "served.pt"))["online"]
    assert (run / "served.onnx").is_file() and (tmp_path / "ref" / "served.onnx").is_file()
    rss = [m["rss_mb"] for m in jsonl(str(tmp_path / "ref" / "metrics.jsonl"))]
    assert max(rss[len(rss) // 2:]) - rss[len(rss) // 2] < 10.0                        # memory stays flat


def test_memory_budget_and_config_errors_are_one_line(tmp_path):
    r = run_online(["--env", ENV, "--save-dir", tmp_path / "m", "--max-memory", "50M", "--max-updates", 3])
    assert r.returncode == 2 and r.stderr.startswith("error: process RSS") and len(r.stderr.strip().splitlines()) == 1
    assert load_checkpoint(str(tmp_path / "m" / "state.pt"))["online"]["update"] == 1      # saved before leaving
    stop = jsonl(str(tmp_path / "m" / "decisions.jsonl"))[-1]                        # and the stop says why
    assert stop["event"] == "stop" and stop["stopped"].startswith("error: process RSS") and stop["update"] == 1
    for sets, msg in ((["online.marginn=1"], "did you mean 'margin'"),
                      (["online.env=\"x:Y\"", "online.stream=\"stdin\""], "exactly one of online.env"),
                      (["online.env=\"%s\"" % ENV, "online.max_memory=\"lots\""], "max_memory must be a size")):
        with pytest.raises(ConfigError, match=msg):
            load_online_config(None, sets)


@pytest.mark.slow
def test_python36_torch110_runs_the_online_demo():
    pyenv = shutil.which("pyenv")
    root = subprocess.run([pyenv, "root"], stdout=subprocess.PIPE, universal_newlines=True).stdout.strip() if pyenv else ""
    if not (root and os.path.exists(os.path.join(root, "versions", "3.6.15", "bin", "python3"))) and not require_tools():
        pytest.skip("pyenv's Python 3.6.15 is not installed (GRPO_EDGE_REQUIRE_TOOLS=1 makes this a failure)")
    r = subprocess.run(["bash", os.path.join(ROOT, "ci", "py36.sh")], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "py36: Python 3.6.15, torch 1.10.2" in r.stdout and "py36 check: ok" in r.stdout


def test_numpy_cartpole_matches_gymnasium():
    gym = pytest.importorskip("gymnasium")
    ref, ours, rng = gym.make("CartPole-v1"), CartPole(), np.random.RandomState(1)
    for ep in range(3):
        a_obs, _ = ref.reset(seed=ep)
        ours.reset()
        ours.state = np.array(ref.unwrapped.state, dtype=np.float64)
        for t in range(500):
            act = int(rng.randint(2)) if t % 3 else int(a_obs[2] > 0)
            a_obs, _, a_term, a_trunc, _ = ref.step(act)
            b_obs, _, b_term, b_trunc, _ = ours.step(act)
            assert np.array_equal(a_obs, b_obs) and (a_term, a_trunc) == (b_term, b_trunc)
            if a_term or a_trunc:
                break


def test_continuous_env_trains_online_and_serves_a_bounded_policy(tmp_path):
    """Pendulum-v1 (a Box action) in the online trainer: Gaussian updates, gates, served.pt and served.onnx."""
    r = run_online(["--env", "Pendulum-v1", "--max-updates", 8, "--set", "online.checkpoint_every=4",
                    "--set", "online.gate_every=4", "--save-dir", tmp_path / "p"])
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert s["update"] == 8 and s["gates"] == 2
    model, state = load_policy(str(tmp_path / "p" / "served.pt"))
    assert model.continuous and state["task_meta"]["action_high"] == [2.0]
    assert (tmp_path / "p" / "served.onnx").exists()
    r = run_online(["--stream", "stdin", "--policy", tmp_path / "p" / "served.pt", "--save-dir", tmp_path / "s"],
                   stdin="")
    assert r.returncode == 2 and "a continuous-action policy trains online from online.env" in r.stderr


def test_a_kill_between_a_promotion_and_the_next_state_replays_exactly(tmp_path):
    """served.pt promoted after state.pt was saved (a kill between the two writes): the restart serves what
    state.pt served and replays the updates after it, ending as the run that was never killed."""
    pol = linear_policy(tmp_path / "p.pt", [0.0, 0.1, 1.0, 0.0], k=2.0)
    args = ["--env", ENV, "--policy", pol, "--set", "online.checkpoint_every=100", "--set", "online.gate_every=4",
            "--set", "online.max_steps=100", "--set", "online.export_onnx=false", "--set", "online.margin=1000"]
    ref = run_online(args + ["--max-updates", 16, "--save-dir", tmp_path / "ref"])
    assert ref.returncode == 0, ref.stderr
    run = tmp_path / "run"
    assert run_online(args + ["--max-updates", 4, "--save-dir", run]).returncode == 0
    early = (run / "state.pt").read_bytes()                          # state at update 4
    assert run_online(args + ["--max-updates", 8, "--save-dir", run]).returncode == 0
    assert load_checkpoint(str(run / "served.pt"))["online"]["version"] > 0   # promoted after update 4
    (run / "state.pt").write_bytes(early)                            # the kill: served.pt newer than state.pt
    r = run_online(args + ["--max-updates", 16, "--save-dir", run])
    assert r.returncode == 0, r.stderr
    resume = [d for d in jsonl(str(run / "decisions.jsonl")) if d["event"] == "resume"][-1]
    assert resume["update"] == 4 and resume["served_pt_version"] > resume["served_version"]
    a, b = load_checkpoint(str(run / "state.pt")), load_checkpoint(str(tmp_path / "ref" / "state.pt"))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert load_checkpoint(str(run / "served.pt"))["online"] == load_checkpoint(str(tmp_path / "ref" / "served.pt"))["online"]


def test_the_tcp_stream_survives_its_clients(tmp_path):
    """issue 30: a client that resets its connection mid-record, one that sends bytes that are not UTF-8, one
    that closes cleanly mid-record, one that sends a line over the bound: each is one `drop` (that
    connection or record), and the server keeps listening; a later client's complete episode is read."""
    import socket
    import struct
    import threading
    from grpo_edge.online.sources import StreamTask, StreamEnded, tcp_lines
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    lines = tcp_lines(port, max_bytes=4096)
    rec = '{"obs": [0.1, 0.2, 0.3, 0.4], "action": 1, "reward": 1.0, "logp": -0.69%s}\n'

    def client(payload, reset=False):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(payload)
        if reset:                                     # RST instead of FIN
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()

    def clients():
        client((rec % "").encode() + b'{"obs": [0.1, 0.2', reset=True)
        client((rec % "").encode() + b"\xff\xfe not utf-8\n" + (rec % ', "done": true').encode())
        client((rec % "").encode() + b'{"obs": [0.1')
        client(b"x" * 10000 + b"\n" + (rec % "").encode())
        client(b"".join((rec % "").encode() for _ in range(3)) + (rec % ', "done": true').encode())
    threading.Thread(target=clients, daemon=True).start()
    task = StreamTask(lines, "tcp:%d" % port, 4, 2, group_size=2, max_steps=50, eval_episodes=4, holdout_every=0,
                      buffer_groups=4)
    drops = []
    task.on_event = lambda event, where, why: drops.append((where, why))
    while task.episodes < 1:
        try:
            task._pump()
        except StreamEnded:
            break
    reasons = " | ".join(w for _, w in drops)
    assert "not UTF-8" in reasons and "cut off" in reasons and "over 4096 bytes" in reasons, drops
    assert task.episodes >= 1 and task.dropped_episodes >= 2 and task.counts["dropped_lines"] >= 4
    assert drops[-1][0].startswith("tcp connection 4")      # the 5th client's episode came after all of them


def _rec(done=False, **kw):
    rec = {"obs": [0.1, 0.2, 0.3, 0.4], "action": 1, "reward": 1.0, "logp": -0.5}
    rec.update(kw)
    if done:
        rec["done"] = True
    return json.dumps(rec)


def _stream_task(texts, bad_records="drop", max_steps=10, group_size=2):
    lines = iter([("line %d" % i, t) for i, t in enumerate(texts, 1)])
    task = StreamTask(lines, "test", 4, 2, group_size=group_size, max_steps=max_steps, eval_episodes=2,
                      holdout_every=0, buffer_groups=4, bad_records=bad_records)
    events = []
    task.on_event = lambda event, where, why: events.append((event, where, why))
    return task, events


def _pump_all(task):
    from grpo_edge.online.sources import StreamEnded
    try:
        while True:
            task._pump()
    except StreamEnded:
        pass


def test_every_bad_record_follows_one_policy():
    """issue 30: a string reward, a NaN reward, a record that is not JSON, an action out of range and bytes that
    are not UTF-8 each drop their episode with a logged reason (online.bad_records=drop), or each stop the
    trainer with one line (stop); a byte-order mark at the start of a line is not an error."""
    from grpo_edge.online.sources import Dropped, StreamError
    bad = ['{"obs": [0.1, 0.2, 0.3, 0.4], "action": 1, "reward": "1.0"}', _rec(reward=float("nan")),
           '{"obs": [0.1, 0.2, 0.3, 0.4], "action": 1, "rew', _rec(action=7), Dropped("bytes that are not UTF-8")]
    texts = ["\ufeff" + _rec(), _rec(done=True)]                     # a good episode, with a BOM
    for b in bad:                                                   # each bad record in the middle of an episode
        texts += [_rec(), b, _rec(done=True)]
    texts += [_rec(), _rec(), _rec(done=True)]                      # and a good one after them
    task, events = _stream_task(texts)
    _pump_all(task)
    assert task.episodes == 2 and len(task.groups) == 1 and task.dropped_episodes == 5
    assert task.counts["bad_records"] == 5 and task.counts["dropped_lines"] == 1
    closes = [why for e, _, why in events if e == "drop" and why.startswith("episode of")]
    assert len(closes) == 5 and all("episode of 3 records dropped" in w for w in closes), events
    assert "'reward' must be a number" in closes[0] and "reward nan" in closes[1] and "not JSON" in closes[2]
    assert "'action' must be an integer" in closes[3] and "not UTF-8" in closes[4]
    for b in bad:                                                   # online.bad_records=stop: each stops
        task, _ = _stream_task([_rec(), b], bad_records="stop")
        with pytest.raises(StreamError) as e:
            _pump_all(task)
        assert str(e.value).startswith("line 2: ")
    # a bad record that ends its episode ends it (the next episode is not merged into the dropped one)
    task, events = _stream_task([_rec(), _rec(done=True, reward="x"), _rec(), _rec(done=True)], group_size=1)
    _pump_all(task)
    assert task.episodes == 1 and task.dropped_episodes == 1


def test_an_endless_episode_is_cut_once_and_flagged():
    """issue 30: a stream that never ends an episode used to become many max_steps "episodes" (each a perfect
    success on CartPole) that were trained on and used as gate evidence: now one truncated episode, a `cut`
    event, the rest skipped, and a `stalled` event once 10 x max_steps records went by without an end."""
    task, events = _stream_task([_rec() for _ in range(250)] + [_rec(done=True)] + [_rec(), _rec(done=True)],
                                max_steps=20)
    _pump_all(task)
    assert task.episodes == 2 and task.counts["cut_episodes"] == 1 and task.counts["skipped_records"] == 231
    kinds = [e for e, _, _ in events]
    assert kinds == ["cut", "stalled"] and events[0][1] == "line 20" and events[1][1] == "line 220"
    assert "online.max_steps=20" in events[0][2] and '"done"' in events[1][2]
    ep = task.groups[0]
    assert [len(e["actions"]) for e in ep] == [20, 2] and ep[0]["truncated"] and not ep[1]["truncated"]


def test_unmatched_groups_are_counted_and_logged(tmp_path):
    """issue 30: one-step episodes that each carry a new group key never make a group; they used to be forgotten
    without a word (0 updates, no event). Each forgotten group is counted and logged, the first 20 one by one
    and then every 1000th (a hostile stream cannot fill the disk), and the stop event has the totals."""
    pol = linear_policy(tmp_path / "p.pt", GOOD, k=2.0)
    text = "".join(_rec(done=True, group="k%d" % i) + "\n" for i in range(2100)) + "not json\n"
    r = run_online(["--stream", "stdin", "--policy", pol, "--save-dir", tmp_path / "s"], stdin=text)
    assert r.returncode == 0, r.stderr
    dec = jsonl(str(tmp_path / "s" / "decisions.jsonl"))
    unmatched = [d for d in dec if d["event"] == "unmatched"]
    assert [d["count"] for d in unmatched] == list(range(1, 21)) + [1000, 2000]
    assert "more than 64 groups were open" in unmatched[0]["reason"] and unmatched[0]["where"] == "group 'k0'"
    stop = dec[-1]
    assert stop["event"] == "stop" and stop["stopped"] == "end of stream" and stop["update"] == 0
    assert stop["unmatched_groups"] == 2100 - 64 and stop["open_groups"] == 64 and stop["records"] == 2101
    assert stop["bad_records"] == 1


@pytest.mark.parametrize("schedule, message", [
    ('[[640, {"lenght": 0.1}]]', 'entry [640, {"lenght": 0.1}]: CartPole has no parameter \'lenght\''),
    ('[[640, {"length": -1}]]', 'entry [640, {"length": -1}]: CartPole length must be > 0, got -1'),
    ('[[640, {"length": "short"}]]', "CartPole length must be a finite number, got 'short'"),
    ('[[-1, {"length": 0.2}]]', "the episode count must be >= 0"),
])
def test_env_schedule_is_checked_at_start(tmp_path, schedule, message):
    """issue 30: a misspelt parameter used to run until the schedule's episode, then end in a traceback;
    {"length": -1} was accepted. Each entry is now applied to a probe env at start: one line, nothing written."""
    r = run_online(["--env", ENV, "--save-dir", tmp_path / "s", "--max-updates", 1, "--set",
                    "online.env_schedule=%s" % schedule])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: online.env_schedule entry") and message in r.stderr
    assert not (tmp_path / "s" / "served.pt").exists()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "grpo_edge.cli.main"] + [str(a) for a in args], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300)


@pytest.mark.slow
def test_the_cli_evaluates_calibrates_and_deploys_served_pt(tmp_path):
    """issue 30: `eval`, `calibrate` and `deploy` take the online trainer's served.pt. An env-trained policy is
    evaluated in the world it last served (the env_schedule's changes in effect); a stream-trained one has no
    env to rebuild: eval is one line saying so, and deploy works with --calibration."""
    pol = linear_policy(tmp_path / "p.pt", GOOD)
    r = run_online(["--env", ENV, "--policy", pol, "--save-dir", tmp_path / "e", "--max-updates", 2, "--set",
                    "online.max_steps=200", "--set", "online.eval_episodes=2", "--set", "online.gate_every=2", "--set",
                    "online.margin=1000", "--set", 'online.env_schedule=[[0, {"length": 0.25}]]'])
    assert r.returncode == 0, r.stderr
    served = tmp_path / "e" / "served.pt"
    assert load_checkpoint(str(served))["task_meta"]["dynamics"] == {"length": 0.25}
    ev = _cli("eval", served, "--n", 3, "--json")
    assert ev.returncode == 0, ev.stderr
    ret = json.loads(ev.stdout)["return"]
    # the same greedy episodes by hand, on the short pole (eval's seeds are 10,000,000 + i)
    model = load_policy(str(served))[0]
    ref = []
    for i in range(3):
        env = CartPole(length=0.25)
        obs, _ = env.reset(seed=10000000 + i)
        total, done = 0.0, False
        while not done and total < 200:
            with torch.no_grad():
                obs, rew, term, trunc, _ = env.step(int(model(torch.as_tensor(obs)[None]).argmax()))
            total, done = total + rew, term or trunc
        ref.append(total)
    assert ret == pytest.approx(float(np.mean(ref)))
    cal = _cli("calibrate", served, "--out", tmp_path / "c.npz", "--n", 64)
    assert cal.returncode == 0 and np.load(str(tmp_path / "c.npz"))["obs"].shape == (64, 4), cal.stderr
    dep = _cli("deploy", "--target", "rpi4", "--checkpoint", served, "--out", tmp_path / "pi")
    assert dep.returncode == 0 and (tmp_path / "pi" / "model.int8.onnx").exists(), dep.stderr
    # trained from a record stream: no env to rebuild
    r = run_online(["--stream", "stdin", "--policy", served, "--save-dir", tmp_path / "s"],
                   stdin=_records(pol, 64, with_logp=True))
    assert r.returncode == 0, r.stderr
    ev = _cli("eval", tmp_path / "s" / "served.pt")
    assert ev.returncode == 2 and ev.stderr.startswith("error: this policy was trained online from a record stream")
    assert len(ev.stderr.strip().splitlines()) == 1
    dep = _cli("deploy", "--target", "esp32", "--checkpoint", tmp_path / "s" / "served.pt", "--out", tmp_path / "esp",
               "--calibration", tmp_path / "c.npz", "--option", "tflm=false")
    assert dep.returncode == 0, dep.stderr
    assert "host_bit_exact: True" in dep.stdout
    # the NumPy env class (reset / step, no gymnasium base class) trains through the CLI too
    tr = _cli("train", "--set", "task.name=%s" % ENV, "--set", "training.steps=1", "--set", "task.eval_episodes=2",
              "--set", "task.max_steps=50", "--save-dir", tmp_path / "run", "-q")
    assert tr.returncode == 0 and (tmp_path / "run" / "last.pt").exists(), tr.stderr
