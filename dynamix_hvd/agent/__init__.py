"""The DYNAMIX policy: cluster simulator, gymnasium env, reward, shared-row PPO policy,
training (`dynamix train-policy`) and evaluation (`dynamix eval-policy`).

Modules: ``sim`` (numpy cluster physics), ``actions`` (action -> proposed batch sizes),
``reward`` (documented reward), ``env`` (gymnasium Env), ``policy`` (SB3 policy whose actor is
one MLP shared by every worker row), ``train``, ``evaluate``, ``rollout`` (runs any controller).
"""
