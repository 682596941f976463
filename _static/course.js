// The course's additions to the theme's behaviour (issue 22). Jupyter Book adds
// a <script> tag for every .js file in _static/.
//
// A figure opens at full size when clicked or tapped: on a phone the column
// shrinks every figure, and its labels with it. (Sphinx itself links a figure
// that carries its size, as the twice-the-pixels ones do.)
document.addEventListener("DOMContentLoaded", () => {
  for (const image of document.querySelectorAll("div.cell_output img")) {
    // already a link; or inline data, which browsers do not open in a tab
    if (image.closest("a") || image.getAttribute("src").startsWith("data:")) continue;
    const link = document.createElement("a");
    link.href = image.getAttribute("src");
    link.target = "_blank";
    link.rel = "noopener";
    link.className = "tc-figure-link";
    link.title = "Open the figure at full size";
    image.replaceWith(link);
    link.appendChild(image);
  }
});

// A name in a table (the "Code used in this chapter" tables) breaks only where
// a reader would: after a dot or an underscore, or between the words of a
// CamelCase name, never in the middle of a word, as on a phone, where the
// columns are narrow. <wbr> marks the places; the CSS forbids any other.
document.addEventListener("DOMContentLoaded", () => {
  const places = /([._])(?=\w)|([a-z])(?=[A-Z])/g;
  for (const code of document.querySelectorAll("article.bd-article table code.literal")) {
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    const texts = [];
    while (walker.nextNode()) texts.push(walker.currentNode);
    for (const text of texts) {
      const parts = text.data.replace(places, "$1$2\u0000").split("\u0000");
      const pieces = document.createDocumentFragment();
      parts.forEach((part, index) => {
        if (index) pieces.appendChild(document.createElement("wbr"));
        const piece = document.createElement("span");
        piece.className = "tc-name-piece"; // no break inside (not at "-" either)
        piece.textContent = part;
        pieces.appendChild(piece);
      });
      text.replaceWith(pieces);
    }
  }
});

// Code that scrolls sideways fades at each edge that has more beyond it (a
// reader on a phone: code lines simply stopped at the screen's edge). The
// shadows course.css gives outputs need the box's own background, which code
// boxes do not share with the page.
document.addEventListener("DOMContentLoaded", () => {
  const boxes = document.querySelectorAll("div.highlight pre");
  const mark = (box) => {
    const more = box.scrollWidth - box.clientWidth;
    box.classList.toggle("tc-more-left", more > 1 && box.scrollLeft > 1);
    box.classList.toggle("tc-more-right", more > 1 && box.scrollLeft < more - 1);
  };
  for (const box of boxes) {
    mark(box);
    box.addEventListener("scroll", () => mark(box), { passive: true });
  }
  window.addEventListener("resize", () => boxes.forEach(mark));
});
