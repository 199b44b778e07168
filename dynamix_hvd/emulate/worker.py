"""The per-rank training script of ``dynamix bench``: real Horovod training of a scenario's
workload with the dynamix hook, on an emulated device (and link, when run in a namespace).

    mpirun ... python -m dynamix_hvd.emulate.worker --scenario S.toml --controller proportional \\
        --run-dir DIR [--link-env] [--emulate-latency]
    torchrun ... -m dynamix_hvd.emulate.worker --engine ddp ...      (DistributedDataParallel, gloo)

Writes into DIR:
    rank<r>.jsonl   one line per step: training time, step, batch, compute and step seconds
    evals.jsonl     rank 0, one line per evaluation: training time, step, test accuracy
    events.jsonl    rank 0, the hook's decision records
    summary.json    rank 0, the run's figures (time to target, final accuracy, samples/s, ...)

Time is the *training clock*: evaluation pauses it on every rank (rank 0 evaluates, then
broadcasts the stop flag; the clock resumes after that broadcast).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch
import torch.nn.functional as F

from dynamix_hvd import workloads
from dynamix_hvd.emulate.device import EmulatedDevice, EmulatedOOM, TrainingClock
from dynamix_hvd.emulate.payload import with_payload
from dynamix_hvd.emulate.scenario import Scenario, load_scenario, override
from dynamix_hvd.errors import OutOfMemoryError

if TYPE_CHECKING:
    from dynamix_hvd.config import DynamixConfig

LINK_ENV = "DYNAMIX_LINK_R{rank}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True)
    p.add_argument("--controller", default="static")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--max-time-s", type=float, default=None, help="override the scenario's max_time_s")
    p.add_argument("--seed", type=int, default=None,
                   help="override the scenario's seed (model initialisation and sample order)")
    p.add_argument("--until", choices=("target", "budget"), default="budget",
                   help="stop at the target accuracy, or train the whole max_time_s budget")
    p.add_argument("--emulate-latency", action="store_true",
                   help="sleep the links' latency per allreduce (when tc netem is unavailable)")
    p.add_argument("--plain", action="store_true",
                   help="no dynamix hook: plain Horovod (or DDP) with the scenario's static batches")
    p.add_argument("--engine", choices=("horovod", "ddp"), default="horovod",
                   help="horovod: Horovod under mpirun; ddp: DistributedDataParallel under torchrun (gloo)")
    return p.parse_args(argv)


@dataclass(frozen=True)
class ControllerSpec:
    """A bench controller spec: ``NAME``, ``oracle@B`` (the oracle at a fixed global batch B, for
    headroom sweeps), ``ppo=PATH`` (the PPO controller with the policy file PATH), ``ppo?OPTS`` /
    ``ppo=PATH?OPTS`` (its options, ``controllers.policy.options``: ``ppo?refute=1&passguard=on``),
    any with ``:fixed`` appended (decisions only every interval_steps: the early-decision detector
    off, for A/B runs)."""

    name: str
    global_batch: int | None = None
    react: bool = True
    policy: str | None = None
    options: dict[str, Any] = field(default_factory=dict)   # PPOController keyword arguments

    def controller_kwargs(self) -> dict[str, Any]:
        """The hook's ``controller_kwargs`` for this spec."""
        return {**({"policy": self.policy} if self.policy else {}), **self.options}


def parse_controller(spec: str) -> ControllerSpec:
    """Parse a controller spec (see ``ControllerSpec``). Raises ValueError naming a bad spec."""
    from dynamix_hvd.controllers.policy.options import ppo_options
    base, colon, opt = spec.partition(":")
    if colon and opt != "fixed":
        raise ValueError(f"controller {spec!r}: the only option after ':' is 'fixed' (no early decisions)")
    base, qmark, opts = base.partition("?")
    name, eq, path = base.partition("=")
    if qmark and name != "ppo":
        raise ValueError(f"controller {spec!r}: only ppo takes options after '?' (ppo?refute=1, ppo=PATH?trust=0.05)")
    if eq:
        if name != "ppo" or not path:
            raise ValueError(f"controller {spec!r}: only ppo takes a policy file (ppo=PATH)")
        return ControllerSpec(name, None, not colon, path, ppo_options(opts, spec))
    if qmark:
        return ControllerSpec(name, None, not colon, None, ppo_options(opts, spec))
    name, sep, arg = base.partition("@")
    if not sep:
        return ControllerSpec(name, None, not colon)
    if name != "oracle":
        raise ValueError(f"controller {spec!r}: only the oracle takes a global batch (oracle@B)")
    try:
        b = int(arg)
    except ValueError:
        b = 0
    if b < 1:
        raise ValueError(f"controller {spec!r}: the global batch after '@' must be an integer >= 1")
    return ControllerSpec(name, b, not colon)


