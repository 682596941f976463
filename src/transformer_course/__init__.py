"""transformer_course: the tested code behind the executable transformer course.

Every chapter notebook starts with ``import transformer_course as tc``. Each idea
lives in one module, roughly one per chapter; the modules fall in four kinds.

**Concepts**, in the order the book teaches them (what the chapters show):

==================  ====================================================================
``tokens``          tokenizers (characters, words, BPE) and patches (chapter 1)
``word_vectors``    co-occurrence word vectors and similarity (chapter 1)
``attention``       softmax, scaled dot-product and additive attention (chapter 2)
``multihead``       multi-head self-attention, both forms (chapter 3)
``norms``           LayerNorm (Turner's TokenNorm), RMSNorm, BatchNorm (chapter 4)
``block``           the transformer block: MLP, residuals, pre-/post-norm (chapter 4)
``positions``       sinusoidal, learned, rotary (RoPE) and ALiBi positions (chapter 5)
``kv_cache``        keys and values of earlier tokens, for generation (chapter 6)
``gpt``             a GPT: causal language model, sampling, generation (chapter 6)
``vit``             a vision transformer: patches, class token, attention rollout (chapter 7)
``shapes``          shape and value checks with clear messages (all chapters)
``notation``        rows (N, D) versus Turner's columns D×N (Notation page)
``torch_layers``    attention and blocks to and from PyTorch's layers (chapters 3, 4)
==================  ====================================================================

**Training and data**: the one training loop and what it trains on.

==================  ====================================================================
``data``            the corpus, the digits, language-model batches (chapters 1, 6, 7)
``train``           the training loop and its checkpoints (chapters 4, 6, 7)
``train_gpt``       a GPT from the command line, one process or ``torchrun`` (chapter 6)
``train_vit``       the ViT's training recipe for the digits: shifts, runs (chapter 7)
``digit_rows``      the digits read row by row, a classifier for the block (chapter 4)
``position_tasks``  a model with any position encoding, the lag task (chapter 5)
``ngram``           count-based n-gram baselines for chapter 6's loss curves
``baselines``       kNN, an SVM and a small CNN on the digits, for the ViT (chapter 7)
``seeds``           a figure over seeds: mean, sd, 95 % interval; recorded figures
``benchmark``       time and peak tensor memory of a call (chapter 2 on)
==================  ====================================================================

**Presentation**: how the chapters look and run.

==================  ====================================================================
``runtime``         seeding, device, threads, figure style (first cell of every chapter)
``plotting``        figure style, token axes, patches, attention heatmaps (all chapters)
``diagrams``        schematic figures of the attention equations (chapters 2, 3)
``lab_settings``    JupyterLab keeps the exercise widgets drawn after a reopen
==================  ====================================================================

**Exercises and grading**: ``exercises`` (the self-checking exercise notebooks:
checks, hints, quizzes, the runner that calls a learner's function) and
``grading``, a subpackage (``python -m transformer_course.grading.grade``, the
autograder; ``sandbox``, where graded code runs; ``gradebook``, a class through
nbgrader).

Not imported by ``import transformer_course``: ``diagrams``, ``ngram``,
``train_gpt``       (``python -m transformer_course.train_gpt``), ``lab_settings``
(``python -m transformer_course.lab_settings``), ``exercises`` and ``grading``.
Repository tooling that learners do not need (the book's JavaScript, the
release of student notebooks) lives outside the package, in ``tools/``.

The test tests/test_package.py lists the package's modules and checks that each
is named here.
"""

from . import digit_rows as digit_rows  # chapter 4's classifier of the digits
from . import position_tasks as position_tasks  # chapter 5's model and lag task
from . import torch_layers as torch_layers  # to and from PyTorch's layers
from . import train_vit as train_vit  # chapter 7's recipe for the digits
from .attention import (
    AdditiveAttention,
    SelfAttention,
    additive_scores,
    attention_weights,
    causal_mask,
    scaled_dot_product_attention,
    softmax,
)
from .baselines import SmallCNN, knn_and_svm
from .block import MLP, Block, BlockConfig, BlockStack
from .data import Digits, load_digits, load_text, split_ids, window_batches
from .gpt import GPT, GPTConfig, generate, sample_next, sequence_cross_entropy
from .kv_cache import KVCache, LayerCache
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .norms import LayerNorm, RMSNorm, batch_norm_tokens, layer_norm, rms_norm
from .notation import average_columns, average_rows, to_columns, to_rows
from .plotting import (
    attention_heatmap,
    loss_curves,
    patch_tokens_figure,
    token_axis,
    use_course_style,
)
from .positions import (
    LearnedPositions,
    RotaryEmbedding,
    SinusoidalPositions,
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    apply_rotary_complex,
    position_angles,
    sinusoidal_positions,
    sinusoidal_shift_matrix,
)
from .runtime import on_colab, pick_device, seed_everything, setup, show_source
from .seeds import OverSeeds, over_seeds, recorded, separated
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
from .train import History, TrainConfig, fit, learning_rate
from .vit import PatchEmbedding, ViT, ViTConfig, attention_rollout
from .word_vectors import (
    cooccurrence,
    cosine_similarity_matrix,
    fit_word_vectors,
    nearest,
    ppmi,
    svd_vectors,
)

__version__ = "0.1.0"

__all__ = [
    "GPT",
    "MLP",
    "AdditiveAttention",
    "BPETokenizer",
    "Block",
    "BlockConfig",
    "BlockStack",
    "CharTokenizer",
    "Digits",
    "GPTConfig",
    "History",
    "KVCache",
    "LayerCache",
    "LayerNorm",
    "LearnedPositions",
    "MultiHeadAttention",
    "OverSeeds",
    "PatchEmbedding",
    "RMSNorm",
    "RotaryEmbedding",
    "SelfAttention",
    "ShapeError",
    "SinusoidalPositions",
    "SmallCNN",
    "TrainConfig",
    "ViT",
    "ViTConfig",
    "WordTokenizer",
    "additive_scores",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "apply_rotary_complex",
    "attention_heatmap",
    "attention_rollout",
    "attention_weights",
    "average_columns",
    "average_rows",
    "batch_norm_tokens",
    "causal_mask",
    "cooccurrence",
    "cosine_similarity_matrix",
    "expect_shape",
    "fit",
    "fit_word_vectors",
    "generate",
    "knn_and_svm",
    "layer_norm",
    "learning_rate",
    "load_digits",
    "load_text",
    "loss_curves",
    "merge_heads",
    "nearest",
    "on_colab",
    "one_hot_lookup",
    "over_seeds",
    "patch_tokens_figure",
    "patchify",
    "pick_device",
    "position_angles",
    "ppmi",
    "pretokenize",
    "recorded",
    "rms_norm",
    "sample_next",
    "scaled_dot_product_attention",
    "seed_everything",
    "separated",
    "sequence_cross_entropy",
    "setup",
    "show_source",
    "sinusoidal_positions",
    "sinusoidal_shift_matrix",
    "softmax",
    "split_heads",
    "split_ids",
    "svd_vectors",
    "to_columns",
    "to_rows",
    "token_axis",
    "unpatchify",
    "use_course_style",
    "window_batches",
]
