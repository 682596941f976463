"""Vendor the JavaScript the built book needs, so that it renders offline.

By default a Jupyter Book page loads MathJax, require.js and the ipywidgets
html-manager from CDNs: offline, math shows as raw TeX and widgets are blank.
This module fetches pinned npm tarballs from the npm registry, checks each
against its published SHA-512 integrity, and unpacks the files the book needs
into ``_vendor/_static/vendor/``. ``_config.yml`` copies ``_vendor`` into the
built site with ``html_extra_path`` (not ``_static``, where Jupyter Book would add
a ``<script>`` tag for every ``.js`` file) and points ``mathjax_path`` and
``nb_ipywidgets_js`` at the copies.

Run by ``make book`` and by the book-build test::

    python tools/book_assets.py [--dest _vendor]

The tarballs are kept in ``_vendor/.tarballs`` (Sphinx skips dot-folders when it
copies ``_vendor``), and a stamp file records what was unpacked, so later builds
need no network.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["ASSETS", "NpmAsset", "vendor_assets"]


@dataclass(frozen=True)
class NpmAsset:
    """Files taken from one pinned npm package."""

    package: str
    version: str
    integrity: str  # the registry's "sha512-<base64>" for the tarball
    members: str  # path inside the tarball: a file, or a folder ending in "/"
    target: str  # path under _static/vendor/
    skip: tuple[str, ...] = ()  # glob patterns (relative to members) not needed

    @property
    def tarball_url(self) -> str:
        basename = self.package.split("/")[-1]
        return (
            f"https://registry.npmjs.org/{self.package}/-/{basename}-{self.version}.tgz"
        )


ASSETS = (
    NpmAsset(
        "mathjax",
        "3.2.2",
        "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
        "package/es5/",
        "mathjax/",
        # The book loads tex-chtml.js; the other combined bundles and the SVG
        # output are never requested.
        skip=(
            "*-svg*.js",
            "mml-*.js",
            "tex-mml-*.js",
            "tex-chtml-full*.js",
            "output/svg*",
        ),
    ),
    NpmAsset(
        "requirejs",
        "2.3.7",
        "sha512-DouTG8T1WanGok6Qjg2SXuCMzszOo0eHeH9hDZ5Y4x8Je+9JB38HdTLT4/VA8OaUhBa0JPVHJ0pyBkM1z+pDsw==",
        "package/require.js",
        "require.js",
    ),
    NpmAsset(
        "@jupyter-widgets/html-manager",
        "1.0.6",
        "sha512-+Mn+Ra8wyIHrYaUpfmf9A3dsLkt/NuwzPQN8sthdxBD35VV5cOJbpmgMhNR27n/rmP3mKyEe0PWCJrtZrXTXDQ==",
        "package/dist/",
        "html-manager/",
        # embed-amd.js and the icon fonts it loads; not the other bundles.
        skip=("*.d.ts", "*.map", "embed.js", "libembed*", "*.embed.js", "*.txt"),
    ),
)

# Written next to the vendored files and loaded after require.js, before the
# widget manager (nb_ipywidgets_js in _config.yml). Two fixes:
# 1. Icon fonts. Each widget module finds its files (the Font Awesome fonts of
#    the widget styles) in the folder require.js resolves its name to, by default
#    the page's folder plus "@jupyter-widgets/": 404s. Map the modules' names to
#    the vendored html-manager folder, where the fonts are.
# 2. MathJax. The widget manager typesets widget labels with the MathJax 2 call
#    MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); MathJax 3 has no Hub,
#    so every widget view threw "Cannot read properties of undefined (reading
#    'Queue')". Give MathJax 3 a Hub whose Queue typesets the same elements with
#    MathJax.typesetPromise; before MathJax is ready it does nothing (MathJax
#    typesets the whole page once it is).
REQUIRE_CONFIG = """\
// Written by transformer_course.book_assets (see REQUIRE_CONFIG there).
(function () {
  var here = document.currentScript.src.replace(/[^/]*([?#].*)?$/, "");
  require.config({
    paths: {
      "@jupyter-widgets/html-manager/dist": here + "html-manager",
      "@jupyter-widgets": here + "html-manager",
    },
  });

  var hub = {
    Queue: function () {
      var mathjax = window.MathJax;
      if (!mathjax || !mathjax.typesetPromise || !mathjax.startup) return;
      var elements = [];
      for (var i = 0; i < arguments.length; i++) {
        var call = arguments[i];
        if (Array.isArray(call) && call[0] === "Typeset" && call[2]) {
          elements.push(call[2]);
        }
      }
      if (!elements.length) return;
      mathjax.startup.promise = mathjax.startup.promise
        .then(function () { return mathjax.typesetPromise(elements); })
        .catch(function (error) { console.warn("MathJax:", error); });
    },
  };
  var mathjax = window.MathJax;
  if (mathjax && mathjax.version) {
    // MathJax 3 is already running.
    if (!mathjax.Hub) mathjax.Hub = hub;
    return;
  }
  if (!mathjax && !document.querySelector("script[src*='mathjax' i]")) return;
  // MathJax is still to load: window.MathJax is its configuration (or nothing).
  // Give the configuration a Hub for now, and the running MathJax one when ready.
  mathjax = window.MathJax = mathjax || {};
  mathjax.Hub = hub;
  mathjax.startup = mathjax.startup || {};
  var ready = mathjax.startup.ready;
  mathjax.startup.ready = function () {
    if (ready) ready();
    else window.MathJax.startup.defaultReady();
    window.MathJax.Hub = hub;
  };
})();
"""


def _check_integrity(data: bytes, asset: NpmAsset) -> None:
    algorithm, _, expected = asset.integrity.partition("-")
    got = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if got != expected:
        raise RuntimeError(
            f"{asset.package}@{asset.version}: expected {asset.integrity}, got "
            f"{algorithm}-{got}; the tarball was not used"
        )


def _store_atomically(data: bytes, path: Path) -> bool:
    """Write ``data`` to ``path`` via a temporary file and a rename, so that a
    reader never sees a partial file. Returns False if the folder is not writable."""
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


def _tarball(asset: NpmAsset, tarballs: Path) -> bytes:
    """The verified tarball: from ``tarballs`` when there, else downloaded."""
    cached = tarballs / f"{asset.package.replace('/', '__')}-{asset.version}.tgz"
    if cached.is_file():
        data = cached.read_bytes()
        _check_integrity(data, asset)
        return data
    with urllib.request.urlopen(asset.tarball_url, timeout=60) as response:
        data = response.read()
    _check_integrity(data, asset)
    _store_atomically(data, cached)  # best effort: a read-only folder is fine
    return data


def _extract(data: bytes, asset: NpmAsset, vendor: Path) -> int:
    count = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            if not member.isfile() or not member.name.startswith(asset.members):
                continue
            relative = PurePosixPath(member.name[len(asset.members) :])
            if any(fnmatch.fnmatch(str(relative), pattern) for pattern in asset.skip):
                continue
            if ".." in relative.parts:
                raise RuntimeError(f"{asset.package}: unsafe path {member.name!r}")
            target = (
                vendor / asset.target / relative
                if asset.members.endswith("/")
                else vendor / asset.target
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            assert source is not None  # isfile() above
            target.write_bytes(source.read())
            count += 1
    if count == 0:
        raise RuntimeError(f"{asset.package}: nothing matched {asset.members!r}")
    return count


def vendor_assets(dest: Path | str = "_vendor") -> Path:
    """Make ``dest/_static/vendor`` hold the pinned assets; return that folder.

    Skips all work when a previous run left the same versions there.
    """
    vendor = Path(dest) / "_static" / "vendor"
    stamp = vendor / "VERSIONS.json"
    wanted = {a.package: f"{a.version} {a.members} skip={list(a.skip)}" for a in ASSETS}
    wanted["require-config.js"] = hashlib.sha256(REQUIRE_CONFIG.encode()).hexdigest()
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return vendor
    if vendor.exists():
        shutil.rmtree(vendor)
    vendor.mkdir(parents=True)
    for asset in ASSETS:
        count = _extract(_tarball(asset, Path(dest) / ".tarballs"), asset, vendor)
        print(f"vendored {asset.package}@{asset.version}: {count} files")
    (vendor / "require-config.js").write_text(REQUIRE_CONFIG)
    stamp.write_text(json.dumps(wanted, indent=1, sort_keys=True))
    return vendor


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dest", default="_vendor", help="folder to fill (default: _vendor)"
    )
    args = parser.parse_args(argv)
    vendor_assets(args.dest)


if __name__ == "__main__":
    main()
