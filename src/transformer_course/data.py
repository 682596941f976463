"""Data the course runs on: a text corpus and a small image set, both offline-safe.

* :func:`load_text` returns a corpus as one string. ``"tinyshakespeare"`` is
  downloaded once from its public URL, verified by SHA-256 and kept in a cache
  directory; ``"course"`` is the course's own prose, which the package ships and
  assembles itself, and which is used whenever there is no network and no cache.
* :func:`load_digits` returns scikit-learn's bundled 8×8 digits as image tensors
  with a fixed, stratified train/test split.

The cache directory is ``$TRANSFORMER_COURSE_DATA`` when set, else
``~/.cache/transformer_course`` (``$XDG_CACHE_HOME`` respected; on macOS
``~/Library/Caches/transformer_course``; on Windows ``%LOCALAPPDATA%``). A cached
file is laid out as ``<cache>/<name>/<filename>``, so a folder holding
``tinyshakespeare/input.txt`` can serve as a pre-seeded cache.

Used from chapter 1 (tokens) on; chapter 6 trains on the text, chapter 7 on the
digits.
"""

from __future__ import annotations

import hashlib
import http.client
import importlib
import inspect
import json
import os
import platform
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import torch

__all__ = [
    "TEXTS",
    "ChecksumError",
    "DataError",
    "Digits",
    "DownloadError",
    "RemoteText",
    "cache_dir",
    "course_corpus",
    "load_digits",
    "load_text",
]

CACHE_ENV = "TRANSFORMER_COURSE_DATA"
OFFLINE_ENV = "TRANSFORMER_COURSE_OFFLINE"
_CHUNK = 1 << 16


class DataError(RuntimeError):
    """A dataset could not be loaded."""


class DownloadError(DataError):
    """A download failed or arrived incomplete. Nothing was written to the cache."""


class ChecksumError(DataError):
    """Bytes did not match their published SHA-256. Nothing was written to the cache."""


class _OfflineError(Exception):
    """No network: the caller falls back to the course corpus."""


@dataclass(frozen=True)
class RemoteText:
    """A text corpus at a public URL, with the checksum that identifies it."""

    name: str
    url: str
    sha256: str
    size: int  # bytes
    filename: str


TINYSHAKESPEARE = RemoteText(
    name="tinyshakespeare",
    url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
    sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    size=1_115_394,
    filename="input.txt",
)

#: Corpora :func:`load_text` knows; ``"course"`` is built in (:func:`course_corpus`).
TEXTS: dict[str, RemoteText | None] = {
    "tinyshakespeare": TINYSHAKESPEARE,
    "course": None,
}


def cache_dir() -> Path:
    """The directory downloads are cached in (it need not exist yet)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    system = platform.system()
    if system == "Darwin":
        base = Path.home() / "Library" / "Caches"
    elif system == "Windows":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "transformer_course"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _verify(data: bytes, spec: RemoteText, source: str) -> None:
    if len(data) != spec.size:
        raise DownloadError(
            f"{spec.name}: expected {spec.size:,} bytes from {source}, got "
            f"{len(data):,} (truncated or wrong file). Nothing was written to "
            f"the cache; run again to retry."
        )
    digest = _sha256(data)
    if digest != spec.sha256:
        raise ChecksumError(
            f"{spec.name}: expected sha256 {spec.sha256} from {source}, got "
            f"{digest}. Nothing was written to the cache."
        )


def _download(spec: RemoteText, timeout: float = 30.0) -> bytes:
    """Fetch ``spec.url`` into memory and verify it. Raises :class:`_OfflineError`
    when the network cannot be reached at all."""
    try:
        response = urllib.request.urlopen(spec.url, timeout=timeout)
    except urllib.error.HTTPError as err:  # the server answered: not "offline"
        raise DownloadError(
            f"{spec.name}: the server answered HTTP {err.code} for {spec.url}"
        ) from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise _OfflineError(str(reason)) from None
    parts: list[bytes] = []
    try:
        with response:
            while chunk := response.read(_CHUNK):
                parts.append(chunk)
    except http.client.IncompleteRead as err:
        parts.append(err.partial)
    except OSError as err:  # TimeoutError included
        raise DownloadError(
            f"{spec.name}: the connection broke after "
            f"{sum(map(len, parts)):,} of {spec.size:,} bytes ({err}). Nothing "
            f"was written to the cache; run again to retry."
        ) from None
    data = b"".join(parts)
    _verify(data, spec, spec.url)
    return data


def _store_atomically(data: bytes, path: Path) -> bool:
    """Write ``data`` to ``path`` via a temporary file and a rename, so that a
    reader never sees a partial file. Returns False if the cache is not writable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
        )
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return False
    return True


