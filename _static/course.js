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
