"""Data-parallel GRPO with torch.distributed, and its single-process twin (Python 3.6 / torch 1.10 safe).

    torchrun --nproc_per_node 2 -m grpo_edge.cli.main train -c configs/cartpole.yaml --save-dir runs/cp2

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; `init_from_env` then joins the process group (gloo on CPU,
NCCL when training on CUDA, one GPU per local rank). What changes with N ranks:

  rollout     rank r samples batch_size / N groups from its own streams (torch, numpy, the trainer's
              generator and the task's RNG seeded with shard_seed(seed, r)); groups never straddle ranks,
              so group-relative advantages are those of a single process;
  gradients   each rank back-propagates its local loss, then the gradients are averaged (one flat
              all-reduce per optimizer step) before clipping, so every rank takes the same Adam step;
  metrics     gathered to every rank: counters and throughput summed, peaks and times the maximum, the
              rest averaged over ranks;
  files       checkpoints, metrics.jsonl, summary.json and plots are written by rank 0 only.

Rank 0 uses the run's own seed, so a 1-process run is exactly the run without torch.distributed. The
same N-shard rollout can be produced in ONE process (`Trainer.add_rollout_shards`): shard k keeps its own
RNG streams, seeded like rank k. With grpo's token aggregation (a mean over sequences), a full-batch
update and equal shards, the mean of the N local gradients equals the gradient of the concatenated batch,
so N processes and the 1-process twin train the same parameters up to float rounding
(tests/test_distributed.py). Not exact (local statistics, as in most DDP trainers): scale_rewards
'batch', PPO's advantage normalisation, the bnpo / dapo / dr_grpo normalisers, the gradient penalty.
"""
import atexit
import os

import numpy as np
import torch
import torch.distributed as dist

from grpo_edge.core import devices
from grpo_edge.core.checkpoint import rng_state
from grpo_edge.core.rollout import concat_rollouts

# Rank r > 0 seeds its sampling streams with seed + SHARD_SEED_STRIDE * r (rank 0: the seed itself).
SHARD_SEED_STRIDE = 100003


def shard_seed(seed, shard):
    return int(seed) + SHARD_SEED_STRIDE * int(shard)


def init_from_env(use_cuda=False):
    """Join the process group torchrun describes (WORLD_SIZE > 1); a no-op otherwise. Returns world()."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1 and dist.is_available() and not dist.is_initialized():
        if use_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        # leave the group at exit, also after an error: a rank that exits with the group alive can abort
        # ("terminate called without an active exception") when a peer has gone first
        atexit.register(leave)
    return world()


def leave():
    """Leave the process group if this process is in one; True when it was."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        return True
    return False


def world():
    """(rank, world_size): (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main():
    return world()[0] == 0


def local_device(device):
    """Under NCCL each rank drives cuda:LOCAL_RANK; other devices are unchanged."""
    if device.type == "cuda" and world()[1] > 1:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def broadcast_parameters(module):
    """Copy rank 0's parameters and buffers to every rank (identical seeds make this a check, not a need)."""
    if world()[1] > 1:
        for t in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(t.data, 0)


def average_gradients(params):
    """All-reduce the gradients of `params` in one flat buffer and divide by the world size."""
    world_size = world()[1]
    grads = [p.grad for p in params if p.grad is not None]
    if world_size == 1 or not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])        # one collective instead of one per tensor
    dist.all_reduce(flat)
    flat.div_(world_size)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


SUM_KEYS = ("samples_per_s", "num_env_steps", "num_samples")
MAX_KEYS = ("peak_memory_mb", "peak_cuda_allocated_mb", "peak_cuda_reserved_mb", "step_time", "rollout_time")


def reduce_metrics(metrics):
    """Combine the per-rank metric dicts (floats) on every rank: SUM_KEYS summed, MAX_KEYS maximum,
    the rest averaged over the ranks that report them."""
    world_size = world()[1]
    if world_size == 1:
        return metrics
    gathered = [None] * world_size
    dist.all_gather_object(gathered, metrics)
    out = {}
    for key in gathered[0]:
        values = [m[key] for m in gathered if m.get(key) is not None]     # None: the rank has no value
        if not values:
            out[key] = None
        elif not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = values[0]
        elif key in SUM_KEYS:
            out[key] = sum(values)
        elif key in MAX_KEYS:
            out[key] = max(values)
        else:
            out[key] = sum(values) / float(len(values))
    return out


def all_gather(obj):
    """Every rank's `obj` as a list indexed by rank ([obj] in one process)."""
    world_size = world()[1]
    if world_size == 1:
        return [obj]
    out = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


def on_every_rank(fn):
    """fn() on this rank; when it raises a GrpoEdgeError on any rank (a bad reward on rank 1's data), every
    rank raises the same one-line error naming that rank: a rank that stopped alone would leave the others
    waiting in the next collective call."""
    from grpo_edge.errors import GrpoEdgeError
    if world()[1] == 1:
        return fn()
    out, problem = None, None
    try:
        out = fn()
    except GrpoEdgeError as e:
        problem = (type(e), str(e))
    bad = [(rank, p) for rank, p in enumerate(all_gather(problem)) if p is not None]
    if bad:
        rank, (kind, msg) = bad[0]
        raise kind("rank %d: %s" % (rank, msg))
    return out


def broadcast_object(obj):
    """Rank 0's `obj` on every rank (picklable objects)."""
    if world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, 0)
    return box[0]


