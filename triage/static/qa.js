// extractq triage, QA review page: keys to mark each field of a sampled
// record right or wrong. No inline script (CSP script-src 'self').
(function () {
  "use strict";
  var page = document.body.dataset.page;
  if (page === "qa") {
    document.addEventListener("keydown", function (e) {
      if (e.ctrlKey || e.metaKey || e.altKey || e.key !== "c") return;
      var t = e.target;
      if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT")) return;
      var b = document.getElementById("qa-claim-next");
      if (b) { b.click(); e.preventDefault(); }
    });
    return;
  }
  if (page !== "qaitem") return;
  var form = document.getElementById("qa-form");
  if (!form) return;
  var rows = Array.prototype.slice.call(form.querySelectorAll("tr.qa-field"));
  var cur = -1;

  function disabled() { var fs = form.querySelector("fieldset"); return fs && fs.disabled; }
  function verdict(row) { var c = row.querySelector("input[type=radio]:checked"); return c ? c.value : ""; }
  function mark(row, v) {
    var r = row.querySelector('input[type=radio][value="' + v + '"]');
    if (r) r.checked = true;
    row.classList.remove("v-right", "v-wrong");
    row.classList.add("v-" + v);
  }
  function select(i) {
    if (!rows.length) return;
    cur = Math.max(0, Math.min(rows.length - 1, i));
    rows.forEach(function (r, j) { r.classList.toggle("sel", j === cur); });
    rows[cur].scrollIntoView({block: "nearest"});
  }
  function nextUnmarked() {
    for (var j = cur + 1; j < rows.length; j++) if (!verdict(rows[j])) return j;
    for (j = 0; j < rows.length; j++) if (!verdict(rows[j])) return j;
    return Math.min(cur + 1, rows.length - 1);
  }
  rows.forEach(function (row, i) {
    row.addEventListener("change", function () { var v = verdict(row); if (v) mark(row, v); });
    row.addEventListener("click", function () { select(i); });
  });

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || disabled()) return;
    var t = e.target;
    if (t && t.classList && t.classList.contains("qa-fix")) {
      // Enter or Escape in a fix leaves it for the next field.
      if (e.key === "Enter" || e.key === "Escape") { t.blur(); select(nextUnmarked()); e.preventDefault(); }
      return;
    }
    if (t && (t.tagName === "INPUT" && t.type !== "radio" || t.tagName === "TEXTAREA" || t.tagName === "SELECT")) return;
    switch (e.key) {
      case "j": select(cur + 1); break;
      case "k": select(cur - 1); break;
      case "y": if (cur < 0) select(0); mark(rows[cur], "right"); select(nextUnmarked()); break;
      case "n":
        if (cur < 0) select(0);
        mark(rows[cur], "wrong");
        var fix = rows[cur].querySelector(".qa-fix");
        if (fix) fix.focus();
        break;
      case "a": rows.forEach(function (r) { if (!verdict(r)) mark(r, "right"); }); break;
      case "s": case "Enter": form.requestSubmit(); break;
      default: return;
    }
    e.preventDefault();
  });
  select(0);
})();
