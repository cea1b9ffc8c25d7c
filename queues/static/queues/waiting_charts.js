/* Draws the waiting page's Plotly figures from the JSON the server rendered (plotly.js is served locally), again
   after each htmx swap of the report. */
(function () {
  "use strict";

  function draw(root) {
    if (!window.Plotly) { return; }
    (root || document).querySelectorAll("[data-plotly-figure]").forEach(function (el) {
      var source = document.getElementById(el.getAttribute("data-plotly-figure"));
      if (!source) { return; }
      var fig = JSON.parse(source.textContent);
      window.Plotly.react(el, fig.data, fig.layout, fig.config);
      el.setAttribute("data-drawn", "1");
    });
  }

  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function () { draw(document); });
})();
