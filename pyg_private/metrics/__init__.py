"""Evaluation metrics of pyg_private (no privacy cost: they read released outputs)."""
from .auc import roc_auc
from .link import hits_at_k, mean_reciprocal_rank
from .ranking import ndcg_at_k, recall_at_k, top_k_indices

__all__ = ["ndcg_at_k", "recall_at_k", "top_k_indices", "roc_auc", "hits_at_k", "mean_reciprocal_rank"]
