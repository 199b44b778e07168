"""The ddp engine under real torchrun (gloo): the reduced gradient equals one big batch's across
plan changes and accumulation, every index is trained exactly once per epoch, a killed job resumes
(torchrun --max-restarts, and on another number of ranks) training the rest exactly once, and a
raising rank ends the job within 30 s, a frozen one after the stall watchdog's timeout. Job: tests/launch/scripts/ddp_job.py."""
from __future__ import annotations

import functools
import re
import time
from pathlib import Path

import pytest

from conftest import BIN, REPO, job_env
from conftest import torchrun as _torchrun
from dynamix_hvd.emulate import netns
from test_bench import _bench, _check_results

JOB = str(REPO / "tests" / "launch" / "scripts" / "ddp_job.py")
EXAMPLE = REPO / "examples" / "mnist1d_ddp.py"
torchrun = functools.partial(_torchrun, script=JOB)


def seen(prefix: Path) -> list[tuple[int, int, int]]:
    """(epoch, step, index) lines of the log ``prefix`` itself, or of every rank's log
    PREFIX.<rank> / PREFIX.r<k>.<rank>."""
    files = [prefix] if prefix.is_file() else sorted(prefix.parent.glob(prefix.name + ".*"))
    return [tuple(map(int, ln.split())) for f in files for ln in f.read_text().splitlines()]  # type: ignore[misc]


@pytest.mark.parametrize("nproc,accumulation", [(1, 1), (1, 2), (4, 1), (4, 2), (2, 3)])
def test_gradient_equals_one_big_batch(nproc, accumulation):
    proc = torchrun(nproc, "--mode", "grad", "--accumulation", str(accumulation))
    m = re.search(r"GRAD worst (\S+) steps (\d+) plans (\d+) unequal_micro (\d+)", proc.stdout)
    assert m, proc.stdout[-2000:]
    worst, steps, plans, micro = float(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4))
    assert worst <= 1e-6, worst
    assert steps > 10
    if nproc > 1:
        assert plans >= 3, plans        # several uneven plans (and the epoch tails) were exercised
    if (nproc, accumulation) == (2, 3):
        assert micro > 0                # micro-batches of unequal size within a step (rescaling path)


def test_out_of_memory_on_a_uniform_step_lowers_exactly_that_cap():
    """A uniform step is averaged by the comm hook (AVG, flags included): the out-of-memory batch
    read back is the rank's own (8, not 8 / N), so its cap drops to 7 (10% below, quantum 1)."""
    proc = torchrun(2, "--mode", "oom", "--base-batch", "8")
    m = re.search(r"OOM max_batch \[(.*)\] plan \[(.*)\]", proc.stdout)
    assert m, proc.stdout[-2000:]
    caps, plan = [int(v) for v in m.group(1).split(",")], [int(v) for v in m.group(2).split(",")]
    assert caps == [64, 7], caps
    assert plan[1] <= 7 and sum(plan) == 16, plan      # the global batch kept


@pytest.mark.parametrize("nproc,lag", [(1, 0), (4, 0), (4, 1), (4, 2), (4, 3)])
def test_every_index_exactly_once_per_epoch(nproc, lag, tmp_path):
    """(lag: ``decision_lag``: rank 0's controller deciding in its thread while the ranks train on
    (1), the rows travelling on gloo during a step (2, the default), the plan too (3))"""
    samples = 1000
    torchrun(nproc, "--mode", "train", "--epochs", "2", "--samples", str(samples), "--controller", "random",
             "--seen-log", str(tmp_path / "seen"), env={"DYNAMIX_DECISION_LAG": str(lag)})
    lines = seen(tmp_path / "seen")
    for epoch in (0, 1):
        assert sorted(i for e, _, i in lines if e == epoch) == list(range(samples)), f"epoch {epoch}"
    if nproc > 1:   # the random controller changed the split: uneven local batches were trained
        sizes = {}
        for e, s, _ in lines:
            sizes[(e, s)] = sizes.get((e, s), 0) + 1
        assert len(set(sizes.values())) > 1