def hook_config(sc: Scenario, spec: ControllerSpec, world: int, max_batches: Sequence[int],
                run_dir: Path) -> "DynamixConfig":
    """The hook's configuration for one bench run of ``spec`` on scenario ``sc`` (pure)."""
    from dynamix_hvd.config import DynamixConfig  # the hook; imported late so --plain works without it
    cfg = DynamixConfig(base_batch=sc.base_batch, controller=spec.name, react=spec.react, gns=True,
                        interval_steps=sc.interval_steps, min_decision_s=0,   # the scenario's cadence
                        max_batch=tuple(max_batches),
                        min_global_batch=sc.min_global_batch, lr_rule=sc.lr_rule,
                        run_dir=str(run_dir), seed=sc.seed, tensorboard=True,
                        controller_kwargs=spec.controller_kwargs())
    if spec.global_batch is not None:  # oracle@B runs at B even below the floor (before: oracle@48 ran at 64)
        cfg = replace(cfg, min_global_batch=min(cfg.min_global_batch_for(world), spec.global_batch),
                      max_batch_growth=max(1.0, spec.global_batch / (sc.base_batch * world)))
    return cfg


def _make_controller(spec: ControllerSpec, cfg: object, world: int, device: EmulatedDevice) -> object | None:
    """The oracle needs the scenario's true speeds; every other controller is built by the hook."""
    if spec.name != "oracle":
        return None
    from dynamix_hvd.controllers import make_controller
    from dynamix_hvd.plan import PlanBounds

    bounds = PlanBounds(max_batch=cfg.max_batch_for(world), min_batch=cfg.min_batch,  # type: ignore[attr-defined]
                        quantum=cfg.quantum, max_global_batch=cfg.max_global_batch,  # type: ignore[attr-defined]
                        deadband=cfg.deadband)  # type: ignore[attr-defined]
    return make_controller("oracle", bounds, cfg.base_batch, speed_fn=device.true_speeds,  # type: ignore[attr-defined]
                           global_batch=spec.global_batch)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    coll = Collectives(args.engine)
    rank, world = coll.rank, coll.world
    sc = override(load_scenario(args.scenario), max_time_s=args.max_time_s, seed=args.seed)
    if sc.world_size != world:
        raise SystemExit(f"scenario {sc.name} has {sc.world_size} workers but the job has {world} ranks")
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)

    net, data = workloads.build(sc.workload, seed=sc.seed)
    # grad_mb: net + a zero-gradient payload parameter allreduced with the real gradients
    model = coll.wrap(with_payload(net, sc.grad_mb))   # DDP(...) for the ddp engine; evaluation uses net itself
    optimizer = torch.optim.Adam(model.parameters(), lr=sc.lr)
    clock = TrainingClock()
    link = None
    if os.environ.get(LINK_ENV.format(rank=rank)):
        from dynamix_hvd.emulate.netns import Link
        link = Link.from_str(os.environ[LINK_ENV.format(rank=rank)])
    device = EmulatedDevice(sc, rank, clock=clock, link=link, emulate_latency=args.emulate_latency)

    if args.plain:
        loop = _PlainLoop(model, optimizer, len(data), sc, coll, device)
    else:
        if args.engine == "ddp":
            from dynamix_hvd.ddp import Dynamix
        else:
            from dynamix_hvd.horovod import Dynamix  # type: ignore[assignment]

        # TensorBoard scalars are written by rank 0 once per decision (not per step): cheap
        spec = parse_controller(args.controller)
        # gradient statistics for every controller (gns=True, not auto): the run log's noise scale is
        # what capture-trace writes into the workload's curves, and the controllers compare alike
        cfg = hook_config(sc, spec, world, device.max_batches(), run_dir)
        ctl = _make_controller(spec, cfg, world, device) if rank == 0 else None
        loop = Dynamix(model, optimizer, dataset_size=len(data), config=cfg, controller=ctl)

    steps_log = open(run_dir / f"rank{rank}.jsonl", "w", buffering=1 << 16)  # noqa: SIM115
    evals_log = open(run_dir / "evals.jsonl", "w", buffering=1) if rank == 0 else None  # noqa: SIM115
    flag = torch.zeros(2)
    coll.barrier()                           # everyone ready: start the clocks together
    clock.restart()
    t_wall0 = time.perf_counter()
    step = samples = 0
    time_to_target = None
    acc = 0.0
    stop = False
    epoch = 0
    while not stop:
        for idx in loop.batches(epoch):
            t0 = time.perf_counter()
            sl = getattr(loop, "current_slice", None)   # all ranks' sizes of this step
            total = int(sl.total) if sl is not None else loop.plan.global_batch
            full = total == loop.plan.global_batch       # False for an epoch's short last step
            x, y = data.x_train[idx], data.y_train[idx]
            loss = F.cross_entropy(model(x), y)
            loop.optimizer.zero_grad()
            try:
                device.before_backward(len(idx), time.perf_counter() - t0)   # compute padding; OOM
                loss.backward()
            except OutOfMemoryError:
                if args.plain or not loop.config.oom_redo:
                    raise
                loop.report(oom=True)            # the hook skips the update everywhere and redoes the step
            t1 = time.perf_counter()
            if getattr(loop, "compute_end", 0.0) > t0:   # DDP: backward also waited for the others
                t1 = loop.compute_end
            loop.optimizer.step()                # the hook records the step and decides in here
            device.after_step()
            loop.report(loss=loss)
            t2 = time.perf_counter()
            step += 1
            samples += total
            steps_log.write(json.dumps({"t": round(clock(), 5), "step": step, "b": len(idx), "B": total,
                                        "full": full, "compute_s": round(t1 - t0, 6),
                                        "step_s": round(t2 - t0, 6)}) + "\n")
            if step % sc.eval_every_steps == 0:  # the same steps on every rank (collective)
                clock.pause()
                t_now = clock()
                sync_bn = getattr(loop, "sync_batchnorm_stats", None)
                if sync_bn is not None:          # every rank: the global batch's BatchNorm statistics
                    sync_bn()
                if rank == 0:
                    acc = workloads.accuracy(net, data.x_test, data.y_test)
                    if time_to_target is None and acc >= sc.target_accuracy:
                        time_to_target = t_now
                    done = t_now >= sc.max_time_s or (args.until == "target" and time_to_target is not None)
                    flag = torch.tensor([float(done), acc])
                    evals_log.write(json.dumps({"t": round(t_now, 4), "step": step, "acc": acc,  # type: ignore[union-attr]
                                                "samples": samples, "wall": round(time.perf_counter() - t_wall0, 3),
                                                "plan": list(loop.plan.batch_sizes)}) + "\n")
                flag = coll.broadcast(flag)
                stop = bool(flag[0] > 0.5)
                clock.resume()
                if stop:
                    break
        epoch += 1
    train_time = clock()
    steps_log.close()
    if rank == 0:
        assert evals_log is not None
        evals_log.close()
        summary = {"scenario": sc.name, "controller": args.controller, "time_to_target_s": time_to_target,
                   "final_accuracy": acc, "train_time_s": train_time, "steps": step, "samples": samples,
                   "samples_per_s": samples / train_time if train_time > 0 else 0.0,
                   "wall_s": time.perf_counter() - t_wall0, "world_size": world,
                   "events_applied": [{"t": t, "rank": e.rank, **dict(e.changes)} for t, e in device.applied],
                   "final_plan": list(loop.plan.batch_sizes), "seed": sc.seed}
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    if hasattr(loop, "close"):
        loop.close()
    coll.close()
    return 0


