// The submit form: re-check feasibility when a field that changes the request changes (only once a check was
// shown), and after htmx swapped new fields in (class changed, or a suggestion applied).
(function () {
  "use strict";
  var names = ["devices_per_pod", "pod_count", "topology_mode", "topology_level", "priority_class"];
  document.addEventListener("change", function (event) {
    if (event.target && names.indexOf(event.target.name) >= 0 && window.htmx) { htmx.trigger(document.body, "queues-recheck"); }
  });
  document.body.addEventListener("htmx:afterSettle", function (event) {
    var verb = event.detail.requestConfig && event.detail.requestConfig.verb;
    if (verb === "get" && event.detail.target && event.detail.target.id === "queues-job-form-fields" && window.htmx) { htmx.trigger(document.body, "queues-recheck"); }
  });
})();
