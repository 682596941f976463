"""The one execution model (transformer_course.exercises.runner): what the
notebook's checks and the grader's sandbox both do when they call a learner's
function."""

import importlib

import pytest
import torch
import torch.nn.functional as F

import transformer_course as tc
from transformer_course.exercises import runner
from transformer_course.exercises.runner import (
    call_cases,
    to_plain,
    uses_course_package,
)

X = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))


def one(function, forbidden=(), args=(X,)):
    (outcome,) = call_cases(function, [args], forbidden)
    return outcome


@pytest.mark.parametrize(
    "cheat",
    [
        lambda x: torch.softmax(x, dim=-1),
        lambda x: x.softmax(-1),
        lambda x: F.softmax(x, dim=-1),
        lambda x: torch.nn.Softmax(dim=-1)(x),
        lambda x: torch.special.softmax(x, -1),
        lambda x: x.log_softmax(-1).exp(),
        lambda x: torch.ops.aten._softmax(x, -1, False),
        lambda x: F.scaled_dot_product_attention(x[None], x[None], x[None])[0],
    ],
    ids=["torch", "method", "F", "module", "special", "log_softmax", "aten", "sdpa"],
)
def test_forbidden_softmax_is_caught_at_every_level(cheat):
    assert cheat(X).shape == X.shape  # the cheat works outside the watch
    outcome = one(cheat, forbidden=("softmax",))
    assert outcome["error"] == "ForbiddenUse"
    assert "torch.softmax" in outcome["message"]


def test_a_forbidden_call_that_the_learner_catches_is_still_caught():
    def sly(x):
        try:
            return torch.softmax(x, -1)
        except Exception:
            e = (x - x.max(-1, keepdim=True).values).exp()
            return e / e.sum(-1, keepdim=True)

    assert one(sly, forbidden=("softmax",))["error"] == "ForbiddenUse"


@pytest.mark.parametrize(
    "cheat",
    [
        lambda q: F.scaled_dot_product_attention(q, q, q),
        lambda q: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)[
            0
        ],
    ],
)
def test_forbidden_sdpa_is_caught(cheat):
    q = torch.randn(1, 2, 3, 4)
    outcome = one(cheat, ("scaled_dot_product_attention",), (q,))
    assert outcome["error"] == "ForbiddenUse"
    assert "scaled_dot_product_attention" in outcome["message"]


def test_allowed_code_runs_under_the_watch():
    def honest(x):
        e = (x - x.max(-1, keepdim=True).values).exp()
        return e / e.sum(-1, keepdim=True)

    outcome = one(honest, forbidden=("softmax", "scaled_dot_product_attention"))
    assert outcome["error"] is None
    torch.testing.assert_close(outcome["value"], torch.softmax(X, -1))


def test_embedding_lookups_are_forbidden_but_one_hot_products_are_not():
    table, ids = torch.randn(5, 3), torch.tensor([0, 4, 4])
    for cheat in (lambda i, t: t[i], lambda i, t: F.embedding(i, t)):
        assert one(cheat, ("embedding",), (ids, table))["error"] == "ForbiddenUse"
    honest = one(
        lambda i, t: F.one_hot(i, 5).to(t.dtype) @ t, ("embedding",), (ids, table)
    )
    torch.testing.assert_close(honest["value"], table[ids])


def test_unknown_forbidden_key_is_named():
    with pytest.raises(ValueError, match=r"expected keys among .* got \['softmaxx'\]"):
        one(lambda x: x, forbidden=("softmaxx",))


# --- the course package -----------------------------------------------------------


def _module_level_helper(x):
    return tc.attention.stable_softmax(x)


def test_the_course_package_is_refused_directly_and_through_helpers():
    assert uses_course_package(lambda x: tc.stable_softmax(x)) == ["tc"]
    assert uses_course_package(_module_level_helper) == ["tc"]

    def via_helper(x):
        return _module_level_helper(x)

    assert uses_course_package(via_helper) == ["tc"]

    def imports_it(x):
        import transformer_course

        return transformer_course.stable_softmax(x)

    assert uses_course_package(imports_it) == ["transformer_course"]
    outcome = one(via_helper)
    assert outcome["error"] == "CoursePackageUsed"
    assert "hidden when grading" in outcome["message"]


def test_torch_only_code_is_not_mistaken_for_the_course_package():
    def honest(x):
        return torch.tanh(x) + F.relu(x)

    assert uses_course_package(honest) == []


# --- inputs and results -----------------------------------------------------------


def test_inputs_are_copied_and_changes_reported():
    ids = [1, 2, 3]

    def edits(values, other):
        values.append(4)
        return len(values)

    outcome = one(edits, args=(ids, torch.ones(2)))
    assert ids == [1, 2, 3]
    assert outcome["value"] == 4
    assert outcome["mutated"] == [0]


def test_nan_inputs_left_alone_are_not_reported_as_changed():
    assert one(lambda x: x + 1, args=(torch.tensor([float("nan")]),))["mutated"] == []


