// Behaviour of every page, kept out of the HTML so that the Content-Security-Policy allows only these files:
// a select marked data-submit-on-change submits its form when it changes (the team switcher).
(function () {
  "use strict";
  document.addEventListener("change", function (event) {
    var el = event.target;
    if (el && el.matches && el.matches("select[data-submit-on-change]") && el.form) { el.form.submit(); }
  });
})();
