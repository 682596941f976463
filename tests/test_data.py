"""transformer_course.data: downloads, the cache, the offline fallback, digits.

Downloads are served by a real HTTP server on 127.0.0.1, so the code under test
opens real sockets; no network beyond the loopback is needed.
"""

import dataclasses
import hashlib
import http.server
import os
import threading
from collections import Counter
from pathlib import Path

import pytest
import torch

import transformer_course as tc
from transformer_course import data

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
PAYLOAD = ("To be, or not to be: that is the question.\n" * 400).encode()


class Server(http.server.ThreadingHTTPServer):
    hits: Counter


class Handler(http.server.BaseHTTPRequestHandler):
    """/good: the payload; /altered: same length, one byte changed;
    /truncated: announces the full length, sends half, hangs up;
    /short: a complete response that is simply too short; /missing: 404."""

    def do_GET(self):
        self.server.hits[self.path] += 1
        if self.path == "/missing":
            self.send_error(404)
            return
        body = {
            "/good": PAYLOAD,
            "/altered": PAYLOAD[:-2] + b"?\n",
            "/truncated": PAYLOAD,
            "/short": PAYLOAD[: len(PAYLOAD) // 3],
        }[self.path]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path == "/truncated":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture(scope="module")
def server():
    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.hits = Counter()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty, writable cache directory."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(data.CACHE_ENV, str(folder))
    monkeypatch.delenv(data.OFFLINE_ENV, raising=False)
    return folder


def serve_as_tinyshakespeare(monkeypatch, server, path):
    """Point the "tinyshakespeare" entry at our server, with PAYLOAD's checksum."""
    url = f"http://127.0.0.1:{server.server_port}{path}"
    spec = dataclasses.replace(
        data.TINYSHAKESPEARE,
        url=url,
        sha256=hashlib.sha256(PAYLOAD).hexdigest(),
        size=len(PAYLOAD),
    )
    monkeypatch.setitem(data.TEXTS, "tinyshakespeare", spec)
    return spec


def files_in(folder):
    return sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
    )


def test_download_verifies_caches_and_then_reads_the_cache(
    server, cache, monkeypatch, capsys
):
    serve_as_tinyshakespeare(monkeypatch, server, "/good")
    before = server.hits["/good"]
    assert tc.load_text("tinyshakespeare") == PAYLOAD.decode()
    assert "from download" in capsys.readouterr().out
    assert files_in(cache) == ["tinyshakespeare/input.txt"]  # no temporary files left
    assert (cache / "tinyshakespeare" / "input.txt").read_bytes() == PAYLOAD

    assert tc.load_text("tinyshakespeare") == PAYLOAD.decode()
    assert "from cache" in capsys.readouterr().out
    assert server.hits["/good"] == before + 1  # the second call did not download


def test_checksum_mismatch_raises_and_caches_nothing(server, cache, monkeypatch):
    spec = serve_as_tinyshakespeare(monkeypatch, server, "/altered")
    with pytest.raises(data.ChecksumError) as info:
        tc.load_text("tinyshakespeare")
    message = str(info.value)
    assert spec.sha256 in message
    assert hashlib.sha256(PAYLOAD[:-2] + b"?\n").hexdigest() in message
    assert "Nothing was written to the cache" in message
    assert not cache.exists() or files_in(cache) == []


@pytest.mark.parametrize("path", ["/truncated", "/short"])
def test_truncated_download_raises_and_caches_nothing(server, cache, monkeypatch, path):
    serve_as_tinyshakespeare(monkeypatch, server, path)
    with pytest.raises(data.DownloadError, match=rf"expected {len(PAYLOAD):,} bytes"):
        tc.load_text("tinyshakespeare")
    assert not cache.exists() or files_in(cache) == []


def test_http_error_is_reported(server, cache, monkeypatch):
    serve_as_tinyshakespeare(monkeypatch, server, "/missing")
    with pytest.raises(data.DownloadError, match="HTTP 404"):
        tc.load_text("tinyshakespeare")


def closed_port():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed once we leave the block


