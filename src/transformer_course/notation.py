"""Rows and columns: the course's (N, D) convention and Turner's D×N convention.

The code stores tokens as **rows**: ``x`` has shape (N, D) or (B, N, D), and an
attention matrix ``A`` (N, N) has rows that sum to 1, so that ``Y = A X``.
Turner's note stores tokens as **columns**: ``X`` is D×N and the columns of ``A``
sum to 1, so that ``Y = X A`` (Turner, eqs. 1-2). The two are transposes of
each other. See book/notation.ipynb; chapter 2 uses both forms.
"""

from __future__ import annotations

import torch

from .shapes import expect_shape

__all__ = ["average_columns", "average_rows", "to_columns", "to_rows"]


def to_columns(x: torch.Tensor) -> torch.Tensor:
    """Rows to columns: (..., N, D) -> (..., D, N)."""
    expect_shape(x, "... N D", "x")
    return x.transpose(-2, -1)


def to_rows(X: torch.Tensor) -> torch.Tensor:
    """Columns to rows: (..., D, N) -> (..., N, D)."""
    expect_shape(X, "... D N", "X")
    return X.transpose(-2, -1)


def _check_stochastic(A: torch.Tensor, dim: int, what: str) -> None:
    sums = A.sum(dim=dim)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
        worst = (sums - 1).abs().max().item()
        raise ValueError(
            f"{what} must each sum to 1 (a weighted average); the largest "
            f"deviation from 1 is {worst:.3g}"
        )


def average_rows(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Attention as a weighted average, in rows: ``y_n = sum_n' A[n, n'] x_n'``.

    Args:
        A: (..., N, N) weights; each row sums to 1.
        x: (..., N, D) tokens as rows.

    Returns:
        (..., N, D): ``A @ x``.
    """
    dims = expect_shape(A, "... N N", "A (rows)")
    expect_shape(x, "... N D", "x", N=dims["N"])
    _check_stochastic(A, dim=-1, what="rows of A")
    return A @ x


def average_columns(X: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """Turner eq. (2), ``Y = X A``: ``y_n = sum_n' x_n' A[n', n]``.

    Args:
        X: (..., D, N) tokens as columns.
        A: (..., N, N) weights; each column sums to 1.

    Returns:
        (..., D, N): ``X @ A``.
    """
    dims = expect_shape(A, "... N N", "A (columns)")
    expect_shape(X, "... D N", "X", N=dims["N"])
    _check_stochastic(A, dim=-2, what="columns of A")
    return X @ A
