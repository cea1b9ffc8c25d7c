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
  // Django starts select2 from a jQuery ready handler, which jQuery 3 runs from a timer: it may come after the page's
  // load event. Name the boxes whenever select2 adds some, whenever that is (and once the page has loaded).
  var pending = false;
  function soon() {
    if (pending) { return; }
    pending = true;
    window.setTimeout(function () { pending = false; nameAll(); }, 0);
  }
  window.addEventListener("load", soon);
  document.addEventListener("formset:added", soon);
  document.addEventListener("DOMContentLoaded", function () {
    new MutationObserver(function (records) {
      for (var i = 0; i < records.length; i++) {
        if (records[i].addedNodes.length) { soon(); return; }
      }
    }).observe(document.body, { childList: true, subtree: true });
  });
})();
