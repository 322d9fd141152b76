// extractq triage: the reviewer's flow beyond app.js. The queue's search
// key; in later parts multi-select and select-to-fill. No inline script
// (CSP script-src 'self'); customer text only ever goes into the page as
// textContent or form values.
(function () {
  "use strict";

  var page = document.body.dataset.page;

  function $(sel, root) { return (root || document).querySelector(sel); }

  function typing(el) {
    if (!el) return false;
    var t = el.tagName;
    return t === "INPUT" || t === "TEXTAREA" || t === "SELECT" || el.isContentEditable;
  }

  // ---- queue: search ------------------------------------------------------
  // "/" goes to the search box. The focus moves at the key's release, so
  // that the "/" itself is never typed into the box, whichever way the
  // browser (or a driver such as the DevTools protocol) sends its
  // character.
  var slash = false;
  document.addEventListener("keydown", function (e) {
    slash = false;
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    if (page === "queue" && e.key === "/" && $("#search")) { slash = true; e.preventDefault(); }
  });
  document.addEventListener("keyup", function (e) {
    if (!slash || e.key !== "/") return;
    slash = false;
    var q = $("#search");
    q.focus();
    q.select();
  });
})();
