"""Reading a learner's cells before they run: what no honest answer needs.

An exercise that forbids a function (``softmax`` in chapter 2's, say) watches
every call the answer makes (:mod:`.runner`). Twenty red-team passes found ways
to make a call the watch cannot see: through the interpreter's own machinery
(``sys.setprofile``, ``gc``, frames and closures), through threads the watch
does not follow, or through C code that calls torch directly
(``map(torch.from_numpy, ...)``). Each was closed where it ran; this module
closes the doors they came through, by reading the cells instead of running
them.

:func:`screen` parses each cell (IPython syntax included) and reports the
first construct on a short list that no answer to the course's exercises
needs: importing a module outside :data:`ALLOWED_MODULES`, the interpreter's
internals (dunder and frame attributes, ``torch._C`` and other private names),
``exec``/``eval``/``compile``, ``getattr`` with a computed name, shell commands
and most magics. The notebook's check (:func:`.core.run_exercise`, reading
the kernel's input history) and the grader (:mod:`..grading.grade`, reading the
submitted cells) screen the same way, so an answer gets the same verdict in
both. Only exercises that forbid something are screened: elsewhere nothing is
hidden from the checks that a learner could gain by hiding.

The screen is a second line, not the only one: everything it refuses is also
watched as the answer runs, where the watch can see it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.machinery
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ALLOWED_MODULES", "Finding", "screen", "screen_module"]

#: Modules a screened notebook may import (and their submodules, except
#: private or listed ones, see :data:`DENIED_ATTRIBUTES`).
ALLOWED_MODULES = frozenset(
    {
        "__future__",
        "abc",
        "asyncio",
        "bisect",
        "cmath",
        "collections",
        "copy",
        "dataclasses",
        "decimal",
        "einops",
        "enum",
        "fractions",
        "functools",
        "heapq",
        "inspect",
        "itertools",
        "json",
        "math",
        "matplotlib",
        "numbers",
        "numpy",
        "pprint",
        "random",
        "re",
        "scipy",
        "sklearn",
        "statistics",
        "string",
        "textwrap",
        "time",
        "torch",
        "tqdm",
        "transformer_course",
        "typing",
        "unicodedata",
        "warnings",
    }
)

#: Attribute names refused on any object: doors to the interpreter (a module
#: reached as an attribute, ``torch.sys``), to code the watch cannot see run
#: (``torch.ops``, ``torch.compile``, ``torch.library``) and to numbers that
#: leave torch through C (``torch.from_numpy``).
DENIED_ATTRIBUTES = frozenset(
    {
        # modules that other modules hold as attributes
        "sys",
        "os",
        "gc",
        "ctypes",
        "threading",
        "importlib",
        "builtins",
        "subprocess",
        "multiprocessing",
        "signal",
        "types",
        "marshal",
        "pickle",
        "weakref",
        "operator",
        "socket",
        "resource",
        "atexit",
        "runpy",
        "concurrent",
        # other threads and processes (asyncio's; DataParallel runs a module's
        # copies in threads, found by tests/test_library_doors.py)
        "DataParallel",
        "parallel_apply",
        "to_thread",
        "run_in_executor",
        "create_subprocess_exec",
        "create_subprocess_shell",
        # writing a file that a later import would run (a module written with
        # %%writefile is screened as a cell and may be imported)
        "savetxt",
        "tofile",
        "save",
        "savez",
        "savez_compressed",
        "write_text",
        "write_bytes",
        "writelines",
        "memmap",
        "open_memmap",
        "savemat",
        "mmwrite",
        # ... and libraries' helpers that open files by name, or unpickle (the
        # twenty-sixth red team rewrote a module with matplotlib's open_file_cm)
        "open_file_cm",
        "to_filehandle",
        "DataSource",
        "dump",
        "read_array",
        "write_array",
        "get_data_home",
        "register_package",
        # another module's globals written: enum.global_enum updates the
        # namespace of the module an enum names (module="copy": the
        # forty-eighth red team rebound copy._keep_alive, which deepcopy of
        # the checks' inputs calls before the watch starts)
        "global_enum",
        # a class whose annotations hold any text as a key: TypedDict's
        # functional form takes any string, and its subclasses inherit them;
        # dataclasses then pastes each key into the code it runs (the
        # forty-ninth red team ran a whole module so)
        "TypedDict",
        # copyreg's table of how to copy a type (copy.dispatch_table): a
        # function put there runs when the checks copy their inputs, before
        # the watch starts
        "dispatch_table",
        # setattr with names as strings: functools copies attributes by name
        # onto any object (the thirty-ninth red team set a tensor's
        # __deepcopy__, and a class attribute of torch.Tensor, so)
        "update_wrapper",
        "wraps",
        # torch's doors to code that runs outside the watched calls
        "ops",
        "library",
        "compile",
        "jit",
        "fx",
        "overrides",
        "hub",
        "export",
        "cpp_extension",
        "load",
        # names resolved from text (string.Formatter().get_field("0.__globals__"))
        "Formatter",
        "get_field",
        "get_value",
        # classes walked to reach others (TMonitor.mro()[1] is threading's
        # Thread), and threads by name (the twenty-third red team)
        "mro",
        # torch's modes, which see every operation (the twenty-fourth red team
        # left one on the stack), and shells and workers in allowed libraries
        "TorchDispatchMode",
        "TorchFunctionMode",
        "collect_env",
        "f2py",
        "distutils",
        "animation",
        "telegram",
        "discord",
        "slack",
        "TelegramIO",
        "DiscordIO",
        "SlackIO",
        "TMonitor",
        "Thread",
        "Timer",
        "IPyAutocall",
        # workers an allowed library starts, and text it runs as code (the
        # twenty-second red team)
        "MonoWorker",
        "utils_worker",
        "Parallel",
        "parallel_backend",
        "parallel_config",
        "DataLoader",
        "benchmark",
        "get_type_hints",
        "ForwardRef",
        "singledispatch",
        "singledispatchmethod",
        "measure",
        "share_memory_",
        "rpc",
        "package",
        "distributed",
        # classes made with any namespace (a __torch_function__ in a dict)
        "make_dataclass",
        "ABCMeta",
        "new_class",
        "get_ipython",
        # numbers that leave torch through C
        "from_numpy",
        "frombuffer",
        "from_dlpack",
        "to_dlpack",
        "data_ptr",
        "storage",
        "untyped_storage",
        "ctypeslib",
        # the interpreter's hooks
        "setprofile",
        "settrace",
        "getprofile",
        "gettrace",
        "setswitchinterval",
        "addaudithook",
    }
)

#: Modules of which only the listed names may be used (``inspect.getsource``,
#: not ``inspect.currentframe``), however the module is reached: imported,
#: bound to another name, or reached as another module's attribute (the
#: chain is followed through the real modules, see :func:`_reached_outside`).
#: The wide helper modules of the allowed libraries hold doors beside the few
#: names a learner needs (numpy.testing's rundocs runs a module's docstrings
#: as code, its run_threaded starts threads; scikit-learn's fetchers unpickle
#: a cache a learner can write; torch.utils.data's argument_validation
#: evaluates annotations written as text; tqdm's main writes files):
#: tests/test_screen.py walks every public function of the allowed modules
#: for such doors and fails on one that is neither refused nor reviewed.
RESTRICTED_MODULES = {
    "inspect": frozenset(
        {
            "getsource",
            "getsourcelines",
            "getdoc",
            "getfile",
            "getcomments",
            "signature",
            "Signature",
            "Parameter",
            "cleandoc",
            "isfunction",
            "ismethod",
            "isclass",
            "ismodule",
            "isbuiltin",
            "isroutine",
        }
    ),
    "numpy.testing": frozenset(
        {
            *("assert_", "assert_allclose", "assert_almost_equal"),
            *("assert_approx_equal", "assert_array_almost_equal"),
            *("assert_array_almost_equal_nulp", "assert_array_equal"),
            *("assert_array_less", "assert_array_max_ulp", "assert_equal"),
            *("assert_raises", "assert_raises_regex", "assert_string_equal"),
            *("assert_warns", "assert_no_warnings"),
        }
    ),
    "torch.testing": frozenset({"assert_close", "assert_allclose", "make_tensor"}),
    "torch.utils": frozenset({"data"}),
    "torch.utils.data": frozenset(
        {
            *("Dataset", "TensorDataset", "IterableDataset", "Subset"),
            *("ConcatDataset", "ChainDataset", "StackDataset", "random_split"),
            *("Sampler", "RandomSampler", "SequentialSampler", "BatchSampler"),
            *("SubsetRandomSampler", "WeightedRandomSampler", "default_collate"),
            *("default_convert", "get_worker_info"),
        }
    ),
    "sklearn.datasets": frozenset(
        {
            *("load_digits", "load_iris", "load_wine", "load_breast_cancer"),
            *("load_diabetes", "make_blobs", "make_circles", "make_classification"),
            *("make_moons", "make_regression", "make_swiss_roll", "make_s_curve"),
            *("make_gaussian_quantiles", "make_friedman1", "make_friedman2"),
            *("make_friedman3", "make_low_rank_matrix", "make_spd_matrix"),
            *("make_sparse_spd_matrix", "make_hastie_10_2", "make_biclusters"),
            *("make_multilabel_classification", "make_checkerboard"),
            *("make_sparse_uncorrelated", "make_sparse_coded_signal"),
        }
    ),
    "tqdm": frozenset(
        {"tqdm", "trange", "tnrange", "tqdm_notebook", "auto", "notebook"}
    ),
    # not warnings.filters, whose entries every warning compares, where the
    # runner's own warnings are compared too (the fiftieth red team)
    "warnings": frozenset(
        {"warn", "filterwarnings", "simplefilter", "catch_warnings", "resetwarnings"}
    ),
    # not CUDAPluggableAllocator, which loads a native library by its path
    "torch.cuda": frozenset(
        {
            *("is_available", "device_count", "current_device", "get_device_name"),
            *("get_device_properties", "get_device_capability", "synchronize"),
            *("manual_seed", "manual_seed_all", "seed", "get_rng_state"),
            *("set_rng_state", "set_device", "device", "empty_cache"),
            *("memory_allocated", "max_memory_allocated", "memory_reserved"),
            *("max_memory_reserved", "reset_peak_memory_stats", "memory_summary"),
            *("is_bf16_supported", "Event", "Stream", "amp"),
        }
    ),
}

#: Objects that run code the screen never reads, refused wherever an allowed
#: module holds them, by their class's name: a test runner (``numpy.test``,
#: ``scipy.linalg.test`` run pytest, which imports plugins by name and runs
#: a module's docstrings as doctests).
DOOR_CLASSES = frozenset({"PytestTester"})

#: Modules that, bound to a name by someone else's code (the grader's setup,
#: a library), are refused as bare names too.
DENIED_MODULE_NAMES = frozenset(
    {
        "sys",
        "os",
        "posix",
        "gc",
        "ctypes",
        "_thread",
        "threading",
        "importlib",
        "builtins",
        "subprocess",
        "multiprocessing",
        "signal",
        "types",
        "marshal",
        "pickle",
        "weakref",
        "operator",
    }
)

#: Frame, traceback, generator and code attributes: the way to another
#: function's variables.
FRAME_ATTRIBUTES = frozenset(
    {
        "f_back",
        "f_builtins",
        "f_code",
        "f_globals",
        "f_locals",
        "f_trace",
        "tb_frame",
        "tb_next",
        "gi_frame",
        "gi_code",
        "cr_frame",
        "cr_code",
        "ag_frame",
        "ag_code",
        "co_code",
        "co_consts",
    }
)

#: Dunder attributes an answer may use (``super().__init__()``,
#: ``type(x).__name__``); every other one is refused.
ALLOWED_DUNDERS = frozenset(
    {
        "__init__",
        "__name__",
        "__qualname__",
        "__doc__",
        "__version__",
        "__class__",  # read only: assigning it is refused
        "__len__",
        "__iter__",
        "__next__",
        "__getitem__",
        "__contains__",
        "__repr__",
        "__str__",
        "__call__",
    }
)

#: Special methods an answer may not define: they run when the checks touch
#: the answer's objects (comparing, copying, deleting), outside the call.
DENIED_DEFINITIONS = frozenset(
    {
        "__torch_function__",
        "__torch_dispatch__",
        "__getattribute__",
        "__getattr__",
        "__del__",
        "__init_subclass__",
        "__set_name__",
        "__class_getitem__",
        "__reduce__",
        "__reduce_ex__",
        "__deepcopy__",
        "__copy__",
        "__getstate__",
        "__setstate__",
        "__instancecheck__",
        "__subclasscheck__",
        "__array__",
        "__array_ufunc__",
        "__array_function__",
        "__dlpack__",
    }
)

#: Keyword arguments that start workers or evaluate text (DataLoader's
#: num_workers, scikit-learn's n_jobs, inspect.signature's eval_str).
DENIED_KEYWORDS = frozenset(
    # data_home: where scikit-learn's loaders read (and unpickle) their caches
    {"num_workers", "workers", "n_jobs", "eval_str", "allow_pickle", "data_home"}
)

#: Built-in names refused wherever they appear.
DENIED_NAMES = frozenset(
    {
        "exec",
        "eval",
        "compile",
        "__import__",
        "globals",
        "locals",
        "vars",
        "breakpoint",
        "memoryview",
        "open",
        "get_ipython",
        "__builtins__",
        "__loader__",
        "__spec__",
    }
)

#: Built-ins that reach an attribute by name: allowed only when called
#: directly with the name written out (``getattr(module, "weight")``).
BY_NAME = frozenset({"getattr", "setattr", "delattr", "hasattr"})

#: Magics an answer may use (timing, plots, reloading one's modules, writing a
#: file; the setup cell's ``%pip install`` of the course on Colab).
ALLOWED_LINE_MAGICS = frozenset(
    {
        "time",
        "timeit",
        "matplotlib",
        "pip",
        "autoreload",
        "load_ext",
        "who",
        "whos",
        "store",
        "config",  # only InlineBackend's settings (see _magic_refused)
        "prun",
        "pinfo",  # obj?
        "pinfo2",  # obj??
        "precision",
        "xmode",
    }
)
#: ``%timeit``'s options that take a value (``-s``, code run untimed, is refused).
_TIMEIT_VALUED = frozenset({"-n", "-r", "-p"})
#: ``from M import ...`` allowed for these submodules of modules not allowed.
ALLOWED_FROM = frozenset({"IPython.display"})
#: The submodules of :data:`ALLOWED_MODULES` a screened notebook may import
#: or reach (``torch.nn.functional``, ``np.linalg``); any other submodule is
#: refused, as a module outside the list is. The libraries hold hundreds of
#: doors under public names in their other submodules (the forty-fifth red
#: team ran exec through sklearn.utils.discovery.import_module,
#: torch.autograd.profiler_util.attrgetter, scipy.conftest.pytest and
#: matplotlib.sphinxext's doctest), which no list of refused names can keep
#: up with: a list of what is allowed ends that, as it did for operators.
ALLOWED_SUBMODULES = frozenset(
    {
        *("torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.utils"),
        *("torch.nn.parameter", "torch.linalg", "torch.fft", "torch.special"),
        *("torch.optim", "torch.optim.lr_scheduler", "torch.utils", "torch.utils.data"),
        *("torch.distributions", "torch.testing", "torch.autograd", "torch.random"),
        *("torch.cuda", "torch.mps", "torch.backends", "torch.backends.mps"),
        *("torch.backends.cudnn", "torch.backends.cuda", "torch.types"),
        *("numpy.linalg", "numpy.random", "numpy.fft", "numpy.testing"),
        *("scipy.special", "scipy.linalg", "scipy.stats", "scipy.optimize"),
        *("sklearn.datasets", "sklearn.model_selection", "sklearn.neighbors"),
        *("sklearn.svm", "sklearn.linear_model", "sklearn.metrics"),
        *("sklearn.preprocessing", "sklearn.decomposition"),
        *("matplotlib.pyplot", "matplotlib.cm", "matplotlib.colors"),
        *("matplotlib.ticker", "matplotlib.patches", "matplotlib.gridspec"),
        *("tqdm.auto", "tqdm.notebook", "einops.layers", "einops.layers.torch"),
        "collections.abc",
    }
)


@functools.lru_cache(maxsize=4096)
def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package that Python would import,
    found on disk without importing anything (a package's folder, a module's
    file, an extension): ``sklearn.utils`` is one, ``torch.Tensor`` is not."""
    import importlib.util
    import os

    parts = dotted.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    locations = list(spec.submodule_search_locations or [])
    for part in parts[1:]:
        found = None
        for location in locations:
            base = os.path.join(location, part)
            if os.path.isdir(base):  # a package (or a namespace package)
                found = [base]
                break
            if any(os.path.isfile(base + end) for end in _MODULE_FILE_ENDINGS):
                found = []
                break
        if found is None:
            return False
        locations = found
    return True


