import base64
import hashlib
import io
import tarfile

import pytest

from tools import book_assets
from tools.book_assets import NpmAsset


def make_tarball(files):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def integrity(data):
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def test_pinned_assets_are_sha512():
    for asset in book_assets.ASSETS:
        assert asset.integrity.startswith("sha512-")
        assert asset.tarball_url.startswith("https://registry.npmjs.org/")
    manager = book_assets.ASSETS[-1]
    assert manager.tarball_url.endswith(
        "/@jupyter-widgets/html-manager/-/html-manager-1.0.6.tgz"
    )


def test_altered_tarball_is_refused():
    data = make_tarball({"package/a.js": b"x"})
    asset = NpmAsset("demo", "1.0.0", integrity(data), "package/", "demo/")
    book_assets._check_integrity(data, asset)
    with pytest.raises(RuntimeError, match=r"demo@1.0.0: expected sha512-"):
        book_assets._check_integrity(data + b"\0", asset)


def test_extract_folder_single_file_and_skips(tmp_path):
    data = make_tarball(
        {
            "package/es5/tex-chtml.js": b"chtml",
            "package/es5/tex-svg.js": b"svg",
            "package/es5/output/chtml/fonts/a.woff": b"font",
            "package/README.md": b"readme",
        }
    )
    folder = NpmAsset(
        "m", "1", integrity(data), "package/es5/", "mj/", skip=("*-svg*.js",)
    )
    assert book_assets._extract(data, folder, tmp_path) == 2
    assert (tmp_path / "mj/tex-chtml.js").read_bytes() == b"chtml"
    assert (tmp_path / "mj/output/chtml/fonts/a.woff").is_file()
    assert not (tmp_path / "mj/tex-svg.js").exists()
    single = NpmAsset("r", "1", integrity(data), "package/README.md", "readme.md")
    assert book_assets._extract(data, single, tmp_path) == 1
    assert (tmp_path / "readme.md").read_bytes() == b"readme"


def test_path_traversal_is_refused(tmp_path):
    data = make_tarball({"package/../../evil.js": b"x"})
    asset = NpmAsset("bad", "1", integrity(data), "package/", "bad/")
    with pytest.raises(RuntimeError, match="unsafe path"):
        book_assets._extract(data, asset, tmp_path)


def test_vendor_assets_uses_the_cache_and_the_stamp(tmp_path, monkeypatch):
    data = make_tarball({"package/lib.js": b"lib"})
    asset = NpmAsset("demo", "2.0.0", integrity(data), "package/lib.js", "lib.js")
    monkeypatch.setattr(book_assets, "ASSETS", (asset,))
    cached = tmp_path / "v" / ".tarballs" / "demo-2.0.0.tgz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(data)  # pre-seeded: no network needed

    vendor = book_assets.vendor_assets(tmp_path / "v")
    assert (vendor / "lib.js").read_bytes() == b"lib"
    (vendor / "lib.js").write_bytes(b"changed")
    book_assets.vendor_assets(tmp_path / "v")  # same versions: nothing redone
    assert (vendor / "lib.js").read_bytes() == b"changed"


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "set" / "file.tgz"
    assert book_assets._store_atomically(b"abc", target)
    assert target.read_bytes() == b"abc"

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(book_assets.os, "replace", broken_replace)
    assert not book_assets._store_atomically(b"new contents", target)
    assert target.read_bytes() == b"abc"  # the old file is intact
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.tgz"]


def test_atomic_write_reports_a_read_only_folder(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(book_assets.tempfile, "mkstemp", refuse)
    assert not book_assets._store_atomically(b"abc", tmp_path / "file.tgz")
    assert list(tmp_path.iterdir()) == []
