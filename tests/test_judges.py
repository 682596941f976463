"""No points for computing nothing (issue 20).

Every judge compares returned values through one function, :func:`core.close`,
which checks the shape before the values (``torch.allclose`` broadcasts: an empty
tensor "equals" anything). And every exercise of every chapter is fuzzed with
answers that compute nothing: empty tensors, zero-size dimensions, scalars, the
input returned, zeros, NaN, a tensor subclass whose comparisons lie, a lookup
table of the checks' fixed cases with one left failing. Each must earn 0 points.
"""

import ast
import inspect
import math

import nbformat
import pytest
import torch
from exercise_helpers import ROOT, namespace_from, solution_cells

from transformer_course.exercises import CHAPTERS, chapter, core, twins

MODULES = {n: chapter(n).module for n in CHAPTERS}
CASES = [(n, key) for n in CHAPTERS for key in chapter(n).exercises]
IDS = [f"ch{n:02d}-{k}" for n, k in CASES]

#: Comparisons that broadcast or skip the shape: judges use core.close instead.
RAW_COMPARISONS = {"allclose", "isclose", "equal", "assert_close", "array_equal"}


def test_no_judge_compares_without_the_shape():
    found = []
    for number, module in MODULES.items():
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in RAW_COMPARISONS
            ):
                found.append(f"ch{number:02d} line {node.lineno}: .{node.func.attr}(")
    assert found == [], "use core.close (it checks the shape first): " + str(found)


def test_close_checks_the_shape_and_the_type():
    want = torch.randn(2, 3)
    assert core.close(want.clone(), want)
    assert not core.close(torch.empty(0), want)  # torch.allclose says True
    assert torch.allclose(torch.empty(0, 1, 1), want)  # ...which is why
    assert not core.close(want[:1], want)  # broadcasts too
    assert not core.close(want.tolist(), want)
    assert not core.close(torch.full_like(want, math.nan), want)

    class Liar(torch.Tensor):
        def __eq__(self, other):
            return True

    assert not core.close(want.clone().as_subclass(Liar), want)


# --- answers that compute nothing ------------------------------------------------