def test_oversized_results_are_refused_before_they_are_copied():
    huge = one(lambda x: torch.zeros(1).expand(16_000_000))
    assert huge["error"] == "ResultTooLarge"
    assert "16000000" in huge["message"].replace(",", "")
    assert one(lambda x: list(range(20_000)))["error"] == "ResultTooLarge"
    assert one(lambda x: "x" * 200_000)["error"] == "ResultTooLarge"
    deep = []
    for _ in range(50):
        deep = [deep]
    assert one(lambda x: deep)["error"] == "ResultTooLarge"


def test_to_plain_keeps_only_plain_data():
    class Sneaky(int):
        def __eq__(self, other):
            return True

    class Odd(torch.Tensor):
        pass

    value = to_plain(
        {"a": (1, 2.5, "s", None, [torch.ones(2)]), 3: object(), "n": Sneaky(7)}
    )
    assert value["a"][:4] == (1, 2.5, "s", None)
    assert torch.equal(value["a"][4][0], torch.ones(2))
    assert value[3] == "<object>"  # keys keep their type; odd values are described
    assert type(value["n"]) is int
    assert value["n"] == 7
    plain = to_plain(torch.ones(2).as_subclass(Odd).requires_grad_())
    assert type(plain) is torch.Tensor
    assert not plain.requires_grad
    assert to_plain(torch.eye(2).to_sparse()).layout == torch.strided


def test_limits_are_part_of_the_runner():
    assert runner.LIMITS["elements"] >= 10_000  # room for every check's results


def test_the_course_package_is_found_behind_wrappers():
    import functools

    class Caller:
        def __call__(self, x):
            return tc.attention.softmax(x)

    def decorated(f):
        @functools.wraps(f)
        def wrapper(*a):
            return f(*a)

        return wrapper

    cases = {
        "the function itself": tc.attention.softmax,
        "a partial": functools.partial(tc.attention.softmax, dim=-1),
        "a callable instance": Caller(),
        "a decorated function": decorated(tc.attention.softmax),
        "__import__": lambda x: __import__("transformer_course").attention.softmax(x),
    }
    for what, function in cases.items():
        assert uses_course_package(function), what
        assert one(function)["error"] == "CoursePackageUsed", what


@pytest.mark.parametrize(
    "cheat",
    [
        lambda x: (
            __import__("concurrent.futures")
            .futures.ThreadPoolExecutor(1)
            .submit(torch.softmax, x, -1)
            .result()
        ),
        lambda x: torch.sparse.softmax(x.to_sparse(), -1).to_dense(),
        lambda x: torch.from_numpy(x.numpy()).softmax(-1),
    ],
    ids=["another-thread", "sparse", "numpy"],
)
def test_forbidden_functions_are_caught_in_other_threads_and_spellings(cheat):
    assert one(cheat, forbidden=("softmax",))["error"] == "ForbiddenUse"
    torch.testing.assert_close(torch.softmax(X, -1).sum(-1), torch.ones(2))  # restored


def test_row_by_row_lookups_are_caught():
    table, ids = torch.randn(5, 3), torch.tensor([0, 4])

    def rows(i, t):
        return torch.stack([t[j] for j in i.tolist()])

    assert one(rows, ("embedding",), (ids, table))["error"] == "ForbiddenUse"
    assert table[1].shape == (3,)  # indexing works again after the call


def test_numpy_scalars_become_python_numbers():
    import numpy as np

    assert type(to_plain(np.int64(3))) is int
    assert type(to_plain(np.float32(0.5))) is float


@pytest.mark.parametrize(
    "cheat",
    [
        lambda x: F.layer_norm(x, (3,)),
        lambda x: torch.layer_norm(x, (3,)),
        lambda x: torch.nn.LayerNorm(3)(x),
        lambda x: torch.ops.aten.native_layer_norm(x, [3], None, None, 1e-5)[0],
        lambda x: F.group_norm(x.reshape(-1, 3, 1), 1).reshape(x.shape),
        lambda x: F.batch_norm(x.T, None, None, training=True).T,
        lambda x: F.instance_norm(x[None]).reshape(x.shape),
        lambda x: F.rms_norm(x - x.mean(-1, keepdim=True), (3,)),
    ],
    ids=["F", "torch", "module", "aten", "group", "batch", "instance", "rms"],
)
def test_forbidden_layer_norm_is_caught_in_every_disguise(cheat):
    torch.testing.assert_close(cheat(X), F.layer_norm(X, (3,)), atol=1e-4, rtol=1e-4)
    outcome = one(cheat, forbidden=("layer_norm",))
    assert outcome["error"] == "ForbiddenUse"
    assert "F.layer_norm" in outcome["message"]


def test_a_layer_norm_written_out_is_allowed():
    def honest(x):
        centred = x - x.mean(-1, keepdim=True)
        return centred / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)

    outcome = one(honest, forbidden=("layer_norm",))
    assert outcome["error"] is None, outcome["message"]
    torch.testing.assert_close(outcome["value"], F.layer_norm(X, (3,)))


