"""Online GRPO on the device: keep training a deployed policy from live experience, without breaking it.

    python3 -m grpo_edge.online --config online.json --save-dir runs/online     # on a Jetson Nano, no CLI deps
    grpo-edge train --online --config online.json --save-dir runs/online
    python3 -m grpo_edge.online --help                                          # every key, with its default

Python 3.6 + torch 1.10 (JetPack 4.6) and newer; imports only torch, numpy and grpo_edge.core (a YAML
config needs PyYAML, a JSON config nothing). One update, repeated:

    experience = G episodes per group, acted by the SERVED policy   (an env, or JSON lines on stdin / TCP)
    candidate  <- core Trainer GRPO step on it (ratio pi_candidate / pi_served, clipped; minibatches of one
                  group with gradient accumulation; fp16 autocast on CUDA)
    every gate_every updates:  evaluate served and candidate on the same episodes;
                  candidate >= served - margin ? promote (served.pt, served.onnx replaced atomically)
                                               : roll back (candidate <- served weights, Adam state cleared)
    every checkpoint_every updates and after every gate: state.pt (candidate, optimizer, counters, RNG)

Files in the save dir (docs/online.md): served.pt (core checkpoint; load_policy reads it), served.onnx,
state.pt, decisions.jsonl (start / resume / gate / memory / stop events), metrics.jsonl (one line per update,
with the process RSS). A kill -9 at any moment leaves served.pt valid (it is only ever replaced by
os.replace) and state.pt resumable; a restart drops the log lines of updates after state.pt and goes on.
"""
import argparse
import copy
import gc
import json
import os
import signal
import sys
import time
import warnings

import torch

from grpo_edge.core.checkpoint import load_checkpoint, load_policy, save_checkpoint
from grpo_edge.core.devices import resolve_device
from grpo_edge.core.trainer import Trainer
from grpo_edge.core.finite import weights_problem
from grpo_edge.errors import ConfigError, GrpoEdgeError, NonFiniteError
from grpo_edge.online.config import ONLINE_KEYS, load_online_config, parse_memory, private_bytes, rss_bytes

MAX_NONFINITE_IN_A_ROW = 10
EVENTS_IN_FULL, EVENTS_EVERY = 20, 1000     # stream events logged one by one, then every 1000th

