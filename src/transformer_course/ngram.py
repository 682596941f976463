"""Chapter 6, Count-based n-gram language models: the baselines a GPT must beat.

An n-gram model predicts token w from the n − 1 tokens before it, its context h,
by counting how often h was followed by w in the training text:

    p(w | h) = c(h w) / c(h)                       (maximum likelihood)

which gives probability 0 to every continuation not seen in training, and an
infinite cross-entropy on new text. Two ways to smooth it:

* ``"additive"`` (Laplace/Lidstone): pretend every n-gram was seen α more
  times, ``p(w | h) = (c(h w) + α) / (c(h) + α V)``. α is chosen on a held-out
  tail of the *training* ids (never on validation), then the counts are
  refitted on all of them.
* ``"kneser-ney"`` (interpolated, modified Kneser–Ney; Chen & Goodman 1998):
  subtract a discount D from every seen count and give the mass freed to the
  next-shorter context::

      p(w | h) = (max(c(h w) − D(c(h w)), 0) + γ(h) · p(w | h')) / c(h)
      γ(h) = D₁ N₁(h·) + D₂ N₂(h·) + D₃₊ N₃₊(h·)

  where h' is h without its oldest token and N_k(h·) counts the tokens seen
  exactly k times (3 or more for N₃₊) after h. The shorter contexts count
  *continuations*: how many different tokens preceded h' w, not how often h' w
  occurred ("Francisco" is frequent but follows "San" only). The discounts
  come from the training counts in closed form, ``Y = n₁ / (n₁ + 2 n₂)``,
  ``D_k = k − (k + 1) Y n_{k+1} / n_k`` with n_k the number of n-grams seen k
  times; no held-out data is needed. Below the unigram sits the uniform 1/V,
  so every token has a probability > 0. A context never seen in training
  falls back to the shorter one.

Order 0 is the uniform model (cross-entropy ln V), order 1 the unigram
model, order 2 the bigram model, and so on. The first n − 1 tokens of a
sequence are predicted from the shorter context they have.

Counts are kept in sorted NumPy arrays keyed by the n-gram read as a number in
base V (oldest token most significant), so fitting order 8 on the million
characters of tiny Shakespeare takes seconds. benchmarks/gpt_quality.py
compares them with a GPT.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .shapes import expect_int

__all__ = ["SMOOTHINGS", "NGramModel", "ngram_table", "select_order"]

SMOOTHINGS = ("additive", "kneser-ney")

#: additive smoothing: the α tried on the held-out tail of the training ids
ALPHA_GRID = tuple(float(a) for a in np.logspace(-4, 1, 16))


def _as_ids(ids: object, vocab_size: int, name: str = "ids") -> np.ndarray:
    """A 1-D int64 array of token ids in 0..V − 1, or a clear error."""
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise TypeError(
                f"{name}: expected integer token ids, got dtype {ids.dtype}"
            )
        ids = ids.detach().cpu().numpy()
    array = np.asarray(ids)
    if array.dtype == bool or not (
        np.issubdtype(array.dtype, np.integer) or array.size == 0
    ):
        raise TypeError(f"{name}: expected integer token ids, got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(
            f"{name}: expected a 1-D sequence of token ids, got shape {array.shape}"
        )
    array = array.astype(np.int64)
    if array.size and (array.min() < 0 or array.max() >= vocab_size):
        raise ValueError(
            f"{name}: expected token ids in 0..{vocab_size - 1}, got values from "
            f"{int(array.min())} to {int(array.max())}"
        )
    return array


def _grams(ids: np.ndarray, n: int) -> np.ndarray:
    """(T, n): row t holds tokens t − n + 1 … t, with −1 before the start."""
    padded = np.concatenate([np.full(n - 1, -1, dtype=np.int64), ids])
    windows = np.lib.stride_tricks.sliding_window_view(padded, n)  # (T, n)
    return np.ascontiguousarray(windows)


def _keys(grams: np.ndarray, k: int, vocab_size: int) -> np.ndarray:
    """The last k columns of ``grams`` (T, n) as base-V numbers (T,)."""
    keys = np.zeros(len(grams), dtype=np.int64)
    for column in range(grams.shape[1] - k, grams.shape[1]):
        keys = keys * vocab_size + np.maximum(grams[:, column], 0)
    return keys


def _lookup(table_keys: np.ndarray, values: np.ndarray, query: np.ndarray):
    """values[i] where table_keys[i] == query, else 0 (table_keys sorted)."""
    if len(table_keys) == 0:
        return np.zeros(len(query), dtype=values.dtype)
    where = np.minimum(np.searchsorted(table_keys, query), len(table_keys) - 1)
    return np.where(table_keys[where] == query, values[where], 0)


@dataclass
class _Level:
    """The counts of one order k: n-grams (keys, counts) and their contexts."""

    keys: np.ndarray  # sorted base-V keys of the k-grams seen
    counts: np.ndarray  # c(h w): raw counts (top order) or continuation counts
    context_keys: np.ndarray  # sorted keys of the (k − 1)-token contexts h
    context_totals: np.ndarray  # Σ_w c(h w)
    context_gammas: np.ndarray  # γ(h) = Σ_w D(c(h w)), the mass handed down
    discounts: tuple[float, float, float]  # D₁, D₂, D₃₊ (0 for additive)


def _discounts(counts: np.ndarray) -> tuple[float, float, float]:
    """Chen & Goodman's closed-form D₁, D₂, D₃₊ from the counts of counts.

    Clamped to 0 ≤ D_k ≤ k, so that no count turns negative. With too few
    distinct counts (tiny texts) every D is Ney's single ``n₁ / (n₁ + 2 n₂)``,
    or 0.5 when even that is undefined.
    """
    n = [int(np.count_nonzero(counts == k)) for k in (1, 2, 3, 4)]
    if n[0] == 0 or n[0] + 2 * n[1] == 0:
        return (0.5, 0.5, 0.5)
    y = n[0] / (n[0] + 2 * n[1])
    if min(n) == 0:
        return (y, y, y)
    raw = [k - (k + 1) * y * n[k] / n[k - 1] for k in (1, 2, 3)]
    return tuple(
        float(min(max(d, 0.0), k)) for k, d in zip((1, 2, 3), raw, strict=True)
    )


class NGramModel:
    """Chapter 6: a count-based n-gram language model over token ids 0..V − 1.

    Args:
        order: n, the tokens an n-gram spans: 0 uniform, 1 unigram, 2 bigram, …
            (the context is the n − 1 tokens before the predicted one).
        vocab_size: V.
        smoothing: ``"kneser-ney"`` (interpolated, modified; the default) or
            ``"additive"`` (see the module).
        alpha: additive smoothing's α > 0; None: chosen by :meth:`fit` on a
            held-out tail of the training ids.
        discount: Kneser–Ney with one discount D in (0, 1] for every count;
            None: Chen & Goodman's D₁, D₂, D₃₊ from the training counts.
        held_out_fraction: the tail of the training ids that chooses α.

    >>> model = NGramModel(2, vocab_size=3).fit([0, 1, 2, 0, 1, 2, 0, 1])
    >>> round(float(model.probabilities([0]).sum()), 6)
    1.0
    """

    def __init__(
        self,
        order: int,
        vocab_size: int,
        smoothing: str = "kneser-ney",
        alpha: float | None = None,
        discount: float | None = None,
        held_out_fraction: float = 0.1,
    ):
        expect_int(order, "order", least=0)
        expect_int(vocab_size, "vocab_size", least=1)
        if smoothing not in SMOOTHINGS:
            raise ValueError(
                f"smoothing: expected one of {list(SMOOTHINGS)}, got {smoothing!r}"
            )
        if order and vocab_size**order >= 2**62:
            raise ValueError(
                f"order: n-grams are stored as base-V numbers in int64; "
                f"V^n = {vocab_size}^{order} is too large, use order ≤ "
                f"{int(61 / math.log2(max(vocab_size, 2)))}"
            )
        if alpha is not None and not alpha > 0:
            raise ValueError(f"alpha: expected a float > 0 or None, got {alpha!r}")
        if discount is not None and not 0 < discount <= 1:
            raise ValueError(
                f"discount: expected a float in (0, 1] or None, got {discount!r}"
            )
        if not 0 < held_out_fraction < 1:
            raise ValueError(
                f"held_out_fraction: expected a float in (0, 1), got {held_out_fraction!r}"
            )
        self.order, self.vocab_size, self.smoothing = order, vocab_size, smoothing
        self.alpha, self.discount = alpha, discount
        self.held_out_fraction = held_out_fraction
        self._levels: list[_Level] | None = None

    def __repr__(self) -> str:
        extra = (
            f", alpha={self.alpha:.3g}"
            if self.smoothing == "additive" and self.alpha
            else ""
        )
        return (
            f"NGramModel(order={self.order}, vocab_size={self.vocab_size}, "
            f"smoothing={self.smoothing!r}{extra})"
        )

    # fitting -----------------------------------------------------------------

    def fit(self, train_ids: object) -> NGramModel:
        """Chapter 6: count the n-grams of ``train_ids`` (T,); returns ``self``.

        Takes the training ids only: additive smoothing's α, when not given,
        is chosen here on the last ``held_out_fraction`` of them (counts from
        the rest), never on validation data.
        """
        ids = _as_ids(train_ids, self.vocab_size, "train_ids")
        if len(ids) == 0:
            raise ValueError("train_ids: expected at least one token, got none")
        if self.smoothing == "additive" and self.alpha is None and self.order > 0:
            self.alpha = self._choose_alpha(ids)
        self._levels = self._count(ids)
        return self

    def _choose_alpha(self, ids: np.ndarray) -> float:
        cut = int(len(ids) * (1 - self.held_out_fraction))
        if cut < 1 or cut >= len(ids):
            raise ValueError(
                f"train_ids: {len(ids)} tokens are too few to hold out "
                f"{self.held_out_fraction:.0%} for choosing alpha; pass alpha"
            )
        probe = NGramModel(self.order, self.vocab_size, "additive", alpha=1.0)
        probe._levels = probe._count(ids[:cut])
        losses = []
        for alpha in ALPHA_GRID:
            probe.alpha = alpha
            losses.append(probe.cross_entropy(ids[cut:]))
        return ALPHA_GRID[int(np.argmin(losses))]

    def _count(self, ids: np.ndarray) -> list[_Level]:
        V, n = self.vocab_size, self.order
        if n == 0:
            return []
        grams = _grams(ids, n)  # (T, n)
        levels: list[_Level] = []
        upper_keys = None  # the unique (k + 1)-gram keys, for continuation counts
        for k in range(n, 0, -1):  # top order first
            complete = grams[:, n - k] >= 0  # rows with all k tokens
            keys, counts = np.unique(
                _keys(grams[complete], k, V), return_counts=True
            )  # raw counts c(h w)
            if self.smoothing == "kneser-ney" and upper_keys is not None:
                # continuation count: distinct tokens seen before h' w
                keys, counts = np.unique(upper_keys % V**k, return_counts=True)
            upper_keys = np.unique(_keys(grams[complete], k, V))
            levels.append(self._level(keys, counts))
        return levels[::-1]  # level k − 1 holds the k-grams

    def _level(self, keys: np.ndarray, counts: np.ndarray) -> _Level:
        V = self.vocab_size
        counts = counts.astype(np.int64)
        if self.smoothing == "kneser-ney":
            d = (self.discount,) * 3 if self.discount else _discounts(counts)
            discount = np.where(counts == 1, d[0], np.where(counts == 2, d[1], d[2]))
        else:
            d, discount = (0.0, 0.0, 0.0), np.zeros(len(counts))
        context, starts = np.unique(keys // V, return_index=True)  # keys are sorted
        totals = np.add.reduceat(counts, starts) if len(keys) else counts
        gammas = np.add.reduceat(discount, starts) if len(keys) else discount
        return _Level(keys, counts, context, totals, gammas, d)

    # scoring -----------------------------------------------------------------

    def _check_fitted(self) -> list[_Level]:
        if self._levels is None:
            raise RuntimeError(
                f"{self!r} is not fitted: call .fit(train_ids) before scoring"
            )
        return self._levels

    def _probs(self, grams: np.ndarray) -> np.ndarray:
        """p(last column | the columns before it) for each row of ``grams`` (P, n)."""
        levels = self._check_fitted()
        V = self.vocab_size
        p = np.full(len(grams), 1.0 / V)  # order 0: uniform
        for k, level in enumerate(levels, start=1):
            valid = grams[:, self.order - k] >= 0  # the k − 1 context tokens exist
            keys = _keys(grams, k, V)
            c_hw = _lookup(level.keys, level.counts, keys)
            total = _lookup(level.context_keys, level.context_totals, keys // V)
            if self.smoothing == "additive":
                here = (c_hw + self.alpha) / (total + self.alpha * V)
            else:
                gamma = _lookup(level.context_keys, level.context_gammas, keys // V)
                d = np.where(
                    c_hw == 1,
                    level.discounts[0],
                    np.where(c_hw == 2, level.discounts[1], level.discounts[2]),
                )
                seen = total > 0
                safe = np.where(seen, total, 1)
                mixed = (np.maximum(c_hw - d, 0.0) + gamma * p) / safe
                here = np.where(seen, mixed, p)  # unseen context: the shorter one
            p = np.where(valid, here, p)
        return p

    def log_probs(self, ids: object) -> np.ndarray:
        """Chapter 6: ln p(token t | the tokens before it) for each of ``ids`` (T,) -> (T,)."""
        array = _as_ids(ids, self.vocab_size)
        self._check_fitted()
        if self.order == 0:
            return np.full(len(array), -math.log(self.vocab_size))
        return np.log(self._probs(_grams(array, self.order)))

    def cross_entropy(self, ids: object) -> float:
        """Chapter 6: the mean of −ln p(token | context) over ``ids`` (T,), in nats per token.

        Comparable with a language model's cross-entropy loss on the same ids.
        """
        array = _as_ids(ids, self.vocab_size)
        if len(array) == 0:
            raise ValueError("ids: expected at least one token to score, got none")
        return float(-self.log_probs(array).mean())

    def probabilities(self, context: Sequence[int] | Iterable[int]) -> np.ndarray:
        """Chapter 6: p(w | context) for every token w: (V,), summing to 1.

        Only the last n − 1 tokens of ``context`` matter; a shorter context
        uses the lower orders only.
        """
        ctx = _as_ids(list(context), self.vocab_size, "context")
        self._check_fitted()
        V = self.vocab_size
        if self.order == 0:
            return np.full(V, 1.0 / V)
        ctx = ctx[len(ctx) - min(len(ctx), self.order - 1) :]
        grams = np.full((V, self.order), -1, dtype=np.int64)
        if len(ctx):
            grams[:, self.order - 1 - len(ctx) : self.order - 1] = ctx
        grams[:, -1] = np.arange(V)
        return self._probs(grams)


def select_order(
    train_ids: object,
    vocab_size: int,
    orders: Iterable[int] = range(9),
    smoothing: str = "kneser-ney",
    held_out_fraction: float = 0.1,
) -> tuple[int, dict[int, float]]:
    """Chapter 6: choose n on the training ids alone: fit on the head, score the tail.

    Returns the best order and the held-out cross-entropy of each order.
    """
    ids = _as_ids(train_ids, vocab_size, "train_ids")
    cut = int(len(ids) * (1 - held_out_fraction))
    if cut < 1 or cut >= len(ids):
        raise ValueError(
            f"train_ids: {len(ids)} tokens are too few to hold out "
            f"{held_out_fraction:.0%}"
        )
    scores = {
        n: NGramModel(n, vocab_size, smoothing).fit(ids[:cut]).cross_entropy(ids[cut:])
        for n in orders
    }
    return min(scores, key=scores.get), scores


def ngram_table(
    train_ids: object,
    val_ids: object,
    vocab_size: int,
    orders: Iterable[int] = range(9),
    smoothing: str = "kneser-ney",
) -> dict[int, float]:
    """Chapter 6: validation cross-entropy (nats per token) of each order, fitted on train."""
    return {
        n: NGramModel(n, vocab_size, smoothing).fit(train_ids).cross_entropy(val_ids)
        for n in orders
    }