@pytest.mark.parametrize(
    "cheat",
    [
        lambda x: importlib.import_module("torch._refs").native_layer_norm(
            x, [3], None, None, 1e-5
        )[0],
        lambda x: (
            importlib.import_module("torch._decomp.decompositions")
            .native_batch_norm(
                x.T.contiguous(), None, None, None, None, True, 0.1, 1e-5
            )[0]
            .T
        ),
        lambda x: torch._decomp.decomposition_table[
            torch.ops.aten.native_layer_norm.default
        ](x, [3], None, None, 1e-5)[0],
    ],
    ids=["refs", "decomposition", "decomposition-table"],
)
def test_torch_s_python_reimplementations_are_caught(cheat):
    importlib.import_module("torch._decomp")
    torch.testing.assert_close(cheat(X), F.layer_norm(X, (3,)), atol=1e-4, rtol=1e-4)
    outcome = one(cheat, forbidden=("layer_norm",))
    assert outcome["error"] == "ForbiddenUse"
    assert "F.layer_norm" in outcome["message"]


def _switch_off_and_cheat(x):
    """Destroy the kernels' library, leave the modes: F.layer_norm unwatched."""
    import gc

    from torch.utils._python_dispatch import _disable_current_modes

    for thing in gc.get_objects():
        if isinstance(thing, torch.library.Library):
            thing._destroy()
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        return torch.layer_norm(x, (3,))


def test_switching_the_watch_off_is_forbidden():
    outcome = one(_switch_off_and_cheat, forbidden=("layer_norm",))
    assert outcome["error"] == "ForbiddenUse"
    assert "switch off" in outcome["message"]
    assert one(lambda x: torch.softmax(x, -1), ("softmax",))["error"] == "ForbiddenUse"


def test_a_patched_watch_is_refused(monkeypatch):
    import contextlib

    def nothing(self):
        return contextlib.nullcontext(), contextlib.nullcontext()

    monkeypatch.setattr(runner._Watch, "modes", nothing)
    monkeypatch.setattr(runner._Watch, "kernels", lambda self: contextlib.nullcontext())
    outcome = one(lambda x: F.layer_norm(x, (3,)), forbidden=("layer_norm",))
    assert outcome["error"] == "ForbiddenUse"
    assert "switch off" in outcome["message"]


def test_honest_code_is_not_mistaken_for_switching_the_watch_off():
    def honest(x):
        var, mean = torch.var_mean(x, -1, keepdim=True, correction=0)
        centred = torch.einsum("ij->ij", x - mean).double()
        return (centred * torch.rsqrt(var.double() + 1e-5)).float()

    outcome = one(honest, forbidden=("layer_norm",))
    assert outcome["error"] is None, outcome["message"]
    torch.testing.assert_close(outcome["value"], F.layer_norm(X, (3,)))


def test_the_course_package_reached_at_run_time_is_refused():
    def hidden(x):  # a computed name: nothing in the code says transformer_course
        name = "".join(["transformer", "_course"])
        return __import__(name).attention.softmax(x)

    assert not uses_course_package(hidden)
    outcome = one(hidden)
    assert outcome["error"] == "CoursePackageUsed"
    assert "transformer_course.attention" in outcome["message"]


def test_a_profile_hook_switched_off_without_a_trace_is_noticed():
    import functools
    import sys

    def quietly_off(x):  # through a partial: no call event for the hook to see
        functools.partial(sys.setprofile, None)()
        return x - x.mean(-1, keepdim=True)

    outcome = one(quietly_off, forbidden=("layer_norm",))
    assert outcome["error"] == "ForbiddenUse"
    assert sys.getprofile() is None  # restored


def test_the_watch_cannot_be_switched_off_without_forbidden_functions_either():
    import functools
    import sys

    def quietly_off(x):  # an exercise with nothing forbidden is watched too
        functools.partial(sys.setprofile, None)()
        return x

    outcome = one(quietly_off)
    assert outcome["error"] == "ForbiddenUse"
    assert "switch off" in outcome["message"]
    assert one(lambda x: x * 2)["error"] is None


def test_an_exception_is_recorded_with_its_base_classes():
    from transformer_course.exercises.core import outcome_from_dict

    class ShapeError(ValueError):
        pass

    def strict(x):
        raise ShapeError(f"expected (N, D), got {tuple(x.shape)}")

    outcome = one(strict)
    assert outcome["error"] == "ShapeError"
    assert outcome["kinds"][:2] == ["ShapeError", "ValueError"]
    parsed = outcome_from_dict(outcome)
    assert parsed.raised_a("ValueError")
    assert parsed.raised_a("ShapeError")
    assert not parsed.raised_a("TypeError")


def test_unreadable_results_and_unprintable_errors_are_outcomes_not_crashes():
    class MuteError(Exception):
        def __str__(self):
            raise RuntimeError("no")

    def mute(x):
        raise MuteError()

    on_meta = one(lambda x: torch.empty(2, 3, device="meta"))
    assert on_meta["error"] == "UnreadableResult"
    assert "Tensor" in on_meta["message"]
    outcome = one(mute)
    assert outcome["error"] == "MuteError"
    assert "cannot be printed" in outcome["message"]


