"""Chapter 1: word vectors learned in seconds from co-occurrence counts.

Words that occur in similar contexts get similar vectors (the distributional
hypothesis). Count how often each pair of words appears within a small window,
weight the counts by positive pointwise mutual information (PPMI), and keep the
top singular directions: each word's row is its vector. Similarity is then a
dot product, or a cosine when lengths should not matter.

See book/01_tokens.ipynb ("Embeddings").
"""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F

from .shapes import expect_shape, expect_token_ids
from .tokens import WordTokenizer

__all__ = [
    "cooccurrence",
    "cosine_similarity_matrix",
    "fit_word_vectors",
    "nearest",
    "ppmi",
    "svd_vectors",
]


def _expect_int(
    value: object, name: str, low: int, high: int | None = None, what: str = ""
) -> int:
    """``value`` as an int in low..high, or an error naming the range and the value."""
    try:
        value = operator.index(value)  # ints, numpy ints, one-element integer tensors
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {value!r}") from None
    if value < low or (high is not None and value > high):
        expected = f"an int ≥ {low}" if high is None else f"an int in {low}..{high}"
        raise ValueError(f"{name}: expected {expected}{what}, got {value}")
    return value


def cooccurrence(ids: torch.Tensor, vocab_size: int, window: int = 2) -> torch.Tensor:
    """Symmetric co-occurrence counts.

    Args:
        ids: (N,) int64 word ids of a text, in 0..V-1.
        vocab_size: V.
        window: words up to this many positions apart count as co-occurring.

    Returns:
        (V, V) float64: entry [a, b] counts the positions i != j, |i - j| <= window,
        with ids[i] == a and ids[j] == b.
    """
    vocab_size = _expect_int(vocab_size, "vocab_size", 1)
    window = _expect_int(window, "window", 1)
    expect_token_ids(ids, vocab_size, shape="N")  # (N,) word ids in 0..V − 1
    ids = ids.long()  # index_put_ wants int64 indices
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    ones = torch.ones(max(len(ids) - 1, 0), dtype=torch.float64)
    for offset in range(1, window + 1):
        left, right = ids[:-offset], ids[offset:]  # (N - offset,) each
        counts.index_put_((left, right), ones[: len(left)], accumulate=True)
        counts.index_put_((right, left), ones[: len(left)], accumulate=True)
    return counts


def ppmi(counts: torch.Tensor) -> torch.Tensor:
    """Positive pointwise mutual information, ``max(0, log p(a, b) / (p(a) p(b)))``.

    Args:
        counts: (V, V) non-negative co-occurrence counts.

    Returns:
        (V, V), zero where a pair never co-occurs.
    """
    expect_shape(counts, "V V", "counts")
    total = counts.sum()
    joint = counts / total  # p(a, b)
    row = joint.sum(dim=1, keepdim=True)  # (V, 1): p(a)
    col = joint.sum(dim=0, keepdim=True)  # (1, V): p(b)
    with torch.no_grad():
        expected = row * col
    pmi = torch.log(joint / expected.clamp_min(1e-300))
    return torch.where(counts > 0, pmi.clamp_min(0.0), torch.zeros_like(pmi))


def svd_vectors(matrix: torch.Tensor, dim: int) -> torch.Tensor:
    """Rows of the best rank-``dim`` factor: ``U[:, :dim] * sqrt(S[:dim])``.

    Args:
        matrix: (V, V) symmetric word-context matrix, e.g. PPMI.
        dim: D, the vector width.

    Returns:
        (V, D) word vectors. Signs of the singular vectors are fixed so that each
        column's largest entry is positive, which makes the result deterministic.
    """
    dims = expect_shape(matrix, "V V", "matrix")
    dim = _expect_int(dim, "dim", 1, dims["V"])
    U, S, _ = torch.linalg.svd(matrix)
    vectors = U[:, :dim] * S[:dim].sqrt()  # (V, D)
    signs = torch.sign(
        vectors.gather(0, vectors.abs().argmax(0, keepdim=True))
    )  # (1, D)
    return vectors * signs


def cosine_similarity_matrix(vectors: torch.Tensor) -> torch.Tensor:
    """All pairwise cosines: (V, D) -> (V, V), ``x_a·x_b / (|x_a| |x_b|)``."""
    expect_shape(vectors, "V D", "vectors")
    unit = vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12)  # (V, D)
    return unit @ unit.T


def nearest(vectors: torch.Tensor, index: int, k: int = 5) -> list[int]:
    """The ``k`` rows most cosine-similar to row ``index`` (itself excluded).

    Args:
        vectors: (V, D) word vectors.
        index: a row, 0..V-1.
        k: how many neighbours, 1..V-1 (a row is not its own neighbour).

    Returns:
        k row indices, most similar first.
    """
    dims = expect_shape(vectors, "V D", "vectors")
    V = dims["V"]
    shape = tuple(vectors.shape)
    if V < 2:
        raise ValueError(
            f"vectors: expected at least 2 rows to find neighbours among, got {shape}"
        )
    index = _expect_int(index, "index", 0, V - 1, f" (a row of vectors {shape})")
    k = _expect_int(k, "k", 1, V - 1, f" (the other rows of vectors {shape})")
    sims = F.cosine_similarity(vectors, vectors[index : index + 1], dim=-1)  # (V,)
    sims[index] = -float("inf")
    return sims.topk(k).indices.tolist()


def fit_word_vectors(
    text: str, vocab_size: int = 1500, window: int = 4, dim: int = 64
) -> tuple[WordTokenizer, torch.Tensor]:
    """The whole recipe of chapter 1 in one call: lower-cased words, counts, PPMI, SVD.

    Returns:
        The word vocabulary (id 0 is ``<unk>``, whose vector is zero) and the
        (V, dim) vectors, float32 like the rest of a model.
    """
    words = [w.lower() for w in WordTokenizer.split(text) if w.isalpha()]
    joined = " ".join(words)
    vocab = WordTokenizer(joined, vocab_size=vocab_size)
    counts = cooccurrence(torch.tensor(vocab.encode(joined)), vocab.vocab_size, window)
    counts[0] = 0  # ignore <unk>
    counts[:, 0] = 0
    return vocab, svd_vectors(ppmi(counts), min(dim, vocab.vocab_size)).float()