def test_torchrun_restart_resumes_exactly_once(tmp_path):
    """Rank 1 SIGKILLs itself at step 55; torchrun restarts all 4 workers, which resume from the
    checkpoint of step 40 and train the rest of the epoch: every index exactly once."""
    samples, ck = 2000, tmp_path / "ck.pt"
    proc = torchrun(4, "--mode", "train", "--samples", str(samples), "--controller", "proportional",
                    "--checkpoint", str(ck), "--checkpoint-every", "20", "--resume",
                    "--seen-log", str(tmp_path / "seen"), "--die-at-step", "55", restarts=1)
    assert "restarts 1" in proc.stdout, proc.stdout[-2000:]
    assert "imported horovod=False mpi4py=False" in proc.stdout   # no MPI, no Horovod in a DDP job
    first = [(s, i) for f in tmp_path.glob("seen.[0-9]") for _, s, i in seen(f)]
    again = [(s, i) for f in tmp_path.glob("seen.r1.[0-9]") for _, s, i in seen(f)]
    assert max(s for s, _ in first) >= 50 and min(s for s, _ in again) == 40   # resumed at the checkpoint
    assert sorted([i for s, i in first if s < 40] + [i for _, i in again]) == list(range(samples))


def test_resume_on_fewer_ranks_exactly_once(tmp_path):
    """A 4-rank job dies (no restarts); its checkpoint resumes under torchrun with 2 ranks, the
    global batch re-split: every index of the epoch exactly once."""
    samples, ck = 2000, tmp_path / "ck.pt"
    common = ["--mode", "train", "--samples", str(samples), "--controller", "static", "--checkpoint", str(ck),
              "--checkpoint-every", "20", "--resume"]
    first = torchrun(4, *common, "--seen-log", str(tmp_path / "a"), "--die-at-step", "30", check=False)
    assert first.returncode != 0
    torchrun(2, *common, "--seen-log", str(tmp_path / "b"))
    before = [i for _, s, i in seen(tmp_path / "a") if s < 20]
    after = [i for _, _, i in seen(tmp_path / "b")]
    assert sorted(before + after) == list(range(samples))


def test_raising_rank_ends_the_job_within_30s(tmp_path):
    proc = torchrun(4, "--mode", "train", "--samples", "20000", "--die-at-step", "5", "--die-mode", "raise",
                    "--sleep", "0.05", check=False, timeout=120)
    t_end = time.time()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "FINISHED" not in proc.stdout
    assert "injected failure in the training loop" in out
    assert "dynamix: rank 1 of 4 failed with RuntimeError" in out
    m = re.search(r"FAULT-AT ([0-9.]+)", out)
    assert m, out[-2000:]
    assert t_end - float(m.group(1)) < 30.0


def test_frozen_rank_ends_the_job_naming_it(tmp_path):
    """SIGSTOP on rank 1 (a frozen node) under torchrun: rank 0 waits in DDP's gloo allreduce; the
    hook's stall watchdog (over torch.distributed) ends the job after stall_timeout_s, naming the
    frozen rank. torchrun then gives the stopped rank its 30 s SIGTERM grace before SIGKILL
    (torch/distributed/elastic/multiprocessing/api.py, ``_close(timeout=30)``)."""
    from faultrun import run_job

    stall_s, torchrun_grace_s, slack_s = 6.0, 30.0, 15.0
    env = {**job_env(), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "DYNAMIX_STALL_TIMEOUT_S": str(stall_s)}
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", JOB, "--mode", "train",
           "--samples", "20000", "--die-at-step", "20", "--die-mode", "sigstop", "--sleep", "0.02"]
    res = run_job(cmd, env, timeout=stall_s + torchrun_grace_s + 90, cwd=str(REPO))
    assert res.returncode is not None, "the job hung after SIGSTOP:\n" + res.out[-3000:]
    assert res.returncode != 0 and "FINISHED" not in res.out
    assert re.search(r"stall watchdog on rank 0 of 2: .*unreachable or frozen: rank 1 \(", res.out), res.out[-3000:]
    took = res.end_after_fault_s
    print(f"\nfrozen rank 1 of 2 (torchrun, ddp engine, stall_timeout_s={stall_s:g}): job ended {took:.1f} s after SIGSTOP")
    assert stall_s <= took < stall_s + torchrun_grace_s + slack_s, took