def test_a_value_of_the_wrong_type_is_named_by_its_own_type():
    import numpy as np

    from transformer_course.exercises.core import (
        Failed,
        outcome_from_dict,
        returned_values,
    )

    outcome = one(lambda x: np.zeros((2, 3)))
    assert outcome["value"] == "<ndarray>"
    with pytest.raises(Failed, match="Return a Tensor, not ndarray"):
        returned_values([outcome_from_dict(outcome)])


class _Liar(torch.Tensor):
    """A subclass that answers every allclose with True and hides its size."""

    def as_subclass(self, cls):
        return self

    def numel(self):
        return 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.allclose:
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_subclass_cannot_fool_the_judges_or_the_limits():
    outcome = one(lambda x: torch.zeros(2, 3).as_subclass(_Liar))
    assert type(outcome["value"]) is torch.Tensor
    assert not torch.allclose(outcome["value"], torch.ones(2, 3))
    too_big = one(lambda x: torch.zeros(10**7).as_subclass(_Liar))
    assert too_big["error"] == "ResultTooLarge"
    assert to_plain([torch.ones(2).as_subclass(_Liar)])[0].__class__ is torch.Tensor


def _in_a_child(call):
    """(error, message) of ``call()``'s outcome, run in a forked child, as each
    graded job is: a cheat that destroys torch's libraries damages only it."""
    import json
    import os

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            outcome = call()
            os.write(write, json.dumps([outcome["error"], outcome["message"]]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return tuple(json.loads(text))


def _learner(source: str):
    """A function as a notebook cell defines it: in a ``__main__`` namespace."""
    namespace = {"__name__": "__main__"}
    exec(source, namespace)
    return namespace["answer"]


SWITCH_OFF = (
    "import gc, torch\n"
    "from torch.utils._python_dispatch import _disable_current_modes\n"
    "{decorator}\n"
    "def answer(x):\n"
    "    for thing in {objects}:\n"
    "        if isinstance(thing, torch.library.Library):\n"
    "            thing._destroy()\n"
    "    with torch._C.DisableTorchFunction(), _disable_current_modes():\n"
    "        return torch.layer_norm(x, (3,))\n"
)


@pytest.mark.parametrize(
    ("decorator", "objects"),
    [
        ("@torch.no_grad()", "gc.get_objects()"),  # a library wrapper around it
        ("", "__import__('functools').partial(gc.get_objects)()"),  # through a partial
    ],
    ids=["decorated", "partial"],
)
def test_switching_the_watch_off_behind_a_decorator_or_a_partial_is_forbidden(
    decorator, objects
):
    cheat = _learner(SWITCH_OFF.format(decorator=decorator, objects=objects))
    error, message = _in_a_child(lambda: one(cheat, forbidden=("layer_norm",)))
    assert error == "ForbiddenUse"
    assert "switch off" in message
    honest = _learner(
        "import torch\n"
        "@torch.no_grad()\n"
        "def answer(x):\n"
        "    mean = x.mean(-1, keepdim=True)\n"
        "    return (x - mean) / ((x - mean).pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()\n"
    )
    outcome = one(honest, forbidden=("layer_norm",))
    assert outcome["error"] is None, outcome["message"]
    torch.testing.assert_close(outcome["value"], F.layer_norm(X, (3,)))


def test_a_name_computed_with_the_course_counts_as_using_it():
    """The thirteenth red team: ALLOWED = tc.causal_mask(64, 64) at a cell's top
    level, read by the function, passed in the notebook and got 0 from the
    grader (which skips the statement: the package is hidden there). The
    notebook now sees it, from the kernel's input history, and says so."""
    from transformer_course.exercises import runner

    namespace = {
        "In": [
            "",
            "import torch\nimport transformer_course as tc",
            "ALLOWED = tc.causal_mask(64, 64)\nSCALE = 2.0",
            "def f(s):\n    return s.masked_fill(~ALLOWED[:4, :4], 0) * SCALE",
            "BIAS = tc.causal_mask(4, 4)\nBIAS = torch.zeros(4, 4)",  # cleared
            "def g(s):\n    return s + BIAS",
        ],
        "torch": torch,
    }
    exec(namespace["In"][3], namespace)
    exec(namespace["In"][5], namespace)
    namespace["ALLOWED"] = torch.ones(64, 64, dtype=torch.bool).tril()
    namespace["SCALE"], namespace["BIAS"] = 2.0, torch.zeros(4, 4)
    assert runner.uses_course_package(namespace["f"]) == [
        "ALLOWED, computed with tc in a cell"
    ]
    assert runner.uses_course_package(namespace["g"]) == []
    outcomes = runner.call_cases(namespace["f"], [(torch.zeros(4, 4),)])
    assert outcomes[0]["error"] == "CoursePackageUsed"


def test_an_attribute_is_not_a_global_of_the_same_name():
    """The fourteenth red team: ``device = tc.setup(seed=0)`` in the setup cell
    marked the name ``device``, and an honest answer reading ``scores.device``
    (as the course's own solutions do) scored 0 in the notebook and full marks
    from the grader. Only globals count; ``__main__.tc`` still does."""
    from transformer_course.exercises import runner

    namespace = {
        "In": [
            "",
            "import torch\nimport transformer_course as tc",
            "device = tc.setup(seed=0)\nMASK = tc.causal_mask(2, 2)",
            "def f(scores):\n    return scores + torch.zeros(1, device=scores.device)",
            "def g(scores):\n    return scores.masked_fill(~MASK, 0)",
            "import __main__\ndef h(scores):\n    return __main__.tc.softmax(scores)",
        ],
        "torch": torch,
    }
    for source in namespace["In"][3:]:
        exec(source, namespace)
    namespace["device"] = torch.device("cpu")
    namespace["MASK"] = torch.ones(2, 2, dtype=torch.bool).tril()
    assert runner.uses_course_package(namespace["f"]) == []
    outcome = runner.call_cases(namespace["f"], [(torch.zeros(2),)])[0]
    assert outcome["error"] is None, outcome["message"]
    assert runner.uses_course_package(namespace["g"]) == [
        "MASK, computed with tc in a cell"
    ]
    assert "tc" in runner.uses_course_package(namespace["h"])


def test_device_is_the_graders_too():
    """The fifteenth red team: ``.to(device)`` in an answer failed in the
    notebook (device = tc.setup() in the setup cell) and passed in the grader,
    whose preamble binds ``device`` itself. Names the grader provides are not
    held against the learner, and the grader does provide each of them."""
    from transformer_course.exercises import runner
    from transformer_course.grading.grade import PREAMBLE

    namespace = {
        "In": ["", "import transformer_course as tc\ndevice = tc.setup(seed=0)"],
        "torch": torch,
        "device": torch.device("cpu"),
    }
    exec("def f(x):\n    return x.to(device) * 2", namespace)
    assert runner.uses_course_package(namespace["f"]) == []
    provided: dict = {}
    exec(PREAMBLE.replace("import transformer_course as tc", "pass"), provided)
    assert set(provided) >= runner.PROVIDED_WHEN_GRADING


def test_names_derived_imported_or_under_a_magic_count_as_computed_with_the_course():
    """The eighteenth red team: the notebook missed three ways to make a name
    with the course package, which the grader passes over (so the function
    failed there and passed here): a name made from such a name, a name made
    with a function imported from the package, and either under ``%%time``
    (whose body the kernel's history holds as a string)."""
    from IPython.core.inputtransformer2 import TransformerManager

    from transformer_course.exercises import runner

    magic = TransformerManager().transform_cell(
        "%%time\nTIMED = tc.causal_mask(8, 8)\n"
    )
    namespace = {
        "In": [
            "",
            "import torch\nimport transformer_course as tc",
            "MASK = tc.causal_mask(64, 64)\nDERIVED = MASK.bool()",
            "from transformer_course import causal_mask\nALIASED = causal_mask(4, 4)",
            magic,
            "PLAIN = torch.ones(2)\nDERIVED_TOO = PLAIN * 2",
            "causal_mask = torch.ones\nNOT_COURSE = causal_mask(2)",  # rebound
        ]
    }
    computed = runner._computed_with_the_course(namespace)
    assert {"MASK", "DERIVED", "ALIASED", "TIMED"} <= computed
    assert not {"PLAIN", "DERIVED_TOO", "NOT_COURSE"} & computed


def _scipy_softmax(values):
    import scipy.special

    return scipy.special.softmax(values, axis=-1)


@pytest.mark.parametrize(
    "cheat",
    [  # red team, pass 19: the numbers leave torch another way, SciPy does the work
        lambda x: torch.tensor(_scipy_softmax(__import__("numpy").from_dlpack(x))),
        lambda x: torch.tensor(_scipy_softmax(x.tolist())),
        _FLOATS := (
            lambda x: torch.tensor(
                _scipy_softmax([[float(v) for v in row] for row in x])
            )
        ),
    ],
    ids=["dlpack", "tolist", "floats"],
)
def test_a_softmax_from_scipy_is_caught_however_the_numbers_leave_torch(cheat):
    torch.testing.assert_close(cheat(X).double(), X.softmax(-1).double())  # it works...
    outcome = one(cheat, forbidden=("softmax",))
    assert outcome["error"] == "ForbiddenUse"  # ...and is refused
    # the floats are refused as they leave torch (the thirty-first red team's
    # NumPy ufuncs run where no hook sees them), before SciPy runs
    said = "taken out of torch" if cheat is _FLOATS else "NumPy/SciPy versions"
    assert said in outcome["message"]


def test_a_lookup_in_numpy_through_to_dlpack_is_a_forbidden_embedding():
    """Red team, pass 19: torch.utils.dlpack.to_dlpack (torch._C._to_dlpack, a C
    function) handed the table to NumPy, whose indexing read the rows."""
    import numpy as np

    class Capsule:
        def __init__(self, tensor):
            self.capsule = torch.utils.dlpack.to_dlpack(tensor)

        def __dlpack__(self, stream=None, **kwargs):
            return self.capsule

        def __dlpack_device__(self):
            return (1, 0)  # the CPU

    def cheat(ids, table):
        rows, at = np.from_dlpack(Capsule(table)), np.from_dlpack(Capsule(ids))
        return torch.from_dlpack(np.ascontiguousarray(rows[at]))

    table, ids = torch.randn(5, 3), torch.tensor([0, 4, 4])
    torch.testing.assert_close(cheat(ids, table), table[ids])  # it works...
    outcome = one(cheat, ("embedding",), (ids, table))  # ...and is refused
    assert outcome["error"] == "ForbiddenUse"
    assert "F.embedding" in outcome["message"]


def test_code_that_torch_compile_generated_is_refused_where_something_is_forbidden():
    """Red team, pass 19: a kernel compiled ahead from torch.softmax (inductor,
    outside the watched call) ran no operator the watch sees. Compiled code is
    recognised by its module (torch._inductor, torch._dynamo) or, for a module
    inductor generated, by the ``async_compile`` it defines; here both are stood
    in for by plain modules, since compiling takes half a minute."""
    import types

    for name, marker in (
        ("torch._inductor.stand_in", {}),
        ("c2xyz", {"async_compile": 1}),
    ):
        generated = types.ModuleType(name)
        generated.__dict__.update(marker, torch=torch)
        exec(
            "def call(x):\n    return (x - x.max(-1, keepdim=True).values).exp()",
            generated.__dict__,
        )
        compiled = generated.call

        def answer(x, compiled=compiled):
            e = compiled(x)
            return e / e.sum(-1, keepdim=True)

        outcome = one(answer, forbidden=("softmax",))
        assert outcome["error"] == "ForbiddenUse", name
        assert "torch.compile" in outcome["message"]
        assert one(answer)["error"] is None  # nothing forbidden: nothing to hide


def _the_watch():
    """The runner's watch, reached as a learner's code could: through the frames
    of a traceback, with no call the hook looks for."""
    try:
        raise LookupError
    except LookupError as err:
        frame = err.__traceback__.tb_frame
    while frame is not None and "watch" not in frame.f_locals:
        frame = frame.f_back
    return None if frame is None else frame.f_locals["watch"]  # None: not watched


def test_a_function_that_empties_the_watch_from_inside_is_still_caught():
    """Red team, pass 19: from inside the call, empty the watch's tables, so that
    nothing it looks for is found, and use a library's softmax."""

    def cheat(x):
        import scipy.special

        watch = _the_watch()
        for table in (
            (watch.functions, watch.names, watch.prefixes, watch.ops) if watch else ()
        ):
            table.clear()
        return torch.tensor(scipy.special.softmax(x.tolist(), axis=-1))

    torch.testing.assert_close(cheat(X).float(), X.softmax(-1))  # it works...
    outcome = one(cheat, forbidden=("softmax",))  # ...and is refused
    assert outcome["error"] == "ForbiddenUse"
    assert "switch off or look for its checks" in outcome["message"]


def test_a_hook_that_raised_stays_off_whatever_the_function_erases():
    """A forbidden call the function catches, then erases from the record: the
    hook raised, which unset it, and that is seen after the function returns."""

    def cheat(x):
        watch = _the_watch()
        try:
            import scipy.special

            values = scipy.special.softmax([[1.0, 2.0]], axis=-1)
        except Exception:
            values = None
        if watch is not None:
            watch.hits.clear()
        e = x.exp()
        return e / e.sum(-1, keepdim=True) if values is None else e

    outcome = one(cheat, forbidden=("softmax",))
    assert outcome["error"] == "ForbiddenUse"


def test_a_process_started_inside_the_call_is_refused_where_something_is_forbidden():
    """Red team, pass 19: a helper process started by the first call did the
    softmax where no watch reaches."""
    import subprocess
    import sys

    def with_a_helper(x):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        e = x.exp()
        return e / e.sum(-1, keepdim=True)

    outcome = one(with_a_helper, forbidden=("softmax",))
    assert outcome["error"] == "ForbiddenUse"
    assert "another process" in outcome["message"]
    assert one(with_a_helper)["error"] is None  # nothing forbidden: allowed


def test_sampling_the_table_as_an_image_is_a_forbidden_lookup():
    """Red team, pass 19: F.grid_sample in nearest mode reads rows of the table."""

    def cheat(ids, table):
        V, D = table.shape
        image = table.T.reshape(1, D, 1, V)  # D channels, one row of V pixels
        xs = ids.to(table.dtype) * 2 / (V - 1) - 1  # each id's pixel, in [-1, 1]
        grid = torch.stack([xs, torch.zeros_like(xs)], -1).reshape(1, 1, -1, 2)
        out = F.grid_sample(image, grid, mode="nearest", align_corners=True)
        return out.reshape(D, -1).T  # (N, D)

    table, ids = torch.randn(5, 3), torch.tensor([0, 4, 2])
    torch.testing.assert_close(cheat(ids, table), table[ids])  # it works...
    outcome = one(cheat, ("embedding",), (ids, table))  # ...and is refused
    assert outcome["error"] == "ForbiddenUse"


@pytest.mark.parametrize(
    "cheat",
    [  # red team, pass 20
        lambda x: (lambda y: y - torch.stack(y.unbind(-1)).logsumexp(0)[..., None])(x),
        lambda x: torch.exp2(
            x / 0.6931471805599453
            - torch.logaddexp2(*(x / 0.6931471805599453).unbind(-1))[..., None]
        ),
    ],
    ids=["logsumexp", "logaddexp2"],
)
def test_other_spellings_of_logsumexp_are_a_forbidden_softmax(cheat):
    outcome = one(cheat, forbidden=("softmax",), args=(torch.randn(3, 2),))
    assert outcome["error"] == "ForbiddenUse"


def test_a_numpy_ufunc_reduction_is_matched_by_the_ufuncs_name():
    """Red team, pass 20: np.logaddexp.reduce reached the hook as "reduce"."""
    import numpy as np

    def cheat(x):
        values = [[float(v) for v in row] for row in x.unbind(0)]
        lse = np.logaddexp.reduce(np.array(values), axis=-1)
        return (x - torch.tensor(lse, dtype=x.dtype)[:, None]).exp()

    torch.testing.assert_close(cheat(X), X.softmax(-1))  # it works...
    assert one(cheat, forbidden=("softmax",))["error"] == "ForbiddenUse"  # ...refused


def test_a_raw_thread_or_ctypes_is_refused_where_something_is_forbidden():
    """Red team, pass 20: a thread started with _thread escaped the hook;
    ctypes reaches native code no watch follows."""
    import _thread
    import ctypes

    def raw_thread(x):
        done = []
        _thread.start_new_thread(done.append, (1,))
        e = x.exp()
        return e / e.sum(-1, keepdim=True)

    def native(x):
        ctypes.CDLL(None)
        e = x.exp()
        return e / e.sum(-1, keepdim=True)

    for answer in (raw_thread, native):
        outcome = one(answer, forbidden=("softmax",))
        assert outcome["error"] == "ForbiddenUse", answer.__name__
        assert one(answer)["error"] is None  # nothing forbidden: allowed


def test_calls_hidden_in_code_run_with_exec_count_as_the_learners():
    """Red team, pass 20: a helper exec'd into a dict of its own switched the
    hook off, used SciPy, and put the hook back."""
    helper = {}
    exec(
        "import sys\ndef helper(x):\n    hook = sys.getprofile()\n    return hook\n",
        helper,
    )

    def cheat(x):
        helper["helper"](x)
        e = x.exp()
        return e / e.sum(-1, keepdim=True)

    outcome = one(cheat, forbidden=("softmax",))
    assert outcome["error"] == "ForbiddenUse"
    assert "switch off or look for its checks" in outcome["message"]


def _after_the_call_through_a_method_of_the_input(x):
    """The twenty-first red team: the result is filled in when the runner, after
    the call, asks the input tensor whether it is floating point (an attribute
    set on the tensor stands in for the method)."""
    out = torch.zeros_like(x)

    def later():
        out.copy_(torch.softmax(x, dim=-1))
        return True

    x.is_floating_point = later
    return out


class _HashKey(str):
    def __hash__(self):
        torch.softmax(X, dim=-1)  # the forbidden function, run while hashed
        return str.__hash__(self)


def _after_the_call_through_a_dict_key(params):
    params[_HashKey("evil")] = 1  # hashed when the runner compares the inputs
    return torch.zeros(2, 3)


class _LazyTuple(tuple):
    def __iter__(self):
        return iter((torch.softmax(X, dim=-1),))


@pytest.mark.parametrize(
    ("cheat", "args"),
    [
        (_after_the_call_through_a_method_of_the_input, (X,)),
        (_after_the_call_through_a_dict_key, ({"a": 1},)),
        (lambda x: _LazyTuple((x,)), (X,)),  # read by to_plain after the call
    ],
    ids=["input's method", "dict key's hash", "result's iterator"],
)
def test_code_run_after_the_call_is_watched_too(cheat, args):
    """Refused, or never run: the forbidden result does not reach the checks."""
    outcome = one(cheat, forbidden=("softmax",), args=args)
    if outcome["error"] is None:  # the runner never ran the learner's code
        assert not torch.allclose(outcome["value"], torch.softmax(X, dim=-1))
    else:
        assert outcome["error"] == "ForbiddenUse", outcome
        assert outcome["value"] is None


def test_a_library_function_named_after_a_forbidden_one_is_refused():
    """The twenty-first red team: scikit-learn's MLP computes its probabilities
    with inplace_softmax, a name the exact match missed; the numbers left torch
    one .item() at a time."""
    neural_network = pytest.importorskip("sklearn.neural_network")
    import numpy as np

    def cheat(x):
        n = x.shape[-1]
        values = [[x[i, j].item() for j in range(n)] for i in range(x.shape[0])]
        mlp = neural_network.MLPClassifier(activation="identity")
        mlp.coefs_, mlp.intercepts_ = [np.eye(n)], [np.zeros(n)]
        mlp.n_layers_, mlp.out_activation_ = 2, "softmax"
        mlp.n_outputs_ = mlp.n_features_in_ = n
        return torch.tensor(mlp.predict_proba(np.array(values)), dtype=x.dtype)

    assert torch.allclose(cheat(X), torch.softmax(X, -1))  # it works unwatched
    outcome = one(cheat, forbidden=("softmax",))
    assert outcome["error"] == "ForbiddenUse", outcome


def test_a_method_added_to_the_tensor_class_refuses_the_call(monkeypatch):
    """The twenty-second red team: a cell set torch.Tensor.new_empty, which
    shadows the C method and which copy.deepcopy of the inputs calls before
    the watched call; the hook computed the answer with the forbidden function."""
    computed = []

    def new_empty(self, *args, **kwargs):
        computed.append(torch.softmax(X, dim=-1))
        return torch._C.TensorBase.new_empty(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "new_empty", new_empty, raising=False)
    outcome = one(lambda x: x, forbidden=("softmax",))
    assert outcome["error"] == "ForbiddenUse", outcome
    assert computed == []  # refused before anything was copied


class _StartsAThreadWhenRead:
    """The twenty-third red team: a callable whose ``func`` (read by the
    runner to unwrap decorators, before the call) starts a thread."""

    @property
    def func(self):
        import threading

        worker = threading.Thread(target=lambda: None)
        worker.start()
        worker.join()
        return None

    def __call__(self, x):
        return torch.zeros_like(x)


class _LoudError(Exception):
    def __str__(self):
        import threading

        worker = threading.Thread(target=lambda: None)
        worker.start()
        worker.join()
        return "loud"


def _raises_loudly(x):
    raise _LoudError()


@pytest.mark.parametrize(
    "cheat",
    [_StartsAThreadWhenRead(), _raises_loudly],
    ids=["reading the function", "the error's message"],
)
def test_learner_code_the_runner_runs_besides_the_call_is_watched(cheat):
    outcome = one(cheat, forbidden=("softmax",))
    assert outcome["error"] == "ForbiddenUse", outcome


def test_a_mode_left_on_torch_s_stack_refuses_the_call():
    """The twenty-fourth red team left a dispatch mode entered by a cell: it
    swapped the results for the forbidden function's as they were encoded."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Swap(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    mode = Swap()
    mode.__enter__()
    try:
        outcome = one(lambda x: x, forbidden=("softmax",))
    finally:
        mode.__exit__(None, None, None)
    assert outcome["error"] == "ForbiddenUse", outcome


def test_what_is_freed_after_the_calls_is_watched():
    """The twenty-fourth red team hung a suspended generator on an input; its
    finally ran when the runner let the copy go, outside the watch."""

    def later():
        try:
            yield
        finally:
            torch.softmax(X, dim=-1)  # the forbidden function, when freed

    def cheat(x):
        x.keep = later()
        next(x.keep)
        return torch.zeros_like(x)

    outcome = one(cheat, forbidden=("softmax",))
    assert outcome["error"] == "ForbiddenUse", outcome


def test_the_runner_copies_the_inputs_itself():
    """The inputs are copied by the runner's own code, not by copy.deepcopy,
    whose tables and hooks a cell can reach (three red teams ran code of
    theirs there, before the watch, inputs in hand): the copy keeps what a
    deep copy keeps (types, strides, requires_grad, an object met twice
    copied once) and shares nothing that can change."""
    import numpy as np

    from transformer_course.exercises import runner

    assert "deepcopy" not in runner._call_cases.__code__.co_names
    x = torch.randn(3, 4).t()  # a transposed view: its strides kept
    weight = torch.nn.Parameter(torch.ones(2))
    leaf = torch.zeros(2, requires_grad=True)
    array = np.arange(3.0)
    case = (x, {"w": weight, "again": x}, [leaf, array], 3, "text", torch.float64)
    twin = runner._copied(case)
    assert twin[0].stride() == x.stride()
    assert torch.equal(twin[0], x)
    assert twin[0].data_ptr() != x.data_ptr()
    assert twin[1]["again"] is twin[0]  # met twice, copied once
    assert type(twin[1]["w"]) is torch.nn.Parameter
    assert twin[1]["w"].requires_grad
    assert twin[2][0].requires_grad
    assert twin[2][0].is_leaf
    twin[2][1][0] = 7.0
    assert array[0] == 0.0  # the array was copied
    assert twin[3:] == (3, "text", torch.float64)

    class Own:
        pass

    with pytest.raises(TypeError, match="a case holds a Own"):
        runner._copied((Own(),))


def test_the_result_is_read_before_the_watch_is_lifted():
    """The fiftieth red team's function returned a blank tensor that code of
    its own, run after the call where nothing watched, filled with
    torch.softmax before the runner read it. The runner reads the result in
    the same watched block as the call, before anything else runs: in its
    code, the call, then the reading, then the end of that block."""
    import inspect

    from transformer_course.exercises import runner

    source = inspect.getsource(runner._call_cases)
    call = source.index("value = function(*args)")
    read = source.index("to_plain(value, limits)")
    after = source.index("except NotImplementedError as err:")
    assert call < read < after
    assert source.count("to_plain(") == 1
