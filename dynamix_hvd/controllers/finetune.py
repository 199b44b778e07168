"""Online PPO fine-tuning of the DYNAMIX policy on rank 0 (``DynamixConfig(finetune=True)``).

Every decision of a fine-tuning ``PPOController`` goes through ``FineTuner.step``:

1. the reward of the *previous* action is computed from the new state with the reward the policy
   was trained with (``dynamix_hvd.reward.reward_terms`` and the weights stored in the policy zip;
   see ``controllers.live_reward``), and the previous (observation, action, value, log-prob) becomes a transition
   in a stable-baselines3 ``RolloutBuffer``;
2. the action for this decision is *sampled* from the acting policy (exploration and valid
   log-probs for PPO), together with the critic's value, under a lock;
3. when the buffer holds ``steps`` transitions it is handed to a background thread that runs
   SB3's ``PPO.train()`` (after ``compute_returns_and_advantage``) on the controller's own copy of
   the policy, then loads the new weights into the acting policy under the lock. Decisions never
   wait for an update; while one runs they keep using the current weights. A rollout that fills
   up while the previous update still runs is dropped (counted), never queued.

The number of workers N is fixed within a job, so the buffer's observation space is (N, 1 + F)
(column 0 = the valid-row mask of ``state.pad_rows``, all ones) and the action space
MultiDiscrete([n_levels] * N + [n_global]): the policy's parameters do not depend on the number
of rows (``controllers.policy.net``), so the zip trained on padded 64-row observations is loaded for N rows.

Fine-tuning on simulated episodes (benchmarks, tests) is ``agent.finetune_sim.finetune_in_sim``.

Nothing here touches the process-wide random generators (the training job's own randomness stays
as without fine-tuning): sampling uses a private ``torch.Generator``, minibatch shuffling a private
numpy generator, and building the policy restores the global torch RNG state.
"""
from __future__ import annotations

import copy
import math
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Generator, Sequence

import numpy as np
import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.type_aliases import RolloutBufferSamples

from dynamix_hvd.controllers.policy.io import PolicyLoadError, decode_state, load_policy  # noqa: F401
from dynamix_hvd.controllers.policy.net import OBS_LIMIT
from dynamix_hvd.controllers.live_reward import live_reward, reference_goodput  # noqa: F401 (re-exported)
from dynamix_hvd.state import pad_rows

STATE_FORMAT = 2          # 2: weights as tensors in the state; 1: base64 of a torch.save blob (still read)


def finetune_weights(state: dict[str, Any]) -> dict[str, Any]:
    """{"policy": state dict[, "optimizer": ...]} of a fine-tuning state (format 2, or format 1's
    base64 blob decoded with ``weights_only=True``)."""
    if isinstance(state.get("weights"), str):
        return decode_state(state["weights"])
    if not isinstance(state.get("policy"), dict):
        raise PolicyLoadError(f"fine-tuning state (format {state.get('format')!r}) holds no policy weights")
    return {"policy": state["policy"], "optimizer": state.get("optimizer")}


# ============================================================================ SB3 plumbing
class _RolloutBuffer(RolloutBuffer):
    """SB3's RolloutBuffer with minibatches shuffled by a private generator (the stock one uses
    the global ``np.random``, which would disturb the training job's randomness from a thread)."""

    def __init__(self, *args: Any, rng: np.random.Generator, **kwargs: Any) -> None:
        self.rng = rng
        super().__init__(*args, **kwargs)

    def get(self, batch_size: int | None = None) -> Generator[RolloutBufferSamples, None, None]:
        assert self.full, "the rollout buffer is not full"
        total = self.buffer_size * self.n_envs
        indices = self.rng.permutation(total)
        if not self.generator_ready:
            for name in ("observations", "actions", "values", "log_probs", "advantages", "returns"):
                self.__dict__[name] = self.swap_and_flatten(self.__dict__[name])
            self.generator_ready = True
        batch_size = batch_size or total
        for start in range(0, total, batch_size):
            yield self._get_samples(indices[start:start + batch_size])


