"""Figures the chapters share: attention heatmaps with token labels.

Used from chapter 2 on (attention weights), and in chapter 3 for grids of heads.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes

__all__ = ["attention_heatmap"]


def _as_matrix(weights: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().numpy()
    matrix = np.asarray(weights, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(
            f"weights: expected a 2-D attention matrix (N_queries, N_keys), "
            f"got shape {matrix.shape}; select one batch element and head first"
        )
    return matrix


def attention_heatmap(
    weights: torch.Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str = "Attention weights",
    annotate: bool | None = None,
    cmap: str = "viridis",
    colorbar: bool = True,
) -> Axes:
    """Draw an attention matrix, queries as rows and keys as columns.

    In the course's row convention, row ``n`` of ``weights`` holds how much
    query token ``n`` takes from each key token, so each row sums to 1.

    Args:
        weights: (N_q, N_k) attention weights, a tensor or an array.
        query_labels: N_q token strings for the rows (default: their indices).
        key_labels: N_k token strings for the columns (default: the query
            labels when the matrix is square, else indices).
        ax: axes to draw into; a new figure is made when ``None``.
        title: the figure title.
        annotate: write each weight in its cell; by default only when the
            matrix is at most 12×12.
        cmap: a matplotlib colour map.
        colorbar: add a colour bar.

    Returns:
        The axes drawn into.
    """
    matrix = _as_matrix(weights)
    n_queries, n_keys = matrix.shape
    if key_labels is None and query_labels is not None and n_queries == n_keys:
        key_labels = query_labels
    query_labels = (
        [str(i) for i in range(n_queries)]
        if query_labels is None
        else list(query_labels)
    )
    key_labels = (
        [str(i) for i in range(n_keys)] if key_labels is None else list(key_labels)
    )
    if len(query_labels) != n_queries:
        raise ValueError(
            f"query_labels: expected {n_queries} labels (one per row of weights "
            f"{matrix.shape}), got {len(query_labels)}"
        )
    if len(key_labels) != n_keys:
        raise ValueError(
            f"key_labels: expected {n_keys} labels (one per column of weights "
            f"{matrix.shape}), got {len(key_labels)}"
        )
    if ax is None:
        size = max(3.0, 0.45 * max(n_queries, n_keys) + 1.5)
        _, ax = plt.subplots(figsize=(size + 1.0, size))
    image = ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=max(1e-12, matrix.max()))
    ax.set_xticks(range(n_keys), key_labels, rotation=90)
    ax.set_yticks(range(n_queries), query_labels)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    if annotate is None:
        annotate = max(n_queries, n_keys) <= 12
    if annotate:
        threshold = matrix.max() / 2
        for i in range(n_queries):
            for j in range(n_keys):
                colour = "black" if matrix[i, j] > threshold else "white"
                ax.text(
                    j,
                    i,
                    f"{matrix[i, j]:.2f}",
                    ha="center",
                    va="center",
                    color=colour,
                    fontsize=8,
                )
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax
