"""Recall, one module per stage: candidates → (rerank) → select → assemble."""

from engrain.recall.assemble import render_tagged
from engrain.recall.rerank import Reranker, rerank
from engrain.recall.select import enforce_budget

__all__ = ["Reranker", "enforce_budget", "render_tagged", "rerank"]