_MODULE_FILE_ENDINGS = tuple(importlib.machinery.all_suffixes())


def _module_allowed(name: str) -> bool:
    top = name.split(".")[0]
    return top in ALLOWED_MODULES and (
        name == top or name in ALLOWED_SUBMODULES or top == "transformer_course"
    )


@functools.lru_cache(maxsize=4096)
def _reached_outside(dotted: str) -> str | None:
    """The first module outside the allowed lists that the chain ``dotted``
    (a module, then attribute names) reaches as Python resolves it, or the
    first name it reads that :data:`RESTRICTED_MODULES` does not list or
    that holds one of :data:`DOOR_CLASSES`; None if there is none.
    The modules are the real ones: imported here (library code only, no
    learner's), each step read with getattr while it is a module, so that an
    alias a library holds (``torch.torch``, ``F.torch``, ``plt.np``) leads
    where it really leads (the forty-sixth red team reached
    torch.utils.data.datapipes' pickle through torch.torch, past a check of
    the path as written). A step that is not a module ends the walk."""
    import types

    parts = dotted.split(".")
    if parts[0] not in ALLOWED_MODULES or parts[0] == "transformer_course":
        return None
    try:
        module = importlib.import_module(parts[0])
    except ModuleNotFoundError:
        return None  # not installed: the learner's import fails as well
    except Exception:
        return parts[0]
    for part in parts[1:]:
        if _attribute_refused(part):
            return None  # refused by name, elsewhere
        names = RESTRICTED_MODULES.get(module.__name__)
        if names is not None and part not in names:
            return f"{module.__name__}.{part}"
        try:
            value = getattr(module, part)
        except Exception:  # a submodule not imported yet (import a.b imports it)
            name = f"{module.__name__}.{part}"
            if not _is_module(name):
                return None
            if not _module_allowed(name):
                return name
            try:
                value = importlib.import_module(name)
            except Exception:
                return name
        if type(value).__name__ in DOOR_CLASSES:
            return f"{module.__name__}.{part}"
        if not isinstance(value, types.ModuleType):
            return None
        if not _module_allowed(value.__name__):
            return value.__name__
        module = value
    return None


