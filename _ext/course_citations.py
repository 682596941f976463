"""Citations that read as the prose writes them, linked to the References page.

A chapter cites a work as a Markdown link to its key in ``references.bib``:
``[Turner](#turner2023) §2.3``. In Jupyter the link shows its own text. In the
book, sphinxcontrib-bibtex alone would resolve it, but replace the text with
"[Turner, 2023]"; this post-transform runs first and keeps the text, linking
it to the work's entry on the References page (``book/references.md``), with
the full reference as the link's tooltip. A key that is not in the .bib file
is left to MyST, which warns (and ``-W`` fails the build).
"""

from __future__ import annotations

import pybtex.plugin
from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform


class CitationLinks(SphinxPostTransform):
    """``[text](#key)`` with ``key`` in the bibliography: a link to its entry."""

    default_priority = 8  # before MyST's own resolver (9)

    def run(self, **kwargs) -> None:
        domain = self.env.get_domain("cite")
        citations = {c.key: c for c in domain.citations}
        plaintext = pybtex.plugin.find_plugin("pybtex.backends", "plaintext")()
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst" or node.get("refdomain") == "doc":
                continue
            citation = citations.get(node["reftarget"])
            if citation is None:
                continue
            here = node.get("refdoc", self.env.docname)
            there = citation.bibliography_key.docname
            uri = self.app.builder.get_relative_uri(here, there)
            link = nodes.reference(
                "",
                "",
                internal=True,
                refuri=f"{uri}#{citation.citation_id}",
                classes=["course-citation"],
            )
            if citation.tooltip_entry:
                link["reftitle"] = citation.tooltip_entry.text.render(plaintext)
            link += node.children
            node.replace_self(link)


def setup(app):
    app.add_post_transform(CitationLinks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
