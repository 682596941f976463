"""The check engine behind every exercise: plain Python, no widgets.

A check runs in two phases, so that grading never trusts the learner's process:

1. **call**: the learner's function is called on a list of inputs (*cases*)
   that the check makes deterministically. Each call gives an :class:`Outcome`:
   a value, or the name and message of the exception it raised.
2. **judge**: the check looks at the inputs and the outcomes, and either passes
   or raises :class:`Failed` with a targeted hint for the usual mistake.

Phase 1 is the same code in the notebook and in the grader
(:func:`.runner.call_cases`): inputs deep-copied before every call, forbidden
functions detected, the course package refused, results turned into plain data
within size limits. In a notebook both phases run in the kernel (instant
feedback), on the inputs as the grader's sandbox reads them back from a file
(:func:`as_the_grader_loads`). The grader (``python -m transformer_course.grading.grade``) runs phase 1 in a
sandbox that holds the submission and not the course package, and phase 2 in its
own process, where submitted code never runs: redefining or monkeypatching checks
in the notebook cannot change a score.

**Scoring.** A check is a *value* check (the results equal the reference on its
fixed inputs), an *unseen* check (the same on inputs drawn afresh, from an
unpredictable seed, each time) or a *property* check (shapes, rows summing to 1,
invariances). A failed unseen check voids the score, whatever the other checks
say (an answer wrong on inputs it has not seen, e.g. a table of the fixed cases
with one left failing, earns nothing); otherwise the value checks carry the
score, and once they all pass the unseen and property checks add theirs. A
function that ignores its inputs earns nothing for returning the right shape.
Every exercise whose arguments could change in place (tensors, lists, dicts)
also gets the property check "leaves its inputs unchanged".

**Twins.** The unseen check also judges a *twin* of every fixed case: the same
shapes, dtypes, flags and omitted defaults, the same zeros, infinities and ties,
but fresh values (see :mod:`.twins`; an exercise whose inputs are sizes or
texts names its own twins); one with every size doubled; and,
where a softmax is inside, one with scores past where ``exp`` overflows
(``Exercise.loud``). A wrong general rule that only a fixed case would
catch, with a table of that case's answer, is then wrong on its twin: whatever
kind of input the fixed cases hold, the unseen inputs hold it too.

Used by every exercise notebook (exercises/NN_topic.ipynb) through
``transformer_course.exercises.chNN`` modules.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import inspect
import io
import os
import re
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import runner, screen
from .runner import to_plain
from .twins import LOUD, default_twins, fresh_values, louder

__all__ = [
    "Check",
    "CheckResult",
    "Exercise",
    "Failed",
    "Outcome",
    "Report",
    "call_cases",
    "close",
    "close_at_scale",
    "each_value",
    "judge_outcomes",
    "outcome_from_dict",
    "report_from_outcomes",
    "returned_values",
    "run_exercise",
    "seeded_randn",
    "to_plain",
    "unseen",
    "unseen_check",
]

VALUE, PROPERTY, UNSEEN = "value", "property", "unseen"
NOT_ATTEMPTED = "not attempted"
PASSED = "passed"
FAILED = "failed"


class Failed(Exception):  # noqa: N818  (a verdict, not an error)
    """A check did not pass; ``hint`` tells the learner what to look at."""

    def __init__(self, hint: str):
        super().__init__(hint)
        self.hint = hint


@dataclass(frozen=True)
class Outcome:
    """What one call of the learner's function gave: a value, or an exception."""

    value: Any = None
    error: str | None = None  # the exception's class name
    message: str = ""
    mutated: tuple[int, ...] = ()  # indices of the arguments changed in place
    kinds: tuple[str, ...] = ()  # the exception's classes by name, its own first
    value_type: str | None = None  # the returned value's type, by name

    @property
    def raised(self) -> bool:
        return self.error is not None

    def raised_a(self, kind: str) -> bool:
        """True if the call raised ``kind`` or a subclass of it (by name)."""
        return self.raised and (self.error == kind or kind in self.kinds)


@dataclass(frozen=True)
class Check:
    """One test of an exercise.

    Attributes:
        name: a short statement of the property, e.g. "rows sum to 1".
        cases: makes the inputs: a list of argument tuples, deterministic.
        judge: ``judge(cases, outcomes)`` returns None to pass, or raises
            :class:`Failed` with a hint.
        kind: ``"value"`` (compared with the reference on fixed inputs; carries
            the score), ``"property"`` (counts only when every value check
            passes) or ``"unseen"`` (compared with the reference on inputs drawn
            afresh each time, see :func:`unseen`: failing it voids the
            exercise's score).
        weight: the check's share of the exercise's points.
    """

    name: str
    cases: Callable[[], list[tuple]]
    judge: Callable[[list[tuple], list[Outcome]], None]
    kind: str = VALUE
    weight: float = 1.0

    def __post_init__(self):
        if self.kind not in (VALUE, PROPERTY, UNSEEN):
            raise ValueError(
                f"kind: expected {VALUE!r}, {PROPERTY!r} or {UNSEEN!r}, got {self.kind!r}"
            )


