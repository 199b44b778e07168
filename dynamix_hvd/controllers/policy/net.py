"""A stable-baselines3 actor-critic policy whose parameters are shared across worker rows.

Input: the padded observation (n_rows, 1 + F) flattened by SB3; column 0 is the valid mask.

* actor: e_i = MLP_e(x_i) for every row (one MLP for all workers), pooled context
  g = masked mean of e_i, per-row logits = MLP_a([e_i, g]) -> n_levels; global-scale logits =
  Linear(g). Padded rows get logits pinning them to "no change" (so they add ~0 to log-prob
  and entropy).
* critic: V = MLP_v([masked mean, masked max] of MLP_c(x_i)).

Because nothing depends on n_rows, ``RowNet.act_rows`` runs the trained actor on any number of
workers (1 .. 1024+) directly, which is what the PPO controller does. Its deterministic path
runs the actor in numpy on float32 copies of the weights (refreshed whenever a parameter
changes in place, e.g. after a fine-tuning update): the same logits as torch, ~10x faster for the
few rows of a live decision, where torch's per-op overhead was a third of the decision's time.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn
from torch.distributions import Categorical

OBS_LIMIT = 5.0    # observations are clipped to [-OBS_LIMIT, OBS_LIMIT] before the network (training and live)

PAD_LOGIT = -30.0


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers)


class RowNet(nn.Module):
    """The shared per-row actor and pooled critic (SB3 ``mlp_extractor`` interface)."""

    def __init__(self, n_features: int, n_rows: int, n_levels: int, n_global: int, hidden: int = 64,
                 pass_head: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.n_features = n_features          # per row, incl. the mask column
        self.n_rows, self.n_levels, self.n_global, self.hidden = n_rows, n_levels, n_global, hidden
        f = n_features - 1
        self.embed_pi = _mlp([f, hidden, hidden])
        self.head_pi = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_levels))
        self.global_pi = nn.Linear(hidden, n_global)
        # (no-op, pass) global indices of a policy whose pass is decided by a binary head of its own
        # (``ActionConfig.pass_head``): where the global head picks the no-op, the pass if its logit is > 0
        self.pass_indices = pass_head
        self.pass_pi = nn.Linear(hidden, 1) if pass_head is not None else None
        if pass_head is not None and not all(0 <= i < n_global for i in pass_head):
            raise ValueError(f"pass_head={pass_head}: global indices outside 0..{n_global - 1}")
        self.embed_vf = _mlp([f, hidden, hidden])
        self.latent_dim_pi = n_rows * n_levels + n_global
        self.latent_dim_vf = 2 * hidden
        pad = th.full((n_levels,), PAD_LOGIT)
        pad[n_levels // 2] = 0.0
        self.register_buffer("pad_logits", pad)
        self._np_cache: tuple[tuple, list[np.ndarray]] | None = None

    def _rows(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        x = features.reshape(features.shape[0], -1, self.n_features)
        return x[..., 1:], x[..., :1]

    @staticmethod
    def _masked_mean(e: th.Tensor, m: th.Tensor) -> th.Tensor:
        return (e * m).sum(1) / m.sum(1).clamp(min=1.0)

    def actor_heads(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """Per-row logits (batch, rows, n_levels), global logits (batch, n_global) and the pass head's
        logit (batch,), None without one."""
        x, m = self._rows(features)
        e = self.embed_pi(x)
        g = self._masked_mean(e, m)
        row = self.head_pi(th.cat([e, g.unsqueeze(1).expand_as(e)], dim=-1))
        row = m * row + (1.0 - m) * self.pad_logits
        return row, self.global_pi(g), None if self.pass_pi is None else self.pass_pi(g)[:, 0]

    def actor_logits(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """Per-row logits (batch, rows, n_levels) and global logits (batch, n_global)."""
        return self.actor_heads(features)[:2]

    def forward_actor(self, features: th.Tensor) -> th.Tensor:
        row, glob = self.actor_logits(features)
        return th.cat([row.flatten(1), glob], dim=1)

    def forward_critic(self, features: th.Tensor) -> th.Tensor:
        x, m = self._rows(features)
        e = self.embed_vf(x)
        mean = self._masked_mean(e, m)
        mx = (e * m + (m - 1.0) * 1e4).max(1).values
        return th.cat([mean, mx], dim=1)

    def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def _actor_weights(self) -> list[np.ndarray]:
        """float32 numpy copies of the actor's weights, re-read when a parameter changed
        (torch bumps a tensor's ``_version`` on every in-place update: optimizer steps,
        ``load_state_dict``)."""
        layers = (self.embed_pi[0], self.embed_pi[2], self.head_pi[0], self.head_pi[2], self.global_pi,
                  *([] if self.pass_pi is None else [self.pass_pi]))
        params = [p for layer in layers for p in (layer.weight, layer.bias)]
        key = tuple((id(p), p._version) for p in params)
        if self._np_cache is None or self._np_cache[0] != key:
            self._np_cache = (key, [p.detach().cpu().numpy().astype(np.float32).T if p.ndim == 2 else
                                    p.detach().cpu().numpy().astype(np.float32) for p in params])
        return self._np_cache[1]

    def actor_heads_numpy(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, float | None]:
        """``actor_heads`` of one unpadded (N, F) observation, in numpy: (N, n_levels), (n_global,), the
        pass logit (None without a pass head)."""
        w0, b0, w1, b1, wh0, bh0, wh1, bh1, wg, bg, *wp = self._actor_weights()
        x = np.asarray(obs, dtype=np.float32)
        e = np.tanh(np.tanh(x @ w0 + b0) @ w1 + b1)
        g = e.mean(axis=0)
        f = e.shape[1]
        h = np.tanh(e @ wh0[:f] + (g @ wh0[f:] + bh0))      # [e_i, g] @ W without building the concat
        return h @ wh1 + bh1, g @ wg + bg, float((g @ wp[0] + wp[1])[0]) if wp else None

    def actor_logits_numpy(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``actor_logits`` of one unpadded (N, F) observation, in numpy: (N, n_levels), (n_global,)."""
        return self.actor_heads_numpy(obs)[:2]

    def global_probs(self, glob: np.ndarray, pass_logit: float | None) -> np.ndarray:
        """The distribution of the global action: softmax of the global logits and, with a pass head,
        the no-op's probability shared with the pass as the head's sigmoid says (the action it samples)."""
        z = np.exp(glob - glob.max())
        p = z / z.sum()
        if self.pass_indices is not None and pass_logit is not None:
            noop, pas = self.pass_indices
            moved = p[noop] / (1.0 + math.exp(-pass_logit))
            p[noop] -= moved
            p[pas] += moved
        return p

    def _with_pass(self, g: int, pass_logit: float | None) -> int:
        """The deterministic global index after the pass head: the pass in place of the no-op where its logit is > 0."""
        if self.pass_indices is not None and pass_logit is not None and g == self.pass_indices[0] and pass_logit > 0:
            return self.pass_indices[1]
        return g

    def act_rows(self, obs: np.ndarray, deterministic: bool = True, margin: float = 0.0,
                 noop: int | None = None) -> tuple[np.ndarray, int]:
        """Actions for an (N, F) unpadded observation: level indices (N,) and the global index.
        Deterministic, with the no-op's index ``noop`` and a ``margin`` other than 0: the global
        index is the best other one where its logit exceeds the no-op's by at least ``margin``,
        else the no-op (a policy fitted to exp(-regret / T) then departs where it predicts a gain
        of about ``margin`` x T; a negative margin departs where it predicts a loss below that).
        With a pass head, a no-op so chosen is the pass where the head's logit is > 0."""
        if deterministic:
            row, glob, pass_logit = self.actor_heads_numpy(obs)
            g = int(glob.argmax())
            if margin != 0 and noop is not None:
                other = glob.copy()
                other[noop] = -np.inf
                best = int(other.argmax())
                g = best if glob[best] - glob[noop] >= margin else noop
            return row.argmax(-1), self._with_pass(g, pass_logit)
        return self._sample_rows(obs)

    @th.no_grad()
    def _sample_rows(self, obs: np.ndarray) -> tuple[np.ndarray, int]:
        x = th.as_tensor(obs, dtype=th.float32)
        x = th.cat([th.ones(x.shape[0], 1), x], dim=1).unsqueeze(0)
        row, glob, pass_logit = self.actor_heads(x)
        ra = th.distributions.Categorical(logits=row[0]).sample().numpy()
        g = int(th.distributions.Categorical(logits=glob[0]).sample())
        if pass_logit is not None and self.pass_indices is not None and g == self.pass_indices[0]:
            g = self.pass_indices[1] if bool(th.bernoulli(th.sigmoid(pass_logit[0]))) else g
        return ra, g


