// extractq triage: the reviewer's flow beyond app.js. The queue's search
// key and multi-select; the item page's select-to-fill. No inline script
// (CSP script-src 'self'); customer text only ever goes into the page as
// textContent or form values.
(function () {
  "use strict";

  var page = document.body.dataset.page;

  function $(sel, root) { return (root || document).querySelector(sel); }
  function $$(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }

  function typing(el) {
    if (!el) return false;
    var t = el.tagName;
    // A focused checkbox takes no letters: the keys stay shortcuts.
    if (t === "INPUT" && (el.type === "checkbox" || el.type === "radio")) return false;
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
  // ---- queue: multi-select ------------------------------------------------
  // The checkboxes sit in the live part of the page, which app.js
  // replaces when the queue changes: the ids picked are kept here and
  // ticked again in each new copy, and an item that left the page (or is
  // no longer open, so has no checkbox) is no longer picked.
  function multiSelect() {
    var form = $("#bulk"), live = $("#live");
    if (!form || !live) return;
    var picked = {};
    function boxes() { return $$('input[type=checkbox][name="id"][form="bulk"]'); }
    function sync() {
      var bs = boxes(), n = 0, onPage = {};
      bs.forEach(function (b) {
        onPage[b.value] = true;
        b.checked = !!picked[b.value];
        var row = b.closest("tr");
        if (row) row.classList.toggle("picked", b.checked);
        if (b.checked) n++;
      });
      Object.keys(picked).forEach(function (id) { if (!onPage[id]) delete picked[id]; });
      var all = $("#pick-all");
      if (all) { all.checked = bs.length > 0 && n === bs.length; all.indeterminate = n > 0 && n < bs.length; }
      var label = $("#picked");
      if (label) label.textContent = n === 0 ? "none selected" : n + " selected";
      $$("#bulk button[name=action]").forEach(function (btn) { btn.disabled = n === 0; });
    }
    function pick(box, on) { if (on) picked[box.value] = true; else delete picked[box.value]; }
    function pickAll(on) { boxes().forEach(function (b) { pick(b, on); }); sync(); }
    // A click on a row opens its item (app.js); a click in the checkbox's
    // cell ticks the box instead. Caught before the row's own handler.
    live.addEventListener("click", function (e) {
      var cell = e.target.closest && e.target.closest("td.pick, th.pick");
      if (!cell) return;
      e.stopPropagation();
      var box = $("input[type=checkbox]", cell);
      if (box && e.target !== box) box.click();
    }, true);
    live.addEventListener("change", function (e) {
      var b = e.target;
      if (b.id === "pick-all") { pickAll(b.checked); return; }
      if (b.name === "id" && b.type === "checkbox") { pick(b, b.checked); sync(); }
    });
    new MutationObserver(sync).observe(live, { childList: true });
    document.addEventListener("keydown", function (e) {
      if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
      if (e.key === "x") {
        var row = $("#items tbody tr.row.sel"), box = row && $('input[name="id"]', row);
        if (!box) return;
        pick(box, !box.checked);
        sync();
        e.preventDefault();
      } else if (e.key === "*") {
        var bs = boxes();
        pickAll(!(bs.length > 0 && bs.every(function (b) { return b.checked; })));
        e.preventDefault();
      }
    });
    sync();
  }
  if (page === "queue") multiSelect();
})();
