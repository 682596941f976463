"""The screen of an exercise notebook's cells (exercises/screen.py).

Exercises that forbid a function refuse, before anything runs, the constructs
through which red-team passes hid a forbidden call from the checks; nothing an
honest answer needs is refused (every exercise notebook, solutions included,
and every submission of the verdict corpus pass), and the notebook and the
grader give the same verdict.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest

from transformer_course.exercises import chapter, core, screen
from transformer_course.grading import grade

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "exercises").glob("*.ipynb")) + sorted(
    (ROOT / "exercises" / "source").glob("*.ipynb")
)

REFUSED = {
    # a module handed on, not only looked at: getattr of a module (whose
    # chains the screen would no longer follow), print to a file, a dunder
    "getattr of a submodule": "import numpy as np\nm = getattr(np, 'testing')",
    "a module printed to a file": "import numpy as np\nprint(np, file=f)",
    "hasattr of a dunder": "import torch\nok = hasattr(torch, '__dict__')",
    "global_enum": "import enum\nenum.global_enum(Hook)",
    "global_enum through re": "import re\nre.enum.global_enum(Hook)",
    "copy's dispatch table": "import copy\ncopy.dispatch_table[int] = hook",
    "warnings.filters": "import warnings\nwarnings.filters.insert(0, entry)",
    # the forty-seventh red team: a pickle written as a data file, which
    # scikit-learn's loader unpickled from its data home; workers by **dict
    "a data file written with %%writefile": (
        "%%writefile cal_housing_py3.pkz\ncbuiltins\nexec\n(Vx = 1\n(dtR."
    ),
    "data_home=": (
        "from sklearn.datasets import fetch_california_housing\n"
        "fetch_california_housing(data_home='.', download_if_missing=False)"
    ),
    "n_jobs by a dict": (
        "from sklearn.neighbors import KNeighborsClassifier\n"
        "knn = KNeighborsClassifier(**{'n_jobs': 2})"
    ),
    # the forty-sixth red team: exec under another name in an allowed
    # submodule, a library's alias that reset the check of the path as written,
    # a module held by a class, processes from asyncio's loop
    "numpy.testing.runstring": "import numpy as np\nnp.testing.runstring('x = 1', {})",
    "torch.torch": "import torch\nh = torch.torch.utils.data.datapipes.utils.decoder",
    "F.torch": "import torch.nn.functional as F\nc = F.torch.xpu.cast",
    "plt.np": "import matplotlib.pyplot as plt\nb = plt.np.testing.extbuild",
    "a module as a class attribute": (
        "import sklearn\nclass Holder:\n    lib = sklearn\nHolder.lib.utils"
    ),
    "asyncio's subprocess_exec": (
        "import asyncio\nloop = asyncio.new_event_loop()\nrun = loop.subprocess_exec"
    ),
    # the forty-fifth red team: doors in the libraries' other submodules, each
    # of which ran text unread (and switched the watch off)
    "sklearn.utils.discovery": (
        "import sklearn.utils.discovery as disc\ncx = disc.import_module('code')"
    ),
    "torch.autograd.profiler_util": (
        "import torch\nget = torch.autograd.profiler_util.attrgetter('__builtins__')"
    ),
    "scipy.conftest": "import scipy.conftest\nscipy.conftest.pytest.importorskip('code')",
    "matplotlib.sphinxext": "import matplotlib.sphinxext.plot_directive as pd",
    "from sklearn import utils": "from sklearn import utils",
    "a submodule through an alias": "import torch\nt = torch.autograd\nt.profiler_util",
    "a module passed to a function": "import sklearn\ndef f(m):\n    return m.utils\nf(sklearn)",
    "a module in a list": "import torch\nmodules = [torch.nn]",
    "matplotlib.Path": "import matplotlib\nmatplotlib.Path('x').touch()",
    "import gc": "import gc\ngc.get_objects()",
    # the thirty-ninth red team: setattr by string, and names bound by a match
    "functools.update_wrapper": (
        "import functools\nfunctools.update_wrapper(torch.Tensor, holder, "
        "assigned=('dim',), updated=())"
    ),
    "from functools import wraps": "from functools import wraps",
    "a match capture binding a dunder": (
        "class Box:\n    match reader:\n        case __deepcopy__:\n            pass"
    ),
    "a match star binding a private name": "match xs:\n    case [*_hidden]:\n        pass",
    "a match mapping's rest binding a dunder": (
        "match d:\n    case {**__dict__}:\n        pass"
    ),
    "a class body binding __dict__": "class Box:\n    __dict__ = {'dim': reader}",
    "a class body binding __len__": "class Sizes(list):\n    __len__ = reader",
    # the forty-second red team: assignments of magics, which IPython rewrites
    # one at a time (600 of them cost the grader's process 40 s a cell)
    "41 assignment magics": "".join(f"a{i} = %time {i}\n" for i in range(41)),
    "600 system assignments": "".join(f"a{i}=!ls\n" for i in range(600)),
    # the fortieth red team: a decorator that replaces a special method
    "a decorated __eq__": (
        "class Key:\n    @(lambda f: reader)\n    def __eq__(self, other):\n"
        "        pass"
    ),
    "import sys": "import sys",
    "import _thread": "import _thread as t\nt.start_new_thread(print, ())",
    "import threading": "from threading import Thread",
    "import ctypes": "import ctypes",
    "inspect.currentframe": "import inspect\nf = inspect.currentframe().f_back",
    "inspect.getmembers": "import inspect\ninspect.getmembers(torch)",
    "inspect.stack, aliased": "import inspect as ins\nframes = ins.stack()",
    "inspect passed on": "import inspect\nm = inspect\nm.stack()",
    "from inspect import": "from inspect import currentframe",
    "asyncio.to_thread": "import asyncio\nawait asyncio.to_thread(f)",
    "open": "open('helpers.py', 'w').write(code)",
    "np.savetxt": "np.savetxt('helpers.py', lines, fmt='%s')",
    "a module's body": "%%writefile helpers.py\nimport gc",
    "a runnable file": "%%writefile helpers.cpython-311-x86_64-linux-gnu.so\nx",
    "a .pth file": "%%writefile hook.pth\nimport gc",
    "a file elsewhere": "%%writefile ../helpers.py\nx = 1",
    # the twenty-seventh red team: text IPython evaluates in a magic's line,
    # and a module's name in quotes (IPython unquotes it)
    "{...} in a magic's line": "%precision {exec(code) or 3}",
    "$name in a magic's line": "%store $x",
    "{...} in %%writefile's name": "%%writefile {exec(code) or 'notes.txt'}\nx",
    "a quoted module name": '%%writefile "helpers.py"\nimport gc',
    # the twenty-sixth red team
    "an alias of a library's class, changed": "T = torch.Tensor\nT.numpy = f",
    "an alias in a loop": "for T in [torch.Tensor]:\n    T.numpy = f",
    "an alias as a default": "def g(T=torch.Tensor):\n    T.numpy = f",
    "type(...) changed": "type(x).numpy = f",
    "a file helper": "import matplotlib.cbook as c\nc.open_file_cm('h.py', 'w')",
    "allow_pickle": "np.load(path, allow_pickle=True)",
    "torch's registry": "torch.serialization.register_package(1, f, g)",
    # the twenty-ninth red team: pip running a setup.py the screen read as a cell
    "%pip install .": "%pip install -q --no-build-isolation .",
    "%pip install a path": "%pip install ./helpers",
    "%pip install -e": "%pip install -e helpers",
    "local module": "import helpers_i_wrote",
    "relative import": "from . import x",
    "star import": "from torch import *",
    "torch._C": "import torch\nf = torch._C._nn.gelu",
    "from torch import _C": "from torch import _C",
    "torch.overrides": "from torch.overrides import TorchFunctionMode",
    "private module": "from torch.utils._python_dispatch import TorchDispatchMode",
    "torch.ops": "y = torch.ops.aten._softmax(x, -1, False)",
    "torch.compile": "g = torch.compile(f)",
    "from_numpy in map": "ys = list(map(torch.from_numpy, arrays))",
    "frombuffer": "y = torch.frombuffer(b, dtype=torch.float32)",
    "globals of a function": "g = f.__globals__",
    "code of a function": "c = f.__code__",
    "closure": "cells = f.__closure__",
    "subclasses": "object.__subclasses__()",
    "a class's dict": "torch.__dict__['softmax']",
    "frame": "def f():\n    try:\n        1 / 0\n    except Exception as e:\n        return e.__traceback__.tb_frame.f_back",
    "generator frame": "g = (i for i in range(3))\nframe = g.gi_frame",
    "exec": "exec('y = 1')",
    "eval": "y = eval('1 + 1')",
    "compile": "code = compile('1', 'x', 'eval')",
    "__import__": "m = __import__('s' + 'ys')",
    "globals()": "globals()['softmax'] = None",
    "vars()": "vars(torch)",
    "computed getattr": "name = 'soft' + 'max'\nf = getattr(torch, name)",
    "getattr of a private name": "getattr(torch, '_C')",
    "getattr passed as a value": "from functools import reduce\nreduce(getattr, ['nn'], torch)",
    "setattr computed": "setattr(torch, name, f)",
    "type() making a class": "T = type('T', (torch.Tensor,), {})",
    "metaclass": "class M(metaclass=Meta):\n    pass",
    "__torch_function__ method": "class T(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n        return 0",
    "__torch_function__ assigned": "class T(torch.Tensor):\n    __torch_function__ = hook",
    "__del__": "class A:\n    def __del__(self):\n        pass",
    "memoryview": "m = memoryview(b'')",
    "get_ipython": "get_ipython().events.register('pre_run_cell', f)",
    "shell command": "!ls /",
    "shell output": "files = !ls",
    "%run": "%run helper.py",
    "%load_ext": "%load_ext something",
    "%env": "%env TORCH_LOGS=all",
    "%%bash": "%%bash\nls",
    "%%script": "%%script python\nprint(1)",
    "%%time body": "%%time\nimport gc",
    "%time line": "%time import gc",
    "f-string": "print(f'{f.__globals__}')",
    "inside a function": "def softmax(x):\n    import gc\n    return x",
    "inside a lambda": "f = lambda: __import__('gc')",
    "%timeit with options": "%timeit -n1 -r1 -q globals().update(t=1)",
    "%timeit -s": "%timeit -s 'import os' x = 1",
    "%timeit, unknown option": "%timeit -z x",
    "%%timeit setup line": "%%timeit -n1 import os\nx = 1",
    "%%timeit -s": "%%timeit -s 'import os'\nx = 1",
    "%%capture, odd words": "%%capture out; import os\nx = 1",
    "a magic's text not Python": "%time -n1 import os",
    "string.Formatter": "import string\nf = string.Formatter().get_field('0.x', (1,), {})",
    "type(x)(...)": "T = type(torch.Tensor)('T', (torch.Tensor,), {})",
    "make_dataclass": "from dataclasses import make_dataclass",
    "abc.ABCMeta": "import abc\nM = abc.ABCMeta('M', (), {})",
    "a module bound by others": "threading = sys.modules['threading']",
    "__class__ assigned": "x.__class__ = T",
    "IPython itself": "import IPython",
    "a replaced tensor method": "torch.Tensor.new_empty = hook",
    "a replaced function, aliased": "import torch as t\nt.softmax = mine",
    "setattr": "setattr(torch.Tensor, 'new_empty', hook)",
    "a worker thread": "from tqdm.contrib.utils_worker import MonoWorker",
    "DataLoader workers": "loader = torch.utils.data.DataLoader(ds, num_workers=1)",
    "n_jobs": "model.fit(x, y, n_jobs=2)",
    "type hints evaluated": "import typing\ntyping.get_type_hints(f)",
    "eval_str": "import inspect\ninspect.signature(f, eval_str=True)",
    "benchmark Timer": "import torch.utils.benchmark as b",
    "automagic": "timeit -n1 -r1 -q import threading",
    "automagic run": "run notes.txt",
    "too many magics": "\n".join(["%time 1"] * 41),
    "magics in a long cell": "%time 1\n" + "#" * 20_001,
    "%config otherwise": "%config InteractiveShell.ast_node_interactivity = 'all'",
    "%prun with options": "%prun -D out.prof f(x)",
    "a shell command, pip in disguise": "!pip install x; rm -rf ~",
    "autocall": "go exec(payload)",
    "autocall escape": "/exec payload",
    "a class's mro": "Thread = TMonitor.mro()[1]",
    "tqdm's monitor": "from tqdm.std import TMonitor",
    "a one-line syntax error": "x = = 1",
    "an alias with a refused name": "from helpers import f as __torch_dispatch__",
    "a private alias": "from torch.autograd import graph as _g",
    "torch's modes": "from torch.autograd.graph import TorchDispatchMode",
    "entering by hand": "mode.__enter__()",
    "a shell in a library": "from torch.utils.collect_env import run",
    "tqdm's telegram": "from tqdm.contrib.telegram import TelegramIO",
    "a module imported as self": "import collections as self\ncls = self._sys",
    "a module bound to self": "self = torch\nf = self._C",
    "self outside a method": "def f(self):\n    return self._C",
    "self with a default": "class A:\n    def f(self=torch):\n        return self._C",
    "self in a nested function": "class A:\n    def f(self):\n        def g(self):\n            return self._C\n        return g",
    "nested magics": "%%time\n%%time\n%%time\n%%time\n%%time\n%%time\nx = 1",
}

ALLOWED = {
    # a module only looked at (the forty-eighth red team's false refusals)
    "a device check": (
        "import torch\ndevice = 'mps' if hasattr(torch.backends, 'mps') and "
        "torch.backends.mps.is_available() else 'cpu'"
    ),
    "help of a module": "import torch.nn.functional as F\nhelp(F)",
    "a module printed": "import numpy as np\nprint(np)",
    "dir of a module": "import torch\nnames = dir(torch.linalg)",
    "getattr of a function": "import torch.nn.functional as F\ng = getattr(F, 'gelu')",
    "hasattr of a refused name": "import torch\nok = hasattr(torch, 'compile')",
    "warnings as learners use them": (
        "import warnings\nwith warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n    warnings.warn('x')"
    ),
    # modules an answer uses, through the allowed submodules and aliases
    "torch.nn as an alias": "import torch\nnn = torch.nn\nlayer = nn.Linear(2, 2)",
    "a module as a default": "import torch\ndef f(x, lib=torch):\n    return lib.zeros(2)",
    "torch.cuda and torch.testing": (
        "import torch\nd = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "torch.testing.assert_close(torch.zeros(1), torch.zeros(1))"
    ),
    "numpy's random and linalg": (
        "import numpy as np\nx = np.random.default_rng(0).normal(size=3)\n"
        "n = np.linalg.norm(x)"
    ),
    "from torch import nn": "from torch import nn\nclass M(nn.Module):\n    pass",
    # the forty-fourth red team: lines that only look like IPython's escapes,
    # once refused as magics (a formatter's wrapped division in a long cell;
    # comments ending in a question)
    "a wrapped division in a long cell": (
        "def attention(q, k, v):\n    scores = (\n        q @ k.transpose(-2, -1)\n"
        "        / q.shape[-1] ** 0.5\n    )\n    return scores.softmax(-1) @ v\n"
        + "# notes\n"
        * 3000
    ),
    "41 comments asking a question": "".join(
        f"# step {i}: is this right?\nx{i} = {i}\n" for i in range(41)
    ),
    "escapes inside a string": 's = """\n/f x\n%time\n!ls\n"""\n' * 41,
    "super().__init__": "class B(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self._cache = {}",
    "type name": "print(type(x).__name__)",
    "getattr written out": "w = getattr(layer, 'weight')",
    "hasattr written out": "hasattr(x, 'shape')",
    "%timeit": "%timeit softmax(x)",
    "%%time": "%%time\ny = softmax(x)",
    "%matplotlib": "%matplotlib inline",
    "%autoreload": "%load_ext autoreload\n%autoreload 2",
    "%pip": "%pip install -q tqdm",
    "%store": "%store",
    "__version__": "print(tc.__version__)",
    "inspect.getsource": "%%capture shown\nimport inspect\nprint(inspect.getsource(f))",
    "asyncio": "import asyncio\n\nawait asyncio.sleep(0)",
    "numpy": "import numpy as np\nnp.exp(1.0)",
    "torch.nn.functional": "import torch.nn.functional as F\ny = F.relu(x)",
    "tolist": "ids = torch.tensor([1, 2]).tolist()",
    "torch.stack and trace": "y = torch.stack([x, x]).trace()",
    "from inspect import getsource": "from inspect import getsource",
    "math and itertools": "import math, itertools\nfrom collections import Counter",
    "the course package": "import transformer_course as tc",
    "%timeit options": "%timeit -n 10 -r 3 -q softmax(x)",
    "%%timeit options": "%%timeit -n 5\ny = softmax(x)",
    "%%capture names": "%%capture --no-stderr out\ny = 1",
    "obj?": "torch.softmax?",
    "obj??": "torch.softmax??",
    "%precision": "%precision 3",
    "IPython.display": "from IPython.display import display, HTML",
    "__class__ read": "print(x.__class__.__name__)",
    "json.loads": "import json\njson.loads('[1]')",
    "string constants": "import string\nletters = string.ascii_lowercase",
    "%config of figures": "%config InlineBackend.figure_format = 'retina'",
    "%prun": "%prun softmax(x)",
    "!pip install": "!pip install -q tqdm",
    "hasattr of any name": "hasattr(torch, 'compile')",
    "a learner's own object": "model.weight = torch.nn.Parameter(w)\nself.cache = {}",
    "a syntax error": "def f(:\n    pass",
    "top-level await": "await something()",
    "the words in strings": "print('exec eval __globals__ import gc')",
    "a comment": "# import gc, sys._getframe, torch._C",
    "a match with plain captures": (
        "match shape:\n    case (b, n, d):\n        pass\n    case _:\n        pass"
    ),
    "a class's __slots__": "class Pair:\n    __slots__ = ('a', 'b')",
    "= and % in a long cell's code and strings": (
        "fmt = 'a=%s' % 3\nb = a != 2\nx = y % 2\n" + "z = 1\n" * 5000
    ),
    "a special method that is a staticmethod": (
        "class Pair:\n    @staticmethod\n    def __call__():\n        return 1\n"
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_could_hide_a_call_is_refused(name):
    finding = screen.screen([(7, REFUSED[name])])
    assert finding is not None, name
    assert finding.cell == 7
    assert finding.line >= 1


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_what_an_answer_needs_is_not(name):
    assert screen.screen([(1, ALLOWED[name])]) is None, name


def test_a_module_the_notebook_writes_may_be_imported():
    written = "%%writefile vocab_helpers.py\ndef sorted_chars(text):\n    return sorted(text)\n"
    use = "from vocab_helpers import sorted_chars"
    assert screen.screen([(1, written), (2, use)]) is None
    assert screen.screen([(2, use)]) == screen.Finding(2, 1, "import vocab_helpers")
    # its body is screened as a cell is
    bad = written.replace("def", "import gc\ndef")
    assert screen.screen([(1, bad), (2, use)]) == screen.Finding(1, 2, "import gc")


def test_the_finding_names_the_construct_its_cell_and_line():
    finding = screen.screen([(3, "x = 1"), (5, "y = 2\n\nimport gc")])
    assert finding == screen.Finding(5, 3, "import gc")
    assert "import gc (cell 5, line 3)" in finding.message()
    assert "import gc (In [5], line 3)" in finding.message("In")
    # inside a cell magic, lines count from the cell's first line
    assert screen.screen([(1, "%%time\nx = 1\nimport gc")]).line == 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_exercise_notebook_passes(path):
    """Every cell, the instructor's setup and the solutions included: an
    honest notebook is never refused (the setup cell installs the course
    where its import fails instead of reading sys.modules)."""
    notebook = nbformat.read(path, 4)
    cells = [
        (i, c.source) for i, c in enumerate(notebook.cells) if c.cell_type == "code"
    ]
    assert len(cells) > 5
    assert screen.screen(cells) is None


def test_no_submission_of_the_verdict_corpus_is_refused():
    corpus = json.loads((ROOT / "tests" / "verdict_corpus.json").read_text())
    sources = [s["source"] for s in corpus["submissions"]]
    assert len(sources) > 100
    refused = [s for s in sources if screen.screen([(1, s)]) is not None]
    assert refused == []


def _solved(number: int, extra: str | None, at: int = 3) -> nbformat.NotebookNode:
    """The chapter's exercise notebook with its solutions, and a cell ``extra``
    inserted at ``at``."""
    import re

    (path,) = (ROOT / "exercises" / "source").glob(f"0{number}_*.ipynb")
    notebook = nbformat.read(path, 4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.source = re.sub(
                r"(?m)^\s*### (BEGIN|END) SOLUTION\n?", "", cell.source
            )
    if extra is not None:
        notebook.cells.insert(at, nbformat.v4.new_code_cell(extra))
    return notebook


def test_the_notebook_and_the_grader_refuse_alike(tmp_path, monkeypatch):
    """Chapter 2: `import gc` in a cell costs the exercise that forbids a
    function (attention, which forbids scaled_dot_product_attention) its points
    in both, with the same hint; the exercises that forbid nothing keep theirs."""
    notebook = _solved(2, "import gc\nunused = 1")
    path = tmp_path / "02_attention.ipynb"
    nbformat.write(notebook, path)
    graded = grade.grade_notebook(path, chapter=2, unsafe=True)
    grades = {g.key: g for g in graded.exercises}
    exercises = chapter(2).exercises
    forbidding = [k for k, e in exercises.items() if e.forbidden]
    free = [k for k, e in exercises.items() if not e.forbidden]
    assert forbidding
    assert free
    for key in free:
        assert grades[key].status == "passed", (key, grades[key])
    cells = [
        (i + 1, c.source)
        for i, c in enumerate(notebook.cells)
        if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("locked")
    ]
    monkeypatch.setattr(core, "_kernel_inputs", lambda: cells)
    for key in forbidding:
        exercise = exercises[key]
        assert grades[key].points == 0, (key, grades[key])
        assert "Not run: import gc (cell 4, line 1)" in grades[key].hint
        assert grades[key].status == "not run"  # not "failed": nothing was judged
        report = core.run_exercise(exercise, lambda *args: None)
        assert report.score == 0
        assert report.status == "failed"
        # the notebook names the cell as it numbers it (In [4]), the grader by place
        assert report.first_hint == grades[key].hint.replace("cell 4,", "In [4],")


def test_the_notebook_reads_the_cells_its_kernel_ran(monkeypatch):
    import IPython

    class History:
        def __init__(self):
            self.input_hist_raw = ["", "x = 1", "%%time\nimport gc", 5]

    class Shell:
        history_manager = History()

    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell())
    inputs = core._kernel_inputs()
    assert inputs == [(1, "x = 1"), (2, "%%time\nimport gc")]
    assert screen.screen(inputs) == screen.Finding(2, 2, "import gc")
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert core._kernel_inputs() == []


@pytest.mark.parametrize(
    "source",
    [
        "%timeit f({'a': 1})",
        "%%time\nd = {'a': 1}",
        "x = torch.ones(3)\nx.requires_grad = True",
        "%precision 3",
        "%pip install -q tqdm",
        "%pip install -q git+https://github.com/transformer-course/transformer-course",
        # a local variable named like a module (the twenty-ninth red team's
        # honest answer was refused)
        "def f(x):\n    signal = x.max()\n    return x - signal",
    ],
)
def test_braces_where_ipython_does_not_expand_them_are_allowed(source):
    assert screen.screen([(1, source)]) is None


def test_a_module_is_read_as_python_reads_it():
    """A module is screened without IPython's syntax, and refused when it does
    not parse: IPython's prompt stripping made a module parse for the screen
    that Python then ran otherwise (the twenty-seventh red team)."""
    assert screen.screen_module("import torch\n\ndef f(x):\n    return x\n") is None
    assert screen.screen_module(">>> x = 1\n... ;pass\n").what == (
        "a module that does not parse"
    )
    assert screen.screen_module("import os\n").what == "import os"


def test_a_chain_of_aliases_is_followed_in_one_pass(monkeypatch):
    """The aliases of a library's objects are found in one reading of the
    cells' bindings, not one reading per alias: a chain of 2,000 kept the
    grader's own process busy for 35 s (the twenty-seventh red team)."""
    calls = []
    real = screen._bindings
    monkeypatch.setattr(screen, "_bindings", lambda tree: calls.append(1) or real(tree))
    chain = "a0 = torch\n" + "".join(f"a{i + 1} = a{i}\n" for i in range(2000))
    found = screen.screen([(1, chain + "a2000.softmax = f\n")])
    assert found.what == "assigning a2000…softmax: a library changed"
    assert len(calls) == 1  # one cell, read once


