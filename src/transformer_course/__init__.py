"""transformer_course: the tested code behind the executable transformer course.

Every chapter notebook starts with ``import transformer_course as tc``. Each idea
lives in one module, roughly one per chapter:

==============  =========================================================
``shapes``      shape checks with clear messages (all chapters)
``runtime``     seeding, device and threads (first cell of every chapter)
``notation``    rows (N, D) versus Turner's columns D×N (Notation page)
``data``        the text corpus and the digits images (chapters 1, 6, 7)
``plotting``    attention heatmaps (chapters 2, 3)
``tokens``      tokenizers (characters, words, BPE) and patches (chapter 1)
``word_vectors`` co-occurrence word vectors and similarity (chapter 1)
``attention``   softmax, scaled dot-product and additive attention (chapter 2)
``benchmark``   time and peak tensor memory of a call (chapter 2 on)
``multihead``   multi-head self-attention, both forms, torch conversion (chapter 3)
==============  =========================================================

Not imported by ``import transformer_course``: ``exercises`` (self-checking
exercise notebooks), ``grade`` (``python -m transformer_course.grade``, the
autograder) and ``book_assets`` (vendored JavaScript for offline reading).
"""

from .attention import (
    AdditiveAttention,
    SelfAttention,
    additive_scores,
    attention_weights,
    causal_mask,
    scaled_dot_product_attention,
    softmax,
)
from .data import Digits, load_digits, load_text
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .notation import average_columns, average_rows, to_columns, to_rows
from .plotting import attention_heatmap
from .runtime import on_colab, pick_device, seed_everything, setup, show_source
from .shapes import ShapeError, expect_shape
from .tokens import (
    BPETokenizer,
    CharTokenizer,
    WordTokenizer,
    one_hot_lookup,
    patchify,
    pretokenize,
    unpatchify,
)
from .word_vectors import (
    cooccurrence,
    cosine_similarity_matrix,
    fit_word_vectors,
    nearest,
    ppmi,
    svd_vectors,
)

__version__ = "0.1.0"

#: The package's modules, in the order the course introduces them.
MODULES = (
    "shapes",
    "runtime",
    "notation",
    "data",
    "plotting",
    "tokens",
    "word_vectors",
)

__all__ = [
    "MODULES",
    "AdditiveAttention",
    "BPETokenizer",
    "CharTokenizer",
    "Digits",
    "MultiHeadAttention",
    "SelfAttention",
    "ShapeError",
    "WordTokenizer",
    "additive_scores",
    "attention_heatmap",
    "attention_weights",
    "average_columns",
    "average_rows",
    "causal_mask",
    "cooccurrence",
    "cosine_similarity_matrix",
    "expect_shape",
    "fit_word_vectors",
    "load_digits",
    "load_text",
    "merge_heads",
    "nearest",
    "on_colab",
    "one_hot_lookup",
    "patchify",
    "pick_device",
    "ppmi",
    "pretokenize",
    "scaled_dot_product_attention",
    "seed_everything",
    "setup",
    "show_source",
    "softmax",
    "split_heads",
    "svd_vectors",
    "to_columns",
    "to_rows",
    "unpatchify",
]