# ---------------------------------------------------------------------------------------------- runner
class OnlineRunner(object):
    """Serve a policy, train a candidate from experience, gate, checkpoint; see the module docstring."""

    def __init__(self, cfg, save_dir, echo=None):
        self.cfg, self.o = cfg, cfg["online"]
        self.dir = save_dir
        self.echo = echo or (lambda msg: None)
        if not os.path.isdir(save_dir):
            os.makedirs(save_dir)
        self.paths = dict((k, os.path.join(save_dir, k)) for k in
                          ("served.pt", "served.onnx", "state.pt", "decisions.jsonl", "metrics.jsonl"))
        for name in os.listdir(save_dir):     # temp files of writes a power cut interrupted
            if name.endswith(".tmp") and name.lstrip(".").split(".")[0] in ("served", "state", "metrics", "decisions"):
                os.unlink(os.path.join(save_dir, name))
        torch.set_num_threads(int(self.o["threads"]))
        self.budget = parse_memory(self.o["max_memory"])
        t = cfg["training"]
        self.device = resolve_device(t["device"])
        if t["amp"] == "auto":
            t["amp"] = self.device.type == "cuda"          # on CUDA only (training.amp_dtype: bf16 where the GPU has it)
        if self.device.type == "cuda" and hasattr(torch.cuda, "set_per_process_memory_fraction"):
            total = torch.cuda.get_device_properties(self.device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, self.budget / float(total)), self.device)
        self.stop = False
        self.onnx_note = None

        resumed_served = os.path.exists(self.paths["served.pt"])
        served_src = self.paths["served.pt"] if resumed_served else self.o["policy"]
        self.task = self._build_task(None if served_src is None else load_checkpoint(served_src)["model_config"])
        if served_src:
            served, meta = load_policy(served_src)
        else:
            from grpo_edge.core.models import build_model
            m = dict(cfg["model"])
            torch.manual_seed(int(t["seed"]))
            served, meta = build_model(m.pop("arch"), **dict(m, **self.task.model_kwargs())), {}
        mc = served.config()
        if (mc.get("obs_dim"), mc.get("n_actions")) != (self.task.obs_dim, self.task.n_actions):
            raise ConfigError("policy %s maps obs_dim=%s to n_actions=%s, the experience has obs_dim=%d, %d actions"
                              % (served_src, mc.get("obs_dim"), mc.get("n_actions"), self.task.obs_dim,
                                 self.task.n_actions))
        self.served = served.to(self.device).eval()
        self.version = int(meta.get("online", {}).get("version", 0)) if resumed_served else 0
        self.task.behaviour = self.served
        self.trainer = Trainer(copy.deepcopy(served), self.task, cfg, device=self.device)
        self.counters = {"update": 0, "gates": 0, "promotions": 0, "rollbacks": 0, "nonfinite": 0}
        self._nonfinite_in_a_row = 0
        self._event_counts = {}
        if hasattr(self.task, "on_event"):
            self.task.on_event = self._on_event
        if os.path.exists(self.paths["state.pt"]):
            self._resume()
        else:
            if not resumed_served:
                self._write_served(None)
            self.save_state()
            self._log("decisions.jsonl", {"event": "start", "update": 0, "served_version": self.version,
                                          "policy": served_src or "fresh %s" % cfg["model"]["arch"]})
        self._export_onnx()   # the ONNX always matches served.pt, even after a kill between the two

    def _build_task(self, model_config):
        from grpo_edge.online.sources import (EnvTask, StreamTask, make_env_factory, max_line_bytes, stdin_lines,
                                              tcp_lines)
        o, t, g = self.o, self.cfg["training"], self.cfg["grpo"]
        if o["env"]:
            return EnvTask(o["env"], make_env_factory(o["env"], o["env_kwargs"]), o["max_steps"],
                           o["eval_episodes"], seed=int(t["seed"]), schedule=o["env_schedule"])
        if "obs_dim" not in model_config or "n_actions" not in model_config:
            raise ConfigError("online training needs a vector-observation policy (arch mlp) with obs_dim and n_actions")
        if model_config.get("continuous"):
            raise ConfigError("online.stream records carry discrete actions; a continuous-action policy trains "
                              "online from online.env (a gymnasium id or module:Class)")
        d, n_act, G = int(model_config["obs_dim"]), int(model_config["n_actions"]), int(g["group_size"])
        group_bytes = G * o["max_steps"] * (d + 4) * 4                 # obs, action, logp, reward per step
        fit = int(0.1 * self.budget // group_bytes)                    # the buffer gets 10% of the budget
        if fit < int(t["batch_size"]):
            raise ConfigError("online.max_memory %s leaves room for %d buffered groups, training.batch_size needs %d"
                              % (o["max_memory"], fit, int(t["batch_size"])))
        bound = max_line_bytes(self.budget)
        lines = (stdin_lines(bound) if o["stream"] == "stdin"
                 else tcp_lines(int(o["stream"].split(":", 1)[1]), max_bytes=bound))
        return StreamTask(lines, o["stream"], d, n_act, G, o["max_steps"], o["eval_episodes"], o["holdout_every"],
                          max(int(t["batch_size"]), min(o["buffer_groups"], fit)), bad_records=o["bad_records"])

    # ------------------------------------------------------------------ files
    def _log(self, name, rec):
        rec = dict(rec, time=round(time.time(), 3))
        with open(self.paths[name], "a") as f:
            f.write(json.dumps(rec) + "\n")

    def _write_served(self, evaluation):
        state = {"arch": self.served.arch, "model_config": self.served.config(), "task": self.task.name,
                 "task_meta": self.task.checkpoint_meta(), "config": self.cfg,
                 "model": dict((k, v.detach().cpu()) for k, v in self.served.state_dict().items()),
                 "metrics": {} if evaluation is None else {"return": evaluation},
                 "online": {"version": self.version, "update": self.counters["update"], "episodes": self.task.episodes}}
        save_checkpoint(self.paths["served.pt"], state)

    def _export_onnx(self):
        if not self.o["export_onnx"] or self.onnx_note:
            return
        path = self.paths["served.onnx"]
        tmp = path + ".tmp"
        try:
            import inspect
            import torch.onnx
            model = copy.deepcopy(self.served).cpu().eval()
            # the example inputs are drawn from torch's RNG: a fork leaves the training stream as it was, so a
            # run resumed after a kill (which exports again) stays bit-identical to one never killed
            with torch.random.fork_rng(devices=[]):
                spec = model.export_spec(1)
            kw = {"input_names": list(spec.input_names), "output_names": list(spec.output_names),
                  "dynamic_axes": dict(spec.dynamic_axes or {}), "opset_version": 13, "do_constant_folding": True}
            if "dynamo" in inspect.signature(torch.onnx.export).parameters:
                kw["dynamo"] = False     # the TorchScript exporter: one self-contained file, as TensorRT 8.2 reads
            with open(tmp, "wb") as f, warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
                warnings.simplefilter("ignore")          # torch 2.x: "legacy exporter" deprecation notice
                torch.onnx.export(spec.module, tuple(spec.example_inputs), f, **kw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except Exception as e:         # optional on the device: served.pt stays the reference
            if os.path.exists(tmp):
                os.unlink(tmp)
            self.onnx_note = "onnx export skipped: %s" % (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            self._log("decisions.jsonl", {"event": "onnx", "update": self.counters["update"], "note": self.onnx_note})

    def save_state(self):
        st = self.trainer.state_dict()
        st["online"] = dict(self.counters, served_version=self.version)
        # the served weights too: a kill between a promotion's served.pt and the next state.pt must not leave a
        # restart acting with a policy the saved state never served (the rerun would differ)
        st["served_model"] = dict((k, v.detach().cpu()) for k, v in self.served.state_dict().items())
        save_checkpoint(self.paths["state.pt"], st)

    def _resume(self):
        st = load_checkpoint(self.paths["state.pt"])
        self.trainer.load_state_dict(st)
        self.counters = dict((k, int(st["online"].get(k, 0))) for k in self.counters)
        u = self.counters["update"]
        state_version, served_pt_version = int(st["online"]["served_version"]), self.version
        if state_version != self.version and isinstance(st.get("served_model"), dict):
            # served.pt moved on after state.pt was saved (killed between the two): serve what state.pt served,
            # so the restarted run replays the updates after it exactly (and promotes again where it did)
            self.served.load_state_dict(st["served_model"])
            self.version = state_version
            self._write_served(None)
        dropped = 0
        for name in ("metrics.jsonl", "decisions.jsonl"):      # forget what happened after state.pt
            dropped = max(dropped, self._truncate_log(name, u))
        self._log("decisions.jsonl", {"event": "resume", "update": u, "served_version": self.version,
                                      "state_served_version": int(st["online"]["served_version"]),
                                      "served_pt_version": served_pt_version, "dropped_updates": dropped})
        self.echo("resumed at update %d (served version %d; %d later updates lost)" % (u, self.version, dropped))

    def _truncate_log(self, name, update):
        path = self.paths[name]
        if not os.path.exists(path):
            return 0
        keep, last = [], update
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue                       # a line cut by the kill
                if int(rec.get("update", 0)) > update:
                    last = max(last, int(rec["update"]))
                    continue
                keep.append(line if line.endswith("\n") else line + "\n")
        with open(path + ".tmp", "w") as f:
            f.writelines(keep)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        return last - update

    def _on_event(self, event, where, reason):
        """A stream event (drop, cut, stalled, unmatched): the first EVENTS_IN_FULL of each kind are logged,
        then every EVENTS_EVERY-th with its running count (a hostile stream cannot fill the disk); the stop
        event has the totals."""
        n = self._event_counts[event] = self._event_counts.get(event, 0) + 1
        if n > EVENTS_IN_FULL and n % EVENTS_EVERY:
            return
        self._log("decisions.jsonl", {"event": event, "update": self.counters["update"], "where": where,
                                      "reason": reason, "count": n})
        self.echo("%s: %s%s" % (where, reason, "" if n < EVENTS_IN_FULL else
                                " (%d %s events so far; now logging every %d-th)" % (n, event, EVENTS_EVERY)))

    def reject_update(self, err):
        """A NaN / inf reward, loss, gradient or weight: the candidate goes back to the served weights (Adam
        state cleared), the update is not counted, nothing is saved from it. Many in a row stop the run."""
        self.trainer.policy.load_state_dict(self.served.state_dict())
        self.trainer.optimizer.state.clear()
        self.trainer.optimizer.zero_grad()
        self.counters["nonfinite"] += 1
        self._nonfinite_in_a_row += 1
        self._log("decisions.jsonl", {"event": "nonfinite", "update": self.counters["update"], "reason": str(err),
                                      "action": "candidate reset to served v%d" % self.version})
        self.echo("update %d rejected: %s" % (self.counters["update"] + 1, err))
        if self._nonfinite_in_a_row >= MAX_NONFINITE_IN_A_ROW:
            raise NonFiniteError("%d updates in a row were not finite (last: %s); served.pt and state.pt hold the "
                                 "last good state" % (self._nonfinite_in_a_row, err))

    # ------------------------------------------------------------------ the loop
    def gate(self):
        cand_model = self.trainer.policy
        s = self.task.evaluate(self.served)
        c = self.task.evaluate(cand_model)
        rec = {"event": "gate", "update": self.counters["update"], "served_eval": s["return"],
               "candidate_eval": c["return"], "margin": float(self.o["margin"]), "eval_n": s["n"]}
        if "ess" in c:          # stream: effective sample size of the importance-sampling estimates
            rec.update(served_ess=s.get("ess"), candidate_ess=c["ess"])
        bad = weights_problem(list(cand_model.state_dict().values()))
        if bad is not None:                                 # never reaches served.pt (train_step checks too)
            rec["decision"] = "rollback"
            rec["reason"] = "candidate weights %s" % bad
            cand_model.load_state_dict(self.served.state_dict())
            self.trainer.optimizer.state.clear()
            self.counters["rollbacks"] += 1
        elif s["n"] == 0 or s["return"] != s["return"] or c["return"] != c["return"]:
            rec["decision"] = "defer"                       # stream: no held-out episodes yet
        elif c["return"] >= s["return"] - float(self.o["margin"]):
            rec["decision"] = "promote"
            self.served.load_state_dict(cand_model.state_dict())
            self.version += 1
            self.counters["promotions"] += 1
            self._write_served(c["return"])
            self._export_onnx()
        else:
            rec["decision"] = "rollback"
            cand_model.load_state_dict(self.served.state_dict())
            self.trainer.optimizer.state.clear()           # Adam moments pointed the wrong way
            self.counters["rollbacks"] += 1
        self.counters["gates"] += 1
        self.save_state()
        rec.update(served_version=self.version, episodes=self.task.episodes,
                   dynamics_phase=getattr(self.task, "dynamics_phase", lambda: 0)())
        self._log("decisions.jsonl", rec)
        self.echo("update %d gate: %s (served %.1f, candidate %.1f, margin %g) -> served v%d"
                  % (rec["update"], rec["decision"], s["return"], c["return"], rec["margin"], self.version))
        return rec

    def memory_used(self):
        """Bytes counted against online.max_memory: the process's private resident memory (RSS less
        mapped library files, online/config.py:private_bytes) plus, on CUDA, what torch's allocator holds
        on the GPU (a Jetson's GPU shares the board's RAM, so both come out of the same budget)."""
        used = private_bytes()
        if self.device.type == "cuda":
            used += torch.cuda.memory_reserved(self.device)
        return used

    def check_memory(self, used):
        if used <= self.budget:
            return
        self.task.shrink()
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        after = self.memory_used()
        self._log("decisions.jsonl", {"event": "memory", "update": self.counters["update"],
                                      "memory_mb": used / 2.0 ** 20, "after_shrink_mb": after / 2.0 ** 20})
        if after > self.budget:
            self.save_state()
            raise GrpoEdgeError("process RSS (private pages%s) %.0f MB is over online.max_memory (%.0f MB) even "
                                "after dropping the buffers; lower training.batch_size / grpo.group_size or raise "
                                "max_memory" % (" + CUDA allocator" if self.device.type == "cuda" else "", after / 2.0 ** 20,
                                   self.budget / 2.0 ** 20))

    def _on_signal(self, signum, frame):
        self.stop = True
        if getattr(self.task, "io_wait", False):           # blocked reading the stream: leave now
            raise KeyboardInterrupt()

    def run(self):
        """Update until max_updates, a stop signal or the end of the stream. Returns a summary dict. An error
        (a bad record under online.bad_records=stop, the memory budget, non-finite updates) saves state.pt,
        writes the `stop` event with the error, and is raised."""
        old = [signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)]
        t0 = time.time()
        try:
            reason = self._loop()
        except GrpoEdgeError as e:            # between updates: the state is consistent, keep it
            self.save_state()
            self._stop_event("error: %s" % e, t0)
            raise
        except Exception as e:                # a bug: the state may be half-updated, state.pt keeps the last good one
            self._stop_event("crash: %s: %s" % (type(e).__name__, str(e).strip()[:200]), t0)
            raise
        finally:
            for s, h in zip((signal.SIGTERM, signal.SIGINT), old):
                signal.signal(s, h)
        self.save_state()
        return self._stop_event(reason, t0)

    def _loop(self):
        from grpo_edge.online.sources import StreamEnded
        try:
            while not self.stop:
                if self.o["max_updates"] and self.counters["update"] >= self.o["max_updates"]:
                    return "max_updates"
                self._update()
            return "signal"
        except StreamEnded:
            return "end of stream"
        except KeyboardInterrupt:
            return "signal"

    def _update(self):
        try:
            m = self.trainer.train_step()
        except NonFiniteError as e:
            self.reject_update(e)
            return
        self._nonfinite_in_a_row = 0
        self.counters["update"] = u = self.trainer.step
        used = self.memory_used()
        rec = {"update": u, "reward_mean": m["reward_mean"], "loss": m.get("loss"),
               "episodes": self.task.episodes, "served_version": self.version,
               "rss_mb": rss_bytes() / 2.0 ** 20, "memory_mb": used / 2.0 ** 20, "step_time": m["step_time"]}
        if self.device.type == "cuda":       # memory_mb counts the GPU allocator's share too
            rec["cuda_reserved_mb"] = torch.cuda.memory_reserved(self.device) / 2.0 ** 20
        self._log("metrics.jsonl", rec)
        if u % self.o["gate_every"] == 0:
            self.gate()
        elif u % self.o["checkpoint_every"] == 0:
            self.save_state()
        self.check_memory(used)

    def _stop_event(self, reason, t0):
        summary = dict(self.counters, served_version=self.version, stopped=reason, episodes=self.task.episodes,
                       wall_s=round(time.time() - t0, 2), rss_mb=round(rss_bytes() / 2.0 ** 20, 1))
        counts = getattr(self.task, "counts", None)
        if counts is not None:                 # stream: what was dropped, cut, skipped or never grouped
            summary.update(counts, records=self.task.records, open_groups=self.task.open_groups)
        self._log("decisions.jsonl", dict(summary, event="stop"))
        return summary


def run_online_cli(config, overrides, save_dir):
    """`grpo-edge train --online`: the same loop as `python3 -m grpo_edge.online`."""
    cfg = load_online_config(config, overrides)
    runner = OnlineRunner(cfg, save_dir or os.path.join("runs", "online"), echo=print)
    s = runner.run()
    print("online: %d updates, %d gates (%d promoted, %d rolled back), served version %d, stopped by %s; %s"
          % (s["update"], s["gates"], s["promotions"], s["rollbacks"], s["served_version"], s["stopped"], runner.dir))
    return s


def main(argv=None):
    keys = "\n".join("  online.%-17s %-8s %s" % (k, json.dumps(d), doc) for k, d, doc in ONLINE_KEYS)
    p = argparse.ArgumentParser(prog="python3 -m grpo_edge.online", formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Online GRPO: keep training a served policy from live experience.",
                                epilog="config keys (JSON file sections online / training / grpo / model):\n" + keys)
    p.add_argument("--config", help="JSON config (YAML when PyYAML is installed)")
    p.add_argument("--save-dir", default=os.path.join("runs", "online"), help="served.pt, state.pt and logs")
    p.add_argument("--policy", help="= online.policy")
    p.add_argument("--env", help="= online.env")
    p.add_argument("--stream", help="= online.stream (stdin or tcp:PORT)")
    p.add_argument("--max-memory", help="= online.max_memory (default 1.5G, fit for a 4 GB Jetson Nano)")
    p.add_argument("--max-updates", type=int, help="= online.max_updates")
    p.add_argument("--device", help="cpu, cuda or auto")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override (repeatable)")
    p.add_argument("--quiet", "-q", action="store_true", help="no per-gate lines")
    a = p.parse_args(argv)
    sets = list(a.set)
    for flag, key in ((a.policy, "online.policy"), (a.env, "online.env"), (a.stream, "online.stream"),
                      (a.max_memory, "online.max_memory"), (a.device, "training.device")):
        if flag is not None:
            sets.append("%s=%s" % (key, json.dumps(flag)))
    if a.max_updates is not None:
        sets.append("online.max_updates=%d" % a.max_updates)
    try:
        cfg = load_online_config(a.config, sets)
        runner = OnlineRunner(cfg, a.save_dir, echo=None if a.quiet else (lambda m: print(m, file=sys.stderr)))
        s = runner.run()
    except GrpoEdgeError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    print(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