def test_the_grader_screens_in_a_child_that_agrees_with_the_screen():
    """The grader reads cells in a child process (grade.screen_apart), which
    finds what the screen finds, cell and line included, and nothing where the
    screen finds nothing."""
    cells = {
        name: [(3, "x = 1"), (7, source)] for name, source in list(REFUSED.items())[:12]
    }
    cells["honest"] = [(1, "import torch"), (2, "def f(x):\n    return x + 1")]
    apart = grade.screen_apart(cells)
    for name, listed in cells.items():
        assert apart.get(name) == screen.screen(listed), name
    assert "honest" not in apart
    assert len(apart) == len(cells) - 1
    assert grade.screen_apart({}) == {}


@pytest.mark.parametrize(
    "child",
    [
        "import time\ntime.sleep(60)",  # a cell that keeps the screen busy
        "x = bytearray(3 << 30)",  # one that takes more memory than it may
        "import sys\nsys.exit(1)",
        "print('{\"a\": [1, 2]}')",  # a finding that cannot be read
        "print('[]')",
    ],
)
def test_a_screen_that_cannot_finish_refuses_its_exercises(
    monkeypatch, tmp_path, child
):
    """Whatever stops the child (time, memory, a crash, output that is no
    finding) costs only the exercises it was reading, each refused and naming
    the longest cell, within the screen's deadline: the grader goes on."""
    script = tmp_path / "screen.py"
    script.write_text(child)
    monkeypatch.setattr(grade, "SCREEN_SCRIPT", script)
    monkeypatch.setattr(grade, "SCREEN_SECONDS", 3)
    cells = {"a": [(1, "x = 1"), (2, "y = 22222")], "b": [(5, "z")]}
    started = time.monotonic()
    apart = grade.screen_apart(cells)
    assert time.monotonic() - started < 3 + 2
    assert set(apart) == {"a", "b"}
    for finding in apart.values():
        assert finding.cell == 2
        assert "could not read within 3 s" in finding.what


