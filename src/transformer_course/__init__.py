"""transformer_course: the tested code behind the executable transformer course.

Every chapter notebook starts with ``import transformer_course as tc``. Each idea
lives in one module, roughly one per chapter:

==============  =========================================================
``shapes``      shape checks with clear messages (all chapters)
``runtime``     seeding, device and threads (first cell of every chapter)
``notation``    rows (N, D) versus Turner's columns D×N (Notation page)
``data``        the text corpus and the digits images (chapters 1, 6, 7)
``plotting``    attention heatmaps (chapters 2, 3)
==============  =========================================================

Not imported by ``import transformer_course``: ``exercises`` (self-checking
exercise notebooks), ``grade`` (``python -m transformer_course.grade``, the
autograder) and ``book_assets`` (vendored JavaScript for offline reading).
"""

from .data import Digits, cache_dir, course_corpus, load_digits, load_text
from .notation import average_columns, average_rows, to_columns, to_rows
from .plotting import attention_heatmap
from .runtime import on_colab, pick_device, seed_everything, setup, show_source
from .shapes import ShapeError, expect_shape

__version__ = "0.1.0"

#: The package's modules, in the order the course introduces them.
MODULES = ("shapes", "runtime", "notation", "data", "plotting")

__all__ = [
    "MODULES",
    "Digits",
    "ShapeError",
    "attention_heatmap",
    "average_columns",
    "average_rows",
    "cache_dir",
    "course_corpus",
    "expect_shape",
    "load_digits",
    "load_text",
    "on_colab",
    "pick_device",
    "seed_everything",
    "setup",
    "show_source",
    "to_columns",
    "to_rows",
]
