/* Draws the cost page's Plotly figures from the JSON the server rendered (plotly.js is served locally), and
   hides or shows the idle reservation series of the charts (the checkbox's choice is kept in localStorage). */
(function () {
  "use strict";
  var KEY = "billing.hideIdle";

  function hidden() {
    try { return window.localStorage.getItem(KEY) === "1"; } catch (e) { return false; }
  }

  function applyIdle(root) {
    var hide = hidden();
    var box = document.getElementById("billing-hide-idle");
    if (box) { box.checked = hide; }
    var note = document.getElementById("billing-hide-idle-note");
    if (note) { note.hidden = !hide; }
    (root || document).querySelectorAll("[data-plotly-figure]").forEach(function (el) {
      if (!el.data) { return; }
      var idle = [];
      el.data.forEach(function (trace, i) { if (trace.meta === "idle") { idle.push(i); } });
      if (idle.length) { window.Plotly.restyle(el, { visible: hide ? false : true }, idle); }
    });
  }

  function draw(root) {
    if (!window.Plotly) { return; }
    (root || document).querySelectorAll("[data-plotly-figure]").forEach(function (el) {
      var source = document.getElementById(el.getAttribute("data-plotly-figure"));
      if (!source) { return; }
      var fig = JSON.parse(source.textContent);
      window.Plotly.react(el, fig.data, fig.layout, fig.config);
      el.setAttribute("data-drawn", "1");
    });
    applyIdle(root);
  }

  document.addEventListener("change", function (event) {
    if (event.target && event.target.id === "billing-hide-idle") {
      try { window.localStorage.setItem(KEY, event.target.checked ? "1" : "0"); } catch (e) { /* private mode */ }
      applyIdle(document);
    }
  });
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function () { draw(document); });
})();
