"""Evaluation metrics of pyg_private (no privacy cost: they read released outputs)."""
from .auc import roc_auc
from .ranking import ndcg_at_k, recall_at_k, top_k_indices

__all__ = ["ndcg_at_k", "recall_at_k", "top_k_indices", "roc_auc"]