@dataclass(frozen=True)
class Exercise:
    """A function the learner writes, with its checks and its points.

    Attributes:
        key: identifier, also the nbgrader ``grade_id`` of the solution cell.
        function: the name the learner's function has in the notebook.
        title: shown above the results.
        points: points for passing every check (partial credit: see the module
            docstring).
        checks: the battery of checks; at least one value check.
        forbidden: keys of :data:`.runner.FORBIDDEN`: functions the learner
            must not call (the exercise asks them to write it themselves).
        twins: ``twins(case, generator)`` makes a fixed case's twins, a list
            of cases (see the module docstring): :func:`.twins.default_twins`
            unless the exercise's inputs need their own (sizes that must
            divide, texts, ids).
        loud: positions of the arguments that set the scale of scores a
            softmax inside the function meets: each fixed case also gets a
            twin with those arguments :data:`LOUD` times larger, so that
            scores pass 88, where ``exp`` overflows in float32 (chapter 2's
            stable softmax, wherever a softmax is). Or ``loud(case)``, the
            loud twin itself, where the scale lies inside an argument (a
            block's weights, in a dict).
        loud_scale: how much larger: :data:`LOUD`, or ``loud_scale(case)``
            where the argument enters the scores twice (x makes q and k): a
            scale that brings the largest score to a few hundred, not 10⁵,
            where float32's rounding alone moves the softmax of two close
            scores (an honest answer failed 1 grading in 85).
    """

    key: str
    function: str
    title: str
    points: int
    checks: tuple[Check, ...]
    forbidden: tuple[str, ...] = ()
    twins: Callable[[tuple, torch.Generator], list[tuple]] | None = None
    loud: tuple[int, ...] | Callable[[tuple], tuple] = ()
    loud_scale: float | Callable[[tuple], float] = LOUD
    #: keys of earlier exercises of the chapter whose functions this one calls
    #: (chapter 4's blocks call the learner's own layer_norm and mlp_forward)
    builds_on: tuple[str, ...] = ()
    #: the hint when only the loud twins fail, with nan or inf (default
    #: :data:`OVERFLOW`); an exercise with a likelier cause names it
    overflow_hint: str = ""
    #: False where every argument is a number, a string or a tuple of them (a
    #: parameter count's sizes): nothing could change in place, so the check
    #: "leaves its inputs unchanged", which could not fail, is not shown
    #: (tests/test_exercises.py checks this against every exercise's cases)
    mutable_inputs: bool = True

    def __post_init__(self):
        if not any(c.kind == VALUE for c in self.checks):
            raise ValueError(f"{self.key}: expected at least one value check")
        unknown = set(self.forbidden) - set(runner.FORBIDDEN)
        if unknown:
            raise ValueError(
                f"{self.key}: forbidden keys must be among {sorted(runner.FORBIDDEN)}, "
                f"got {sorted(unknown)}"
            )
        unseen_checks = [c for c in self.checks if c.kind == UNSEEN]
        if len(unseen_checks) != 1:
            raise ValueError(
                f"{self.key}: expected one unseen check, got {len(unseen_checks)}"
            )
        (drawn,) = unseen_checks
        with_twins = Check(
            drawn.name,
            _with_twins(drawn.cases, self),
            (
                _telling_overflow(drawn.judge, self.overflow_hint or OVERFLOW)
                if self.loud
                else drawn.judge
            ),
            UNSEEN,
            drawn.weight,
        )
        checks = tuple(with_twins if c is drawn else c for c in self.checks)
        object.__setattr__(self, "checks", checks)
        object.__setattr__(self, "_drawn", drawn.cases)

    def drawn_cases(self) -> list[tuple]:
        """The unseen check's inputs drawn afresh, without the twins."""
        return self._drawn()

    def fixed_cases(self) -> list[tuple]:
        """The value checks' inputs, in order: the cases a table could hold."""
        return [case for c in self.checks if c.kind == VALUE for case in c.cases()]

    def twin_cases(self, g: torch.Generator) -> list[tuple]:
        """The twins of every fixed case (see the module docstring), from ``g``."""
        twins = self.twins or default_twins
        made = []
        for case in self.fixed_cases():
            made += [tuple(twin) for twin in twins(case, g)]
            if self.loud:
                fresh = fresh_values(case, g)
                scale = self.loud_scale
                if callable(self.loud):
                    loud = tuple(self.loud(fresh))
                else:
                    loud = louder(
                        fresh, self.loud, scale(fresh) if callable(scale) else scale
                    )
                _LOUD_CASES[id(loud)] = loud
                while len(_LOUD_CASES) > _LOUD_KEPT:
                    _LOUD_CASES.popitem(last=False)
                made.append(loud)
        return made


