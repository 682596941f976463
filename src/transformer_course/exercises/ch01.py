"""Checks and quizzes for exercises/01_tokens.ipynb (chapter 1, Tokens).

Each exercise is a function the learner writes; each check makes its own
inputs, calls the learner's function on them (see :mod:`.core`) and judges the
outcomes, with a hint for the usual mistake.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..tokens import _merge
from .core import (
    PROPERTY,
    Check,
    Exercise,
    Failed,
    close,
    names_the_sizes,
    returned_values,
    shown,
    sizes_p_does_not_divide,
    too_many_numbers,
    unseen,
    unseen_check,
)
from .widgets import load_quizzes

__all__ = ["EXERCISES", "QUIZZES"]


# --- Exercise 1: a character vocabulary ------------------------------------------

VOCAB_TEXTS = ["hello world", "To be, or not to be", "naïve café 🙂 — ok", "aaaa"]


def _vocab_cases():
    return [(text,) for text in VOCAB_TEXTS]


def _judge_vocab_type(cases, outcomes):
    returned_values(outcomes, object)
    for outcome in outcomes:
        vocab = outcome.value
        if not isinstance(vocab, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in vocab.items()
        ):
            raise Failed(
                "Return a dict mapping each character (a str) to its id (an int)."
            )


def _judge_vocab_covers(cases, outcomes):
    returned_values(outcomes, object)
    for (text,), outcome in zip(cases, outcomes, strict=True):
        keys = set(outcome.value)
        if keys != set(text):
            missing = sorted(set(text) - keys)[:5]
            raise Failed(
                f"For {text!r} the vocabulary should hold exactly the characters of the "
                f"text, each once (missing: {missing}). Build it from set(text)."
            )


def _judge_vocab_ids(cases, outcomes):
    returned_values(outcomes, object)
    for (text,), outcome in zip(cases, outcomes, strict=True):
        vocab = outcome.value
        missing = sorted(set(text) - set(vocab))
        if missing:
            raise Failed(
                f"A text with {len(set(text))} distinct characters needs all of "
                f"them in its vocabulary; {len(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} missing (such as "
                f"{shown(missing[:5])}). Build it from sorted(set(text)), whatever "
                "its size."
            )
        ids = sorted(vocab.values())
        repeated = len(text) != len(set(text))
        if repeated and vocab == {c: i for i, c in enumerate(sorted(text))}:
            raise Failed(
                "Number each distinct character once: enumerate sorted(set(text)). "
                "Enumerating sorted(text) gives a repeated character the id of its "
                "last copy, so ids skip numbers."
            )
        if ids == list(range(1, len(vocab) + 1)):
            raise Failed(
                "Start the ids at 0: an id is a row index into the embedding table."
            )
        if ids != list(range(len(vocab))):
            raise Failed(
                "Give the V characters the ids 0, 1, ..., V-1, each exactly once."
            )
        if [ch for ch, _ in sorted(vocab.items(), key=lambda kv: kv[1])] != sorted(
            set(text)
        ):
            raise Failed(
                "Number the characters in sorted order (sorted(set(text))), not in the "
                "order they first appear: then the same characters always get the same ids."
            )


# Unicode ranges the unseen texts draw from: every kind of character a text can
# hold (control characters and whitespace, accents, combining marks, other
# scripts, emoji beyond the 16-bit plane), so that no kind can be left out.
_CODE_RANGES = (
    (0, 32),  # control characters: \n, \t, \r, \x00, ...
    (32, 127),  # ASCII
    (0xA0, 0x300),  # Latin-1 and Latin Extended: accents
    (0x300, 0x370),  # combining marks
    (0x391, 0x3CA),  # Greek
    (0x4E00, 0x4F00),  # CJK
    (0x1F300, 0x1F650),  # emoji
    # and anything else: the rest of the basic plane (punctuation such as "—",
    # Cyrillic, currency, ...) and the planes above it
    (0x370, 0xD800),
    (0xE000, 0xFFFE),
    (0x10000, 0x110000),
)


def _random_texts(g):
    texts = []
    for _ in range(3):
        n = int(torch.randint(1, 40, (), generator=g))
        picks = torch.randint(0, len(_CODE_RANGES), (n,), generator=g).tolist()
        codes = [int(torch.randint(*_CODE_RANGES[p], (), generator=g)) for p in picks]
        texts.append("".join(chr(c) for c in codes))
    # and one text with a character of every range
    texts.append(
        "".join(chr(int(torch.randint(a, b, (), generator=g))) for a, b in _CODE_RANGES)
    )
    # and whitespace, every time: newlines, tabs and spaces are characters too,
    # at the ends of a text as in its middle
    words = texts[0] or "a"
    texts.append("\t" + words + " \n" + words[::-1] + "\r\n")
    # and a long one, of a vocabulary larger than tiny Shakespeare's 65 characters
    n = int(torch.randint(100, 400, (), generator=g))
    printable = torch.randint(32, 127, (n,), generator=g).tolist()
    wide = torch.randint(0xA0, 0x250, (n // 2,), generator=g).tolist()
    texts.append("".join(chr(c) for c in printable + wide))
    return [(text,) for text in texts]


def _text_twins(case, g):
    """A text's twins: each distinct character replaced by another of its kind
    (the same range of :data:`_CODE_RANGES`), equal characters by equal ones;
    and twice as long, two such texts in a row."""
    (text,) = case
    return [(_replaced(text, g),), (_replaced(text, g) + _replaced(text, g),)]


def _replaced(text, g):
    used, replacement = set(), {}
    for ch in dict.fromkeys(text):
        low, high = next(
            ((a, b) for a, b in _CODE_RANGES if a <= ord(ch) < b),
            (ord(ch), ord(ch) + 1),
        )
        for _ in range(50):  # a character not used yet, if the range has one
            code = int(torch.randint(low, high, (), generator=g))
            if code not in used:
                break
        used.add(code)
        replacement[ch] = chr(code)
    return "".join(replacement[ch] for ch in text)


CHAR_VOCAB = Exercise(
    key="build_char_vocab",
    function="build_char_vocab",
    title="Exercise 1: a character vocabulary",
    points=3,
    checks=(
        Check(
            "returns a dict from characters to int ids",
            _vocab_cases,
            _judge_vocab_type,
            PROPERTY,
        ),
        Check(
            "every distinct character has one id",
            _vocab_cases,
            _judge_vocab_covers,
            PROPERTY,
        ),
        Check(
            "ids are 0..V-1 in sorted character order", _vocab_cases, _judge_vocab_ids
        ),
        unseen_check("the same on unseen texts", _random_texts, _judge_vocab_ids),
    ),
    twins=_text_twins,
    mutable_inputs=False,  # numbers and strings only: nothing to change in place
)

# --- Exercise 2: one BPE merge step ---------------------------------------------------


def _merge_example_cases():
    return [
        ([1, 2, 3, 1, 2], (1, 2), 4),
        ([5, 6, 5, 6, 6], (5, 6), 7),
        # ids are numbers, not text: "11 2" contains "1 2", and so does "1 23"
        ([11, 2, 1, 23, 1, 2], (1, 2), 9),
    ]


def _judge_merge_example(cases, outcomes):
    returned_values(outcomes, object)
    expected = [[4, 3, 4], [7, 7, 6], [11, 2, 1, 23, 9]]
    for (ids, pair, new_id), outcome, want in zip(
        cases, outcomes, expected, strict=True
    ):
        if outcome.value == want:
            continue
        if outcome.value == _merged_keeping_seconds(ids, pair, new_id):
            raise Failed(
                f"merge_pair({ids}, {pair}, {new_id}) should give {want}: you kept "
                "the pair's second id after new_id. A merge replaces both ids of the "
                "pair by one new_id: skip past both."
            )
        if ids and outcome.value == _reference_merge(ids[:-1], pair, new_id):
            raise Failed(
                f"merge_pair({ids}, {pair}, {new_id}) should give {want}: the last "
                "id is missing. Loop to the end of the list: only a pair needs "
                "i + 1 < len(ids), a single id does not."
            )
        if ids[0] == 11:
            raise Failed(
                f"merge_pair({ids}, {pair}, {new_id}) should give {want}, got "
                f"{shown(outcome.value)}: compare ids as numbers, pair by pair; as text, "
                "'11 2' and '1 23' also contain '1 2'."
            )
        raise Failed(
            f"Merging {pair} -> {new_id} in {ids} should give {want}; you returned "
            f"{shown(outcome.value)}. Replace every occurrence of the pair by new_id."
        )


def _merged_keeping_seconds(ids, pair, new_id):
    """The usual mistake: new_id in place of each pair's first id, the second
    one kept."""
    return [
        new_id if (x, y) == tuple(pair) else x
        for x, y in zip(ids, [*ids[1:], None], strict=True)
    ]


def _merge_overlap_cases():
    return [([1, 1, 1], (1, 1), 9), ([1, 1, 1, 1], (1, 1), 9)]


def _judge_merge_overlap(cases, outcomes):
    returned_values(outcomes, object)
    got = [o.value for o in outcomes]
    if got == [[9, 1], [9, 9]]:
        return
    if got[0] != [9, 1] and isinstance(got[0], list) and got[0].count(9) >= 2:
        raise Failed(
            "Occurrences overlap in [1, 1, 1]: after merging a pair, skip past both of "
            "its tokens. The answer is [9, 1]."
        )
    if got[0] == [1, 9]:
        raise Failed(
            "Scan from left to right: [1, 1, 1] merges its first pair, giving [9, 1]."
        )
    if got[0] == [9]:  # the trailing 1, with no pair after it, left out
        raise Failed(
            "Merging (1, 1) in [1, 1, 1] should give [9, 1]: the last id is missing. "
            "Loop to the end of the list: only a pair needs i + 1 < len(ids), a "
            "single id does not."
        )
    raise Failed(
        f"Merging (1, 1) in [1, 1, 1] should give [9, 1]; you returned {shown(got[0])}."
    )


def _merge_edge_cases():
    return [
        ([], (1, 2), 3),
        ([1], (1, 2), 3),
        ([3, 4, 1, 2], (1, 2), 5),
        ([2, 1], (1, 2), 5),
    ]


def _judge_merge_edges(cases, outcomes):
    returned_values(outcomes, object)
    expected = [[], [1], [3, 4, 5], [2, 1]]
    for (ids, pair, _), outcome, want in zip(cases, outcomes, expected, strict=True):
        if outcome.value != want:
            raise Failed(
                f"merge_pair({ids}, {pair}, ...) should give {want}, got {shown(outcome.value)}: "
                f"check the empty list, a pair at the very end, and a reversed pair."
            )


def _judge_merge_pure(cases, outcomes):
    returned_values(outcomes, object)
    for outcome in outcomes:
        if not isinstance(outcome.value, list):
            raise Failed("Return a new list of ids.")


def _merge_pure_cases():
    return [([1, 2, 1, 2], (1, 2), 3)]


def _reference_merge(ids, pair, new_id):
    """The package's own merge step (chapter 1's BPE), as the reference."""
    return _merge(list(ids), tuple(pair), new_id)


def _random_merges(g):
    def draw(n, high=4):
        return torch.randint(0, high, (n,), generator=g).tolist()

    cases = []
    for _ in range(4):
        # four ids per list, among them ids of two and three digits whose text
        # shares digits with the others ("1 2" is inside "11 2" and "1 23")
        alphabet = [
            [1, 2, 11, 12, 21, 23, 112, 3, 13, 0][i]
            for i in torch.randperm(10, generator=g)[:4].tolist()
        ]
        n = int(torch.randint(0 if len(cases) >= 2 else 3, 25, (), generator=g))
        pair = tuple(alphabet[i] for i in draw(2))
        ids = [alphabet[i] for i in draw(n)]
        # a new id of one digit in the first two lists, of up to three after
        high = 10 if len(cases) < 2 else 150
        cases.append((ids, pair, int(torch.randint(0, high, (), generator=g))))
    # and always a run of exactly three equal ids (others around it), merged as (a, a)
    a, others = draw(1)[0], [4 + i for i in draw(6)]
    cases.append(([*others[:3], a, a, a, *others[3:]], (a, a), 99))
    # and a pair (a, b) whose text hides in its neighbours: "xa b" and "a by"
    a, b, x, y = (1 + i for i in draw(4, 9))
    trap = [10 * x + a, b, a, 10 * b + y, a, b]
    cases.append((trap[: int(torch.randint(4, 7, (), generator=g))], (a, b), 99))
    # and a merge as byte-level BPE makes them: ids of bytes and of earlier
    # merges (256 and up), a new id past them all
    vocab = 256 + int(torch.randint(1, 200, (), generator=g))
    alphabet = [int(i) for i in torch.randint(0, vocab, (5,), generator=g)]
    alphabet[0] = int(torch.randint(256, vocab, (), generator=g))  # a merged id
    ids = [alphabet[i] for i in draw(int(torch.randint(6, 30, (), generator=g)), 5)]
    pair = (alphabet[0], alphabet[int(torch.randint(0, 5, (), generator=g))])
    cases.append((ids, pair, vocab))
    return cases


def _judge_merge_reference(cases, outcomes):
    returned_values(outcomes, object)
    for (ids, pair, new_id), outcome in zip(cases, outcomes, strict=True):
        want = _reference_merge(ids, pair, new_id)
        if outcome.value != want:
            raise Failed(
                f"merge_pair({ids}, {pair}, {new_id}) should give {want}, got "
                f"{shown(outcome.value)}."
            )


def _relabelled_merge(case, g):
    """A merge's twins: every id (of the list, the pair and new_id) replaced by a
    fresh one, equal ids by equal ones, so that the pattern of the case stays;
    and such a list twice over."""
    ids, pair, new_id = case
    every = list(dict.fromkeys([*ids, *pair, new_id]))
    twins = []
    for times in (1, 2):
        fresh = torch.randperm(max(every) * 3 + 300, generator=g)[: len(every)]
        relabel = dict(zip(every, fresh.tolist(), strict=True))
        relabelled = [relabel[i] for i in ids] * times
        twins.append((relabelled, tuple(relabel[i] for i in pair), relabel[new_id]))
    return twins


MERGE_PAIR = Exercise(
    key="merge_pair",
    function="merge_pair",
    title="Exercise 2: one byte-pair merge",
    points=3,
    checks=(
        Check("replaces every occurrence", _merge_example_cases, _judge_merge_example),
        Check(
            "overlapping pairs merge left to right",
            _merge_overlap_cases,
            _judge_merge_overlap,
        ),
        Check(
            "edge cases: empty, end of list, reversed pair",
            _merge_edge_cases,
            _judge_merge_edges,
        ),
        unseen_check(
            "the same on unseen lists", _random_merges, _judge_merge_reference
        ),
        Check("returns a list", _merge_pure_cases, _judge_merge_pure, PROPERTY),
    ),
    twins=_relabelled_merge,
)

# --- Exercise 3: an embedding lookup as a one-hot matrix product --------------------


def _table(v=7, d=3, dtype=torch.float64, seed=0):
    return torch.randn(v, d, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _embed_cases():
    return [
        (torch.tensor([0, 3, 3, 6]), _table()),
        (torch.tensor([[1, 2], [5, 0]]), _table(seed=1)),
        (torch.tensor([2]), _table(v=5, d=4, dtype=torch.float32, seed=2)),
    ]


def _judge_embed_shape(cases, outcomes):
    returned_values(outcomes, object)
    for (ids, table), outcome in zip(cases, outcomes, strict=True):
        want = (*ids.shape, table.shape[1])
        got = (
            tuple(outcome.value.shape)
            if isinstance(outcome.value, torch.Tensor)
            else None
        )
        if got == (*ids.shape, table.shape[0]):
            raise Failed(
                "Your result has one column per vocabulary entry: that is the one-hot "
                "matrix itself. Multiply it by the table: (N, V) @ (V, D) -> (N, D)."
            )
        if got != want:
            raise Failed(
                f"For ids of shape {tuple(ids.shape)} and a table of shape "
                f"{tuple(table.shape)} the result should be {want}, got {got}."
            )


def _judge_embed_values(cases, outcomes):
    returned_values(outcomes, object)
    for (ids, table), outcome in zip(cases, outcomes, strict=True):
        value = outcome.value
        if value.dtype != table.dtype:
            raise Failed(
                f"The result should have the table's dtype ({table.dtype}), got "
                f"{value.dtype}: convert the one-hot matrix with .to(table.dtype)."
            )
        if not close(value, F.embedding(ids, table)):
            raise Failed("Row n of the result should be row ids[n] of the table.")


def _random_embeddings(g):
    cases = []
    # ids of one, two and three dimensions: the shape (...) is any shape
    for dims, dtype in ((1, torch.float32), (2, torch.float64), (3, torch.float32)):
        v, d = (int(t) for t in torch.randint(2, 9, (2,), generator=g))
        shape = tuple(torch.randint(1, 4, (dims,), generator=g).tolist())
        if dims == 1:  # 2 to 8 ids: never a single one a table could list
            shape = (int(torch.randint(2, 9, (), generator=g)),)
        ids = torch.randint(0, v, shape, generator=g)
        cases.append((ids, torch.randn(v, d, generator=g, dtype=dtype)))
    return cases


EMBED = Exercise(
    key="embed_one_hot",
    function="embed_one_hot",
    title="Exercise 3: a lookup is a one-hot matrix product",
    points=2,
    checks=(
        Check("shape (..., D)", _embed_cases, _judge_embed_shape, PROPERTY),
        Check(
            "equals a table lookup, in the table's dtype",
            _embed_cases,
            _judge_embed_values,
        ),
        unseen_check(
            "the same on unseen ids and tables", _random_embeddings, _judge_embed_values
        ),
    ),
    forbidden=("embedding",),
)

# --- Exercise 4: patchify -----------------------------------------------------------


def _images(b, c, h, w, seed=0):
    return torch.randn(b, c, h, w, generator=torch.Generator().manual_seed(seed))


def _patch_cases():
    return [
        (_images(2, 1, 8, 8), 2),
        (_images(1, 3, 6, 4, seed=1), 2),
        (_images(3, 1, 8, 8, 2), 4),
        (_images(2, 3, 4, 6, 3), 2),  # B > 1 and C > 1 together, H != W
    ]


def _unfold_reference(images, p):
    return F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)  # (B, N, C*p*p)


def _judge_patch_shape(cases, outcomes):
    returned_values(outcomes, object)
    for (images, p), outcome in zip(cases, outcomes, strict=True):
        b, c, h, w = images.shape
        want = (b, (h // p) * (w // p), c * p * p)
        got = (
            tuple(outcome.value.shape)
            if isinstance(outcome.value, torch.Tensor)
            else None
        )
        if got != want:
            raise Failed(
                f"Images {tuple(images.shape)} with patch size {p} should give "
                f"(B, N, C·p·p) = {want}, got {got}."
            )


def _judge_patch_values(cases, outcomes):
    returned_values(outcomes, object)
    for (images, p), outcome in zip(cases, outcomes, strict=True):
        want = _unfold_reference(images, p)
        got = outcome.value
        if close(got, want):
            continue
        b, c, h, w = images.shape
        grid = (
            want.reshape(b, h // p, w // p, -1)
            .transpose(1, 2)
            .reshape(b, -1, want.shape[-1])
        )
        if close(got, grid):
            raise Failed(
                "Number the patches row by row (left to right, then top to "
                "bottom), not column by column."
            )
        if c > 1:
            hwc = want.reshape(b, -1, c, p * p).transpose(2, 3).reshape(want.shape)
            if close(got, hwc):
                raise Failed(
                    "Flatten each patch channel first, as (C, p, p), the layout of "
                    "F.unfold and of a Conv2d weight."
                )
        raise Failed(
            "The patches do not match: patch n should be the flattened (C, p, p) "
            "block at grid position (n // (W/p), n % (W/p))."
        )


def _patch_error_cases(g):
    """Four fixed sizes and one drawn afresh (:func:`.core.sizes_p_does_not_divide`)."""
    return [(_images(1, 1, H, W), p) for H, W, p in sizes_p_does_not_divide(g)]


def _judge_patch_error(cases, outcomes):
    for (images, p), outcome in zip(cases, outcomes, strict=True):
        if not outcome.raised_a("ValueError"):
            got = (
                f"{outcome.error}: {outcome.message}" if outcome.raised else "no error"
            )
            raise Failed(
                "When the image size is not divisible by the patch size, raise a "
                f"ValueError that names both sizes (got {got})."
            )
        height, width = images.shape[-2:]
        if not names_the_sizes(outcome.message, height, width, p):
            raise Failed(
                "Name the image size and the patch size in the error message "
                f"(images of {height}×{width} pixels, p = {p})."
                + too_many_numbers(outcome.message)
            )


def _random_images(g):
    cases = []
    # small patches, and one of 4 to 7 pixels
    for p in (1, 2, 3, int(torch.randint(4, 8, (), generator=g))):
        b, c = (int(t) for t in torch.randint(1, 4, (2,), generator=g))
        rows, cols = (int(t) for t in torch.randint(1, 6, (2,), generator=g))
        if p == 2:  # 4 or 5 patches a row and a column
            rows, cols = (int(t) for t in torch.randint(4, 6, (2,), generator=g))
        if p > 3:  # two rows and two columns of patches at least: an order shows
            rows, cols = rows + 1, cols + 1
        cases.append((torch.randn(b, c, rows * p, cols * p, generator=g), p))
    return cases


PATCHIFY = Exercise(
    key="patchify",
    function="patchify",
    title="Exercise 4: images into patch tokens",
    points=4,
    checks=(
        Check("shape (B, N, C·p·p)", _patch_cases, _judge_patch_shape, PROPERTY),
        Check(
            "patches in row-major order, each flattened as (C, p, p)",
            _patch_cases,
            _judge_patch_values,
        ),
        unseen_check("the same on unseen images", _random_images, _judge_patch_values),
        Check(  # a property: raising on every input must not earn points
            "a clear ValueError for sizes that do not divide",
            unseen(_patch_error_cases),
            _judge_patch_error,
            PROPERTY,
        ),
    ),
)

EXERCISES: dict[str, Exercise] = {
    e.key: e for e in (CHAR_VOCAB, MERGE_PAIR, EMBED, PATCHIFY)
}

QUIZZES = load_quizzes("ch01")  # quizzes/ch01.toml