def _submodule_refused(dotted: str) -> str | None:
    """The first submodule in ``dotted`` (``sklearn.utils`` of
    ``sklearn.utils.discovery.import_module``) outside
    :data:`ALLOWED_SUBMODULES`, or None."""
    parts = dotted.split(".")
    if parts[0] not in ALLOWED_MODULES:
        return None  # refused, or the learner's own, elsewhere
    if parts[0] == "transformer_course":
        return None  # hidden when grading; a use of it fails the check by name
    for end in range(2, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if prefix not in ALLOWED_SUBMODULES and _is_module(prefix):
            return prefix
    return None


#: The extensions ``%load_ext`` may load.
ALLOWED_EXTENSIONS = frozenset({"autoreload"})
ALLOWED_CELL_MAGICS = frozenset({"time", "timeit", "prun", "capture", "writefile"})
#: Magics whose line IPython passes on as it is written (``@no_var_expand``):
#: every other one has ``{...}`` and ``$name`` in it evaluated first.
_NOT_EXPANDED = frozenset({"time", "timeit", "prun"})
#: The shell commands allowed (``!pip install tqdm``, a Colab habit).
_PIP_INSTALL = re.compile(
    r"\s*pip install(\s+-q|\s+--quiet)?"
    r"(\s+(?:[A-Za-z0-9][\w.\-\[\],=<>]*|git\+https://[\w.\-/@]+))+\s*"
)
#: ``%config`` of the inline figures only.
_INLINE_CONFIG = re.compile(r"\s*InlineBackend\.\w+\s*=\s*(['\"])[\w\-]+\1\s*")


@dataclass(frozen=True)
class Finding:
    """The first refused construct: in which cell, on which line, and what."""

    cell: int  # the cell's number as its caller counts them
    line: int  # 1-based, in the cell as written
    what: str  # the construct, as a learner would recognise it

    def message(self, cell_word: str = "cell") -> str:
        """``cell_word`` "In" names the cell as the notebook numbers it, In [7]."""
        where = f"In [{self.cell}]" if cell_word == "In" else f"{cell_word} {self.cell}"
        return (
            f"{self.what} ({where}, line {self.line}): an exercise that forbids a "
            "function refuses, anywhere in its notebook, what could hide a call "
            "from its checks; remove it and restart the kernel"
        )


def screen(cells: Iterable[tuple[int, str]]) -> Finding | None:
    """The first refused construct in ``cells`` ((number, source) pairs, in the
    order they run), or None. A cell that does not parse is skipped: it does
    not run either."""
    cells = list(cells)
    for number, source in cells:  # before any transform: IPython's is slow
        too_many = _too_many_magics(source)
        if too_many:
            return Finding(number, 1, too_many)
    trees = [tree for _, source in cells if (tree := _parse(_python(source)))]
    bindings = [pair for tree in trees for pair in _bindings(tree)]  # read once
    known = _Known(
        modules=frozenset(
            m.group(1) for _, source in cells if (m := _WRITES_MODULE.match(source))
        ),
        imported=_imported_names(trees, bindings),
        module_paths=_module_paths(trees, bindings),
    )
    for number, source in cells:
        found = _screen_source(source, 0, known)
        if found is None and _automagic(source) is not None:
            # a one-line cell that is not Python: IPython runs it as a magic
            # when its first word names one ("automagic", on by default)
            found = _screen_source(_automagic(source), 0, known, strict=True)
        elif found is None and _one_line_not_python(source):
            # ... or as a call: IPython's prefilter makes "f x" f(x) for an
            # autocall object (the twenty-third red team ran text unscreened)
            found = (1, "a one-line cell that is not Python, which IPython may run")
        if found is not None:
            line, what = found
            return Finding(number, line, what)
    return None


def screen_module(source: str) -> Finding | None:
    """The first refused construct in a module's ``source``, read as Python
    reads a file it imports (no IPython syntax), or None. Unlike a cell, a
    module that does not parse is refused: what Python would make of it is
    not what the screen read (IPython's prompt stripping made a module parse
    for the screen that Python then ran otherwise: the twenty-seventh red team).
    Used by the grader's runner on each module a screened job imports from a
    folder it can write."""
    flags = ast.PyCF_ONLY_AST
    try:
        tree = compile(source, "<module>", "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError) as err:
        return Finding(
            0, getattr(err, "lineno", None) or 1, "a module that does not parse"
        )
    except (RecursionError, MemoryError):
        return Finding(0, 1, "a module too deep to read")
    known = _Known(
        modules=frozenset(),
        imported=_imported_names([tree]),
        module_paths=_module_paths([tree]),
    )
    found = _Reader(0, known).first(tree)
    return None if found is None else Finding(0, found[0], found[1])


#: A cell with more magic lines than this, or magics in a cell longer than
#: :data:`MAGIC_CELL_CHARACTERS`, is refused unread: IPython reads a cell
#: again for each magic in it, and a cell of hundreds of magics kept the
#: grader busy for minutes (the twenty-second red team).
MAX_MAGICS = 40
MAGIC_CELL_CHARACTERS = 20_000


def _magic_lines(source: str) -> int:
    """How many lines of ``source`` IPython rewrites as a magic, an escape
    (%magic, !shell, ?help, /call, ,quote, ;quote, at the start of a logical
    line), a help request ending in ? or an assignment of one (x = !ls,
    x = %time f()): found as IPython finds them, in the tokens of each logical
    line, so that a continuation line of an expression starting with / (as a
    formatter wraps a division) or a comment ending in ? is not one (the
    forty-fourth red team). IPython rewrites such lines one at a time,
    tokenising the whole cell again for each: the forty-second and forty-third
    red teams stalled the grader with hundreds of them. One tokenising here,
    in time linear in the cell."""
    try:
        from IPython.core import inputtransformer2 as it
    except ImportError:  # pragma: no cover - IPython is in requirements.txt
        return sum(line.lstrip().startswith(("%", "!")) for line in source.splitlines())
    escapes = it.ESCAPE_SINGLES | it.ESCAPE_DOUBLES
    count = 0
    for line in it.make_tokens_by_line(source.splitlines(keepends=True)):
        first = 0
        while first < len(line) and line[first].type in (
            tokenize.INDENT,
            tokenize.DEDENT,
        ):
            first += 1
        if first == len(line):
            continue
        assign = it._find_assign_op(line)
        if (
            line[first].string in escapes
            or (len(line) > 2 and line[-2].string in ("?", "??"))
            or (
                assign is not None
                and assign + 1 < len(line)
                and line[assign + 1].string in ("%", "!", "!!")
            )
        ):
            count += 1
    return count


def _too_many_magics(source: str) -> str:
    magics = _magic_lines(source)
    if magics > MAX_MAGICS:
        return f"a cell of {magics} magics (at most {MAX_MAGICS})"
    if magics and len(source) > MAGIC_CELL_CHARACTERS:
        return f"magics in a cell of {len(source):,} characters"
    return ""


def _automagic(source: str) -> str | None:
    """The line magic IPython runs for a one-line cell that is not Python and
    starts with a name, or None."""
    text = source.strip()
    word = re.match(r"([A-Za-z_]\w*)(\s|$)", text)
    if "\n" in text or word is None or word.group(1) not in _magic_names():
        return None
    if _parse(_python(source)) is not None:
        return None
    return "%" + text


def _one_line_not_python(source: str) -> bool:
    text = source.strip()
    return bool(text) and "\n" not in text and _parse(_python(source)) is None


@functools.lru_cache(maxsize=1)
def _magic_names() -> frozenset[str]:
    """IPython's line magics and shell aliases, by name: a one-line cell that
    starts with one of them runs it (automagic)."""
    names = {  # an extension's, the kernel's, and the shell aliases
        *("store", "autoreload", "aimport", "clear", "less", "more", "man"),
        *("connect_info", "qtconsole", "autosave", "cat", "cp", "ls", "mkdir"),
        *("mv", "rm", "rmdir", "ldir", "lf", "lk", "ll", "lx"),
    }
    try:
        import inspect

        import IPython.core.magics as magics
    except ImportError:  # pragma: no cover - IPython is in requirements.txt
        return frozenset(names)
    for _, kind in inspect.getmembers(magics, inspect.isclass):
        table = getattr(kind, "magics", None)
        if isinstance(table, dict):
            names |= set(table.get("line", {}))
    return frozenset(names)


# as many as a notebook the grader reads may hold (each read once per notebook,
# not once per exercise: the forty-third red team overflowed a smaller cache)
@functools.lru_cache(maxsize=8192)
def _python(source: str) -> str:
    """A cell as the Python IPython runs (magics become ``get_ipython()``
    calls); the source itself where IPython is not installed."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython is in requirements.txt
        return source
    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # not IPython either: left for ast to refuse
        return source


def _parse(source: str) -> ast.Module | None:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        return compile(source, "<cell>", "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    except (RecursionError, MemoryError):  # too deep for Python to run either
        return None


#: ``%%writefile helpers.py``: a module of the learner's own, screened as a
#: cell, which later cells may import.
_WRITES_MODULE = re.compile(
    r"\s*%%writefile\s+(?:-a\s+|--append\s+)?([A-Za-z_]\w*)\.py\s*\n"
)
#: What a file may not be named: one Python would import or run, or one in
#: another folder.
_RUNNABLE_SUFFIXES = (*importlib.machinery.all_suffixes(), ".pth", ".pyw")


def _screen_source(
    source: str,
    depth: int,
    known: _Known,
    strict: bool = False,
) -> tuple[int, str] | None:
    """``strict``: text a magic runs, which must read as Python (a cell that
    does not is skipped: IPython cannot run it either)."""
    if depth > 4:  # magics inside magics inside magics
        return 1, "nested cell magics"
    tree = _parse(_python(source))
    if tree is None:
        return (1, "code in a magic that does not read as Python") if strict else None
    return _Reader(depth, known).first(tree)


def _timeit_code(line: str) -> tuple[str | None, str | None]:
    """The statement of a ``%timeit`` line, its options taken off, or a refusal
    (``-s``: setup code; an option the screen does not know)."""
    rest = line
    while True:
        match = re.match(r"\s*(-\S+)(?:\s+|$)", rest)
        if match is None:
            return rest, None
        option, rest = match.group(1), rest[match.end() :]
        if not re.fullmatch(r"-[nrptcqo0-9.]+", option):
            return None, f"%timeit {option}"
        if option in _TIMEIT_VALUED:  # its value is the next word
            value = re.match(r"\s*(\S+)(?:\s+|$)", rest)
            if value is None or not re.fullmatch(r"[0-9.]+", value.group(1)):
                return None, f"%timeit {option}"
            rest = rest[value.end() :]


@dataclass(frozen=True)
class _Known:
    """What the screened cells themselves define: modules written with
    %%writefile, names bound by imports, and the modules those names hold."""

    modules: frozenset[str]
    imported: frozenset[str] = frozenset()  # names bound by an import
    # name -> the dotted path it stands for (np -> numpy, nn -> torch.nn)
    module_paths: dict[str, str] = dataclasses.field(default_factory=dict)


#: Modules' usual names: attributes of them may not be assigned (a method set
#: on torch.Tensor runs wherever a tensor is used, watched or not).
MODULE_NAMES = frozenset(
    {"torch", "nn", "F", "np", "numpy", "math", "tc", "plt", "scipy", "sklearn"}
)


def _imported_names(
    trees: list[ast.AST], bindings: list | None = None
) -> frozenset[str]:
    """The names bound by an import, and the names bound to them again
    (``T = torch.Tensor``, ``j = json``, ``for T in [torch.Tensor]``, a default
    ``def f(T=torch.Tensor)``): a library's objects under another name, whose
    attributes may not be assigned either (the twenty-sixth red team set
    ``T.numpy``). One pass over the bindings, then a walk along them: a chain
    of thousands of aliases costs a moment, not minutes (the twenty-seventh
    red team's, searched again for each new name, took 35 s for 2,000)."""
    names = set(MODULE_NAMES)
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    names.add((alias.asname or alias.name).split(".")[0])
    onward: dict[str, set[str]] = {}  # name -> the names bound to its objects
    if bindings is None:
        bindings = [pair for tree in trees for pair in _bindings(tree)]
    for value, target in bindings:
        for source in _referred(value):
            onward.setdefault(source, set()).add(target)
    todo = [*names, _TYPE_CALL]
    while todo:
        for target in onward.get(todo.pop(), ()):
            if target not in names:
                names.add(target)
                todo.append(target)
    return frozenset(names)


def _chain(node: ast.AST) -> list[str] | None:
    """``["torch", "nn", "functional"]`` for the expression torch.nn.functional
    (names and attributes only), else None."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def _module_paths(trees: list[ast.AST], bindings: list | None = None) -> dict[str, str]:
    """Each name an import binds, with the dotted path it stands for
    (``import numpy as np``: np -> numpy; ``from torch import nn``: nn ->
    torch.nn), and each name bound to such a path again (``lib = torch.nn``,
    a default ``def f(lib=np)``)."""
    paths: dict[str, str] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        paths[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        paths[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    paths[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    onward: dict[str, list[tuple[list[str], str]]] = {}  # root -> its bindings
    if bindings is None:
        bindings = [pair for tree in trees for pair in _bindings(tree)]
    for value, target in bindings:
        chain = _chain(value)
        if chain is not None:
            onward.setdefault(chain[0], []).append((chain, target))
    todo = list(paths)
    while todo:  # along the bindings once: a chain of thousands of aliases is
        # followed in linear time (the twenty-seventh red team's took 35 s)
        for chain, target in onward.get(todo.pop(), ()):
            if target not in paths:
                paths[target] = ".".join([paths[chain[0]], *chain[1:]])
                todo.append(target)
    return paths


def _bindings(tree: ast.AST):
    """(value, name) for each name a statement binds from a value."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and node.value is not None:
                        yield node.value, name.id
        elif isinstance(node, ast.NamedExpr):
            yield node.value, node.target.id
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            for name in ast.walk(node.target):
                if isinstance(name, ast.Name):
                    yield node.iter, name.id
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            for name in ast.walk(node.optional_vars):
                if isinstance(name, ast.Name):
                    yield node.context_expr, name.id
        elif isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            pairs = list(zip(positional[::-1], node.defaults[::-1], strict=False))
            pairs += [
                (a, d)
                for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True)
                if d is not None
            ]
            for argument, default in pairs:
                yield default, argument.arg


#: Stands for ``type(...)``: what it returns is a class, a library's maybe.
_TYPE_CALL = "type()"


def _referred(value: ast.AST) -> set[str]:
    """The names whose objects ``value`` is itself, not something computed from
    them: the root of a chain of attributes and subscripts, the names in a
    display (list, tuple, set, dict) or a conditional, and :data:`_TYPE_CALL`
    for ``type(...)``."""
    if isinstance(value, ast.Attribute | ast.Subscript | ast.Starred):
        return _referred(value.value)
    if isinstance(value, ast.Name):
        return {value.id}
    if isinstance(value, ast.List | ast.Tuple | ast.Set):
        return set().union(*(_referred(v) for v in value.elts))
    if isinstance(value, ast.Dict):
        return set().union(*(_referred(v) for v in value.values if v is not None))
    if isinstance(value, ast.IfExp):
        return _referred(value.body) | _referred(value.orelse)
    if isinstance(value, ast.BoolOp):
        return set().union(*(_referred(v) for v in value.values))
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "type"
    ):
        return {_TYPE_CALL}
    return set()


def _root(node: ast.AST) -> str:
    """The name an attribute chain starts from (``torch`` of torch.Tensor.x)."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else ""


def _module_refused(dotted: str, local: frozenset[str] = frozenset()) -> str | None:
    parts = dotted.split(".")
    if parts[0] in local and len(parts) == 1:
        return None
    if parts[0] not in ALLOWED_MODULES:
        return f"import {dotted}"
    for part in parts[1:]:
        if _attribute_refused(part):
            return f"import {dotted}"
    if _submodule_refused(dotted):
        return f"import {dotted}"
    return None


#: Special names an answer may bind (a class's own ``__slots__``, a module's
#: ``__all__``); any other is a special method or attribute set by assignment.
BINDABLE_DUNDERS = frozenset({"__all__", "__slots__", "__doc__"})


def _dunder_bound(name: str) -> bool:
    """Whether binding ``name`` sets a special name (``__dict__ = {...}`` or
    ``__deepcopy__ = reader`` in a class body), not :data:`BINDABLE_DUNDERS`."""
    return (
        name.startswith("__")
        and name.endswith("__")
        and len(name) > 4
        and name not in BINDABLE_DUNDERS
    )


def _plain_decorator(node: ast.expr) -> bool:
    """Whether a decorator of a special method is one that keeps it a method
    the learner wrote (``staticmethod``, ``classmethod``)."""
    return isinstance(node, ast.Name) and node.id in ("staticmethod", "classmethod")


#: Modules outside :data:`ALLOWED_MODULES` that allowed modules hold under
#: public names (``enum.bltns`` is builtins, ``torch.cuda.tunable.mp``
#: multiprocessing, ``json.codecs.open`` writes files, ``torch.inspect`` is all
#: of inspect): refused as attributes of anything, as their imports are (the
#: forty-fourth red team ran exec through enum.bltns). tests/test_screen.py
#: walks the installed libraries and checks that every such path is refused.
MODULE_ALIASES = frozenset(
    {
        *("bltns", "inspect", "codecs", "linecache", "mp", "python_multiprocessing"),
        *("shutil", "tempfile", "tarfile", "gzip", "glob", "fnmatch", "pathlib"),
        *("io", "PIL", "Image", "base64", "hashlib", "uuid", "urllib", "ssl"),
        *("selectors", "shlex", "sysconfig", "pkgutil", "plistlib", "joblib"),
        *("contextlib", "contextvars", "copyreg", "reprlib", "traceback", "logging"),
        *("tokenize", "dis", "ast", "difflib", "dateutil", "fontTools", "errno"),
        *("nw", "queue", "stat", "struct", "locale", "platform", "keyword"),
        "ipywidgets",  # tqdm.notebook's
        # functions of refused modules that allowed ones hold: attributes by
        # name (operator's, dunders included) and files (pathlib's Path, as
        # matplotlib.Path)
        *("attrgetter", "methodcaller", "Path", "NUMPY_ROOT"),
        # text run as code, processes and native code under other names (the
        # forty-sixth red team): numpy.testing's runstring is exec;
        # asyncio's loop starts processes; torch.classes loads a library
        *("runstring", "subprocess_exec", "subprocess_shell", "load_library"),
    }
)
#: Modules held under public names that are left alone: names an honest
#: answer may use for its own attributes (``np.array``, ``self.token``,
#: ``model.features``), of modules that open no door (array's tofile is
#: refused by name; PIL.features, which matplotlib's Agg backend holds, only
#: reports what PIL was built with).
HARMLESS_MODULE_ALIASES = frozenset({"array", "token", "datetime", "features"})


#: Refused names that are refused as attributes too (exec or open reached
#: through a module); not eval, which is every model's eval().
DENIED_AS_ATTRIBUTES = frozenset(
    {"exec", "open", "globals", "locals", "vars", "breakpoint", "get_ipython"}
)


def _attribute_refused(name: str) -> bool:
    if name.startswith("__") and name.endswith("__"):
        return name not in ALLOWED_DUNDERS
    if name.startswith("_"):
        return True
    return (
        name in DENIED_ATTRIBUTES
        or name in FRAME_ATTRIBUTES
        or name in MODULE_ALIASES
        or name in DENIED_AS_ATTRIBUTES
    )


class _Reader:
    """Walks one cell's syntax tree; :meth:`first` returns the first refusal."""

    def __init__(self, depth: int, known: _Known):
        self.depth = depth
        self.known = known
        self.local = known.modules
        self.parents: dict[int, ast.AST] = {}
        self._scopes: dict[int, tuple[frozenset, frozenset]] = {}

    def _own_private(self, node: ast.Attribute) -> bool:
        """``self._cache`` in a method whose first parameter is ``self`` (or
        ``cls``), without a default: a private attribute of the learner's own
        object. The name alone is not enough (``import collections as self``
        then ``self._sys``: the twenty-fifth red team)."""
        name = node.attr
        if name.startswith("__") and name.endswith("__"):
            return False
        if not (
            name.startswith("_")
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            return False
        scope = self.parents.get(id(node))
        while scope is not None and not isinstance(
            scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        ):
            scope = self.parents.get(id(scope))
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        if not isinstance(self.parents.get(id(scope)), ast.ClassDef):
            return False  # a method, directly in its class
        arguments = scope.args
        first = (arguments.posonlyargs + arguments.args)[:1]
        defaults = len(arguments.defaults)
        return (
            bool(first)
            and first[0].arg == node.value.id
            and defaults < len(arguments.posonlyargs + arguments.args)
        )

    def _local(self, node: ast.Name) -> bool:
        """Whether ``node`` reads a local variable of the function around it (a
        parameter, or a name the function assigns, declared neither global nor
        nonlocal): the learner's own ``signal``, not a module bound by others
        (refused by the twenty-ninth red team's honest answer)."""
        scope = self.parents.get(id(node))
        while scope is not None and not isinstance(
            scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        ):
            scope = self.parents.get(id(scope))
        if scope is None:
            return False
        arguments = scope.args
        parameters = {
            a.arg
            for a in [
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                *filter(None, [arguments.vararg, arguments.kwarg]),
            ]
        }
        if node.id in parameters:
            return True
        assigned, declared = self._scope_names(scope)
        return node.id in assigned and node.id not in declared

    def _scope_names(self, scope: ast.AST) -> tuple[frozenset, frozenset]:
        """The names a function assigns, and those it declares global or
        nonlocal (nested functions and classes left out): walked once per
        function, not once per name read in it (walking the body for every
        read took quadratic time: 4,000 reads, 27 s; the forty-third red team)."""
        known = self._scopes.get(id(scope))
        if known is not None:
            return known
        body = scope.body if isinstance(scope.body, list) else [scope.body]
        assigned, declared = set(), set()
        todo = list(body)
        while todo:
            inner = todo.pop()
            if isinstance(inner, ast.Global | ast.Nonlocal):
                declared.update(inner.names)
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                assigned.add(inner.id)
            if not isinstance(
                inner,
                ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef,
            ):
                todo.extend(ast.iter_child_nodes(inner))
        known = (frozenset(assigned), frozenset(declared))
        self._scopes[id(scope)] = known
        return known

    def _module_refused_here(self, node: ast.Name | ast.Attribute) -> str | None:
        """For a chain rooted at an imported module (``sklearn.utils``): a
        submodule outside :data:`ALLOWED_SUBMODULES` in it, or a module used
        as a value rather than through its attributes (``f(sklearn)``,
        ``[torch.nn]``), which would carry it past this check; binding it to
        another name (``nn = torch.nn``) is followed instead."""
        chain = _chain(node)
        if chain is None or chain[0] not in self.known.module_paths:
            return None
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            return None
        dotted = ".".join([self.known.module_paths[chain[0]], *chain[1:]])
        outside = _submodule_refused(dotted) or _reached_outside(dotted)
        if outside:
            return f"{outside}, outside the allowed lists"
        parent = self.parents.get(id(node))
        used_through = isinstance(parent, ast.Attribute) and parent.value is node
        # bound to a plain name, which the screen follows; not to a class's
        # attribute (class Holder: lib = sklearn), which it would not (the
        # forty-sixth red team)
        bound = (
            isinstance(parent, ast.Assign | ast.AnnAssign)
            and parent.value is node
            and all(
                isinstance(target, ast.Name)
                for target in (
                    parent.targets
                    if isinstance(parent, ast.Assign)
                    else [parent.target]
                )
            )
            and not isinstance(self.parents.get(id(parent)), ast.ClassDef)
        ) or isinstance(parent, ast.arguments)
        if (
            not used_through
            and not bound
            and not self._only_looked_at(node, dotted)
            and _is_module(dotted)
        ):
            return f"the module {'.'.join(chain)} passed on as a value"
        return None

    def _only_looked_at(self, node: ast.AST, dotted: str) -> bool:
        """Whether the module ``node`` (``dotted``) is only looked at, which
        hands nothing on: printed, its help or ``dir`` shown, one of its names
        tested (``hasattr(torch.backends, "mps")``, a device check the
        forty-eighth red team found refused), or a name read that is no
        module and that the chain rules allow (``getattr(F, "gelu")``)."""
        call = self.parents.get(id(node))
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            return False
        if call.keywords or not call.args or call.args[0] is not node:
            return False
        name = call.func.id
        if name in ("print", "help", "dir"):
            return len(call.args) == 1
        if name not in ("hasattr", "getattr") or len(call.args) != 2:
            return False
        attribute = call.args[1]
        if not (
            isinstance(attribute, ast.Constant) and isinstance(attribute.value, str)
        ):
            return False
        if name == "hasattr":  # a yes or a no: any name but a special one
            return not attribute.value.startswith("__")
        inner = f"{dotted}.{attribute.value}"
        if _attribute_refused(attribute.value) or _submodule_refused(inner):
            return False
        return not _reached_outside(inner) and not _is_module(inner)

    def first(self, tree: ast.AST) -> tuple[int, str] | None:
        self.parents = {
            id(child): node
            for node in ast.walk(tree)
            for child in ast.iter_child_nodes(node)
        }
        callee_names = {
            id(node.func)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and (
                node.func.id == "hasattr" or not _attribute_refused(node.args[1].value)
            )
        }
        magic_calls = {}
        for node in ast.walk(tree):
            magic = _magic(node)
            if magic is not None:
                magic_calls[id(node.func.value.func)] = (node, magic)
        nodes = sorted(
            (n for n in ast.walk(tree) if hasattr(n, "lineno")),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for node in nodes:
            line = node.lineno
            if id(node) in magic_calls:
                _, (kind, name, line_text, body) = magic_calls[id(node)]
                refused = self._magic_refused(kind, name, line_text, body)
                if refused is not None:
                    return line + refused[0] - 1, refused[1]
                continue
            what = self._refused(node, callee_names)
            if what is not None:
                return line, what
        return None

    def _magic_refused(self, kind, name, line_text, body) -> tuple[int, str] | None:
        if (
            kind in ("line", "cell")
            and name not in _NOT_EXPANDED
            and ("{" in line_text or "$" in line_text)
        ):
            # IPython evaluates {expression} and $name in a magic's line as
            # Python (%precision {exec(code) or 3}: the twenty-seventh red team)
            return 1, f"{{…}} or $ in the line of %{name}, which IPython runs"
        if kind == "line":
            if name not in ALLOWED_LINE_MAGICS:
                return 1, f"the magic %{name}"
            if name == "load_ext":
                if line_text.split() and set(line_text.split()) <= ALLOWED_EXTENSIONS:
                    return None
                return 1, f"%load_ext {line_text.strip()}"
            if name == "config":
                return None if _INLINE_CONFIG.fullmatch(line_text) else (1, "%config")
            if name == "pip" and not _PIP_INSTALL.fullmatch(f"pip {line_text}"):
                # packages by name only: "install ." ran a setup.py the screen
                # had read as a cell (the twenty-ninth red team)
                return 1, f"%pip {line_text.strip()[:60]}"
            if name == "prun" and line_text.lstrip().startswith("-"):
                return 1, "%prun with options"
            if name not in ("time", "timeit", "prun"):
                return None
            code, refusal = (
                _timeit_code(line_text) if name == "timeit" else (line_text, None)
            )
            if refusal is not None:
                return 1, refusal
            return self._code(code)
        if kind == "cell":
            if name not in ALLOWED_CELL_MAGICS:
                return 1, f"the cell magic %%{name}"
            if name == "writefile":
                if re.search(r"[\"'\\]", line_text):  # IPython unquotes the name
                    return 1, f"%%writefile {line_text.strip()}"
                target = line_text.split()[-1] if line_text.split() else ""
                if not target.endswith(".py"):
                    if (
                        "/" in target
                        or "\\" in target
                        or target.endswith(_RUNNABLE_SUFFIXES)
                    ):
                        return 1, f"%%writefile {target}"
                    # a data file: a library may read it as code (a pickle in
                    # scikit-learn's data cache: the forty-seventh red team)
                    return 1, f"%%writefile {target}, a data file"
                if not re.fullmatch(r"[A-Za-z_]\w*\.py", target):
                    return 1, f"%%writefile {target}"
            elif name == "capture":
                for word in line_text.split():
                    if not re.fullmatch(
                        r"--no-(stderr|stdout|display)|[A-Za-z_]\w*", word
                    ):
                        return 1, f"%%capture {word}"
            elif name == "prun" and line_text.strip():
                return 1, "%%prun with options"
            elif line_text.strip():  # %%time and %%timeit run their line too
                code, refusal = (
                    _timeit_code(line_text) if name == "timeit" else (line_text, None)
                )
                if refusal is not None:
                    return 1, refusal
                if code.strip():
                    found = self._code(code)
                    if found is not None:
                        return found
            found = self._code(body)
            if found is not None:
                return found[0] + 1, found[1]
            return None
        if _PIP_INSTALL.fullmatch(line_text):
            return None
        return 1, "a shell command (!)"

    def _code(self, text: str) -> tuple[int, str] | None:
        return _screen_source(text, self.depth + 1, self.known, strict=True)

    def _refused(self, node: ast.AST, callee_names: set[int]) -> str | None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                refused = _module_refused(alias.name, self.local)
                if refused:
                    return refused
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                return "a relative import"
            module = node.module or ""
            refused = (
                None if module in ALLOWED_FROM else _module_refused(module, self.local)
            )
            if refused:
                return refused
            allowed = RESTRICTED_MODULES.get(module)
            for alias in node.names:
                if (
                    alias.name == "*"
                    or _attribute_refused(alias.name)
                    or (allowed is not None and alias.name not in allowed)
                    or (
                        module not in ALLOWED_FROM
                        and (
                            _submodule_refused(f"{module}.{alias.name}")
                            or _reached_outside(f"{module}.{alias.name}")
                        )
                    )
                ):
                    return f"from {module} import {alias.name}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:  # bound under a name the screen refuses
                bound = alias.asname or ""
                if (
                    bound in DENIED_DEFINITIONS
                    or bound in DENIED_NAMES
                    or bound in ("self", "cls")
                    or (bound.startswith("_") and bound not in ("_",))
                ):
                    return f"import … as {bound}"
        elif isinstance(node, ast.Attribute):
            if node.attr == "__class__" and not isinstance(node.ctx, ast.Load):
                return ".__class__ assigned"
            if not isinstance(node.ctx, ast.Load) and (
                _root(node) in self.known.imported or _called_on(node)
            ):
                return f"assigning {_root(node)}…{node.attr}: a library changed"
            if _attribute_refused(node.attr) and not self._own_private(node):
                return f".{node.attr}"
            refused = self._module_refused_here(node)
            if refused:
                return refused
        elif isinstance(node, ast.Name):
            refused = self._module_refused_here(node)
            if refused:
                return refused
            if node.id in DENIED_NAMES:
                return f"{node.id}"
            if (
                node.id in DENIED_MODULE_NAMES
                and isinstance(node.ctx, ast.Load)
                and not self._local(node)
            ):
                return f"the module {node.id}"
            if node.id in ("setattr", "delattr"):
                return node.id
            if node.id in ("self", "cls") and not isinstance(node.ctx, ast.Load):
                return f"{node.id} bound to something else"
            if node.id in BY_NAME and id(node) not in callee_names:
                return f"{node.id} with a name that is not written out"
            if node.id in DENIED_DEFINITIONS and isinstance(node.ctx, ast.Store):
                return f"defining {node.id}"
            if _dunder_bound(node.id) and isinstance(node.ctx, ast.Store):
                return f"binding {node.id}"
        elif isinstance(node, ast.MatchAs | ast.MatchStar | ast.MatchMapping):
            # a capture pattern binds a name that is no ast.Name: `case
            # __deepcopy__:` in a class body defined a method so (the
            # thirty-ninth red team)
            bound = node.rest if isinstance(node, ast.MatchMapping) else node.name
            if bound is not None and (
                bound in DENIED_DEFINITIONS
                or bound in DENIED_NAMES
                or bound in ("self", "cls")
                or (bound.startswith("_") and bound != "_")
            ):
                return f"a match pattern binding {bound}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in DENIED_DEFINITIONS:
                return f"defining {node.name}"
            if (
                not isinstance(node, ast.ClassDef)
                and _dunder_bound(node.name)
                and any(not _plain_decorator(d) for d in node.decorator_list)
            ):  # @(lambda f: reader) def __eq__: a C callable as a special
                # method (the fortieth red team)
                return f"a decorated {node.name}"
            if isinstance(node, ast.ClassDef) and node.keywords:
                return f"class {node.name} with a metaclass or class arguments"
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in DENIED_KEYWORDS
        ):  # f(**{"n_jobs": 2}): the keyword as text (the forty-seventh red team)
            return f"{node.value!r}: more workers, text run as code or a pickle"
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.lstrip().startswith("module://")
        ):  # matplotlib imports a backend named so, by any module name
            return f"{node.value[:40]!r}: a module named as text"
        elif isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg in DENIED_KEYWORDS:
                    return f"{keyword.arg}=: more workers, text run as code or a pickle"
            if (
                isinstance(node.func, ast.Name)
                and node.func.id == "type"
                and len(node.args) == 3
            ):
                return "type() making a class"
            if (
                isinstance(node.func, ast.Call)
                and isinstance(node.func.func, ast.Name)
                and node.func.func.id == "type"
            ):
                return "calling type(...): a class made at run time"
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            return None
        return None


def _called_on(node: ast.Attribute) -> bool:
    """Whether an assigned attribute belongs to what a call returned
    (``type(x).numpy = ...``, ``get_class().method = ...``): an object the
    screen cannot tell from a library's."""
    inner = node.value
    while isinstance(inner, ast.Attribute | ast.Subscript):
        inner = inner.value
    return isinstance(inner, ast.Call)


def _magic(node: ast.AST):
    """``get_ipython().run_line_magic('name', 'line')`` and the like (what
    IPython makes of ``%name line``, ``%%name`` and ``!cmd``): (kind, name,
    line, body), or None for any other node."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "get_ipython"
        and not node.func.value.args
        and all(
            isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args
        )
    ):
        return None
    method, args = node.func.attr, [a.value for a in node.args]
    if method == "run_line_magic" and len(args) == 2:
        return "line", args[0], args[1], ""
    if method == "run_cell_magic" and len(args) == 3:
        return "cell", args[0], args[1], args[2]
    if method in ("system", "getoutput"):
        return "shell", "", args[0] if method == "system" and args else "", ""
    return None


def _main() -> None:
    """``python screen.py``: the grader's way in (:func:`..grading.grade.
    screen_apart`). Reads ``{"key": [[number, source], ...], ...}`` as JSON on
    stdin, screens each list of cells as :func:`screen` does, and writes
    ``{"key": [cell, line, what] or null, ...}`` to stdout. Reading untrusted
    text has stalled the grader's own process before (IPython rewrites a cell
    once per magic in it: the forty-second red team); in a child process of
    its own, with a deadline and a memory limit, the next such cell costs its
    notebook's exercises and nothing else. Needs nothing of the course's
    package (nor torch): the file runs on its own."""
    import json
    import sys

    jobs = json.load(sys.stdin)
    findings = {}
    for key, cells in jobs.items():
        found = screen((int(number), str(source)) for number, source in cells)
        findings[key] = None if found is None else [found.cell, found.line, found.what]
    json.dump(findings, sys.stdout)


if __name__ == "__main__":
    _main()
