"""Links that read as the prose writes them: citations and equation numbers.

The chapters link a citation to its key in ``references.bib`` and an equation
to its number, as plain Markdown links that Jupyter shows as written:

    [Turner](#turner2023) §2.3          [eq. (4.4)](#eq-4-4)

In the book, this extension keeps each link's text and points it at

* a citation: the work's entry on the References page (``book/references.md``),
  with the full reference as the tooltip (sphinxcontrib-bibtex alone would
  replace the text with "[Turner, 2023]");
* an equation: the display equation that carries ``\\tag{4.4}``, on whichever
  page it is (each tagged equation gets the anchor ``eq-4-4``; a tag's
  characters other than letters and digits become ``-``: ``T1–T2`` is
  ``eq-T1-T2``).

A target that is neither is left to MyST, which warns (``-W`` fails the build).
"""

from __future__ import annotations

import re

import pybtex.plugin
from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

TAG = re.compile(r"\\tag\{([^}]*)\}")


def equation_anchor(tag: str) -> str:
    """``4.4`` -> ``eq-4-4``: the anchor of the equation tagged ``tag``."""
    return "eq-" + re.sub(r"[^0-9A-Za-z]+", "-", tag).strip("-")


def _anchor_equations(app, doctree) -> None:
    """At read time: an anchor before each tagged display equation."""
    found = app.env.course_equations = getattr(app.env, "course_equations", {})
    for math in list(doctree.findall(nodes.math_block)):
        for tag in TAG.findall(math.astext()):
            anchor = equation_anchor(tag)
            math.parent.insert(
                math.parent.index(math), nodes.target("", "", ids=[anchor])
            )
            found[anchor] = (app.env.docname, tag)


def _purge(app, env, docname) -> None:
    found = getattr(env, "course_equations", {})
    for anchor in [a for a, (doc, _) in found.items() if doc == docname]:
        del found[anchor]


def _merge(app, env, docnames, other) -> None:
    env.course_equations = getattr(env, "course_equations", {})
    env.course_equations.update(getattr(other, "course_equations", {}))


class CourseLinks(SphinxPostTransform):
    """``[text](#key)``: a citation or an equation, linked with its own text."""

    default_priority = 8  # before MyST's own resolver (9)

    def run(self, **kwargs) -> None:
        citations = {c.key: c for c in self.env.get_domain("cite").citations}
        equations = getattr(self.env, "course_equations", {})
        plaintext = pybtex.plugin.find_plugin("pybtex.backends", "plaintext")()
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst" or node.get("refdomain") == "doc":
                continue
            target = node["reftarget"]
            here = node.get("refdoc", self.env.docname)
            if target in citations:
                citation = citations[target]
                there, anchor = citation.bibliography_key.docname, citation.citation_id
                kind = "course-citation"
                title = (
                    citation.tooltip_entry.text.render(plaintext)
                    if citation.tooltip_entry
                    else None
                )
            elif target in equations:
                (there, tag), anchor, kind = equations[target], target, "course-eq"
                title = f"equation ({tag})"
            else:
                continue
            uri = self.app.builder.get_relative_uri(here, there)
            link = nodes.reference(
                "", "", internal=True, refuri=f"{uri}#{anchor}", classes=[kind]
            )
            if title:
                link["reftitle"] = title
            link += node.children
            node.replace_self(link)


def setup(app):
    app.connect("doctree-read", _anchor_equations)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.add_post_transform(CourseLinks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