def _with_twins(drawn, exercise: Exercise):
    """The unseen check's cases: ``drawn()``, then the exercise's twins of its
    fixed cases, from an unpredictable seed of their own."""

    def cases() -> list[tuple]:
        seed = int.from_bytes(os.urandom(4), "big")
        return list(drawn()) + exercise.twin_cases(torch.Generator().manual_seed(seed))

    return cases


OVERFLOW = (
    "Your function returned nan or inf for finite inputs whose scores reach a "
    "few hundred: exp overflows past 88 in float32 (inf / inf = nan). Subtract "
    "each row's maximum before exp, as chapter 2's stable softmax does, or use "
    "torch.softmax."
)


def _non_finite(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() and not torch.isfinite(value).all()
    if type(value) in (list, tuple):
        return any(_non_finite(v) for v in value[:8])
    return False


#: The loud twins made lately, by id (held, so that no id is reused while it is
#: here): the judge tells them from the other cases by identity, as judges see
#: the very cases that were made (in the notebook and in the grader).
_LOUD_CASES: collections.OrderedDict[int, tuple] = collections.OrderedDict()
_LOUD_KEPT = 4096


def _telling_overflow(judge, hint: str = OVERFLOW):
    """``judge``, with ``hint`` (:data:`OVERFLOW`) when it fails only on loud
    twins, and a result for such finite inputs is nan or inf; a mistake the
    other inputs show keeps its own hint."""

    def loud(case) -> bool:
        return _LOUD_CASES.get(id(case)) is case

    def judged(cases, outcomes):
        try:
            judge(cases, outcomes)
        except Failed:
            quiet = [
                (case, outcome)
                for case, outcome in zip(cases, outcomes, strict=True)
                if not loud(case)
            ]
            judge([c for c, _ in quiet], [o for _, o in quiet])  # its own hint first
            for case, outcome in zip(cases, outcomes, strict=True):
                if (
                    loud(case)
                    and not outcome.raised
                    and _non_finite(outcome.value)
                    and not any(_non_finite(v) for v in case)
                ):
                    raise Failed(hint) from None
            raise

    return judged


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    hint: str = ""
    kind: str = VALUE
    weight: float = 1.0


@dataclass(frozen=True)
class Report:
    """The results of one exercise."""

    exercise: Exercise
    status: str  # "passed", "failed" or "not attempted"
    results: tuple[CheckResult, ...] = field(default_factory=tuple)
    note: str = ""  # shown first: an earlier function of the learner's fails

    @property
    def passed_count(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def score(self) -> float:
        """Points earned, as a share of all checks' weights: nothing when an
        unseen check fails (right on the fixed inputs only, e.g. a table of
        them, or right on none); otherwise the value checks passed and, once
        they all pass, the unseen and property checks too."""
        if not self.results:
            return 0.0
        total = sum(r.weight for r in self.results)
        unseen = [r for r in self.results if r.kind == UNSEEN]
        if not all(r.passed for r in unseen):
            return 0.0  # wrong on inputs drawn afresh: nothing, whatever else passed
        values = [r for r in self.results if r.kind == VALUE]
        earned = sum(r.weight for r in values if r.passed)
        if all(r.passed for r in values):
            earned += sum(r.weight for r in unseen)
            earned += sum(
                r.weight for r in self.results if r.kind == PROPERTY and r.passed
            )
        return self.exercise.points * earned / total

    @property
    def first_hint(self) -> str:
        hint = next((r.hint for r in self.results if not r.passed), "")
        return f"{self.note} {hint}".strip()


def foundations_note(
    exercise: Exercise,
    siblings: Mapping[str, Exercise],
    status_of: Callable[[Exercise], str],
) -> str:
    """For a failed exercise that calls the learner's own earlier functions
    (``exercise.builds_on``): which of those do not pass their own checks, so
    that the learner fixes the first real mistake first. "" when all pass.

    ``status_of(earlier)`` is the earlier exercise's status: in the notebook,
    its checks run on the current definition; in the grader, its grade.
    """
    failing = [
        siblings[key]
        for key in exercise.builds_on
        if key in siblings and status_of(siblings[key]) != PASSED
    ]
    if not failing:
        return ""
    names = " and ".join(f"{e.function}() ({e.title.split(':')[0]})" for e in failing)
    one = len(failing) == 1
    return (
        f"First fix your {names}: {'it does' if one else 'they do'} not pass "
        f"{'its' if one else 'their'} own checks yet, and if this function calls "
        f"{'it' if one else 'them'}, its checks fail with "
        f"{'it' if one else 'them'}. Then check this one again."
    )


def unseen(make: Callable[[torch.Generator], list[tuple]]) -> Callable[[], list[tuple]]:
    """Cases drawn afresh, from an unpredictable seed, every time a check runs.

    The grader draws them in its own process, so an answer that looks its
    inputs up in a table of the checks' fixed cases cannot pass.
    """

    def cases() -> list[tuple]:
        seed = int.from_bytes(os.urandom(4), "big")
        return make(torch.Generator().manual_seed(seed))

    return cases


def sizes_p_does_not_divide(g: torch.Generator) -> list[tuple[int, int, int]]:
    """Image sizes that patches of p do not tile: (height, width, p) tuples.

    For the error checks of chapters 1 and 7: p divides neither side, the width
    only, the height only, neither by remainders that add up to p; then one size
    drawn from ``g`` (p in 3..7, dividing one side), afresh with :func:`unseen`,
    so that an answer cannot list the sizes it refuses.
    """
    p = int(torch.randint(3, 8, (), generator=g))
    fits = p * int(torch.randint(1, 4, (), generator=g))  # a side p divides
    misfits = fits + int(torch.randint(1, p, (), generator=g))  # one it does not
    drawn = (misfits, fits) if torch.rand((), generator=g) < 0.5 else (fits, misfits)
    return [(8, 8, 3), (6, 8, 4), (8, 6, 4), (6, 10, 4), (*drawn, p)]


#: The most numbers an error message about sizes may hold: the images' shape,
#: the patch size and a remainder or two. A message listing every number names
#: no size (red team 58: "1 2 3 … 64" passed for any image).
MOST_NUMBERS_IN_A_MESSAGE = 8


def numbers_in(message: str) -> set[str]:
    """The whole numbers an error message holds, as written: {"6", "8", "4"} for
    "6×8 images, p=4"."""
    return set(re.findall(r"(?<!\d)\d+(?!\d)", message))


def too_many_numbers(message: str) -> str:
    """A hint's last words for a message that lists numbers rather than naming
    sizes ("" for one that does not)."""
    count = len(numbers_in(message))
    if count <= MOST_NUMBERS_IN_A_MESSAGE:
        return ""
    return (
        f" Your message holds {count} different numbers: name the sizes, not a "
        "list of numbers."
    )


def names_the_sizes(message: str, height: int, width: int, p: int) -> bool:
    """Does an error message name p and a side of the image that p does not divide
    (either, where p divides neither: red team 60), each as a whole number ("6"
    in "6×8" or "H=6", not in "16"), among at most
    :data:`MOST_NUMBERS_IN_A_MESSAGE` distinct numbers?"""
    numbers = numbers_in(message)
    return (
        len(numbers) <= MOST_NUMBERS_IN_A_MESSAGE
        and str(p) in numbers
        and any(str(side) in numbers for side in (height, width) if side % p)
    )


def expect_returned_shape(got: torch.Tensor, shape: tuple, name: str, note=""):
    """Raise :class:`Failed` unless ``got`` has ``shape``, which ``name`` spells
    out, e.g. ``"(B, L, L)"``: "Expected (B, L, L) = (2, 5, 5), got (2, 1, 5, 5)",
    then ``note``, a hint or the sizes the shape comes from."""
    if tuple(got.shape) != tuple(shape):
        note = f": {note}" if note else ""
        raise Failed(f"Expected {name} = {tuple(shape)}, got {tuple(got.shape)}{note}.")


def unseen_check(name: str, make, judge) -> Check:
    """A check on inputs drawn afresh each time (see :func:`unseen`)."""
    return Check(name, unseen(make), judge, UNSEEN)


#: PyTorch's usual errors in a learner's code, in plain words: (a pattern of the
#: error's message, the hint that follows it). Shape errors first: most
#: exercises' mistakes show up as one.
USUAL_ERRORS = (
    (
        r"must match the size of tensor b .* at non-singleton dimension",
        "Two shapes do not line up (broadcasting compares sizes from the last "
        "dimension). The usual causes: a sum, max or mean that drops its "
        "dimension (keep it: keepdim=True), or .T on a batched tensor, which "
        "reverses every dimension (swap the last two: .transpose(-2, -1)).",
    ),
    (
        r"shapes cannot be multiplied|Expected size for first two dimensions",
        "In a @ b, a's last size must equal b's second-to-last: print both "
        "shapes to see which is off. Usual causes: a weight not transposed "
        "(x @ W.T), .T on a batched tensor, which reverses every dimension "
        "(swap the last two: .transpose(-2, -1)), or the two in the wrong "
        "order (attention's weights come first: A @ V, not V @ A).",
    ),
    (
        r"Expected target size|to match target batch_size",
        "F.cross_entropy takes the classes in dimension 1: logits (M, V) with "
        "targets (M,), so flatten both (.reshape(-1, V), .reshape(-1)), or "
        "logits (B, V, N) with targets (B, N).",
    ),
    (
        r"Dimension out of range",
        "A dim past the tensor's last dimension. Check its shape first: a tensor "
        "with fewer dimensions than you meant (a (D,) vector where (B, 1, D) was "
        "meant: reshape or expand it) raises this too. Counting from the end "
        "(dim=-1 is the last) works with and without batch dimensions.",
    ),
    (
        r"Tensors must have same number of dimensions",
        "torch.cat and torch.stack need tensors with the same number of "
        "dimensions: give the smaller one its missing dimensions first "
        "(x.reshape(1, 1, D).expand(B, 1, D)).",
    ),
    (
        r"view size is not compatible with input tensor",
        "After a transpose, a permute or a slice (x[:, :-1]) the tensor's "
        "memory is not in order: use .reshape(...) instead of .view(...).",
    ),
    (
        r"to have the same dtype|expected scalar type|same dtype",
        "Two tensors of different dtypes meet: give one the other's dtype "
        "(t.to(other.dtype)), or make new tensors with the dtype and device of "
        "the inputs they meet (dtype=..., device=...).",
    ),
    (
        r"selected index k out of range",
        "topk's k is larger than the dimension it picks from: pick along the "
        "vocabulary, dim=-1.",
    ),
    (
        r"name '\w+' is not defined",
        "A name your function uses is defined in no cell the notebook has now: "
        "a helper or an earlier answer of yours, deleted or renamed, or a cell "
        "not run. Define it again and run the notebook from the top: a kernel "
        "that still remembers it passes checks that Validate and the grader, "
        "which start afresh, fail.",
    ),
)


def in_plain_words(message: str) -> str:
    """The hint of :data:`USUAL_ERRORS` for an error's message, or "" (each
    pattern is tested on the error PyTorch really raises, tests/test_judges.py)."""
    for pattern, hint in USUAL_ERRORS:
        if re.search(pattern, message):
            return hint
    return ""


def raised_with_hint(error: str, message: str) -> str:
    """ "Your function raised E: message." with the plain-words hint, if any."""
    plain = in_plain_words(message)
    message = message.strip()
    said = (
        f"Your function raised {error}: {message}"
        if message
        else (f"Your function raised {error}")
    )
    if not said.endswith((".", "!", "?")):
        said += "."  # the course's words start a sentence of their own
    return f"{said} {plain}" if plain else said


def returned_values(outcomes: list[Outcome], kind: type = torch.Tensor) -> list:
    """The values the learner's function returned, for a judge to inspect.

    Raises :class:`Failed` naming the first exception the function raised, or the
    first value that is not of ``kind``.
    """
    values = []
    for outcome in outcomes:
        if outcome.error == "ResultTooLarge":
            raise Failed(outcome.message[:1].upper() + outcome.message[1:] + ".")
        if outcome.raised:
            error = outcome.error
            if error == runner.NOT_ATTEMPTED:  # its own raise, for some inputs only
                error = "NotImplementedError"
            raise Failed(raised_with_hint(error, outcome.message))
        if not isinstance(outcome.value, kind):
            article = "an" if kind.__name__[0] in "aeiou" else "a"
            given = outcome.value_type or type(outcome.value).__name__
            raise Failed(f"Return {article} {kind.__name__}, not {given}.")
        values.append(outcome.value)
    return values


def call_cases(
    function: Callable, cases: Sequence[tuple], forbidden: Sequence[str] = ()
) -> list[Outcome]:
    """Phase 1: call ``function(*case)`` for every case (see :func:`.runner.call_cases`).

    Inputs are deep-copied before each call, so a function that modifies its
    input cannot change what a later case (or the judge) sees; the outcome
    records which arguments it changed.
    """
    return [outcome_from_dict(o) for o in runner.call_cases(function, cases, forbidden)]


def outcome_from_dict(raw: dict) -> Outcome:
    """An :class:`Outcome` from the plain dict :func:`.runner.call_cases` makes."""
    if not isinstance(raw, dict):
        raise ValueError(f"an outcome must be a dict, got {type(raw).__name__}")
    error = raw.get("error")
    mutated = raw.get("mutated", ())
    kinds = raw.get("kinds", ())
    value_type = raw.get("value_type")
    return Outcome(
        value=raw.get("value"),
        error=str(error)[:100] if error is not None else None,
        message=str(raw.get("message", ""))[:500],
        mutated=tuple(int(i) for i in mutated if type(i) is int),
        kinds=tuple(str(k)[:100] for k in kinds[:20])
        if isinstance(kinds, list | tuple)
        else (),
        value_type=str(value_type)[:100] if value_type is not None else None,
    )


def judge_outcomes(
    check: Check, cases: list[tuple], outcomes: list[Outcome]
) -> CheckResult:
    """Phase 2: apply ``check.judge``; an unexpected exception is a failure too."""
    try:
        check.judge(cases, outcomes)
    except Failed as failure:
        return CheckResult(check.name, False, failure.hint, check.kind, check.weight)
    except Exception as err:  # e.g. the learner returned the wrong type
        raised = next((o for o in outcomes if o.raised), None)
        detail = (
            f"{raised.error}: {raised.message}"
            if raised
            else f"{type(err).__name__}: {err}"
        )
        plain = in_plain_words(raised.message) if raised else ""
        return CheckResult(
            check.name,
            False,
            f"Your function raised or returned something unexpected ({detail})."
            + (f" {plain}" if plain else ""),
            check.kind,
            check.weight,
        )
    return CheckResult(check.name, True, "", check.kind, check.weight)


#: How long an exercise's checks may run in the notebook: the grader's default
#: ``--timeout``, which its sandbox gives the same calls (0 points past it).
CHECK_SECONDS = 30.0


class CheckTimeout(BaseException):
    """Raised in the learner's function when the checks pass :data:`CHECK_SECONDS`
    (a BaseException, so that the function's own ``except Exception`` lets it by)."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise :class:`CheckTimeout` in the code run inside, ``seconds`` from now.

    A timer signal, so only where one exists (not on Windows) and in the main
    thread (where a kernel runs cells and widget callbacks); elsewhere it waits.
    """
    rang = []  # yielded: holds True once the time is up, even if the error was caught
    if not hasattr(signal, "setitimer") or (
        threading.current_thread() is not threading.main_thread()
    ):
        yield rang
        return
    armed = [True]

    def ring(_signum, _frame):
        if armed[0]:  # every 0.05 s until the checks end: a caught one recurs
            rang.append(True)
            runner.STOP_CALLS.append(True)  # and no further case is called
            raise CheckTimeout

    runner.QUIET_CODE.add(ring.__code__)  # the watch does not count it as tc's
    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
    try:
        yield rang
    finally:
        while True:  # a ring while this runs raises here: do it again
            try:
                armed[0] = False  # from here on a ring does nothing
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                runner.STOP_CALLS.clear()
                break
            except CheckTimeout:
                continue


def timed_out(exercise: Exercise, seconds: float) -> Report:
    """The report of checks stopped after ``seconds``: every check failed, as in
    the grader (its status "timeout", 0 points)."""
    hint = f"stopped: no result within {seconds:g} s"
    results = tuple(
        CheckResult(c.name, False, hint, c.kind, c.weight) for c in exercise.checks
    )
    results += _inputs_unchanged(exercise, False, hint)
    note = (
        f"Your {exercise.function}() did not return within {seconds:g} s on the "
        "checks' inputs, and the grader stops it at the same limit (0 points). "
        "Look for a loop that never ends, or a step much slower than it needs to be."
    )
    return Report(exercise, FAILED, results, note)


def run_exercise(exercise: Exercise, function: Callable | None) -> Report:
    """Both phases, in this process: the notebook's instant feedback.

    The calls stop after :data:`CHECK_SECONDS`, as the grader's do.
    """
    if function is None:
        return Report(exercise, NOT_ATTEMPTED)
    case_lists = [check.cases() for check in exercise.checks]
    if exercise.forbidden:
        finding = screen.screen(_kernel_inputs())
        if finding is not None:
            return screened_out(exercise, case_lists, finding, "In")
    loaded = as_the_grader_loads(case_lists)
    seconds = CHECK_SECONDS
    try:
        with deadline(seconds) as rang:
            raw = [runner.call_cases(function, c, exercise.forbidden) for c in loaded]
    except CheckTimeout:
        return timed_out(exercise, seconds)
    if rang:  # the function caught the timeout (a bare except) and went on
        return timed_out(exercise, seconds)
    try:  # the trip the grader's results take out of its sandbox
        raw = runner.decode_result(runner.encode_result(raw))
    except runner.WireError as err:
        hint = f"The grader could not read your results: {err}."
        results = tuple(
            CheckResult(c.name, False, hint, c.kind, c.weight) for c in exercise.checks
        )
        return Report(exercise, FAILED, results)
    outcome_lists = [[outcome_from_dict(o) for o in row] for row in raw]
    report = report_from_outcomes(exercise, case_lists, outcome_lists)
    stale = stale_definition(function, _kernel_inputs())
    if stale:
        report = dataclasses.replace(report, note=f"{stale} {report.note}".strip())
    return report


def stale_definition(function: Callable, inputs: list[tuple[int, str]]) -> str:
    """A note when the kernel's latest cell that defines ``function``'s name
    is not the cell it came from, or "": that cell stopped before its ``def``
    ran (a syntax error, an error above it), so "Check again" checks the
    definition before it (a learner read "passed" for code that did not run)."""
    name = getattr(function, "__name__", "")
    if not isinstance(name, str) or not name.isidentifier():
        return ""
    defines = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", re.M)
    latest = next(((n, s) for n, s in reversed(inputs) if defines.search(s)), None)
    if latest is None:
        return ""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):  # defined where no source is kept
        return ""
    if source.strip() in latest[1]:
        return ""
    return (
        f"In [{latest[0]}], your latest cell that defines {name}(), stopped before "
        "its def ran (look for its error): these checks are of the definition "
        "before it. Fix that cell and run it, then check again."
    )


def _kernel_inputs() -> list[tuple[int, str]]:
    """The cells this kernel has run, as typed ((execution count, source));
    none outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is in requirements.txt
        return []
    shell = get_ipython()
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    if not isinstance(history, list):
        return []
    return [(n, s) for n, s in enumerate(history) if n and isinstance(s, str)]


def screened_out(
    exercise: Exercise,
    case_lists: list[list[tuple]],
    finding: screen.Finding,
    cell_word: str = "cell",
) -> Report:
    """The report of an exercise whose notebook holds a construct
    :func:`.screen.screen` refuses: every check failed, naming it, in the
    notebook and in the grader alike."""
    refused = [
        [Outcome(error=SCREENED, message=finding.message(cell_word)) for _ in cases]
        for cases in case_lists
    ]
    return report_from_outcomes(exercise, case_lists, refused)


def as_the_grader_loads(case_lists: list[list[tuple]]) -> list[list[tuple]]:
    """The cases after the trip the grader gives them: saved by ``torch.save``
    and read back by ``torch.load(weights_only=True)`` (see :mod:`..sandbox`).

    The learner's function sees the same objects in the notebook and in the
    grader: fresh strings, say, so that ``pool is "cls"`` fails in both.
    """
    buffer = io.BytesIO()
    torch.save(case_lists, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


#: The error of outcomes refused before any call (:func:`screened_out`).
SCREENED = "ScreenedOut"
#: How hints begin where no check judged a value: the function never ran (the
#: screen refused a cell), or it debugged inside itself where the watch cannot
#: follow. Its rows show "not checked", not "failed".
NOT_RUN, NOT_CHECKED = "Not run: ", "Not checked: "
#: Outcome errors that fail a whole exercise, whatever its values.
DISQUALIFYING = {
    "ForbiddenUse": "Write it yourself: {message}.",
    "CoursePackageUsed": "Don't call the course's own code: {message}.",
    SCREENED: NOT_RUN + "{message}.",
}
INPUTS_UNCHANGED = "leaves its inputs unchanged"
#: Returned values that are no result (the function never computed one), by type,
#: with the hint: no property is shown by a function that returns none of them
NOTHING_RETURNED = {
    "NoneType": "Your function returned None for every input (is its return "
    "statement missing?): this is checked once it returns results.",
    "generator": "Your function is a generator (it uses yield), so its body never "
    "ran: return the result instead; this is checked once it returns results.",
    "coroutine": "Your function is a coroutine (async def), so its body never ran: "
    "write it with def; this is checked once it returns results.",
}


def _inputs_unchanged(exercise: Exercise, passed: bool, hint: str) -> tuple:
    """The property check "leaves its inputs unchanged", as a tuple of results:
    empty where no argument could change (``exercise.mutable_inputs``)."""
    if not exercise.mutable_inputs:
        return ()
    return (CheckResult(INPUTS_UNCHANGED, passed, hint, PROPERTY),)


def report_from_outcomes(
    exercise: Exercise,
    case_lists: list[list[tuple]],
    outcome_lists: list[list[Outcome]],
) -> Report:
    """Judge every check; a stub that raises NotImplementedError is "not attempted".

    A forbidden function or the course package fails every check, with a hint
    that names it. Every exercise whose inputs could change in place ends with
    the property check "leaves its inputs unchanged".
    """
    every = [o for outcomes in outcome_lists for o in outcomes]
    if every and all(o.error == runner.NOT_ATTEMPTED for o in every):
        return Report(exercise, NOT_ATTEMPTED)
    disqualified = next((o for o in every if o.error in DISQUALIFYING), None)
    if disqualified is not None:
        said = DISQUALIFYING[disqualified.error]
        if disqualified.message.startswith(runner.CANNOT_FOLLOW):  # print(x), assert
            said = NOT_CHECKED + "{message}."
        hint = said.format(message=disqualified.message)
        results = tuple(
            CheckResult(c.name, False, hint, c.kind, c.weight) for c in exercise.checks
        )
        results += _inputs_unchanged(exercise, False, hint)
        return Report(exercise, FAILED, results)
    results = tuple(
        judge_outcomes(check, cases, outcomes)
        for check, cases, outcomes in zip(
            exercise.checks, case_lists, outcome_lists, strict=True
        )
    )
    changed = next((o for o in every if o.mutated), None)
    if every and all(o.raised or o.value_type in NOTHING_RETURNED for o in every):
        # nothing returned: no property has been shown, whatever was raised
        first = every[0]
        if first.raised:
            error = (
                "NotImplementedError"
                if first.error == runner.NOT_ATTEMPTED
                else first.error
            )
            plain = in_plain_words(first.message)
            hint = (
                f"Your function raised an error for every input (first {error}: "
                f"{first.message[:200]}): this is checked once it returns results."
                + (f" {plain}" if plain else "")
            )
        else:
            hint = NOTHING_RETURNED[first.value_type]
        # ... said as the value checks say it, where one does, so that it
        # reads once ("the same as above"), not three times in other words
        # (a learner round's wall of text)
        hint = next((r.hint for r in results if r.kind != PROPERTY and r.hint), hint)
        results = tuple(
            CheckResult(r.name, False, hint, r.kind, r.weight)
            if r.kind == PROPERTY
            else r
            for r in results
        )
        results += _inputs_unchanged(exercise, False, hint)
    elif changed is None:
        results += _inputs_unchanged(exercise, True, "")
    else:
        ordinals = ("first", "second", "third", "fourth", "fifth", "sixth")
        which = " and ".join(
            ordinals[i] if i < len(ordinals) else f"number {i + 1}"
            for i in changed.mutated
        )
        plural = "s" if len(changed.mutated) > 1 else ""
        hint = (
            f"Your function changed its input in place (its {which} "
            f"argument{plural}, counting from the left): work on a copy "
            "or build a new result; the caller's data must stay as it was."
        )
        results += _inputs_unchanged(exercise, False, hint)
    status = PASSED if all(r.passed for r in results) else FAILED
    return Report(exercise, status, results)


# --- helpers shared by the chapters' judges ------------------------------------------


def shown(value: Any, limit: int = 120) -> str:
    """A learner's returned value as a hint may quote it: short, whatever it is.

    Lists and tuples of numbers read as Python shows them, cut at ``limit``
    characters; a tensor reads as its shape and dtype. Walks at most ``limit``
    items, so a result of 10,000 tensors costs what a short list does (a
    ``repr`` of each cost the grader 25 s).
    """
    budget = [limit]

    def walk(v: Any) -> str:
        if budget[0] <= 0:
            return "…"
        if type(v) in (list, tuple):
            parts = []
            for item in v:
                if budget[0] <= 0:
                    parts.append("…")
                    break
                parts.append(walk(item))
            inner = ", ".join(parts)
            text = (
                f"[{inner}]" if type(v) is list else f"({inner}{',' * (len(v) == 1)})"
            )
        elif isinstance(v, torch.Tensor):
            text = f"a {v.dtype} tensor of shape {tuple(v.shape)}"
        elif type(v) in (int, float, bool) or v is None:
            text = repr(v) if type(v) is not int or abs(v) < 10**40 else "a huge int"
        elif type(v) is str:
            text = repr(v[:limit])
        else:
            text = f"a {type(v).__name__}"
        budget[0] -= len(text) + 2
        return text

    text = walk(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def seeded_randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A standard-normal tensor of ``shape`` drawn from its own generator (fixed cases)."""
    return torch.randn(
        *shape, dtype=dtype, generator=torch.Generator().manual_seed(seed)
    )


def close(
    got, want, *, atol: float = 1e-5, rtol: float = 1e-4, equal_nan: bool = False
) -> bool:
    """The one comparison every judge uses: ``got`` equals ``want`` when both are
    plain tensors of the same shape whose values agree within ``atol + rtol·|want|``
    (compared in float64).

    Never ``torch.allclose`` alone: it broadcasts, so an empty tensor, or one of
    shape (1,), "equals" anything (``tests/test_judges.py`` keeps every judge on
    this function). Anything but a plain ``torch.Tensor`` (a list, a subclass
    whose comparisons could lie) is not close.
    """
    if type(got) is not torch.Tensor or type(want) is not torch.Tensor:
        return False
    if got.shape != want.shape or got.is_complex() != want.is_complex():
        return False
    if got.is_complex():
        got, want = torch.view_as_real(got), torch.view_as_real(want)
    return bool(
        torch.allclose(
            got.double(), want.double(), atol=atol, rtol=rtol, equal_nan=equal_nan
        )
    )


def close_at_scale(got, want, *, equal_nan: bool = False) -> bool:
    """:func:`close` within 1e-4 of the output's own size as well as of each
    value: for judges whose loud twins hold nearly equal scores of a few
    hundred, which float32's rounding alone shares out differently (an honest
    answer moves an output near 0 by a little of the output's size). Compare
    with a float64 reference: its own error then adds nothing."""
    if type(want) is not torch.Tensor:
        return False
    finite = want[torch.isfinite(want)] if want.numel() else want
    scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
    return close(got, want, atol=1e-4 * scale, equal_nan=equal_nan)


def each_value(cases, outcomes):
    """(case, returned tensor) in order, failing at the first outcome that raised:
    a later case's error does not hide an earlier case's targeted hint."""
    for case, outcome in zip(cases, outcomes, strict=True):
        (value,) = returned_values([outcome])
        yield case, value
