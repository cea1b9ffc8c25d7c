// The admin's searching selects (select2, Django's autocomplete fields) render a combobox and a text box with no
// accessible name when nothing is chosen yet: name them after the field's label (axe-core: aria-input-field-name).
(function () {
  "use strict";
  function fieldName(select) {
    var label = select.id ? document.querySelector('label[for="' + select.id + '"]') : null;
    var text = label ? label.textContent : select.getAttribute("aria-label") || select.name;
    return text.replace(/:\s*$/, "").trim();
  }
  function nameAll() {
    document.querySelectorAll("select.admin-autocomplete").forEach(function (select) {
      var box = select.nextElementSibling;
      if (!box) { return; }
      box.querySelectorAll(".select2-selection, .select2-selection__rendered").forEach(function (el) {
        if (!el.getAttribute("aria-label")) { el.setAttribute("aria-label", fieldName(select)); }
      });
    });
  }
  window.addEventListener("load", nameAll);
  document.addEventListener("formset:added", function () { window.setTimeout(nameAll, 0); });
})();