def _fetch_remote(spec: RemoteText, *, offline: bool) -> tuple[bytes, str] | None:
    """Bytes of ``spec`` from the cache or the network, and where they came from;
    None when offline with no cached copy."""
    path = cache_dir() / spec.name / spec.filename
    if path.is_file():
        data = path.read_bytes()
        try:
            _verify(data, spec, str(path))
        except DataError as err:
            raise DataError(
                f"{err} The cached file {path} is damaged: delete it and run again."
            ) from None
        return data, "cache"
    if offline:
        print(f"{spec.name}: offline mode and no cached copy in {path.parent}.")
        return None
    try:
        data = _download(spec)
    except _OfflineError as reason:
        print(
            f"{spec.name}: no network ({reason}) and no cached copy in {path.parent}."
        )
        return None
    if _store_atomically(data, path):
        return data, "download"
    print(
        f"{spec.name}: the cache {path.parent} is not writable; "
        "using the download in memory."
    )
    return data, "download, not cached"


def load_text(name: str = "tinyshakespeare", *, offline: bool | None = None) -> str:
    """A text corpus as one string, and a one-line report of which corpus it is.

    Args:
        name: ``"tinyshakespeare"`` (downloaded once, checksum-verified, cached)
            or ``"course"`` (the course's own prose; no network needed).
        offline: never touch the network. Defaults to the environment variable
            ``TRANSFORMER_COURSE_OFFLINE`` (any value but ``""``/``"0"``).

    Returns:
        The text. With no network and no cached copy, the course corpus is
        returned instead, and the printed line says so.

    Raises:
        ValueError: unknown ``name``.
        DownloadError, ChecksumError: a download arrived truncated or altered
            (nothing is cached then), or a cached copy is damaged.
    """
    if name not in TEXTS:
        raise ValueError(f"name: expected one of {sorted(TEXTS)}, got {name!r}")
    if offline is None:
        offline = os.environ.get(OFFLINE_ENV, "") not in ("", "0")
    spec = TEXTS[name]
    if spec is not None:
        fetched = _fetch_remote(spec, offline=offline)
        if fetched is not None:
            data, source = fetched
            text = data.decode("utf-8")
            print(f"corpus: {name} ({len(text):,} characters, from {source})")
            return text
        print("Falling back to the course's own corpus.")
    text = course_corpus()
    print(f"corpus: course ({len(text):,} characters, the course's own prose)")
    return text


def _book_prose(book: Path) -> list[str]:
    """Markdown text of the book's pages and notebooks, in file-name order."""
    pieces = []
    for path in sorted(book.glob("*")):
        if path.suffix == ".md":
            pieces.append(path.read_text(encoding="utf-8"))
        elif path.suffix == ".ipynb":
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            pieces += [
                "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
            ]
    return pieces


def course_corpus() -> str:
    """The course's own prose: a text the package ships and assembles itself.

    It joins the notes shipped in ``transformer_course/corpus/``, the docstrings
    of the package, and (in a checkout of the repository) the markdown of the
    book. Deterministic: the same checkout always gives the same string.
    """
    pieces = [
        resources.files(__package__)
        .joinpath("corpus", "course_notes.txt")
        .read_text("utf-8")
    ]
    for module_name in sys.modules[__package__].MODULES:
        module = importlib.import_module(f"{__package__}.{module_name}")
        pieces.append(inspect.getdoc(module) or "")
        for obj_name in sorted(module.__all__):
            obj = getattr(module, obj_name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                pieces.append(inspect.getdoc(obj) or "")
    book = Path(__file__).resolve().parents[2] / "book"
    if book.is_dir():
        pieces += _book_prose(book)
    return "\n\n".join(p.strip() for p in pieces if p.strip()) + "\n"


class Digits(NamedTuple):
    """scikit-learn's 8×8 digits, split 80/20, stratified by class."""

    x_train: torch.Tensor  # (N_train, 1, 8, 8) float32 in [0, 1]
    y_train: torch.Tensor  # (N_train,) int64 labels 0-9
    x_test: torch.Tensor  # (N_test, 1, 8, 8)
    y_test: torch.Tensor  # (N_test,)


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> Digits:
    """The bundled digits as image tensors with a fixed, stratified split.

    Args:
        test_fraction: share of images held out for testing, in (0, 1).
        seed: the split's random state (the default split is the course's).

    Returns:
        :class:`Digits` with ``x_*`` of shape (N, 1, 8, 8), float32, pixel
        intensities scaled from 0-16 to [0, 1], and ``y_*`` of shape (N,), int64.
        1,797 images in all: 1,437 for training and 360 for testing by default.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(
            f"test_fraction: expected a number in (0, 1), got {test_fraction!r}"
        )
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    bunch = sklearn_digits()
    images = torch.tensor(bunch.images, dtype=torch.float32) / 16.0  # (1797, 8, 8)
    labels = torch.tensor(bunch.target, dtype=torch.int64)  # (1797,)
    train_idx, test_idx = train_test_split(
        range(len(labels)),
        test_size=test_fraction,
        stratify=labels.numpy(),
        random_state=seed,
    )
    train_idx, test_idx = torch.tensor(train_idx), torch.tensor(test_idx)
    images = images.unsqueeze(1)  # (1797, 1, 8, 8): one channel
    return Digits(
        images[train_idx], labels[train_idx], images[test_idx], labels[test_idx]
    )
