"""Tries bad inputs against every user-facing parser and prints a Markdown table of what each
produced (exception type and message). Reproduce the README table with:

    .venv/bin/python scripts/bad_inputs.py
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

TMP = Path(tempfile.mkdtemp(prefix="dynamix-bad-"))


def f(name: str, text: str | bytes) -> Path:
    p = TMP / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def cases() -> list[tuple[str, Callable[[], object]]]:
    from dynamix_hvd import checkpoint
    from dynamix_hvd.config import DynamixConfig
    from dynamix_hvd.controllers import make_controller
    from dynamix_hvd.data import ExactOnceSampler
    from dynamix_hvd.emulate.scenario import load_scenario, parse_scenario
    from dynamix_hvd.lr import lr_factor
    from dynamix_hvd.plan import Plan, PlanBounds

    ok_workers = "[[workers]]\nfixed_ms = 1\nper_sample_ms = 0.1\nmax_batch = 64\nbandwidth_mbit = 100\nlatency_ms = 1\n"
    head = 'name = "x"\nworkload = "mnist1d_mlp"\ntarget_accuracy = 0.5\nmax_time_s = 60\nbase_batch = 32\nseed = 0\n'
    b2 = PlanBounds(max_batch=(64, 64))
    return [
        ("config `base_batch=0`", lambda: DynamixConfig.load(env={}, base_batch=0)),
        ("config `base_batch='32'` (a string)", lambda: DynamixConfig.load(env={}, base_batch="32")),
        ("config `controller='pid'`", lambda: DynamixConfig.load(env={}, controller="pid")),
        ("config `interval_steps=0`", lambda: DynamixConfig.load(env={}, interval_steps=0)),
        ("config `deadband=1.5`", lambda: DynamixConfig.load(env={}, deadband=1.5)),
        ("config `lr_rule='cosine'`", lambda: DynamixConfig.load(env={}, lr_rule="cosine")),
        ("config `max_batch=0`", lambda: DynamixConfig.load(env={}, max_batch=0)),
        ("config `max_batch` with 3 values in a 2-rank job",
         lambda: DynamixConfig(base_batch=4, max_batch=(4, 4, 4)).validate(world_size=2)),
        ("config `base_batch=2048` above `max_batch=1024`", lambda: DynamixConfig.load(env={}, base_batch=2048)),
        ("config unknown keyword `batch=3`", lambda: DynamixConfig.load(env={}, batch=3)),
        ("config `accumulation=0`", lambda: DynamixConfig.load(env={}, accumulation=0)),
        ("config `guard_drop=2`", lambda: DynamixConfig.load(env={}, guard_drop=2.0)),
        ("config `stall_timeout_s=-5` (negative)", lambda: DynamixConfig.load(env={}, stall_timeout_s=-5)),
        ("config `stall_timeout_s=0.5` (neither 0 = off nor >= 1 s)",
         lambda: DynamixConfig.load(env={}, stall_timeout_s=0.5)),
        ("config `stall_timeout_s='60'` (a string)", lambda: DynamixConfig.load(env={}, stall_timeout_s="60")),
        ("config `stall_timeout_s=nan`", lambda: DynamixConfig.load(env={}, stall_timeout_s=float("nan"))),
        ("env `DYNAMIX_DEADBAND=x`", lambda: DynamixConfig.load(env={"DYNAMIX_DEADBAND": "x"})),
        ("env `DYNAMIX_SHUFFLE=maybe`", lambda: DynamixConfig.load(env={"DYNAMIX_SHUFFLE": "maybe"})),
        ("env `DYNAMIX_MAX_BATCH=64,abc`", lambda: DynamixConfig.load(env={"DYNAMIX_MAX_BATCH": "64,abc"})),
        ("env `DYNAMIX_STALL_TIMEOUT_S=soon`", lambda: DynamixConfig.load(env={"DYNAMIX_STALL_TIMEOUT_S": "soon"})),
        ("env `DYNAMIX_STALL_TIMEOUT_S=-3`", lambda: DynamixConfig.load(env={"DYNAMIX_STALL_TIMEOUT_S": "-3"})),
        ("config file that does not exist", lambda: DynamixConfig.load(TMP / "nope.toml", env={})),
        ("config file with broken TOML", lambda: DynamixConfig.load(f("broken.toml", "base_batch = ["), env={})),
        ("config file with unknown key", lambda: DynamixConfig.load(f("unk.toml", "batchsize = 3\n"), env={})),
        ("plan with a negative batch size", lambda: Plan(0, (4, -1))),
        ("plan whose sizes sum to 0", lambda: Plan(0, (0, 0))),
        ("plan record missing `start_step`", lambda: Plan.from_dict({"version": 1, "batch_sizes": [1]})),
        ("bounds `quantum=0`", lambda: PlanBounds(max_batch=(8,), quantum=0)),
        ("sampler over an empty dataset", lambda: ExactOnceSampler(0, Plan(0, (1,)))),
        ("sampler resumed from another dataset's checkpoint",
         lambda: ExactOnceSampler(101, Plan(0, (4,))).load_state_dict(ExactOnceSampler(100, Plan(0, (4,))).state_dict())),
        ("checkpoint that does not exist", lambda: checkpoint.load(TMP / "none.pt")),
        ("checkpoint with garbage bytes", lambda: checkpoint.load(f("bad.pt", b"\x00garbage"))),
        ("checkpoint not written by dynamix", lambda: (__import__("torch").save({"model": 1}, TMP / "other.pt"),
                                                       checkpoint.load(TMP / "other.pt"))),
        ("unknown controller name", lambda: make_controller("pid", b2, 8)),
        ("LR rule `cosine`", lambda: lr_factor("cosine", 64, 32)),
        ("scenario with unknown worker key", lambda: parse_scenario(head + ok_workers + "gpu = 1\n")),
        ("scenario with negative `per_sample_ms`",
         lambda: parse_scenario(head + ok_workers.replace("per_sample_ms = 0.1", "per_sample_ms = -1"))),
        ("scenario without `[[workers]]`", lambda: parse_scenario(head)),
        ("scenario missing `target_accuracy`",
         lambda: parse_scenario(head.replace("target_accuracy = 0.5\n", "") + ok_workers)),
        ("scenario event for rank 7 of 1", lambda: parse_scenario(head + ok_workers + "[[events]]\nat_s = 1\nrank = 7\nfixed_ms = 2\n")),
        ("scenario file that does not exist", lambda: load_scenario(TMP / "missing.toml")),
        ("scenario file with broken TOML", lambda: load_scenario(f("s.toml", "name = "))),
        *trace_cases(),
        ("PPO policy file that does not exist", lambda: make_controller("ppo", b2, 8, policy=str(TMP / "p.zip"))),
        ("PPO policy file that is not a zip", lambda: make_controller("ppo", b2, 8, policy=str(f("p.zip", b"junk")))),
        *unsafe_file_cases(b2),
    ]


class _Payload:
    """Unpickling this would run ``touch`` (os.system): what a tampered file carries."""

    def __reduce__(self):
        import os
        return (os.system, (f"touch {TMP / 'PWNED'}",))


def _torch_bytes(obj: object) -> bytes:
    import io

    import torch
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _policy_zip(name: str, replace: dict[str, bytes]) -> Path:
    """The shipped default policy zip with some members replaced."""
    import zipfile

    from dynamix_hvd.controllers.policy.io import default_policy_path
    out = TMP / name
    with zipfile.ZipFile(default_policy_path()) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.namelist():
            dst.writestr(item, replace.get(item, src.read(item)))
    return out


def _data_field_payload() -> bytes:
    import base64
    import json
    import pickle
    import zipfile

    from dynamix_hvd.controllers.policy.io import default_policy_path
    with zipfile.ZipFile(default_policy_path()) as z:
        data = json.loads(z.read("data"))
    data["clip_range"] = {":serialized:": base64.b64encode(pickle.dumps(_Payload())).decode()}
    return json.dumps(data).encode()


def _sb3_mlp_zip() -> Path:
    import warnings

    from stable_baselines3 import PPO
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PPO("MlpPolicy", "CartPole-v1", device="cpu", n_steps=8, batch_size=8).save(TMP / "mlp.zip")
    return TMP / "mlp.zip"


def _full_disk_checkpoint() -> None:
    """A checkpoint written to a 64 KiB tmpfs (mounted here; needs root)."""
    import os
    import subprocess

    import torch

    from dynamix_hvd import checkpoint
    disk = TMP / "small"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        raise RuntimeError("not run: mounting a small tmpfs needs root")
    try:
        checkpoint.save(disk / "ck.pt", {"dynamix": {}, "model": {"w": torch.zeros(16384)}})   # 64 KiB of weights
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def trace_cases() -> list[tuple[str, Callable[[], object]]]:
    """Measured-trace files (dynamix_hvd/traces: PAI mini-batch times, Pollux workloads)."""
    from dynamix_hvd.traces.pai import load_pai_job
    from dynamix_hvd.traces.pollux import load_pollux
    hdr = "worker,time,batch_time_norm\n"
    return [
        ("PAI trace file that does not exist", lambda: load_pai_job(TMP / "job_9_norm.csv")),
        ("PAI trace without the `batch_time_norm` column", lambda: load_pai_job(f("nocol.csv", "worker,time\n0,1\n"))),
        ("PAI trace with a non-numeric cell", lambda: load_pai_job(f("nan.csv", hdr + "0,1,0.5\n0,2,fast\n"))),
        ("PAI trace whose time goes backwards for a worker",
         lambda: load_pai_job(f("back.csv", hdr + "0,1,0.5\n0,3,0.6\n0,2,0.7\n"))),
        ("PAI trace with a negative batch time", lambda: load_pai_job(f("neg.csv", hdr + "0,1,0.5\n0,2,-1\n"))),
        ("Pollux workload directory that does not exist", lambda: load_pollux(TMP / "no_workload")),
        ("Pollux `placements.csv` with a local batch below one sample (another unit)",
         lambda: load_pollux(_pollux_dir("frac", local_bsz=0.032))),
        ("Pollux workload one of whose runs never improves on the curves' start (no target without `--target`)",
         lambda: _pollux_target(_pollux_dir("flat", flat_batch=512))),
    ]


def _pollux_dir(name: str, local_bsz: float = 32, flat_batch: int = 0) -> Path:
    """A two-run workload in the Pollux format; ``flat_batch``: that run's metric never moves."""
    d = TMP / name
    d.mkdir()
    for B in (128, 512):
        rows = [f"{e * 1000 // B},{0.3 if B == flat_batch else 0.3 + 0.1 * e:.2f},1.0,2.0" for e in range(1, 6)]
        (d / f"validation-{B}.csv").write_text("iteration,metric,grad_sqr,grad_var\n" + "\n".join(rows) + "\n")
    (d / "placements.csv").write_text(f"placement,local_bsz,step_time,sync_time\n1,{local_bsz},0.1,0.0\n"
                                      f"11,{local_bsz},0.12,0.02\n")
    return d