class Collectives:
    """The worker's own few collectives (start barrier, evaluation flag) and the model wrap, over
    the engine under test: Horovod (mpirun) or torch.distributed (torchrun, gloo)."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        if engine == "ddp":
            import datetime

            import torch.distributed as dist

            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
            self.dist, self.rank, self.world = dist, dist.get_rank(), dist.get_world_size()
        else:
            import horovod.torch as hvd

            hvd.init()
            self.hvd, self.rank, self.world = hvd, hvd.rank(), hvd.size()

    def wrap(self, net: torch.nn.Module) -> torch.nn.Module:
        if self.engine == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            return DistributedDataParallel(net)
        return net

    def barrier(self) -> None:
        if self.engine == "ddp":
            self.dist.barrier()
        else:
            self.hvd.allreduce(torch.zeros(2), name="dmx_start")

    def broadcast(self, flag: torch.Tensor) -> torch.Tensor:
        if self.engine == "ddp":
            self.dist.broadcast(flag, src=0)
            return flag
        return self.hvd.broadcast(flag, root_rank=0, name="dmx_eval")

    def close(self) -> None:
        if self.engine == "ddp":
            self.dist.destroy_process_group()


class _PlainLoop:
    """Plain Horovod (or plain DDP) with fixed per-rank batches (the scenario's base_batch), no
    hook: the network-only baseline and a fallback. Same surface as the hook for the loop above."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, n: int, sc: object,
                 coll: Collectives, device: EmulatedDevice) -> None:
        from dynamix_hvd.plan import Plan

        self.rank, self.world = coll.rank, coll.world
        self.plan = Plan.uniform(self.world, sc.base_batch)  # type: ignore[attr-defined]
        self.optimizer = optimizer                 # DDP: the model is already wrapped
        if coll.engine == "horovod":
            hvd = coll.hvd
            self.optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.n, self.seed, self.device = n, sc.seed, device  # type: ignore[attr-defined]

    def batches(self, epoch: int):  # noqa: ANN201
        g = torch.Generator().manual_seed(self.seed + epoch)
        perm = torch.randperm(self.n, generator=g)
        b, B = self.plan.batch_sizes[self.rank], self.plan.global_batch
        off = self.plan.offset(self.rank)
        for s in range(0, self.n - B + 1, B):
            yield perm[s + off:s + off + b]

    def report(self, loss: torch.Tensor | None = None, oom: bool = False) -> None:
        pass


if __name__ == "__main__":
    try:
        sys.exit(main())
    except EmulatedOOM as exc:
        print(f"[dynamix worker] {exc}", file=sys.stderr, flush=True)
        sys.exit(3)
