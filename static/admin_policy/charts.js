/* Draws the policy pages' Plotly figures from the JSON the server rendered (plotly.js is served locally). */
(function () {
  "use strict";
  function draw() {
    if (!window.Plotly) { return; }
    document.querySelectorAll("[data-plotly-figure]").forEach(function (el) {
      var source = document.getElementById(el.getAttribute("data-plotly-figure"));
      if (!source) { return; }
      var fig = JSON.parse(source.textContent);
      window.Plotly.react(el, fig.data, fig.layout, fig.config);
      el.setAttribute("data-drawn", "1");
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
  window.addEventListener("load", draw);
  // A what-if preview's result arrives by htmx once its replay is done.
  document.addEventListener("htmx:afterSettle", draw);
})();
