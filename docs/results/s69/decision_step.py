# Session 69: which step pays a blocking decision (decision_lag 0, a decision every 5 steps, 10 ms sleep per step,
# 4 ranks on 2 cores). Per step of the 5-step cycle: the whole step (rank 0), optimizer.step() and dyn.report().
#   mpirun -np 4 --allow-run-as-root --oversubscribe -x PYTHONPATH=$PWD .venv/bin/python docs/results/s69/decision_step.py
import time, warnings, numpy as np, torch, torch.nn.functional as F
import horovod.torch as hvd
from dynamix_hvd import Dynamix
hvd.init(); torch.set_num_threads(1)
def run(every, lag, ctl="ppo", steps=400, sleep=0.01):
    torch.manual_seed(0)
    x, y = torch.randn(50000, 64), torch.randint(0, 4, (50000,))
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.01), dataset_size=len(x), base_batch=16,
        controller=ctl, interval_steps=every, min_decision_s=0, first_decision_steps=2, decision_lag=lag,
        collector=True, guard_patience=10**9)
    opt = dyn.optimizer; T = []; P = []
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in range(100):
            for idx in dyn.batches(epoch):
                loss = F.cross_entropy(model(x[idx]), y[idx]); opt.zero_grad(); loss.backward(); time.sleep(sleep)
                ta = time.perf_counter(); opt.step(); tb = time.perf_counter(); dyn.report(loss=loss); tc = time.perf_counter()
                T.append(tc - t0); P.append((tb - ta, tc - tb)); t0 = tc
                if len(T) >= steps: break
            if len(T) >= steps: break
    dyn.close()
    return np.array(T[20:]) * 1e3, np.array(P[20:]) * 1e3
for ctl in ["static", "ppo"]:
  for every, lag in [(10**9, 0), (5, 0), (10**9, 0), (5, 0)]:
    T, P = run(every, lag, ctl)
    if hvd.rank() == 0:
        k = np.arange(len(T)) % 5
        print(ctl, every, lag, "mean %.3f" % T.mean(), "by mod5:", " ".join("%.2f" % T[k == i].mean() for i in range(5)),
              "| step() by mod5:", " ".join("%.2f" % P[k == i, 0].mean() for i in range(5)),
              "| report by mod5:", " ".join("%.2f" % P[k == i, 1].mean() for i in range(5)), flush=True)