class RowCategorical(Distribution):
    """MultiDiscrete([n_levels] * n_rows + [n_global]) as two batched Categoricals.

    SB3's MultiCategoricalDistribution builds one Categorical per dimension (hundreds here),
    which dominates training time; this one is equivalent and vectorised."""

    def __init__(self, n_rows: int, n_levels: int, n_global: int) -> None:
        super().__init__()
        self.n_rows, self.n_levels, self.n_global = n_rows, n_levels, n_global

    def proba_distribution_net(self, latent_dim: int) -> nn.Module:
        return nn.Identity()

    def proba_distribution(self, action_logits: th.Tensor) -> "RowCategorical":
        rows = action_logits[:, : self.n_rows * self.n_levels].reshape(-1, self.n_rows, self.n_levels)
        self.rows = Categorical(logits=rows, validate_args=False)
        self.glob = Categorical(logits=action_logits[:, self.n_rows * self.n_levels:], validate_args=False)
        return self

    def log_prob(self, actions: th.Tensor) -> th.Tensor:
        a = actions.long()
        return self.rows.log_prob(a[:, : self.n_rows]).sum(1) + self.glob.log_prob(a[:, self.n_rows])

    def entropy(self) -> th.Tensor:
        return self.rows.entropy().sum(1) + self.glob.entropy()

    def sample(self) -> th.Tensor:
        return th.cat([self.rows.sample(), self.glob.sample().unsqueeze(1)], dim=1)

    def mode(self) -> th.Tensor:
        return th.cat([self.rows.probs.argmax(-1), self.glob.probs.argmax(-1, keepdim=True)], dim=1)

    def actions_from_params(self, action_logits: th.Tensor, deterministic: bool = False) -> th.Tensor:
        self.proba_distribution(action_logits)
        return self.get_actions(deterministic=deterministic)

    def log_prob_from_params(self, action_logits: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        actions = self.actions_from_params(action_logits)
        return actions, self.log_prob(actions)


class SharedRowPolicy(ActorCriticPolicy):
    """ActorCriticPolicy with a ``RowNet`` extractor; ``dynamix_config`` travels with the zip."""

    def __init__(self, *args: Any, hidden: int = 64, dynamix_config: dict | None = None,
                 noop_bias: float | None = None, **kwargs: Any) -> None:
        self.hidden = hidden
        self.dynamix_config = dict(dynamix_config or {})
        # Initial logit bias of the "no change" level and the neutral global scale. With an
        # anchored action (a residual on a model-based plan) training starts near the anchor and
        # explores around it (default 2.0: p(no change) ~ 0.65 per row) instead of starting as a
        # uniformly random perturbation of it; with anchor "current" it stays 0 (as first shipped).
        if noop_bias is None:
            from dynamix_hvd.controllers.policy.actions import ActionConfig
            anchored = ActionConfig.from_dict(self.dynamix_config.get("action", {})).anchor != "current"
            noop_bias = 2.0 if anchored else 0.0
        self.noop_bias = float(noop_bias)
        kwargs.setdefault("share_features_extractor", True)
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        n_rows, n_features = self.observation_space.shape  # type: ignore[misc]
        nvec = self.action_space.nvec  # type: ignore[attr-defined]
        from dynamix_hvd.controllers.policy.actions import ActionConfig
        action = ActionConfig.from_dict(self.dynamix_config.get("action", {}))
        pass_head = (action.noop_global, action.pass_global) if action.pass_head and action.pass_global is not None else None
        self.mlp_extractor = RowNet(n_features, n_rows, int(nvec[0]), int(nvec[-1]), self.hidden, pass_head)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()   # RowNet already outputs the logits
        net = self.mlp_extractor
        for layer in (net.head_pi[-1], net.global_pi, *([] if net.pass_pi is None else [net.pass_pi])):
            nn.init.orthogonal_(layer.weight, gain=0.01)
            nn.init.zeros_(layer.bias)
        scales = list(self.dynamix_config.get("action", {}).get("global_scales", [1.0]))
        with th.no_grad():
            net.head_pi[-1].bias[net.n_levels // 2] = self.noop_bias
            if 1.0 in scales and len(scales) == net.n_global:
                net.global_pi.bias[scales.index(1.0)] = self.noop_bias
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)
        self.row_dist = RowCategorical(net.n_rows, net.n_levels, net.n_global)

    def _get_action_dist_from_latent(self, latent_pi: th.Tensor) -> Distribution:
        return self.row_dist.proba_distribution(latent_pi)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(hidden=self.hidden, dynamix_config=self.dynamix_config, noop_bias=self.noop_bias)
        return data