#: The forty-third red team's cells, each of which kept the screen busy for
#: minutes in the grader's own process (each figure theirs, measured there).
SLOW_BEFORE = {
    # 501 lines of IPython's /call escape, which the magic count missed: IPython
    # rewrites one a pass, tokenising the whole cell each time (100 KB: 160 s)
    "escapes the magic count missed": "".join("/f x\n" for _ in range(501))
    + "y = "
    + "+".join(["a"] * 40_000)
    + "\n",
    # a local named like a denied module, read 8,000 times: each read walked the
    # whole function again (4,000 reads: 27 s)
    "a denied name read as a local": "def helper():\n    sys = 1\n"
    + "".join("    sys\n" for _ in range(8000))
    + "    return sys\n",
    # blank lines, over which one pattern anchored at every line start ran to
    # the end of the cell from each (50,000: 28 s)
    "blank lines": "\n" * 80_000 + "x = 1\n",
}


@pytest.mark.parametrize("name", SLOW_BEFORE)
def test_cells_that_stalled_the_screen_are_read_at_once(name):
    started = time.monotonic()
    found = screen.screen([(1, "import torch"), (2, SLOW_BEFORE[name])])
    assert time.monotonic() - started < 5
    if name.startswith("escapes"):
        assert found is not None
        assert "a cell of 501 magics" in found.what
    else:
        assert found is None  # honest in form: nothing to refuse