class RolloutShard(object):
    """A rollout shard with its own RNG streams, for rolling out N shards in one process.

    Holds a task (seeded for shard k), a torch.Generator, and the global torch / numpy RNG states, which
    are swapped in around the shard's rollout so it draws exactly what rank k draws in a torchrun run.
    """

    def __init__(self, task, seed):
        self.task = task
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(int(seed))
        saved = torch.get_rng_state(), np.random.get_state()
        torch.manual_seed(int(seed))
        np.random.seed(int(seed))
        self.torch_state, self.numpy_state = torch.get_rng_state(), np.random.get_state()
        torch.set_rng_state(saved[0])
        np.random.set_state(saved[1])

    def rollout(self, policy, num_groups, group_size):
        saved = torch.get_rng_state(), np.random.get_state()
        torch.set_rng_state(self.torch_state)
        np.random.set_state(self.numpy_state)
        try:
            return self.task.rollout(policy, num_groups, group_size, self.generator)
        finally:
            self.torch_state, self.numpy_state = torch.get_rng_state(), np.random.get_state()
            torch.set_rng_state(saved[0])
            np.random.set_state(saved[1])

    def get_state(self):
        st = self.numpy_state
        return {"torch": self.torch_state, "generator": self.generator.get_state(),
                "numpy": [st[0], torch.as_tensor(st[1].astype("int64")), int(st[2]), int(st[3]), float(st[4])],
                "task_state": self.task.get_state()}

    def set_state(self, state):
        self.torch_state = state["torch"].cpu()
        self.generator.set_state(state["generator"].cpu())
        n = state["numpy"]
        self.numpy_state = (n[0], n[1].cpu().numpy().astype("uint32"), n[2], n[3], n[4])
        self.task.set_state(state.get("task_state", {}))


class ShardedTrainerMixin(object):
    """The rollout-sharding half of grpo_edge.core.trainer.Trainer (it sets rank, world_size, t, g, task,
    policy, generator and rollout_shards); the gradient and metric hooks sit in the trainer itself."""

    def _check_sharding(self, shards):
        if int(self.t["batch_size"]) % shards:
            raise ValueError("training.batch_size (%d) must be divisible by the number of rollout shards / "
                             "ranks (%d)" % (int(self.t["batch_size"]), shards))
        mb = int(self.t["minibatch_size"])
        if mb and (mb % shards or (mb // shards) % int(self.g["group_size"])):
            raise ValueError("training.minibatch_size (%d) must split into %d shards of whole groups of %d"
                             % (mb, shards, int(self.g["group_size"])))
        if shards > 1 and self.g["filter_zero_std"]:
            raise ValueError("grpo.filter_zero_std drops a different number of samples on each rank, which "
                             "would desynchronise the gradient all-reduce; it is not supported with %d shards"
                             % shards)

    def _seed_streams(self, seed):
        torch.manual_seed(int(seed))
        np.random.seed(int(seed))
        self.generator.manual_seed(int(seed))

    def add_rollout_shards(self, tasks):
        """Roll out 1 + len(tasks) shards in this process: shard 0 from self.task and the live RNG streams,
        shard k from tasks[k - 1] (built with seed shard_seed(seed, k)) and streams seeded like rank k:
        the single-process twin of a torchrun run with 1 + len(tasks) ranks."""
        if self.world_size > 1:
            raise ValueError("add_rollout_shards is for one process; under torchrun each rank is a shard")
        self._check_sharding(1 + len(tasks))
        seed = int(self.t["seed"])
        self.rollout_shards = [RolloutShard(t, shard_seed(seed, k + 1))
                               for k, t in enumerate(tasks)]

    def _rollout(self, group_size):
        """This process's share of the batch: batch_size / (ranks * shards) groups per shard."""
        n = int(self.t["batch_size"]) // (self.world_size * (1 + len(self.rollout_shards)))
        ro = self.task.rollout(self.policy, n, group_size, self.generator)
        if self.rollout_shards:
            ro = concat_rollouts([ro] + [s.rollout(self.policy, n, group_size) for s in self.rollout_shards])
        return ro

    def _epoch_order(self, keep, mb_size):
        """The sample order of one pass over the batch, minibatches of mb_size taken in turn.

        With in-process shards each shard permutes its own samples with its own generator, as rank k
        does, and minibatch j is the union of the shards' j-th minibatches: the torchrun run's minibatch.
        """
        if not self.rollout_shards:
            return keep[devices.randperm(len(keep), self.generator).to(keep.device)]
        gens = [self.generator] + [s.generator for s in self.rollout_shards]
        n = len(keep) // len(gens)
        local_mb = mb_size // len(gens)
        perms = [keep[k * n + devices.randperm(n, g).to(keep.device)] for k, g in enumerate(gens)]
        return torch.cat([p[j:j + local_mb] for j in range(0, n, local_mb) for p in perms])

    def _stream_state(self):
        st = rng_state()
        return {"torch": st["torch"], "numpy": st["numpy"], "generator": self.generator.get_state().cpu(),
                "task_state": self.task.get_state()}

    def _shard_states(self):
        """RNG streams of every rank / shard (a collective under torchrun: call it on all ranks)."""
        if self.world_size > 1:
            return all_gather(self._stream_state())
        if self.rollout_shards:
            return [self._stream_state()] + [s.get_state() for s in self.rollout_shards]
        return None

    def _load_shard_states(self, shards):
        if self.world_size > 1 and len(shards) == self.world_size:
            own = shards[self.rank]
            n = own["numpy"]
            torch.set_rng_state(own["torch"].cpu())
            np.random.set_state((n[0], n[1].cpu().numpy().astype("uint32"), n[2], n[3], n[4]))
            self.generator.set_state(own["generator"].cpu())
            self.task.set_state(own.get("task_state", {}))
        elif self.rollout_shards and len(shards) == 1 + len(self.rollout_shards):
            for shard, st in zip(self.rollout_shards, shards[1:]):
                shard.set_state(st)