class _KeepRng:
    """Restore the global torch / numpy / python RNG states on exit (building a policy draws
    initial weights from the global torch generator)."""

    def __enter__(self) -> None:
        import random
        self._th = th.random.get_rng_state()
        self._np = np.random.get_state()
        self._py = random.getstate()

    def __exit__(self, *exc: Any) -> None:
        import random
        th.random.set_rng_state(self._th)
        np.random.set_state(self._np)
        random.setstate(self._py)


def load_model(path: str | os.PathLike, n_workers: int, *, steps: int = 32, lr: float = 1e-4, epochs: int = 4,
               batch_size: int | None = None) -> Any:
    """A private SB3 ``PPO`` built from the policy zip for exactly ``n_workers`` rows, with the
    fine-tuning hyper-parameters (the rest — gamma, GAE lambda, clip range, entropy and value
    coefficients, gradient clipping — as the policy was trained). Nothing in the file is
    unpickled: configuration, weights and Adam state come from ``policy_io.read_policy_file``
    (``PPO.load`` is never called). Never the cached policy of ``controllers.ppo.load_policy``."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import Logger

    from dynamix_hvd.controllers.policy.net import SharedRowPolicy
    from dynamix_hvd.controllers.policy.io import policy_spaces, read_policy_file

    pf = read_policy_file(path)
    obs_space, act_space = policy_spaces(n_workers, pf.n_features, pf.nvec[0], pf.nvec[-1])
    h = pf.hyper
    try:
        with _KeepRng():
            model = PPO(SharedRowPolicy, env=None, device="cpu", _init_setup_model=False)
            model.observation_space, model.action_space, model.n_envs = obs_space, act_space, 1
            model.policy_kwargs = dict(pf.policy_kwargs)
            for key in ("gamma", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm", "normalize_advantage",
                        "target_kl", "clip_range_vf"):
                if key in h:
                    setattr(model, key, h[key])
            model.clip_range = float(h.get("clip_range", 0.2))
            model.learning_rate = float(lr)
            model.n_steps, model.n_epochs = int(steps), int(epochs)
            model.batch_size = int(batch_size or min(steps, 64))
            model.seed, model._current_progress_remaining = None, 1.0
            model._setup_model()
            model.policy.load_state_dict(pf.weights, strict=True)
            if pf.optimizer is not None:
                model.policy.optimizer.load_state_dict(pf.optimizer)
    except Exception as exc:  # noqa: BLE001 - any failure here means the file is unusable
        raise PolicyLoadError(f"policy file {pf.path} could not be loaded for fine-tuning "
                              f"({type(exc).__name__}: {exc})") from exc
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def save_policy_zip(source: str | os.PathLike, policy_state: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write an SB3 zip (loadable by ``controllers.ppo.load_policy``) holding ``policy_state`` with
    the configuration of the policy zip ``source`` (read without unpickling)."""
    from dynamix_hvd.controllers.policy.io import read_policy_file
    model = load_model(source, read_policy_file(source).n_rows)
    model.policy.load_state_dict(policy_state)
    return _save(model, path)