def test_a_rank_with_other_settings_ends_the_job_naming_them():
    """Rank 1 alone gets DYNAMIX_DECISION_LAG=0 (torchrun --no-python through
    tests/launch/scripts/rank_env.sh): both ranks refuse when Dynamix is built, naming the field;
    before the check the job waited in different collectives until killed."""
    from faultrun import run_job

    env = {**job_env(), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "RANK_ENV": "DYNAMIX_DECISION_LAG=0"}
    cmd = [str(BIN / "torchrun"), "--standalone", "--no-python", "--nproc-per-node", "2",
           str(REPO / "tests" / "launch" / "scripts" / "rank_env.sh"), str(BIN / "python"), JOB, "--mode", "train",
           "--samples", "2000", "--controller", "goodput"]
    res = run_job(cmd, env, timeout=120, cwd=str(REPO))
    assert res.returncode is not None, "the job hung:\n" + res.out[-3000:]
    assert res.returncode != 0 and "FINISHED" not in res.out
    for rank, value in ((0, 2), (1, 0)):
        assert f"decision_lag (rank {rank}, this one, has decision_lag={value})" in res.out, res.out[-3000:]


def test_example_trains_under_torchrun(tmp_path):
    proc = torchrun(2, "--epochs", "2", "--samples", "2000", script=str(EXAMPLE),
                    env={"DYNAMIX_RUN_DIR": str(tmp_path), "DYNAMIX_CONTROLLER": "proportional"})
    m = re.search(r"final test accuracy ([0-9.]+)", proc.stdout)
    assert m, proc.stdout[-2000:]
    assert float(m.group(1)) > 0.2          # 10 classes: well above chance after 2 epochs
    assert (tmp_path / "events.jsonl").stat().st_size > 0