def test_each_cell_is_rewritten_once_whatever_the_number_of_exercises():
    """The grader screens a notebook's cells once for each exercise that forbids
    a function; IPython's rewriting of a cell is kept for the next, for as many
    cells as a notebook may hold (a smaller cache, overflowed by 1,100 cells,
    rewrote each cell twice per exercise: the forty-third red team)."""
    cells = [(i, f"x{i} = {i}") for i in range(1100)]
    screen._python.cache_clear()
    for _ in range(3):
        assert screen.screen(cells) is None
    assert screen._python.cache_info().misses == len(cells)


#: Run in a fresh interpreter, with what a notebook imports and a figure drawn
#: (matplotlib's backend is imported then): the modules loaded decide what
#: is reachable, and the other tests load more or less.
WALK = """
import contextlib, importlib, io, json, sys, types
from transformer_course.exercises import screen
allowed = screen.ALLOWED_MODULES - {"transformer_course"}
extra = ["torch.nn.functional", "torch.utils.data", "matplotlib.pyplot",
         "matplotlib.backends.backend_agg", "scipy.special", "sklearn.datasets",
         "tqdm.auto"]
for name in [*sorted(allowed), *extra]:
    with contextlib.suppress(Exception):
        importlib.import_module(name)
import matplotlib.pyplot as plt
plt.plot([1, 2]); plt.savefig(io.BytesIO(), format="png")
found, seen = {}, set()
queue = [(n, sys.modules[n]) for n in sorted(allowed) if n in sys.modules]
while queue:
    path, module = queue.pop(0)
    if id(module) in seen or path.count(".") > 6:
        continue
    seen.add(id(module))
    for attribute, value in list(vars(module).items()):
        if isinstance(value, types.ModuleType) and not attribute.startswith("_"):
            dotted = path + "." + attribute
            if value.__name__.split(".")[0] not in allowed:
                found[dotted] = value.__name__
            queue.append((dotted, value))
print(json.dumps(found))
"""