def test_offline_with_no_cache_falls_back_to_course_corpus(cache, monkeypatch, capsys):
    spec = dataclasses.replace(
        data.TINYSHAKESPEARE, url=f"http://127.0.0.1:{closed_port()}/x"
    )
    monkeypatch.setitem(data.TEXTS, "tinyshakespeare", spec)
    text = tc.load_text("tinyshakespeare")
    assert text == tc.course_corpus()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tinyshakespeare: no network (")
    assert out[-1].startswith("corpus: course (")
    assert not cache.exists() or files_in(cache) == []


def test_offline_mode_never_touches_the_network(server, cache, monkeypatch, capsys):
    serve_as_tinyshakespeare(monkeypatch, server, "/good")
    monkeypatch.setenv(data.OFFLINE_ENV, "1")
    before = server.hits["/good"]
    assert tc.load_text("tinyshakespeare") == tc.course_corpus()
    assert server.hits["/good"] == before
    assert "offline mode" in capsys.readouterr().out


@pytest.mark.skipif(
    not (SHARED / "tinyshakespeare" / "input.txt").is_file(),
    reason="needs the pre-seeded cache ../shared/data",
)
def test_pre_seeded_cache_is_used_with_the_real_checksum(monkeypatch, capsys):
    monkeypatch.setenv(data.CACHE_ENV, str(SHARED))
    monkeypatch.setitem(data.TEXTS, "tinyshakespeare", data.TINYSHAKESPEARE)
    text = tc.load_text("tinyshakespeare")
    assert hashlib.sha256(text.encode()).hexdigest() == data.TINYSHAKESPEARE.sha256
    assert text.startswith("First Citizen:")
    assert (
        capsys.readouterr().out
        == "corpus: tinyshakespeare (1,115,394 characters, from cache)\n"
    )


def test_damaged_cache_file_is_reported_and_kept(cache, monkeypatch):
    spec = dataclasses.replace(
        data.TINYSHAKESPEARE,
        sha256=hashlib.sha256(PAYLOAD).hexdigest(),
        size=len(PAYLOAD),
    )
    monkeypatch.setitem(data.TEXTS, "tinyshakespeare", spec)
    damaged = cache / "tinyshakespeare" / "input.txt"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(PAYLOAD[:100])
    with pytest.raises(data.DataError, match=r"is damaged: delete it and run again"):
        tc.load_text("tinyshakespeare")
    assert damaged.read_bytes() == PAYLOAD[:100]  # the user's file is not touched


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="root ignores directory permissions",
)
def test_read_only_cache_directory_by_permissions(server, cache, monkeypatch, capsys):
    serve_as_tinyshakespeare(monkeypatch, server, "/good")
    cache.mkdir()
    cache.chmod(0o555)
    try:
        assert tc.load_text("tinyshakespeare") == PAYLOAD.decode()
        assert "is not writable" in capsys.readouterr().out
        assert files_in(cache) == []
    finally:
        cache.chmod(0o755)


def test_read_only_cache_directory_by_failing_writes(
    server, cache, monkeypatch, capsys
):
    """As root permissions do not stop writes, so make the file system refuse them."""
    serve_as_tinyshakespeare(monkeypatch, server, "/good")

    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(data.tempfile, "mkstemp", refuse)
    assert tc.load_text("tinyshakespeare") == PAYLOAD.decode()
    out = capsys.readouterr().out
    assert "is not writable; using the download in memory" in out
    assert "from download, not cached" in out
    assert not cache.exists() or files_in(cache) == []


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "set" / "file.txt"
    assert data._store_atomically(b"abc", target)
    assert target.read_bytes() == b"abc"

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(data.os, "replace", broken_replace)
    assert not data._store_atomically(b"new contents", target)
    assert target.read_bytes() == b"abc"  # the old file is intact
    assert files_in(tmp_path) == ["set/file.txt"]  # the temporary file is gone


def test_unknown_dataset_names_the_choices():
    with pytest.raises(
        ValueError,
        match=r"expected one of \['course', 'tinyshakespeare'\], got 'shakespeare'",
    ):
        tc.load_text("shakespeare")


def test_course_corpus_is_deterministic_and_the_course_own(capsys):
    text = tc.course_corpus()
    assert text == tc.course_corpus()
    assert "Notes from the transformer course" in text  # the shipped notes
    assert "Check ``tensor`` against a shape spec" in text  # a package docstring
    assert "Rows and columns" in text  # a module docstring
    assert len(text) > 5_000
    assert tc.load_text("course") == text
    assert capsys.readouterr().out.startswith("corpus: course (")


def test_cache_dir_respects_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "x"))
    assert tc.cache_dir() == tmp_path / "x"
    monkeypatch.delenv(data.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if data.platform.system() == "Linux":
        assert tc.cache_dir() == tmp_path / "xdg" / "transformer_course"
    assert tc.cache_dir().name == "transformer_course"


def test_digits_shapes_types_and_range():
    digits = tc.load_digits()
    assert digits.x_train.shape == (1437, 1, 8, 8)
    assert digits.x_test.shape == (360, 1, 8, 8)
    assert digits.y_train.shape == (1437,)
    assert digits.x_train.dtype == torch.float32
    assert digits.y_train.dtype == torch.int64
    assert digits.x_train.min() >= 0.0
    assert digits.x_train.max() == 1.0
    assert set(digits.y_test.tolist()) == set(range(10))


def test_digits_split_is_fixed_and_stratified():
    first, second = tc.load_digits(), tc.load_digits()
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b)
    train = torch.bincount(first.y_train, minlength=10).double()
    test = torch.bincount(first.y_test, minlength=10).double()
    # stratified: every class has ~20% of its images in the test split
    share = test / (train + test)
    assert ((share - 0.2).abs() < 0.01).all(), share
    other = tc.load_digits(seed=1)
    assert not torch.equal(other.y_test, first.y_test)


def test_digits_bad_fraction():
    with pytest.raises(
        ValueError, match=r"test_fraction: expected a number in \(0, 1\), got 1.5"
    ):
        tc.load_digits(test_fraction=1.5)
