"""Experiment (session 57, not the product): PPO in the replay world on the time-to-target reward, starting from an
imitation policy's weights (its observation and actions), the actor frozen while the critic learns for --critic-steps.

    PYTHONPATH=. .venv/bin/python docs/results/s57/ft_from_imitation.py --init runs/s56/po_s0.zip --out runs/s57/ft_a.zip \
        --timesteps 61440 --lr 3e-5 --clip 0.1 --critic-steps 8192
"""
import argparse, sys, time, json
from pathlib import Path
import numpy as np, torch

from dynamix_hvd.agent import train as T
from dynamix_hvd.agent.replay_train import config_from_args, REPLAY_PPO
from dynamix_hvd.controllers.policy.io import read_policy_file

ap = argparse.ArgumentParser()
ap.add_argument("--init", required=True); ap.add_argument("--out", required=True)
ap.add_argument("--timesteps", type=int, default=20000); ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--lr", type=float, default=3e-5); ap.add_argument("--critic-steps", type=int, default=4096)
ap.add_argument("--n-envs", type=int, default=8); ap.add_argument("--ent", type=float, default=0.0)
ap.add_argument("--clip", type=float, default=0.1)
a = ap.parse_args()
p = argparse.ArgumentParser(); T.add_arguments(p)
recipe = ("--world replay --method ppo --horizon 20 --threads 1 --pass-hold --pass-action --pass-only "
          "--disable system,network --history 0 --global-scales 0.5,0.8,1.0,1.25,1.6,2.0,3.0").split()
args = p.parse_args(recipe + ["--out", a.out])
cfg = config_from_args(args)

from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv
from dynamix_hvd.agent.curriculum import WorldPool
from dynamix_hvd.agent.replay_env import make_replay_env
from dynamix_hvd.controllers.policy.net import SharedRowPolicy
from dynamix_hvd.agent.run_files import save_run
torch.set_num_threads(1)
pf = read_policy_file(a.init)
dyn = pf.policy_kwargs["dynamix_config"]
mine = cfg.to_dict()
for k in ("obs", "action", "history"):
    if json.dumps(dyn.get(k), sort_keys=True) != json.dumps(mine.get(k), sort_keys=True):
        sys.exit(f"{a.init}: its {k} {dyn.get(k)!r} is not the recipe's {mine.get(k)!r}")
pool = WorldPool(cfg.worlds, a.seed + 500, curriculum=cfg.curriculum)
venv = DummyVecEnv([make_replay_env(cfg, pool, seed=(a.seed + 500) * 1000 + i) for i in range(a.n_envs)])
hp = dict(REPLAY_PPO, learning_rate=a.lr, ent_coef=a.ent, clip_range=a.clip)
kw = {k: v for k, v in pf.policy_kwargs.items()}
model = PPO(SharedRowPolicy, venv, seed=a.seed, verbose=0, device="cpu", policy_kwargs=kw, **hp)
missing = model.policy.load_state_dict(pf.weights, strict=False)
print("loaded", a.init, missing, flush=True)
# critic warm-up: only the value head learns for the first critic_steps
actor = [q for n, q in model.policy.named_parameters() if "value" not in n and "vf" not in n]
print("params", [n for n, _ in model.policy.named_parameters()], flush=True)
eps = []; t0 = time.perf_counter(); ret = np.zeros(a.n_envs); curve = []
class Track(BaseCallback):
    def _on_step(self):
        ret[:] += self.locals["rewards"]
        for i, (d, info) in enumerate(zip(self.locals["dones"], self.locals["infos"])):
            if d:
                eps.append((float(ret[i]), float(info.get("ratio_to_goodput", np.nan)))); ret[i] = 0
        return True
    def _on_rollout_end(self):
        frozen = self.num_timesteps < a.critic_steps
        for q in actor: q.requires_grad_(not frozen)
        if eps:
            last = np.array(eps[-50:])
            curve.append((self.num_timesteps, float(last[:, 0].mean()), float(np.nanmean(last[:, 1])), time.perf_counter() - t0))
            print(f"{self.num_timesteps:7d} eps {len(eps):4d} ret {curve[-1][1]:+.3f} t/g {curve[-1][2]:.3f} "
                  f"{'critic-only ' if frozen else ''}{curve[-1][3]:.0f}s", flush=True)
for q in actor: q.requires_grad_(False)
model.learn(total_timesteps=a.timesteps, callback=Track())
save_run(model, Path(a.out), curve, ["timesteps", "ret", "t_over_g", "wall_s"],
         {"world": "replay", "init": a.init, "env": dyn, "ppo": hp, "seed": a.seed, "timesteps": a.timesteps}, lambda *x: None)
print("saved", a.out, time.perf_counter() - t0, flush=True)
