// The submit form: the running total of devices as the fields change; re-check feasibility when a field that
// changes the request changes (only once a check was shown), and after htmx swapped new fields in (class or kind
// changed, or a suggestion applied); bring the answer into view; keep the typed fields when the team is switched.
(function () {
  "use strict";
  var names = ["devices_per_pod", "pod_count", "topology_mode", "topology_level", "priority_class"];

  function number(form, name, fallback) {
    var field = form.elements[name];
    var value = field ? parseInt(field.value, 10) : NaN;
    return isNaN(value) ? fallback : value;
  }

  function recount() {
    var form = document.getElementById("queues-job-form");
    var planNode = document.getElementById("queues-job-total-plan");
    var out = document.querySelector("#queues-job-total [data-total]");
    if (!form || !planNode || !out) { return; }
    var plan = JSON.parse(planNode.textContent);
    var perPod = number(form, "devices_per_pod", 1), pods = number(form, "pod_count", 1);
    var parts = [], total = 0;
    plan.companions.forEach(function (c) {
      var devices = number(form, c.field, c.like_primary ? perPod : c.devices);
      total += c.count * devices;
      parts.push(c.name + " " + c.count + " pod" + (c.count === 1 ? "" : "s") + " \u00d7 " + devices);
    });
    total += pods * perPod;
    parts.push(plan.primary + " " + pods + " pod" + (pods === 1 ? "" : "s") + " \u00d7 " + perPod);
    out.textContent = total + " " + plan.unit[total === 1 ? 0 : 1] + " in all: " + parts.join(" + ");
  }

  function counts(target) {
    return target && target.name && (names.indexOf(target.name) >= 0 || /^pod_set_.*_devices$/.test(target.name));
  }

  document.addEventListener("input", function (event) { if (counts(event.target)) { recount(); } });
  document.addEventListener("change", function (event) {
    if (counts(event.target)) { recount(); }
    if (event.target && names.indexOf(event.target.name) >= 0 && window.htmx) { htmx.trigger(document.body, "queues-recheck"); }
  });
  document.body.addEventListener("htmx:afterSettle", function (event) {
    var verb = event.detail.requestConfig && event.detail.requestConfig.verb;
    var target = event.detail.target;
    if (verb === "get" && target && target.id === "queues-job-form-fields" && window.htmx) { htmx.trigger(document.body, "queues-recheck"); }
    var answer = document.getElementById("queues-job-feasibility");
    if (answer && target && target.id === "queues-job-feasibility" && verb === "post") {
      var box = answer.getBoundingClientRect();
      if (box.top < 0 || box.bottom > window.innerHeight) { answer.scrollIntoView({block: "nearest"}); }
    }
  });

  // Switching team reloads the page: carry what was typed into the new team's form (the query string fills it).
  document.addEventListener("submit", function (event) {
    var switcher = event.target;
    var form = document.getElementById("queues-job-form");
    if (!form || !switcher.classList || !switcher.classList.contains("team-switch")) { return; }
    var params = new URLSearchParams();
    new FormData(form).forEach(function (value, key) {
      if (key !== "csrfmiddlewaretoken" && key !== "action" && value !== "") { params.append(key, value); }
    });
    switcher.elements.next.value = form.getAttribute("action") + "?" + params.toString();
  });
})();