def _save(model: Any, path: str | os.PathLike) -> Path:
    """``model.save`` (plain SB3 zip), written to a temporary name in the same directory and renamed."""
    out = Path(path)
    out = out if out.suffix == ".zip" else out.with_name(out.name + ".zip")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp.zip")
    try:
        model.save(tmp)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def _lower_thread_priority() -> None:
    """The update is background work: let the training loop have the CPU first (Linux: per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


# ============================================================================ the fine-tuner
class FineTuner:
    """Rollout buffer, background PPO updates and the acting copy of the policy (see module doc)."""

    def __init__(self, policy_path: str | os.PathLike, n_workers: int, *, steps: int = 32, lr: float = 1e-4,
                 epochs: int = 4, batch_size: int | None = None, seed: int = 0) -> None:
        if steps < 2:
            raise ValueError(f"finetune_steps={steps}: must be >= 2")
        self.policy_path = Path(policy_path)
        self.n = int(n_workers)
        self.steps = int(steps)
        self.model = load_model(self.policy_path, self.n, steps=steps, lr=lr, epochs=epochs, batch_size=batch_size)
        self.acting = copy.deepcopy(self.model.policy)   # decisions use this one; the thread trains model.policy
        self.acting.set_training_mode(False)
        self.acting.optimizer = None                     # never stepped; keeps the deep copy light
        self.lock = threading.Lock()
        self.gen = th.Generator().manual_seed(int(seed))
        self.rng = np.random.default_rng(int(seed))
        self.buffer = self._new_buffer()
        self._pending: tuple[np.ndarray, np.ndarray, th.Tensor, th.Tensor] | None = None
        self._episode_start = False
        self._thread: threading.Thread | None = None
        self._opt_state = copy.deepcopy(self.model.policy.optimizer.state_dict())
        self._blob: tuple[int | None, dict[str, Any] | None] = (None, None)
        self.n_updates = 0
        self.n_transitions = 0
        self.rollouts_dropped = 0         # full rollouts dropped because an update was still running
        self.rewards_missing = 0          # transitions dropped for lack of a finite reward
        self.update_s: deque[float] = deque(maxlen=100)
        self.last_train: dict[str, float] = {}
        self.error: str | None = None

    # ----------------------------------------------------------------- acting
    def _new_buffer(self) -> _RolloutBuffer:
        m = self.model
        return _RolloutBuffer(self.steps, m.observation_space, m.action_space, device="cpu", gamma=m.gamma,
                              gae_lambda=m.gae_lambda, n_envs=1, rng=self.rng)

    def policy_input(self, obs: np.ndarray) -> np.ndarray:
        """(N, F) observation -> the (N, 1 + F) rows the SB3 policy sees (mask column, clipped)."""
        if obs.ndim != 2 or obs.shape[0] != self.n:
            raise ValueError(f"observation has shape {obs.shape}; this fine-tuner was built for {self.n} workers "
                             "(the number of workers is fixed within a job)")
        return np.clip(pad_rows(obs, self.n), -OBS_LIMIT, OBS_LIMIT)

    @th.no_grad()
    def _sample(self, x: np.ndarray) -> tuple[np.ndarray, th.Tensor, th.Tensor]:
        """Sampled action (N + 1,), value (1, 1) and log-prob (1,) of the acting policy; caller holds the lock."""
        pol = self.acting
        obs = th.as_tensor(x, dtype=th.float32).unsqueeze(0)
        features = pol.extract_features(obs)
        net = pol.mlp_extractor
        row, glob = net.actor_logits(features)
        value = pol.value_net(net.forward_critic(features))
        row_lp = th.log_softmax(row[0], dim=-1)                          # (N, L)
        glob_lp = th.log_softmax(glob[0], dim=-1)                        # (G,)
        ra = th.multinomial(row_lp.exp(), 1, generator=self.gen).squeeze(1)
        ga = th.multinomial(glob_lp.exp(), 1, generator=self.gen)
        log_prob = row_lp.gather(1, ra.unsqueeze(1)).sum() + glob_lp[ga[0]]
        action = th.cat([ra, ga]).numpy().astype(np.int64)
        return action, value, log_prob.reshape(1)

    def step(self, obs: np.ndarray, reward: float | None) -> tuple[np.ndarray, int]:
        """Record ``reward`` for the previous action, sample this decision's action; returns level
        indices (N,) in 0..n_levels-1 and the global-scale index. Never waits for an update."""
        x = self.policy_input(obs)
        self._record(reward)
        with self.lock:
            action, value, log_prob = self._sample(x)
        if self.buffer.full:
            self._launch(value)
        self._pending = (x, action, value, log_prob)
        return action[: self.n], int(action[self.n])

    def _record(self, reward: float | None) -> None:
        """The previous action's transition, with ``reward``, into the rollout buffer."""
        if self._pending is None:
            return
        if reward is not None and math.isfinite(reward):
            px, pa, pv, plp = self._pending
            self.buffer.add(px[None], pa[None], np.array([reward], dtype=np.float32),
                            np.array([float(self._episode_start)]), pv, plp)
            self._episode_start = False
            self.n_transitions += 1
        else:
            self.rewards_missing += 1
        self._pending = None

    def skip(self, reward: float | None) -> None:
        """This decision is not the policy's (the controller's training-support guard took the
        no-op): ``reward`` closes the previous action's transition and the trajectory ends there."""
        self._record(reward)
        self.end_episode()

    def end_episode(self) -> None:
        """The decision stream restarts (e.g. a new simulated episode): the action waiting for its
        reward is dropped and the next transition starts a new episode (no bootstrapping across)."""
        self._pending = None
        self._episode_start = True

    def deterministic(self, obs: np.ndarray) -> tuple[np.ndarray, int]:
        """Greedy action of the current weights (evaluation; not recorded)."""
        with self.lock:
            return self.acting.mlp_extractor.act_rows(obs, deterministic=True)

    # ----------------------------------------------------------------- updating
    @property
    def updating(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _launch(self, last_value: th.Tensor) -> None:
        buf, self.buffer = self.buffer, self._new_buffer()
        if self.updating or self.error is not None:
            self.rollouts_dropped += 1
            return
        self._thread = threading.Thread(target=self._update, args=(buf, last_value.clone()),
                                        name="dynamix-finetune", daemon=True)
        self._thread.start()

    def _update(self, buf: _RolloutBuffer, last_value: th.Tensor) -> None:
        _lower_thread_priority()
        t0 = time.perf_counter()
        try:
            buf.compute_returns_and_advantage(last_values=last_value, dones=np.zeros(1))
            m = self.model
            m.rollout_buffer = buf
            m._current_progress_remaining = 1.0
            m.train()
            new = {k: v.detach().clone() for k, v in m.policy.state_dict().items()}
            opt = copy.deepcopy(m.policy.optimizer.state_dict())
            info = {k.split("/")[-1]: float(v) for k, v in m.logger.name_to_value.items()
                    if isinstance(v, (int, float, np.floating))}
            info["mean_reward"] = float(np.mean(buf.rewards))
            with self.lock:                      # the swap: decisions see old or new weights, never a mix
                self.acting.load_state_dict(new)
                self._opt_state = opt
                self.n_updates += 1
                self.last_train = info
        except BaseException as exc:  # noqa: BLE001 - reported through stats(); acting goes on unchanged
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.update_s.append(time.perf_counter() - t0)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a running update finished (tests, checkpoint files); True when idle."""
        t = self._thread
        if t is not None:
            t.join(timeout)
        return not self.updating

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Weights of the acting policy and Adam's state as tensors and plain data (a checkpoint
        reads them back with ``weights_only=True``); never blocks on a running update (it holds
        the weights of the last finished update)."""
        with self.lock:
            if self._blob[0] != self.n_updates or self._blob[1] is None:
                self._blob = (self.n_updates, {"policy": {k: v.detach().clone() for k, v in self.acting.state_dict().items()},
                                               "optimizer": copy.deepcopy(self._opt_state)})
            return {"format": STATE_FORMAT, "n_updates": self.n_updates, "n_transitions": self.n_transitions,
                    "rollouts_dropped": self.rollouts_dropped, **self._blob[1]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        payload = finetune_weights(state)
        self.wait()
        with self.lock:
            self.acting.load_state_dict(payload["policy"])
            self.model.policy.load_state_dict(payload["policy"])
            if payload.get("optimizer"):
                self.model.policy.optimizer.load_state_dict(payload["optimizer"])
            self._opt_state = copy.deepcopy(self.model.policy.optimizer.state_dict())
            self.n_updates = int(state.get("n_updates", 0))
            self.n_transitions = int(state.get("n_transitions", 0))
            self.rollouts_dropped = int(state.get("rollouts_dropped", 0))
            self._blob = (None, None)
        self.buffer = self._new_buffer()
        self._pending = None

    def save(self, path: str | os.PathLike) -> Path:
        """SB3 zip of the current acting weights (waits for a running update)."""
        self.wait()
        with self.lock:
            self.model.policy.load_state_dict(self.acting.state_dict())
            return _save(self.model, path)

    def stats(self) -> dict[str, Any]:
        d: dict[str, Any] = {"n_updates": self.n_updates, "n_transitions": self.n_transitions,
                             "buffered": self.buffer.pos, "updating": self.updating,
                             "rollouts_dropped": self.rollouts_dropped, "rewards_missing": self.rewards_missing}
        if self.update_s:
            d["last_update_s"] = self.update_s[-1]
        if self.last_train:
            d["train"] = dict(self.last_train)
        if self.error:
            d["error"] = self.error
        return d
