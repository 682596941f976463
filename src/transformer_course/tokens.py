"""Chapter 1, Tokens: text and images become a sequence of N tokens.

* :class:`CharTokenizer`: one token per character.
* :class:`WordTokenizer`: one token per word or punctuation mark, with a
  fixed vocabulary and ``<unk>`` for every word outside it.
* :class:`BPETokenizer`: byte-level byte-pair encoding, trained from scratch.
  It works on UTF-8 bytes, so ``decode(encode(s)) == s`` for every string,
  accents and emoji included, and no input is ever "unknown".
* :func:`patchify` / :func:`unpatchify`: images (B, C, H, W) to patch tokens
  (B, N, C·p·p) and back (Turner's figure 2; used by the ViT of chapter 7).

See book/01_tokens.ipynb.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections import Counter, defaultdict
from collections.abc import Iterable

import torch
import torch.nn.functional as F

from .shapes import expect_shape

__all__ = [
    "BPETokenizer",
    "CharTokenizer",
    "WordTokenizer",
    "one_hot_lookup",
    "patchify",
    "pretokenize",
    "unpatchify",
]


def _checked_ids(ids: Iterable[int], vocab_size: int) -> list[int]:
    """``ids`` as a list of ints, or an error naming what is wrong with them.

    A TypeError for anything but an iterable of ints (a 1-D integer tensor is
    fine), a ValueError naming the ids outside 0..vocab_size-1: a negative id
    must not silently count from the end of the vocabulary.
    """
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise TypeError(f"ids: expected an iterable of ints, got {type(ids).__name__}")
    checked = []
    for i in ids:
        try:
            checked.append(operator.index(i))
        except TypeError:
            raise TypeError(f"ids: expected ints, got {i!r}") from None
    ids = checked
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise ValueError(f"ids: expected values in 0..{vocab_size - 1}, got {bad[:5]}")
    return ids


class CharTokenizer:
    """Characters as tokens: the vocabulary is the sorted set of a text's characters.

    >>> tok = CharTokenizer("hello")
    >>> tok.encode("hole"), tok.decode([1, 3, 2, 0])
    ([1, 3, 2, 0], 'hole')
    """

    def __init__(self, text: str):
        if not isinstance(text, str) or not text:
            raise ValueError(f"text: expected a non-empty str, got {text!r:.40}")
        self.chars: list[str] = sorted(set(text))
        self.ids: dict[str, int] = {ch: i for i, ch in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """The id of every character of ``text``."""
        unknown = sorted(set(text) - self.ids.keys())
        if unknown:
            raise ValueError(
                f"text contains {len(unknown)} character(s) outside the vocabulary of "
                f"{self.vocab_size}: {''.join(unknown[:10])!r}"
            )
        return [self.ids[ch] for ch in text]

    def decode(self, ids: Iterable[int]) -> str:
        """The characters of ``ids``."""
        ids = _checked_ids(ids, self.vocab_size)
        return "".join(self.chars[i] for i in ids)


_WORD = re.compile(r"\w+(?:'\w+)?|[^\w\s]")


class WordTokenizer:
    """Words (and punctuation marks) as tokens, with a closed vocabulary.

    The vocabulary is ``<unk>`` plus the ``vocab_size - 1`` most frequent words of
    the training text (ties broken alphabetically). Every other word becomes
    ``<unk>``, and white space is lost: ``decode`` joins tokens with spaces. Both
    are why sub-word tokenizers replaced word tokenizers.
    """

    UNK = "<unk>"

    def __init__(self, text: str, vocab_size: int | None = None):
        counts = Counter(_WORD.findall(text))
        if not counts:
            raise ValueError("text: expected some words, got none")
        ranked = sorted(counts, key=lambda w: (-counts[w], w))
        if vocab_size is not None:
            if vocab_size < 2:
                raise ValueError(
                    f"vocab_size: expected at least 2 (<unk> and a word), got {vocab_size}"
                )
            ranked = ranked[: vocab_size - 1]
        self.words: list[str] = [self.UNK, *ranked]
        self.ids: dict[str, int] = {w: i for i, w in enumerate(self.words)}

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    @staticmethod
    def split(text: str) -> list[str]:
        """The words and punctuation marks of ``text``."""
        return _WORD.findall(text)

    def encode(self, text: str) -> list[int]:
        """Word ids; out-of-vocabulary words get the id of ``<unk>`` (0)."""
        return [self.ids.get(w, 0) for w in self.split(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """Words joined by single spaces (the original spacing is not kept)."""
        return " ".join(self.words[i] for i in _checked_ids(ids, self.vocab_size))


# Split text into chunks before BPE, so merges never cross a word boundary:
# a letter run, a digit run, a punctuation run (each with one leading space),
# or white space. Every character matches one branch, so the chunks join back
# into the text exactly.
_CHUNK = re.compile(r" ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")


def pretokenize(text: str) -> list[str]:
    """Split ``text`` into the chunks BPE merges within; ``"".join`` restores it."""
    return _CHUNK.findall(text)


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace each non-overlapping ``pair``, scanning left to right."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _pairs(ids: list[int]) -> Counter:
    return Counter(itertools.pairwise(ids))


class BPETokenizer:
    """Byte-level byte-pair encoding.

    The base vocabulary is the 256 byte values; each merge adds one token for
    the most frequent adjacent pair of tokens in the training text (ties go to
    the pair seen first). ``merges[k] = (a, b)`` made token ``256 + k``.

    Use :meth:`train`::

        bpe = BPETokenizer.train(text, vocab_size=512)
        ids = bpe.encode("To be, or not to be")
        assert bpe.decode(ids) == "To be, or not to be"
    """

    def __init__(self, merges: list[tuple[int, int]]):
        self.merges: list[tuple[int, int]] = [tuple(m) for m in merges]
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        self.vocab: list[bytes] = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text``.

        Words are counted once with their frequency, and pair counts are
        updated only for the words a merge touches, so each merge costs time in
        proportion to how often its pair occurs, not to the length of the text.
        """
        if not isinstance(vocab_size, int) or vocab_size < 256:
            raise ValueError(
                f"vocab_size: expected an int >= 256 (the bytes), got {vocab_size!r}"
            )
        word_counts = Counter(pretokenize(text))
        words = [list(w.encode("utf-8")) for w in word_counts]
        freqs = list(word_counts.values())
        pair_counts: Counter = Counter()
        where: defaultdict[tuple[int, int], set[int]] = defaultdict(set)
        for index, (ids, freq) in enumerate(zip(words, freqs, strict=True)):
            for pair in itertools.pairwise(ids):
                pair_counts[pair] += freq
                where[pair].add(index)
        merges: list[tuple[int, int]] = []
        for new_id in range(256, vocab_size):
            if not pair_counts:
                break  # every word is a single token: nothing left to merge
            pair = max(pair_counts, key=pair_counts.__getitem__)  # first seen wins ties
            if pair_counts[pair] < 1:
                break
            merges.append(pair)
            for index in where.pop(pair):
                old = words[index]
                new = _merge(old, pair, new_id)
                freq = freqs[index]
                for p, n in _pairs(old).items():
                    pair_counts[p] -= n * freq
                    if pair_counts[p] <= 0:
                        del pair_counts[p]
                for p, n in _pairs(new).items():
                    pair_counts[p] += n * freq
                    where[p].add(index)
                words[index] = new
            pair_counts.pop(pair, None)
        return cls(merges)

    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = list(chunk.encode("utf-8"))
        while len(ids) > 1:
            # apply the earliest-learned merge present, as training did
            pair = min(
                itertools.pairwise(ids),
                key=lambda p: self.ranks.get(p, 1 << 30),
            )
            if pair not in self.ranks:
                break
            ids = _merge(ids, pair, 256 + self.ranks[pair])
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; every string can be encoded."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        ids: list[int] = []
        for chunk in pretokenize(text):
            if chunk not in self._cache:
                self._cache[chunk] = self._encode_chunk(chunk)
            ids.extend(self._cache[chunk])
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``. Ids that split a multi-byte character decode to U+FFFD."""
        ids = _checked_ids(ids, self.vocab_size)
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")

    def token_strings(self, ids: Iterable[int]) -> list[str]:
        """Each token as readable text (bytes that are not valid UTF-8 shown escaped)."""
        ids = _checked_ids(ids, self.vocab_size)
        return [self.vocab[i].decode("utf-8", errors="backslashreplace") for i in ids]


def _check_patch_size(patch_size: int) -> None:
    if not isinstance(patch_size, int) or patch_size < 1:
        raise ValueError(f"patch_size: expected a positive int, got {patch_size!r}")


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Cut images into non-overlapping square patches, one token per patch.

    Args:
        images: (B, C, H, W), with H and W divisible by ``patch_size``.
        patch_size: p, the side of each patch.

    Returns:
        (B, N, C·p·p) with N = (H/p)·(W/p): patches numbered row by row, each
        flattened channel first as (C, p, p), the layout of ``F.unfold`` and of a
        ``Conv2d`` weight, so a linear map of the patches equals a strided conv.
    """
    _check_patch_size(patch_size)
    dims = expect_shape(images, "B C H W", "images")
    B, C, H, W, p = dims["B"], dims["C"], dims["H"], dims["W"], patch_size
    if H % p or W % p:
        raise ValueError(
            f"images: size {H}×{W} is not divisible by patch_size {p}; crop or pad "
            f"to a multiple of {p} (e.g. {H - H % p}×{W - W % p})"
        )
    grid = images.reshape(B, C, H // p, p, W // p, p)  # (B, C, H/p, p, W/p, p)
    grid = grid.permute(0, 2, 4, 1, 3, 5)  # (B, H/p, W/p, C, p, p)
    return grid.reshape(B, (H // p) * (W // p), C * p * p)  # (B, N, C·p·p)


def unpatchify(
    patches: torch.Tensor, image_size: tuple[int, int], patch_size: int
) -> torch.Tensor:
    """Inverse of :func:`patchify`: (B, N, C·p·p) -> (B, C, H, W)."""
    _check_patch_size(patch_size)
    H, W = image_size
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image_size: {H}×{W} is not divisible by patch_size {p}")
    n = (H // p) * (W // p)
    dims = expect_shape(patches, "B N P", "patches", N=n)
    if dims["P"] % (p * p):
        raise ValueError(
            f"patches: the last dimension ({dims['P']}) must be C·p·p, a multiple of "
            f"p·p = {p * p}"
        )
    B, C = dims["B"], dims["P"] // (p * p)
    grid = patches.reshape(B, H // p, W // p, C, p, p)  # (B, H/p, W/p, C, p, p)
    grid = grid.permute(0, 3, 1, 4, 2, 5)  # (B, C, H/p, p, W/p, p)
    return grid.reshape(B, C, H, W)


def one_hot_lookup(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """An embedding lookup written as a matrix product: one_hot(ids) @ table.

    Args:
        ids: (...,) int64 token ids in 0..V-1.
        table: (V, D) embedding matrix.

    Returns:
        (..., D), equal to ``table[ids]`` (and to ``nn.Embedding``).
    """
    dims = expect_shape(table, "V D", "table")
    if not isinstance(ids, torch.Tensor):
        raise TypeError(
            f"ids: expected an integer torch.Tensor of shape (...), "
            f"got {type(ids).__name__}"
        )
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(
            f"ids: expected an integer tensor (int64 or int32), got {ids.dtype}"
        )
    if ids.numel() and (ids.min() < 0 or ids.max() >= dims["V"]):
        raise ValueError(
            f"ids: expected values in 0..{dims['V'] - 1}, got {ids.min()}..{ids.max()}"
        )
    one_hot = F.one_hot(ids.long(), num_classes=dims["V"]).to(table.dtype)  # (..., V)
    return one_hot @ table  # (..., V) @ (V, D) -> (..., D)
