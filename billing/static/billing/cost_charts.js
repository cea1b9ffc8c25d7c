/* Draws the cost page's Plotly figures from the JSON the server rendered (plotly.js is served locally). */
(function () {
  "use strict";
  function draw(root) {
    if (!window.Plotly) { return; }
    (root || document).querySelectorAll("[data-plotly-figure]").forEach(function (el) {
      var source = document.getElementById(el.getAttribute("data-plotly-figure"));
      if (!source) { return; }
      var fig = JSON.parse(source.textContent);
      window.Plotly.react(el, fig.data, fig.layout, fig.config);
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function () { draw(document); });
})();
