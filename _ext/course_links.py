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

Each entry on the References page links back to the pages that cite it
("Cited in: 2 Attention, 6 …"), in the order of the table of contents.

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


def _note_citers(app, doctree) -> None:
    """At read time: which targets of ``[text](#key)`` links this page names,
    and the section of the page where it first names each."""
    citers = app.env.course_citers = getattr(app.env, "course_citers", {})
    sections = app.env.course_cite_sections = getattr(
        app.env, "course_cite_sections", {}
    )
    for node in doctree.findall(addnodes.pending_xref):
        if node.get("reftype") == "myst" and node.get("refdomain") != "doc":
            target, page = node["reftarget"], app.env.docname
            citers.setdefault(target, set()).add(page)
            section = node.parent
            while section is not None and not isinstance(section, nodes.section):
                section = section.parent
            if section is not None and section["ids"]:
                sections.setdefault((target, page), section["ids"][0])


def _purge(app, env, docname) -> None:
    found = getattr(env, "course_equations", {})
    for anchor in [a for a, (doc, _) in found.items() if doc == docname]:
        del found[anchor]
    for pages in getattr(env, "course_citers", {}).values():
        pages.discard(docname)
    sections = getattr(env, "course_cite_sections", {})
    for key in [k for k in sections if k[1] == docname]:
        del sections[key]


def _merge(app, env, docnames, other) -> None:
    env.course_equations = getattr(env, "course_equations", {})
    env.course_equations.update(getattr(other, "course_equations", {}))
    env.course_citers = getattr(env, "course_citers", {})
    for target, pages in getattr(other, "course_citers", {}).items():
        env.course_citers.setdefault(target, set()).update(pages)
    env.course_cite_sections = getattr(env, "course_cite_sections", {})
    env.course_cite_sections.update(getattr(other, "course_cite_sections", {}))


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


class CitedIn(SphinxPostTransform):
    """After each entry of a bibliography: links to the pages that cite it."""

    default_priority = 6  # after sphinxcontrib-bibtex writes the entries (5)

    def run(self, **kwargs) -> None:
        key_of = {c.citation_id: c.key for c in self.env.get_domain("cite").citations}
        citers = getattr(self.env, "course_citers", {})
        sections = getattr(self.env, "course_cite_sections", {})
        order = _toc_order(self.env)
        here = self.env.docname
        for entry in list(self.document.findall(nodes.citation)):
            key = next((key_of[i] for i in entry["ids"] if i in key_of), None)
            pages = sorted(
                citers.get(key, ()) - {here}, key=lambda d: order.get(d, len(order))
            )
            if not pages:
                continue
            line = nodes.paragraph("", "Cited in: ", classes=["course-cited-in"])
            for i, page in enumerate(pages):
                if i:
                    line += nodes.Text(", ")
                uri = self.app.builder.get_relative_uri(here, page)
                # to the section that first cites it, not the top of a long page
                section = sections.get((key, page))
                uri += f"#{section}" if section else ""
                link = nodes.reference("", "", internal=True, refuri=uri)
                link += nodes.Text(self.env.titles[page].astext())
                line += link
            entry += line


def _toc_order(env) -> dict[str, int]:
    """Each page's place in the book's reading order (the table of contents)."""
    seen: list[str] = []

    def walk(docname: str) -> None:
        if docname in seen:
            return
        seen.append(docname)
        for child in env.toctree_includes.get(docname, []):
            walk(child)

    walk(env.config.root_doc)
    return {name: i for i, name in enumerate(seen)}


def setup(app):
    app.connect("doctree-read", _anchor_equations)
    app.connect("doctree-read", _note_citers)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.add_post_transform(CourseLinks)
    app.add_post_transform(CitedIn)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
