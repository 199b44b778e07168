"""Session 36: workloads and speed traces unlike any in the repository, made from the shipped ones,
written into the current directory (one_batch/, bert2/, ds_fast/, pai4.csv, cov3.csv).

    python novel_inputs_make.py [TRACES_DIR]    # TRACES_DIR: the shared traces (pollux/, pai/)
"""
import csv
import os
import shutil
import sys

import numpy as np

S = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/traces"
rng = np.random.default_rng(7)
def copywl(src, dst, keep=None, tscale=1.0):
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        if f.startswith("validation-"):
            B = int(f[11:-4])
            if keep is not None and B not in keep: continue
            shutil.copy(os.path.join(src, f), os.path.join(dst, f))
        elif f in ("placements.csv", "scalability.csv"):
            rows = list(csv.reader(open(os.path.join(src, f))))
            h = rows[0]
            out = [h]
            for r in rows[1:]:
                r = list(r)
                for c in ("step_time", "sync_time"):
                    i = h.index(c); r[i] = str(float(r[i]) * tscale)
                out.append(r)
            csv.writer(open(os.path.join(dst, f), "w", newline="")).writerows(out)
# 1: one validation file only, cifar10 slowed 3x
copywl(f"{S}/pollux/cifar10", "one_batch", keep={256}, tscale=3.0)
# 2: bert with only placements (no scalability) and 2 batches
copywl(f"{S}/pollux/bert", "bert2", keep={12, 384})
if os.path.exists("bert2/scalability.csv"):
    os.remove("bert2/scalability.csv")
# 3: deepspeech2 fast (0.1x times)
copywl(f"{S}/pollux/deepspeech2", "ds_fast", tscale=0.1)
# 4: PAI job with 4 workers, ids 3,5,8,9, some rows dropped
rows = list(csv.reader(open(f"{S}/pai/job_2_norm.csv")))
h = rows[0]; keep = {"3", "5", "8", "9"}
out = [h] + [r for r in rows[1:] if r[1] in keep and rng.random() > 0.05]
csv.writer(open("pai4.csv", "w", newline="")).writerows(out)
# 5: CoV with 3 jobs of different lengths, heavy tail
with open("cov3.csv", "w") as f:
    f.write("," + ",".join(str(i) for i in range(50)) + "\n")
    for j, (n, m) in enumerate([(50, 0.05), (10, 2.5), (30, 0.5)]):
        v = rng.gamma(2.0, m / 2, n)
        f.write(f"job_{j}," + ",".join(f"{x:.4f}" for x in v) + "," * (50 - n) + "\n")
