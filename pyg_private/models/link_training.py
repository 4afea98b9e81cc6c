r"""The two private steps of :func:`~pyg_private.models.run_link_prediction` that read edges
besides the encoder's release: the pair decoder trained by DP-SGD on the supervision edges, and
the report-noisy-max selection on the validation edges.

**DP-SGD, one supervision edge = one example** (Abadi et al., "Deep Learning with Differential
Privacy", CCS 2016, Alg. 1). An example is a positive pair :math:`(u, v)` together with
``num_negatives`` pairs drawn uniformly from the supervision part for that example and that step,
without reading the graph (:func:`~pyg_private.utils.sample_pairs`); its loss is the binary
cross-entropy of the positive against label 1 plus the mean over its negatives against label 0, and
its gradient (all of it, negatives included) is clipped to ``max_grad_norm`` :math:`C`. Each step
samples the examples independently at the public rate :math:`q` (Poisson sampling), sums the
clipped gradients, releases the sum on a power-of-two grid :math:`g` with exactly sampled rounded
Gaussian noise of standard deviation :math:`\sigma C'` (:math:`C' = C + \sqrt D\, g`, the rounding's
inflation of the sensitivity for :math:`D` parameters; :func:`~pyg_private.nn._grid_gaussian.plan_grid`),
so no floating-point sampler touches the released weights, and divides by the public expected batch
size. Under edge-level neighbours (one supervision edge added or removed) the sum changes by one
clipped gradient whatever the negatives, so :math:`T` steps are the subsampled Gaussian mechanism
of Mironov, Talwar and Zhang (2019) that
:func:`~pyg_private.accounting.subsampled_gaussian_event` accounts. Per-example gradients come from
``torch.func`` (``vmap`` of ``grad``); the decoders are PyG :class:`~torch_geometric.nn.MLP`\ s
without normalisation or dropout (a batch norm would mix the examples).

**Report noisy max** (Dwork and Roth, "The Algorithmic Foundations of Differential Privacy", 2014,
Sec. 3.3, Claim 3.9): for :math:`m` counting queries, adding independent :math:`\mathrm{Lap}(1/\epsilon)`
noise to each count and releasing only the index of the largest noisy count is
:math:`\epsilon`-DP. The claim's proof uses that one individual added raises every count by 0 or 1
(monotone counts of sensitivity 1), which is what the selection's counts satisfy. Here the noise
is the Laplace variable rounded to a power-of-two grid :math:`g` and sampled exactly from integers
(:func:`~pyg_private.mechanisms.exact_integer_noise.rounded_laplace`), and ties go to the first
candidate. The proof carries over: with the others' noise fixed, candidate :math:`i` wins exactly
when its own integer noise :math:`K_i` (in grid steps) reaches a threshold :math:`t` set by the
others, and adding one individual moves :math:`t` by at most :math:`1/g` steps, in the direction
that the monotone counts allow; the rounded Laplace law satisfies
:math:`P(K \ge t + 1/g) = S((t - \tfrac12) g + 1) \ge e^{-\epsilon} S((t - \tfrac12) g) = e^{-\epsilon} P(K \ge t)`
for the continuous survival function :math:`S` of :math:`\mathrm{Lap}(1/\epsilon)`, which is the
one inequality the proof needs in both directions. No output is impossible under a neighbour
(exact sampling, no floating-point sampler).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import MLP

from ..mechanisms.exact_integer_noise import MAX_SCALE, MIN_SCALE, rounded_laplace
from ..mechanisms.randomness import RandomSource, resolve_secure_mode
from ..nn._grid_gaussian import add_grid_gaussian_, plan_grid
from ..utils.pair_sampling import LinkSplitRule, sample_pairs

__all__ = ["LinkDecoder", "fit_link_decoders", "report_noisy_max"]


class LinkDecoder(nn.Module):
    r"""Scores a pair from the released features of its two nodes, reading the columns
    ``[start, stop)`` of the node features; symmetric in :math:`(u, v)`:

    * ``"dot"``: :math:`f(z_u)^\top f(z_v)` for a node MLP :math:`f` (PyG's ``examples/link_pred.py``);
    * ``"hadamard"``: :math:`\mathrm{MLP}(f(z_u) \odot f(z_v))`;
    * ``"channels"``: a logistic model on the **similarity channels** of the pair: the columns are
      ``blocks`` equal blocks (the hops :math:`\mathbf X^{(0)}, \dots, \mathbf X^{(K)}`), and the
      score is :math:`b + \sum_{i \le j} w_{ij}\, \tfrac12 [\cos(z_u^{(i)}, z_v^{(j)}) +
      \cos(z_u^{(j)}, z_v^{(i)})]`: the feature cosine (:math:`i = j = 0`), the cosine of a node's
      features with the other's aggregated neighbourhood (:math:`i = 0 < j`), and so on. It has
      :math:`(K + 1)(K + 2)/2 + 1` parameters (7 for ``K = 2``), so DP-SGD's noise, which grows with
      the number of parameters, barely moves it; the channels themselves are post-processing of the
      release. With ``raw=(start, stop)`` the cosine of those columns (the raw public features,
      which the principal components before the release may blur) is one more channel. With
      ``degree=c`` the column ``c`` holds a per-node **degree channel** :math:`r` (in the recipe: the
      square root of the node's released noisy degree, scaled to mean 1) and the pair gets two more
      channels, :math:`r_u + r_v` and :math:`r_u r_v`: the evaluation negatives are uniform pairs, the
      positives are edges, whose ends have higher degrees (preferential attachment, Barabasi and
      Albert 1999). ``in_channels``, ``hidden`` and ``layers`` are unused.
    """

    def __init__(self, in_channels: int, hidden: int, layers: int, kind: str = "hadamard", *,
                 columns: tuple[int, int], blocks: int = 1, raw: Optional[tuple[int, int]] = None,
                 degree: Optional[int] = None) -> None:
        super().__init__()
        if kind not in ("hadamard", "dot", "channels"):
            raise ValueError(f"`decoder` must be 'hadamard', 'dot' or 'channels'; got {kind!r}")
        self.kind = kind
        self.columns = (int(columns[0]), int(columns[1]))
        self.blocks = int(blocks)
        self.raw: Optional[tuple[int, int]] = None
        self.degree: Optional[int] = None
        if degree is not None and kind != "channels":
            raise ValueError("only the 'channels' decoder reads a degree column")
        if kind == "channels":
            if (self.columns[1] - self.columns[0]) % self.blocks:
                raise ValueError("the columns must split into `blocks` equal blocks")
            rows, cols = torch.triu_indices(self.blocks, self.blocks)
            self.register_buffer("pairs", torch.stack([rows, cols]), persistent=False)
            self.raw = None if raw is None else (int(raw[0]), int(raw[1]))
            self.degree = None if degree is None else int(degree)
            self.node = None
            self.score = nn.Linear(rows.numel() + (self.raw is not None) + 2 * (self.degree is not None), 1)
            nn.init.zeros_(self.score.weight)
            nn.init.zeros_(self.score.bias)
            return
        self.node = MLP([in_channels] + [hidden] * layers, act="relu", norm=None, dropout=0.0)
        self.score = MLP([hidden, hidden, 1], act="relu", norm=None, dropout=0.0) if kind == "hadamard" else None

    def forward(self, z_u: Tensor, z_v: Tensor) -> Tensor:
        a, b = self.columns
        if self.kind == "channels":
            shape = z_u.shape[:-1] + (self.blocks, (b - a) // self.blocks)
            u = F.normalize(z_u[..., a:b].reshape(shape), dim=-1)
            v = F.normalize(z_v[..., a:b].reshape(shape), dim=-1)
            sim = torch.einsum("...id,...jd->...ij", u, v)
            sim = 0.5 * (sim + sim.transpose(-1, -2))
            channels = sim[..., self.pairs[0], self.pairs[1]]
            if self.raw is not None:
                c, e = self.raw
                cos = F.cosine_similarity(z_u[..., c:e], z_v[..., c:e], dim=-1)
                channels = torch.cat([channels, cos.unsqueeze(-1)], dim=-1)
            if self.degree is not None:
                r_u, r_v = z_u[..., self.degree], z_v[..., self.degree]
                channels = torch.cat([channels, (r_u + r_v).unsqueeze(-1), (r_u * r_v).unsqueeze(-1)], dim=-1)
            return self.score(channels).squeeze(-1)
        h = self.node(z_u[..., a:b]) * self.node(z_v[..., a:b])
        return self.score(h).squeeze(-1) if self.score is not None else h.sum(-1)


class _Joint(nn.Module):
    """Several decoders trained in one DP-SGD run: an example's gradient is the concatenation of
    their gradients (disjoint parameters), clipped together, so the run costs one mechanism."""

    def __init__(self, decoders: Sequence[LinkDecoder]) -> None:
        super().__init__()
        self.decoders = nn.ModuleList(decoders)

    def forward(self, z_u: Tensor, z_v: Tensor) -> Tensor:
        return torch.stack([d(z_u, z_v) for d in self.decoders], dim=-1)


def _example_loss(scores: Tensor) -> Tensor:
    """One example's loss from its scores ``[1 + k, D]`` (row 0 the positive, the others its
    negatives; one column per decoder): BCE(positive, 1) + mean BCE(negative, 0), summed over decoders."""
    pos = F.binary_cross_entropy_with_logits(scores[0], torch.ones_like(scores[0]), reduction="sum")
    if scores.size(0) == 1:
        return pos
    neg = F.binary_cross_entropy_with_logits(scores[1:], torch.zeros_like(scores[1:]), reduction="none")
    return pos + neg.mean(0).sum()


def fit_link_decoders(decoders: Sequence[LinkDecoder], z: Tensor, positives: Tensor, *, rule: LinkSplitRule,
                      sample_rate: float, steps: int, expected_batch: float, noise_multiplier: float,
                      max_grad_norm: Optional[float], num_negatives: int, lr: float,
                      generator: Optional[torch.Generator] = None, num_src: Optional[int] = None) -> None:
    r"""Train ``decoders`` jointly on the supervision edges ``positives`` ``[2, E]`` over the node
    features ``z`` (a release), in place: ``steps`` steps of Poisson sampling at ``sample_rate``,
    per-example clipping at ``max_grad_norm`` and Gaussian noise of ``noise_multiplier`` times it,
    the sum divided by the public ``expected_batch``, then Adam (see the module notes).

    ``noise_multiplier = 0`` with ``max_grad_norm=None`` is the non-private reference (no clipping,
    no noise, the mean over the batch actually drawn). The caller charges the run before calling.
    ``generator`` draws the sampling, the negatives and the noise (the global generator if ``None``).
    ``num_src``: a user-item graph, whose negatives join the two sides (see
    :func:`~pyg_private.utils.sample_pairs`).
    """
    from torch.func import functional_call, grad, vmap

    joint = _Joint(decoders).to(z.device)
    joint.train()
    names = [k for k, _ in joint.named_parameters()]
    params = dict(joint.named_parameters())
    opt = torch.optim.Adam(params.values(), lr=lr)
    z = z.detach()
    n = z.size(0)
    k = int(num_negatives)
    m = positives.size(1)

    def loss_of(p: dict[str, Tensor], zu: Tensor, zv: Tensor) -> Tensor:
        return _example_loss(functional_call(joint, p, (zu, zv)))

    per_example = vmap(grad(loss_of), in_dims=(None, 0, 0))
    private = max_grad_norm is not None
    noisy = private and noise_multiplier > 0
    if noisy:  # the noise on a power-of-two grid, sampled exactly (planned once: public quantities only)
        dim = sum(p.numel() for p in params.values())
        grid, inflated = plan_grid(std_per_sensitivity=float(noise_multiplier), sensitivity=float(max_grad_norm),
                                   dim=dim, value_bound=float(max_grad_norm) * max(float(expected_batch), 1.0))
        source = RandomSource("cpu", generator=generator, secure=resolve_secure_mode(None, generator))
    for _ in range(int(steps)):
        chosen = positives[:, torch.rand(m, generator=generator, device=positives.device) < sample_rate]
        b = chosen.size(1)
        summed = {name: torch.zeros_like(params[name]) for name in names}
        if b:
            pairs = chosen.unsqueeze(-1)
            if k:
                neg = sample_pairs(n, b * k, part="train", split=rule, generator=generator,
                                   num_src=num_src).to(z.device)
                pairs = torch.cat([pairs, neg.view(2, b, k)], dim=-1)  # [2, b, 1 + k]
            detached = {name: p.detach() for name, p in params.items()}
            grads = per_example(detached, z[pairs[0]], z[pairs[1]])
            if private:
                norms = torch.sqrt(sum(g.reshape(b, -1).pow(2).sum(1) for g in grads.values()))
                factor = (float(max_grad_norm) / (norms + 1e-6)).clamp(max=1.0)
            else:
                factor = torch.ones(b, device=z.device)
            for name in names:
                summed[name] = torch.einsum("b,b...->...", factor, grads[name])
        scale = float(expected_batch) if private else float(max(b, 1))
        if noisy:  # g (round(sum / g) + K), K exact rounded Gaussian of std sigma * inflated / g
            flat = torch.cat([summed[name].reshape(-1) for name in names]).to(torch.float64).cpu().view(1, -1)
            add_grid_gaussian_(flat, float(noise_multiplier) * inflated, grid, source)
            parts = flat.view(-1).split([summed[name].numel() for name in names])
            summed = {name: part.view_as(summed[name]).to(summed[name]) for name, part in zip(names, parts)}
        for name in names:
            params[name].grad = summed[name] / scale
        opt.step()
        opt.zero_grad(set_to_none=True)
    joint.eval()
    for p in joint.parameters():
        p.grad = None


def report_noisy_max(counts: Tensor, epsilon: float, *, generator: Optional[torch.Generator] = None,
                     secure_mode: Optional[bool] = None) -> int:
    r"""The index of the largest of ``counts`` (integers) plus independent :math:`\mathrm{Lap}(1/\epsilon)`
    noise rounded to a power-of-two grid and sampled exactly (see the module notes); ties go to the
    first index. Only the index leaves the function. Charge the selection before calling."""
    if counts.dim() != 1 or counts.numel() == 0 or counts.is_floating_point():
        raise ValueError("`counts` must be a non-empty 1-D integer tensor")
    scale = 1.0 / float(epsilon)
    j = max(0, math.ceil(math.log2(MIN_SCALE / scale)))  # scale / g >= MIN_SCALE grid steps
    if scale * 2.0 ** j > MAX_SCALE:
        raise ValueError(f"`epsilon` {epsilon!r} is out of the exact sampler's range")
    source = RandomSource("cpu", generator=generator, secure=resolve_secure_mode(secure_mode, generator))
    noise = rounded_laplace(counts.numel(), scale * 2.0 ** j, source)
    noisy = counts.cpu().long() * (1 << j) + noise
    return int(torch.argmax(noisy))  # the first maximal index