def _modules_held_under_public_names() -> dict[str, str]:
    """Dotted paths from an allowed module, through public attributes, to a
    module outside the allowed list (``enum.bltns``: builtins), in the
    libraries as installed: {path: module}."""
    import subprocess
    import sys

    ran = subprocess.run(
        [sys.executable, "-c", WALK], capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads(ran.stdout.splitlines()[-1])


def test_a_module_held_by_an_allowed_one_is_refused_as_its_import_is():
    """enum.bltns is builtins (exec, open), torch.cuda.tunable.mp
    multiprocessing, json.codecs.open writes files: reaching a module that may
    not be imported, as an attribute of one that may, is refused the same (the
    forty-fourth red team ran exec through enum.bltns for full marks)."""
    held = _modules_held_under_public_names()
    assert "enum.bltns" in held  # the attack's door, in this Python
    assert len(held) > 40
    for path, module in held.items():
        names = path.split(".")[1:]
        if all(
            name in screen.HARMLESS_MODULE_ALIASES for name in names[-1:]
        ) and not any(screen._attribute_refused(name) for name in names):
            continue  # a harmless module, reached without a refused name
        root = path.split(".")[0]
        found = screen.screen([(1, f"import {root}\nx = {path}")])
        assert found is not None, (path, module)
    for honest in ("import numpy as np\nx = np.array([1])", "t = self.token"):
        assert screen.screen([(1, honest)]) is None


@pytest.mark.parametrize(
    ("call", "said"),
    [
        ("enum.bltns.exec('x = 1')", ".exec"),
        ("b = enum.bltns", ".bltns"),
        ("json.codecs.open('f', 'w')", ".open"),
        ("c = json.codecs", ".codecs"),
        ("holder.exec('x = 1')", ".exec"),
        ("holder.open('f', 'w')", ".open"),
    ],
)
def test_exec_and_open_are_refused_as_attributes_too(call, said):
    found = screen.screen([(1, f"import enum, json\nholder = enum\n{call}")])
    assert found is not None
    assert found.what == said


def test_a_models_eval_is_not_refused():
    assert screen.screen([(1, "model = torch.nn.Linear(2, 2)\nmodel.eval()")]) is None


#: What the libraries' doors lead to: where a function or class held by an
#: allowed module comes from (``matplotlib.Path`` is pathlib's).
DANGEROUS_ORIGINS = (
    *("os", "posix", "sys", "subprocess", "importlib", "ctypes", "pickle"),
    *("_pickle", "shutil", "tempfile", "io", "_io", "codecs", "_codecs", "runpy"),
    *("code", "pydoc", "doctest", "timeit", "multiprocessing", "threading"),
    *("_thread", "unittest.mock", "pytest", "_pytest", "pathlib", "gc", "inspect"),
)
#: Run in a fresh interpreter: each allowed module and submodule, and what it
#: holds under public names, with where it comes from.
HOLDINGS = """
import importlib, json, types
from transformer_course.exercises import screen
names = sorted((screen.ALLOWED_MODULES | screen.ALLOWED_SUBMODULES)
               - {"transformer_course"})
held = []
for name in names:
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    for attribute, value in list(vars(module).items()):
        if attribute.startswith("_"):
            continue
        origin = (value.__name__ if isinstance(value, types.ModuleType)
                  else getattr(value, "__module__", None))
        if isinstance(origin, str):
            held.append([name, attribute, origin])
print(json.dumps(held))
"""


def test_no_allowed_module_holds_a_door_under_a_name_the_screen_lets_through():
    """Every allowed module and submodule is walked for what it holds: a
    module, function or class from a refused module (pathlib, operator's
    attrgetter, pytest, builtins' exec) must be refused by its name, as
    matplotlib.Path and torch.autograd.profiler_util.attrgetter were not (the
    forty-fifth red team); and every allowed submodule exists."""
    import subprocess
    import sys

    ran = subprocess.run(
        [sys.executable, "-c", HOLDINGS], capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    held = json.loads(ran.stdout.splitlines()[-1])
    assert len(held) > 1000
    doors = [
        (module, attribute, origin)
        for module, attribute, origin in held
        if origin.split(".")[0] in DANGEROUS_ORIGINS
        or origin in DANGEROUS_ORIGINS
        or attribute in ("attrgetter", "methodcaller", "exec", "eval", "open")
    ]
    assert ("matplotlib", "Path", "pathlib") in [tuple(d) for d in doors]
    for module, attribute, origin in doors:
        if (
            module == "inspect"
            or attribute == "eval"
            or (module, attribute)
            in (
                ("functools", "RLock"),  # a lock, which starts nothing
                ("matplotlib", "Parameter"),  # inspect's, describes a signature
            )
        ):
            continue  # inspect's own names are listed (RESTRICTED_MODULES)
        found = screen.screen([(1, f"import {module}\nx = {module}.{attribute}")])
        assert found is not None, (module, attribute, origin)
    assert screen.screen([(1, "import inspect\nx = inspect.attrgetter")]) is not None
    for name in screen.ALLOWED_SUBMODULES:
        assert screen._is_module(name) or name.startswith("einops"), name