def test_example_is_three_lines_from_plain_ddp():
    import difflib

    plain = EXAMPLE.with_name("mnist1d_ddp_plain.py")
    a, b = plain.read_text().splitlines(), EXAMPLE.read_text().splitlines()
    changed = [ln for ln in difflib.unified_diff(a, b, lineterm="", n=0)
               if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert 0 < len([ln for ln in changed if ln.startswith("+")]) <= 3, changed
    assert len([ln for ln in changed if ln.startswith("-")]) <= 3, changed
    assert any("loss.backward()" in ln for ln in b) and any("optimizer.step()" in ln for ln in b)


@pytest.mark.skipif(not netns.netns_available()[0], reason="network namespaces not permitted here")
def test_bench_engine_ddp_over_namespaces(tmp_path):
    """`dynamix bench --engine ddp`: one torchrun per emulated rank in its namespace; the oracle
    gives the fast rank more and balances the compute better than static."""
    p, out = _bench(tmp_path, "static,oracle", "--engine", "ddp")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "engine ddp" in p.stdout and "netns+tc" in p.stdout
    res = _check_results(out, ["static", "oracle"])
    assert res["engine"] == "ddp"
    oracle, static = res["controllers"]["oracle"], res["controllers"]["static"]
    assert oracle["decisions"] >= 1 and oracle["final_plan"][0] > oracle["final_plan"][1]
    assert static["decisions"] == 0
    assert oracle["balance_efficiency"] > static["balance_efficiency"]
    assert "torch.distributed.run" in (out / "oracle" / "command.txt").read_text()


def test_a_rank_that_leaves_a_step_out_ends_the_job_naming_it():
    """Rank 1 takes the batch of step 7 and goes on to the next one without backward or step (a
    ``continue`` on a loss that is not finite, say). Before the check the job hung (rank 0 waited in
    DDP's allreduce for a rank a step behind; the watchdog sees both alive): killed after 300 s. Now
    rank 1 raises StepSkippedError as it takes the next batch, and the job ends."""
    from faultrun import run_job

    env = {**job_env(), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", JOB, "--mode", "train",
           "--epochs", "2", "--die-at-step", "7", "--die-mode", "skip"]
    res = run_job(cmd, env, timeout=120, cwd=str(REPO))
    assert res.returncode is not None, "the job hung:\n" + res.out[-3000:]
    assert res.returncode != 0 and "FINISHED" not in res.out
    assert ("StepSkippedError: dynamix: rank 1 of 2 took its next batch without calling optimizer.step() for the "
            "batch of step 7") in res.out, res.out[-3000:]
    took = res.end_after_fault_s
    print(f"\nddp engine, rank 1 left step 7 out: job ended {took:.1f} s after")
    assert took < 30, took


@pytest.mark.parametrize("fault", [None, "skip-backward"])
def test_a_micro_batch_left_without_backward_ends_the_job_naming_it(tmp_path, fault):
    """Accumulation 2: rank 1 takes micro-batch 0 of step 7 and runs no backward for it, then goes
    on with micro-batch 1 and steps. DDP's ``no_sync`` hides the first micro-batch's backward, so
    before session 75 the job ended normally with that micro-batch's samples counted as trained and
    not in the gradient. Now rank 1 raises StepSkippedError as it takes micro-batch 1, and the job
    ends. Without the fault the same job trains every index of the epoch once (the forward hook
    that marks each micro-batch's backward raises nothing)."""
    from faultrun import run_job

    log = tmp_path / "seen"
    env = {**job_env(), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", JOB, "--mode", "train", "--samples", "2000",
           "--accumulation", "2", "--seen-log", str(log)] + (["--die-at-step", "7", "--die-mode", fault] if fault else [])
    res = run_job(cmd, env, timeout=120, cwd=str(REPO))
    assert res.returncode is not None, "the job hung:\n" + res.out[-3000:]
    if fault is None:
        assert res.returncode == 0 and "FINISHED" in res.out, res.out[-3000:]
        assert sorted(i for _, _, i in seen(log)) == list(range(2000))
        return
    assert res.returncode != 0 and "FINISHED" not in res.out
    assert ("StepSkippedError: dynamix: rank 1 of 2 ran loss.backward() for 0 of the first 1 micro-batch(es) of "
            "step 7 (accumulation=2)") in res.out, res.out[-3000:]
    assert res.end_after_fault_s < 30, res.end_after_fault_s


def test_torch_grad_scaler_leaving_out_overflowed_updates(tmp_path):
    """The real torch.amp.GradScaler (``scaler.step(optimizer)`` after backward), started at a scale
    that overflows: it leaves out updates on every rank alike and the job trains on, every index
    of the epoch exactly once."""
    log = tmp_path / "seen"
    proc = torchrun(2, "--mode", "train", "--samples", "2000", "--grad-scaler", "--seen-log", str(log),
                    check=False, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    m = re.search(r"FINISHED steps (\d+) left out (\d+)", proc.stdout)
    assert m and int(m.group(2)) >= 1, out[-3000:]
    assert sorted(i for _, _, i in seen(log)) == list(range(2000))


@pytest.mark.parametrize("who", ["every rank", "rank 1"])
def test_an_update_left_out_after_the_reduction(tmp_path, who):
    """After backward (DDP reduced the step's gradients) the update of step 7 is left out, as
    torch.amp.GradScaler does on an overflow. By every rank: the job trains on, every index of the
    epoch exactly once (the step's samples count as consumed). By rank 1 alone: the models would
    differ from there on; every rank raises StepSkippedError at the next step."""
    log = tmp_path / "seen"
    proc = torchrun(2, "--mode", "train", "--samples", "2000", "--die-at-step", "7", "--die-mode", "skip-update",
                    "--die-rank", "-1" if who == "every rank" else "1", "--seen-log", str(log), check=False,
                    timeout=120)
    out = proc.stdout + proc.stderr
    if who == "every rank":
        assert proc.returncode == 0 and "FINISHED" in proc.stdout, out[-3000:]
        assert sorted(i for _, _, i in seen(log)) == list(range(2000))
        return
    assert proc.returncode != 0 and "FINISHED" not in proc.stdout
    for rank in (0, 1):
        assert (f"dynamix: rank {rank} of 2 failed with StepSkippedError: dynamix: rank(s) [1] left out the update "
                "of step 7") in out, out[-3000:]
