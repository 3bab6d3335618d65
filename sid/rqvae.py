"""RQ-VAE quantiser (TIGER-style): an MLP autoencoder with residual vector quantisation of its latent.

The alternative to :class:`sid.quantize.ResidualKMeans`: codes come from a learned latent rather
than from the raw embedding space. Same :class:`sid.quantize.Quantiser` surface (``fit``,
``encode``, ``sizes``, ``save``); CPU, deterministic per seed, numpy in and out.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Self

import faiss
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from sid.quantize import NotFittedError, _as_matrix, count_distinct_rows, kmeans_pp_init

_INIT_KMEANS_ITERS = 10  # Lloyd iterations for each codebook's k-means initialisation


class RQVAEConfig(BaseModel):
    """RQ-VAE settings; validated on construction."""

    model_config = ConfigDict(extra="forbid")

    levels: int = Field(3, ge=1, description="Residual quantisation levels L. Default 3.")
    codebook_size: int = Field(256, ge=2, description="Codes per level K. Default 256.")
    latent_dim: int = Field(32, ge=1, description="Width of the quantised latent. Default 32.")
    hidden: tuple[int, ...] = Field((256, 128), description="Encoder hidden widths (the decoder mirrors them). "
                                                            "Default (256, 128).")
    epochs: int = Field(30, ge=1, description="Passes over the data. Default 30.")
    batch_size: int = Field(1024, ge=1, description="Rows per optimiser step (and per encode batch). Default 1024.")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate. Default 1e-3.")
    beta: float = Field(0.25, ge=0, description="Commitment weight beta in the TIGER loss. Default 0.25.")
    kmeans_init: bool = Field(True, description="Initialise each level's codebook by k-means on the first batch's "
                                                "residuals at that level; false = random normal. Default true.")
    reset_dead: bool = Field(True, description="After every epoch but the last, move codes no item used in that "
                                               "epoch onto random residuals of the epoch's last batch. Default true.")
    seed: int = Field(0, ge=0, description="Seed for weights, shuffling, k-means and resets. Default 0.")


def _mlp(widths: list[int]) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _kmeans_centroids(r: np.ndarray, k: int, seed: int) -> np.ndarray:
    """k centroids (k, d) of ``r`` (n, d): k-means++ then faiss k-means; when ``r`` has fewer than k distinct
    rows, the surplus codes start on random rows plus small noise (the dead-code reset revives them)."""
    rng = np.random.default_rng(seed)
    k_eff = min(k, count_distinct_rows(r))
    if k_eff > 1:
        km = faiss.Kmeans(r.shape[1], k_eff, niter=_INIT_KMEANS_ITERS, seed=seed, max_points_per_centroid=len(r),
                          min_points_per_centroid=1, verbose=False)
        km.train(r, init_centroids=kmeans_pp_init(r, k_eff, rng))
        c = np.asarray(km.centroids, dtype=np.float32)
    else:
        c = r.mean(0, keepdims=True).astype(np.float32)
    if k_eff < k:
        extra = r[rng.choice(len(r), size=k - k_eff)]
        c = np.concatenate([c, extra + 1e-3 * (r.std() + 1e-6) * rng.standard_normal(extra.shape)])
    assert c.shape == (k, r.shape[1]), f"init centroids {c.shape} != {(k, r.shape[1])}"
    return c.astype(np.float32)


class RQVAE(nn.Module):
    """Encoder MLP -> L-level residual VQ (straight-through) -> decoder MLP.

    Loss (TIGER: Rajput et al. 2023, "Recommender Systems with Generative Retrieval", sec. 3.1),
    with z = E(x), r_1 = z, c_d = argmin_k ||r_d - e_k^d||, r_{d+1} = r_d - e_{c_d}^d,
    z_hat = sum_d e_{c_d}^d and x_hat = D(z + sg[z_hat - z]) (straight-through estimator)::

        L = ||x - x_hat||^2 + sum_d ( ||sg[r_d] - e_{c_d}^d||^2 + beta * ||r_d - sg[e_{c_d}^d]||^2 )

    (each squared norm as a mean over batch and dims). The codebook term moves codes towards the
    residuals, the commitment term keeps the encoder near its codes.
    """

    def __init__(self, config: RQVAEConfig | None = None, input_dim: int | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else RQVAEConfig()
        self.input_dim: int | None = None  # set by _build: at construction when given, else by the first fit
        self.encoder = nn.Sequential()
        self.decoder = nn.Sequential()
        self.codebooks = nn.Parameter(torch.empty(0))  # (L, K, d) once built
        self.loss_history: list[float] = []  # mean training loss per epoch
        self.fitted = False
        if input_dim is not None:
            self._build(input_dim)

    def _build(self, input_dim: int) -> None:
        """Create seeded weights for inputs of width ``input_dim``, without touching the caller's torch RNG."""
        cfg = self.config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            widths = [input_dim, *cfg.hidden, cfg.latent_dim]
            self.encoder = _mlp(widths)
            self.decoder = _mlp(widths[::-1])
            self.codebooks = nn.Parameter(torch.randn(cfg.levels, cfg.codebook_size, cfg.latent_dim))  # (L, K, d)
        self.input_dim = input_dim

    @property
    def sizes(self) -> list[int]:
        return [self.config.codebook_size] * self.config.levels

    def quantise(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Residual VQ of ``z`` (B, d): z_hat (B, d), codes (B, L), the VQ loss, and each level's residual."""
        assert z.ndim == 2 and z.shape[1] == self.config.latent_dim, f"z must be (B, {self.config.latent_dim})"
        residual = z
        z_hat = torch.zeros_like(z)  # (B, d)
        codes, residuals = [], []
        vq_loss = z.new_zeros(())
        for cb in self.codebooks:  # (K, d) per level
            r = residual.detach()
            dist = (r * r).sum(1, keepdim=True) - 2 * r @ cb.detach().T + (cb.detach() ** 2).sum(1)  # (B, K)
            idx = dist.argmin(1)  # (B,)
            e = cb[idx]  # (B, d)
            vq_loss = vq_loss + F.mse_loss(e, r) + self.config.beta * F.mse_loss(residual, e.detach())
            z_hat = z_hat + e
            residuals.append(r)
            codes.append(idx)
            residual = residual - e.detach()
        return z_hat, torch.stack(codes, 1), vq_loss, residuals

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Loss (scalar), codes (B, L), reconstruction (B, D), per-level residuals for ``x`` (B, D)."""
        z = self.encoder(x)  # (B, d)
        z_hat, codes, vq_loss, residuals = self.quantise(z)
        x_hat = self.decoder(z + (z_hat - z).detach())  # straight-through: forward z_hat, gradient to z
        return F.mse_loss(x_hat, x) + vq_loss, codes, x_hat, residuals

    def fit(self, x: np.ndarray) -> Self:
        """Train on ``x`` (N, D) float (CPU, Adam); records ``loss_history``. Deterministic per ``seed``."""
        cfg = self.config
        arr = _as_matrix(x)  # (N, D)
        if self.input_dim is None:
            self._build(arr.shape[1])
        data = self._as_tensor(arr)  # (N, D)
        gen = torch.Generator().manual_seed(cfg.seed)
        opt = torch.optim.Adam(self.parameters(), lr=cfg.lr)
        self.loss_history = []
        self.train()
        for epoch in range(cfg.epochs):
            perm = torch.randperm(len(data), generator=gen)
            usage = torch.zeros(cfg.levels, cfg.codebook_size, dtype=torch.long)  # (L, K)
            total, residuals = 0.0, []
            for start in range(0, len(data), cfg.batch_size):
                batch = data[perm[start:start + cfg.batch_size]]  # (B, D)
                if epoch == 0 and start == 0 and cfg.kmeans_init:
                    self._kmeans_init(batch)
                loss, codes, _x_hat, residuals = self(batch)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(batch)
                for level in range(cfg.levels):
                    usage[level] += torch.bincount(codes[:, level], minlength=cfg.codebook_size)
            self.loss_history.append(total / len(data))
            if cfg.reset_dead and epoch < cfg.epochs - 1:
                self._reset_dead(usage, residuals, gen)
        self.fitted = True
        return self

    @torch.no_grad()
    def _kmeans_init(self, batch: torch.Tensor) -> None:
        """Each level's codebook := k-means of that level's residuals of ``batch`` (B, D)."""
        residual = self.encoder(batch).numpy()  # (B, d)
        for level in range(self.config.levels):
            c = _kmeans_centroids(np.ascontiguousarray(residual), self.config.codebook_size, self.config.seed + level)
            self.codebooks[level].copy_(torch.from_numpy(c))
            _dist, idx = faiss.knn(np.ascontiguousarray(residual), c, 1)  # (B, 1)
            residual = residual - c[idx[:, 0]]

    @torch.no_grad()
    def _reset_dead(self, usage: torch.Tensor, residuals: list[torch.Tensor], gen: torch.Generator) -> None:
        """Codes unused this epoch (``usage`` (L, K) == 0) jump onto random rows of the last batch's residuals."""
        for level, r in enumerate(residuals):  # r: (B, d)
            dead = torch.nonzero(usage[level] == 0).flatten()
            if len(dead):
                pick = torch.randint(len(r), (len(dead),), generator=gen)
                self.codebooks[level, dead] = r[pick]

    @torch.no_grad()
    def encode(self, x: np.ndarray) -> np.ndarray:
        """Codes (N, L) int64 for ``x`` (N, D): nearest code per level on the latent's running residual."""
        if not self.fitted:
            raise NotFittedError("RQVAE is not fitted: call fit() or RQVAE.load() first")
        data = self._as_tensor(x)
        self.eval()
        out = [self.quantise(self.encoder(data[s:s + self.config.batch_size]))[1]
               for s in range(0, len(data), self.config.batch_size)]
        codes = torch.cat(out).numpy().astype(np.int64)
        assert codes.shape == (len(data), self.config.levels), f"codes {codes.shape}"
        return codes

    def _as_tensor(self, x: np.ndarray) -> torch.Tensor:
        arr = _as_matrix(x)
        if arr.shape[1] != self.input_dim:
            raise ValueError(f"x has dim {arr.shape[1]}, this RQVAE takes dim {self.input_dim}")
        return torch.from_numpy(arr)

    def save(self, path: Path | str) -> None:
        """State dict, config JSON, input dim and loss history in one ``torch.save`` file at ``path``."""
        if not self.fitted:
            raise NotFittedError("RQVAE is not fitted: nothing to save")
        torch.save({"config": self.config.model_dump_json(), "input_dim": self.input_dim,
                    "state_dict": self.state_dict(), "loss_history": self.loss_history}, path)

    @classmethod
    def load(cls, path: Path | str) -> RQVAE:
        """The model :meth:`save` wrote (tensors only; loaded with ``weights_only=True``)."""
        blob = torch.load(path, weights_only=True)
        model = cls(RQVAEConfig.model_validate(json.loads(blob["config"])), input_dim=int(blob["input_dim"]))
        model.load_state_dict(blob["state_dict"])
        model.loss_history = [float(v) for v in blob["loss_history"]]
        model.fitted = True
        return model