class LyingTensor(torch.Tensor):
    """A tensor whose comparisons all say "equal"."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal", "isclose", "eq", "__eq__"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})

    def __eq__(self, other):
        return True


def _tensors(args):
    """The tensors among ``args``, in lists and tuples too, in order."""
    found = []
    for a in args:
        if isinstance(a, torch.Tensor):
            found.append(a)
        elif isinstance(a, list | tuple):
            found += _tensors(a)
    return found


def _first_tensor(args):
    tensors = _tensors(args)
    return tensors[0] if tensors else None


def _dtype(args):
    """The dtype of the first floating-point input (a judge may check it)."""
    floats = [t for t in _tensors(args) if t.is_floating_point()]
    return floats[0].dtype if floats else torch.float32


def _same(a, b):
    """Structural equality of two cases (written here: an answer that used the
    course package's own would be refused for that)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return type(a) is type(b) and a == b


def _like_input(fill):
    def answer(*args, **kwargs):
        x = _first_tensor(args)
        if x is None:
            return fill
        return torch.full_like(x, fill, dtype=_dtype(args))

    return answer


def _refuse(*args, **kwargs):
    raise ValueError(f"bad sizes: {args!r}"[:400])


DEGENERATE = {
    "empty": lambda *a, **k: torch.empty(0, dtype=_dtype(a)),
    "empty, five dimensions": lambda *a, **k: torch.empty(
        0, 1, 1, 1, 1, dtype=_dtype(a)
    ),
    "empty, four dimensions": lambda *a, **k: torch.empty(0, 1, 1, 1, dtype=_dtype(a)),
    "a zero-size dimension": lambda *a, **k: torch.zeros(2, 0, 3, dtype=_dtype(a)),
    "empty, with 10**9 slots": lambda *a, **k: torch.empty(1000, 1000, 1000, 0),
    "a scalar tensor": lambda *a, **k: torch.tensor(0.0, dtype=_dtype(a)),
    "a scalar one": lambda *a, **k: torch.tensor(1.0, dtype=_dtype(a)),
    "an integer tensor": lambda *a, **k: torch.zeros(1, dtype=torch.long),
    "the number 0": lambda *a, **k: 0,
    "None": lambda *a, **k: None,
    "an empty list": lambda *a, **k: [],
    "an empty dict": lambda *a, **k: {},
    "the input returned": lambda *a, **k: a[0],
    "zeros like the input": _like_input(0.0),
    "NaN like the input": _like_input(math.nan),
    "a lying tensor": lambda *a, **k: torch.empty(0, dtype=_dtype(a)).as_subclass(
        LyingTensor
    ),
    "a lying copy of the input": lambda *a, **k: (
        _first_tensor(a).clone().as_subclass(LyingTensor)
        if _first_tensor(a) is not None
        else 0
    ),
    "a ValueError for everything": _refuse,
}


@pytest.mark.parametrize(("number", "key"), CASES, ids=IDS)
def test_answers_that_compute_nothing_earn_nothing(number, key):
    exercise = chapter(number).exercises[key]
    earned = {}
    for name, answer in DEGENERATE.items():
        answer.__name__ = exercise.function
        report = core.run_exercise(exercise, answer)
        if report.score != 0:
            earned[name] = (report.score, [r.name for r in report.results if r.passed])
    assert earned == {}, f"{key}: points for computing nothing: {earned}"


def test_the_first_red_teams_chapter_1_answers_earn_nothing():
    """The issue's answers: a five-dimensional empty tensor for the embedding
    (1.5 / 2 before), an empty tensor for the patches with the size error raised
    from the image's shape alone (3.2 / 4 before)."""

    def embed_one_hot(ids, table):
        return torch.empty(0, 1, 1, 1, 1, dtype=table.dtype)

    def patchify(images, p):
        H, W = images.shape[-2:]
        if H % p or W % p:
            raise ValueError(f"patch size {p} does not divide {H}x{W}")
        return torch.empty(0, 1, 1, 1, dtype=images.dtype)

    exercises = chapter(1).exercises
    assert core.run_exercise(exercises["embed_one_hot"], embed_one_hot).score == 0
    report = core.run_exercise(exercises["patchify"], patchify)
    assert report.score == 0, report.results


# --- a lookup table of the fixed cases ---------------------------------------------


@pytest.fixture(scope="module")
def references():
    """chapter -> the namespace of its reference solutions."""
    result = {}
    for n in CHAPTERS:
        path = next((ROOT / "exercises" / "source").glob(f"{n:02d}_*.ipynb"))
        source = nbformat.read(path, as_version=4)
        result[n] = namespace_from(solution_cells(source).values())
    return result


def _table_answer(exercise, reference, left_failing):
    """Answers the fixed cases from a table (the reference's answers, which the
    package source shows), except case ``left_failing``; anything else: zeros."""
    table = []
    fixed = [c for c in exercise.checks if c.kind != core.UNSEEN]
    for check in fixed:
        for case in core.as_the_grader_loads([check.cases()])[0]:
            try:
                table.append((case, reference(*case)))
            except Exception as err:  # an error case: answer with the same error
                table.append((case, err))
    wrong_case = table[left_failing % len(table)][0]

    def answer(*args):
        if _same(args, tuple(wrong_case)):
            return _like_input(0.0)(*args)
        for case, result in table:
            if _same(args, tuple(case)):
                if isinstance(result, Exception):
                    raise result
                return result
        return _like_input(0.0)(*args)

    answer.__name__ = exercise.function
    return answer, len(table)


@pytest.mark.parametrize(("number", "key"), CASES, ids=IDS)
def test_a_table_of_the_fixed_cases_with_one_left_failing_earns_nothing(
    references, number, key
):
    exercise = chapter(number).exercises[key]
    reference = references[number][exercise.function]
    answer, size = _table_answer(exercise, reference, 0)
    for left_failing in sorted({0, size // 2, size - 1}):
        answer, _ = _table_answer(exercise, reference, left_failing)
        report = core.run_exercise(exercise, answer)
        assert report.score == 0, (left_failing, report.results)


def test_merge_pair_table_earned_a_third_before():
    """The issue's case: a table of merge_pair's fixed cases with one left
    failing kept 1 / 3, because the unseen check voided the score only when every
    value check passed. A failed unseen check now voids it whatever else passed."""
    exercise = chapter(1).exercises["merge_pair"]
    results = (
        core.CheckResult("fixed", True, kind=core.VALUE),
        core.CheckResult("fixed too", False, kind=core.VALUE),
        core.CheckResult("unseen", False, kind=core.UNSEEN),
    )
    assert core.Report(exercise, core.FAILED, results).score == 0
    passed_unseen = (*results[:2], core.CheckResult("unseen", True, kind=core.UNSEEN))
    assert core.Report(exercise, core.FAILED, passed_unseen).score > 0


# --- twins of the fixed cases -------------------------------------------------------


def _kind(value, choices=()):
    """What a twin must keep of an input: its type, a tensor's rank and dtype,
    a flag, a choice (one of ``choices``), None; not its values or sizes."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dim(), value.dtype)
    if type(value) in (list, tuple):
        return (type(value).__name__, tuple(_kind(v) for v in value[:1]))
    if type(value) is dict:
        return ("dict", tuple((k, _kind(v)) for k, v in value.items()))
    if type(value) in (bool, type(None)):
        return value
    if type(value) is str and value in choices:  # "cls", "mean"
        return value
    return type(value).__name__


def _same_case(a, b):
    return len(a) == len(b) and all(
        torch.equal(x, y)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        else (type(x) is type(y) and _same_values(x, y))
        for x, y in zip(a, b, strict=True)
    )


def _same_values(x, y):
    if type(x) in (list, tuple):
        return len(x) == len(y) and _same_case(tuple(x), tuple(y))
    if type(x) is dict:
        return x.keys() == y.keys() and _same_case(tuple(x.values()), tuple(y.values()))
    return x == y


@pytest.mark.parametrize(("number", "key"), CASES, ids=IDS)
def test_every_fixed_case_has_twins_of_its_kind_with_other_values(number, key):
    """Two or more twins per fixed case, each of the case's kind (arity, ranks,
    dtypes, flags, choices, omitted defaults), none equal to the case; and the
    unseen check judges them, drawn afresh at each run."""
    exercise = chapter(number).exercises[key]
    fixed = exercise.fixed_cases()
    g = torch.Generator().manual_seed(7)
    make_twins = exercise.twins or twins.default_twins
    strings = [v for case in fixed for v in case if type(v) is str]
    choices = {v for v in strings if strings.count(v) > 1}  # given in several cases
    for case in fixed:
        made = make_twins(case, g)
        assert len(made) >= 2, (case, made)
        for twin in made:
            kinds = [_kind(v, choices) for v in twin]
            assert kinds == [_kind(v, choices) for v in case]
        # (an input of zeros alone has a twin of zeros: zeros are its kind)
        assert any(not _same_case(tuple(twin), tuple(case)) for twin in made), case
    (unseen,) = [c for c in exercise.checks if c.kind == core.UNSEEN]
    first = unseen.cases()
    count = len(exercise.twin_cases(g))
    assert len(first) == len(exercise.drawn_cases()) + count
    # afresh: a few sizes (H halved or doubled) can repeat, not every twin always
    later = [unseen.cases()[-count:] for _ in range(5)]
    assert any(not _same_case(tuple(first[-count:]), tuple(t)) for t in later)


def test_fresh_values_keep_zeros_infinities_and_ties_not_values():
    x = torch.tensor([[0.0, 2.0, 2.0, -math.inf], [1.5, 1.5, 1.5, 1.5]])
    twin = twins.fresh_values(x, torch.Generator().manual_seed(0))
    assert twin[0, 0] == 0
    assert twin[0, 3] == -math.inf
    assert twin[0, 1] == twin[0, 2]
    assert twin[0, 1] != 2.0
    assert (twin[1] == twin[1, 0]).all()
    assert twin[1, 0] != 1.5
    assert twin[1].mean() == twin[1, 0]  # a row of equal values averages exactly
    ids = torch.tensor([3, 0, 3, 1])
    relabelled = twins.fresh_values(ids, torch.Generator().manual_seed(1))
    assert relabelled[0] == relabelled[2]
    assert int(relabelled.max()) <= 3


def test_grown_twins_double_every_size_but_one_and_keep_rows_of_equal_values():
    x = torch.tensor([[[2.0, 2.0, 2.0], [1.0, -1.0, 0.0]]])  # (1, 2, 3)
    twin = twins.grown((x, 4, 1, True, "cls", 0.5), torch.Generator().manual_seed(0))
    more, heads, one, flag, choice, eps = twin
    assert more.shape == (1, 4, 6)
    assert (heads, one, flag, choice, eps) == (
        8,
        1,
        True,
        "cls",
        0.5,
    )
    assert (more[0, 0] == more[0, 0, 0]).all()
    assert (more[0, 2] == more[0, 2, 0]).all()
    assert more[0, 0, 0] != more[0, 2, 0]  # each tile has values of its own
    assert more[0, 1, 5] == 0
    assert more[0, 3, 2] == 0


def _float_inputs(case):
    for value in case:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            yield value
        elif type(value) in (list, tuple):
            yield from _float_inputs(value)
        elif type(value) is dict:
            yield from _float_inputs(tuple(value.values()))


def _short_mantissa(x: torch.Tensor) -> bool:
    """Every finite value with at most 8 significant bits (the tenth red team's
    test for a twin)."""
    values = x[torch.isfinite(x)].double()
    mantissa, _ = torch.frexp(values)
    return bool((mantissa * 256 == torch.round(mantissa * 256)).all())


def test_a_twin_does_not_give_itself_away():
    """Twins of inputs drawn from randn look drawn: values of full precision,
    no resemblance to the fixed case they replace (correlation, signs), no
    grown row made of two equal halves. (The tenth red team recognised every
    twin by its 8-bit values, so that a wrong rule could switch itself off on
    twins.)"""
    correlations, same_signs, looked = [], [], 0
    g = torch.Generator().manual_seed(11)
    for number, key in CASES:
        exercise = chapter(number).exercises[key]
        if exercise.twins is not None:  # sizes, texts, ids: no values to resemble
            continue
        for case in exercise.fixed_cases():
            fresh, more = twins.fresh_values(case, g), twins.grown(case, g)
            for x, y, z in zip(
                _float_inputs(case),
                _float_inputs(fresh),
                _float_inputs(more),
                strict=True,
            ):
                if torch.unique(x).numel() < 12 or not torch.isfinite(x).all():
                    continue  # a special case: its kind is in its values
                looked += 1
                assert not _short_mantissa(y), (key, "fresh")
                assert not _short_mantissa(z), (key, "grown")
                pair = torch.stack([x.flatten().double(), y.flatten().double()])
                correlations.append(float(torch.corrcoef(pair)[0, 1]))
                same_signs.append(float((x.sign() == y.sign()).double().mean()))
                if z.shape[-1] == 2 * x.shape[-1]:
                    half = x.shape[-1]
                    assert not torch.equal(z[..., :half], z[..., half:]), key
    assert looked > 50
    assert abs(sum(correlations) / len(correlations)) < 0.1
    assert max(abs(c) for c in correlations) < 0.8
    assert 0.4 < sum(same_signs) / len(same_signs) < 0.6


def test_an_exercise_is_refused_when_its_definition_is_incomplete():
    """An exercise needs a value check, one unseen check (its twins ride on it)
    and forbidden functions the runner knows."""
    value = core.Check("value", list, lambda cases, outcomes: None)
    unseen = core.unseen_check("unseen", lambda g: [], lambda cases, outcomes: None)
    core.Exercise("ok", "f", "ok", 1, (value, unseen), forbidden=("softmax",))
    with pytest.raises(ValueError, match="at least one value check"):
        core.Exercise("no_value", "f", "t", 1, (unseen,))
    with pytest.raises(ValueError, match="one unseen check, got 0"):
        core.Exercise("no_unseen", "f", "t", 1, (value,))
    with pytest.raises(ValueError, match="forbidden keys must be among"):
        core.Exercise("typo", "f", "t", 1, (value, unseen), forbidden=("softmaxx",))


# PyTorch's usual errors, made for real: each mistake, and words from the hint
# the learner gets for it (core.USUAL_ERRORS).
def _k_dot_T(q, k):
    return q @ k.T  # (B, N, d) @ (d, N, B): .T reverses every dimension


USUAL_ERRORS = {
    "k.T on a batch": (
        lambda: _k_dot_T(torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4)),
        ".transpose(-2, -1)",
    ),
    "a max without keepdim": (
        lambda: (lambda x: x - x.max(-1).values)(torch.randn(2, 3, 4)),
        "keepdim=True",
    ),
    "a sum without keepdim": (
        lambda: (lambda e: e / e.sum(-1))(torch.randn(3, 5)),
        "keepdim=True",
    ),
    "q @ k untransposed": (
        lambda: torch.randn(2, 3, 4) @ torch.randn(2, 5, 4),
        ".transpose(-2, -1)",
    ),
    "cat of a vector and a batch": (  # the learner round of issue 21
        lambda: torch.cat([torch.zeros(1, 4), torch.zeros(2, 3, 4)], dim=1),
        "expand(B, 1, D)",
    ),
    # (F.one_hot without num_classes, where chapter 1 multiplies a one-hot, is
    # refused before any product with a hint naming num_classes:
    # tests/test_allowed_operators.py; the product's hint no longer names it,
    # which misled learners of chapter 7)
    "a matrix by an untransposed weight": (
        lambda: torch.randn(3, 4) @ torch.randn(5, 4),
        "a's last size must equal b's second-to-last",
    ),
    "cross_entropy, classes last": (
        lambda: torch.nn.functional.cross_entropy(
            torch.randn(2, 7, 11), torch.randint(11, (2, 7))
        ),
        "classes in dimension 1",
    ),
    "cross_entropy, targets unflattened": (
        lambda: torch.nn.functional.cross_entropy(
            torch.randn(14, 11), torch.randint(11, (2, 7))
        ),
        "flatten both",
    ),
    "a dim past the last": (lambda: torch.randn(2, 3).sum(dim=2), "dim=-1"),
    "view after transpose": (
        lambda: torch.randn(2, 3, 4).transpose(1, 2).view(2, -1),
        ".reshape(...)",
    ),
    "float meets double": (
        lambda: torch.randn(3, 4) @ torch.randn(4, 3).double(),
        "t.to(other.dtype)",
    ),
    "top-k down a short batch": (
        lambda: torch.randn(2, 9).topk(3, dim=0),
        "dim=-1",
    ),
    # a JupyterLab learner round: a helper deleted with its cell's contents
    # passed in the old kernel and failed afresh
    "a helper deleted": (
        lambda: eval("my_helper(None, None, 2)"),
        "run the notebook from the top",
    ),
}


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize("mistake", USUAL_ERRORS)
def test_pytorchs_usual_errors_come_with_plain_words(mistake):
    make_error, words = USUAL_ERRORS[mistake]
    with pytest.raises(Exception) as raised:  # noqa: PT011 (PyTorch's own kinds)
        make_error()
    hint = core.in_plain_words(str(raised.value))
    assert words in hint, (str(raised.value), hint)
    said = core.raised_with_hint(type(raised.value).__name__, str(raised.value))
    assert said.startswith(f"Your function raised {type(raised.value).__name__}")
    assert said.endswith(hint)


def test_an_error_of_its_own_gets_no_words_put_in_its_mouth():
    assert core.in_plain_words("x must be positive, got -1") == ""
    assert core.raised_with_hint("ValueError", "x must be positive") == (
        "Your function raised ValueError: x must be positive."
    )


def test_pytorch_s_message_and_the_course_s_words_are_two_sentences():
    """The learner round read "…at non-singleton dimension 2 Two shapes do not
    line up": the error's message now ends with a full stop."""
    message = (
        "The size of tensor a (4) must match the size of tensor b (7) at "
        "non-singleton dimension 2"
    )
    said = core.raised_with_hint("RuntimeError", message)
    assert "dimension 2. Two shapes do not line up" in said


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_a_learners_k_T_gets_the_transpose_hint_in_the_check():
    """Through a real exercise: attention with k.T on batched keys."""
    source = (
        "def attention_weights(q, k, mask=None):\n"
        "    s = q @ k.T / q.shape[-1] ** 0.5\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask, float('-inf'))\n"
        "    return torch.softmax(s, dim=-1)\n"
    )
    exercise = chapter(2).exercises["attention_weights"]
    report = core.run_exercise(exercise, namespace_from([source])["attention_weights"])
    assert report.status == "failed"
    hints = " ".join(r.hint for r in report.results if not r.passed)
    assert ".transpose(-2, -1)" in hints, hints