def _pollux_target(d: Path) -> float:
    from dynamix_hvd.replay.progress import default_target, metric_increases
    from dynamix_hvd.traces.pollux import load_pollux
    w = load_pollux(d)
    return default_target(w.curves, metric_increases(w.curves))


def unsafe_file_cases(b2: object) -> list[tuple[str, Callable[[], object]]]:
    """Files that would run code if unpickled, from before plain-data checkpoints, of another
    policy class; a full disk during a checkpoint (issue 23)."""
    import numpy as np

    from dynamix_hvd import checkpoint
    from dynamix_hvd.controllers import make_controller
    return [
        ("checkpoint carrying a pickle payload (tampered)",
         lambda: checkpoint.load(f("evil.pt", _torch_bytes({"dynamix": _Payload()})))),
        ("checkpoint needing pickle (numpy scalar: written before plain-data checkpoints)",
         lambda: checkpoint.load(f("old.pt", _torch_bytes({"dynamix": {"lr_factor": np.float64(1.0)}})))),
        ("PPO policy zip with a pickle payload in `policy.pth`", lambda: make_controller(
            "ppo", b2, 8, policy=str(_policy_zip("w.zip", {"policy.pth": _torch_bytes({"w": _Payload()})})))),
        ("PPO policy zip with a pickle payload in a `data` field", lambda: make_controller(
            "ppo", b2, 8, policy=str(_policy_zip("d.zip", {"data": _data_field_payload()})))),
        ("PPO policy zip of another policy class (SB3 `MlpPolicy`)",
         lambda: make_controller("ppo", b2, 8, policy=str(_sb3_mlp_zip()))),
        ("disk full while writing a checkpoint (64 KiB tmpfs)", _full_disk_checkpoint),
    ]


def main() -> None:
    rows = cases()
    marker = TMP / "PWNED"
    print("| # | bad input | what it produced |")
    print("|---|---|---|")
    for i, (what, fn) in enumerate(rows, 1):
        try:
            fn()
            out = "**accepted (no error)**"
        except Exception as exc:  # noqa: BLE001 - the point is to show what each raises
            msg = str(exc).replace("|", "\\|").replace("\n", " ")
            if len(msg) > 180:
                msg = msg[:177] + "..."
            out = f"`{type(exc).__name__}`: {msg}"
        print(f"| {i} | {what} | {out} |")
    if marker.exists():
        raise SystemExit(f"a loader ran a pickle payload: {marker} was created")


if __name__ == "__main__":
    main()
