"""Differentially private message-passing layers."""
from .noisy_ppr_diffusion import NoisyPPRDiffusion

__all__ = ["NoisyPPRDiffusion"]
