"""The scenario's ``grad_mb``: an extra gradient payload allreduced every step with the model's own.

``WithPayload(net, grad_mb)`` is ``net`` plus one float32 parameter of ``payload_numel(grad_mb)``
elements (``grad_mb`` megabytes, 1 MB = 10^6 bytes). Its forward is ``net(x) + z`` where ``z`` is
a scalar 0 computed from the payload parameter by ``_ZeroGrad``, whose backward returns a
zero-filled gradient of the parameter's shape (never a function of the loss). So:

* the loss, the model's gradients and its updates are exactly those of ``net`` alone (adding 0.0
  changes no logit, and d(logits + z)/d logits = I);
* the payload's gradient is produced inside backward like any other, so Horovod's
  ``DistributedOptimizer`` (or DDP's reducer) allreduces it through the same path and fusion
  buffer as the real gradients, and the shaped links carry its bytes;
* it stays 0 under the hook's ``n_i / T`` weighting, in the noise-scale norms and under Adam
  (zero gradient -> zero update).

``fill`` (tests only) makes the backward return a constant instead of 0, so a test can see that
the payload was reduced across ranks.
"""
from __future__ import annotations

import torch
from torch import nn

MB = 1_000_000


def payload_numel(grad_mb: float) -> int:
    """float32 elements of a ``grad_mb`` megabyte payload (at least 1 when grad_mb > 0)."""
    if grad_mb < 0:
        raise ValueError(f"grad_mb = {grad_mb}: must be >= 0")
    return max(1, round(grad_mb * MB / 4)) if grad_mb > 0 else 0


class _ZeroGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p: torch.Tensor, fill: float) -> torch.Tensor:  # type: ignore[override]
        ctx.shape, ctx.dtype, ctx.fill = p.shape, p.dtype, fill
        return p.new_zeros(())

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]  # noqa: ANN205
        g = torch.zeros(ctx.shape, dtype=ctx.dtype) if ctx.fill == 0 else torch.full(ctx.shape, ctx.fill, dtype=ctx.dtype)
        return g, None


class WithPayload(nn.Module):
    """``net`` plus the gradient payload parameter (``payload.weight``)."""

    def __init__(self, net: nn.Module, grad_mb: float, fill: float = 0.0) -> None:
        super().__init__()
        self.net = net
        self.payload = nn.Module()
        self.payload.weight = nn.Parameter(torch.zeros(payload_numel(grad_mb)))
        self.fill = float(fill)

    @property
    def payload_bytes(self) -> int:
        w = self.payload.weight
        return w.numel() * w.element_size()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) + _ZeroGrad.apply(self.payload.weight, self.fill)


def with_payload(net: nn.Module, grad_mb: float) -> nn.Module:
    """``net`` itself when grad_mb is 0, else ``WithPayload(net, grad_mb)``."""
    return WithPayload(net, grad_mb) if grad_mb > 0 else net


__all__ = ["WithPayload", "with_payload", "payload_numel", "MB"]
