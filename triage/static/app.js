// extractq triage: keyboard shortcuts, live queue updates, lease renewal
// and live record checks. No inline script anywhere (CSP script-src
// 'self'); customer text only ever goes into the page as textContent.
(function () {
  "use strict";

  var csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
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

  function go(link) { if (link && link.href) window.location.href = link.href; }

  function click(el) { if (el && !el.disabled && !(el.closest && el.closest("fieldset[disabled]"))) { el.click(); return true; } return false; }

  // ---- help ---------------------------------------------------------------
  var help = $("#help");
  function toggleHelp(show) {
    if (!help) return;
    help.hidden = show === undefined ? !help.hidden : !show;
  }

  // ---- queue page ---------------------------------------------------------
  var sel = -1;
  function rows() { return $$("#items tbody tr.row"); }
  function select(i) {
    var rs = rows();
    if (!rs.length) return;
    sel = Math.max(0, Math.min(rs.length - 1, i));
    rs.forEach(function (r, j) { r.classList.toggle("sel", j === sel); });
    rs[sel].scrollIntoView({ block: "nearest" });
  }

  function bindRows() {
    rows().forEach(function (r) {
      r.addEventListener("click", function (e) {
        if (e.target.closest("a, button, input, select")) return;
        window.location.href = r.dataset.href;
      });
    });
    if (sel >= 0) select(sel);
  }

  function liveQueue() {
    var live = $("#live");
    if (!live || !window.EventSource) return;
    var state = $("#livestate");
    var busy = false;
    function version() { var i = $("#live-inner"); return i ? i.dataset.version : ""; }
    function refresh() {
      if (busy) return;
      busy = true;
      fetch(live.dataset.src, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
        .then(function (html) {
          // The fragment is rendered by the server's templates, which
          // escape every customer value; no script runs from innerHTML.
          live.innerHTML = html;
          bindRows();
        })
        .catch(function () { if (state) state.textContent = "offline"; })
        .then(function () { busy = false; });
    }
    var es = new EventSource("/events");
    es.addEventListener("queue", function (e) {
      if (state) { state.textContent = "live"; state.classList.remove("off"); }
      if (e.data !== version()) refresh();
    });
    es.onerror = function () { if (state) { state.textContent = "reconnecting"; state.classList.add("off"); } };
    es.onopen = function () { if (state) { state.textContent = "live"; state.classList.remove("off"); } };
  }

  // ---- item page ----------------------------------------------------------
  function renewLease() {
    var item = $("#item");
    if (!item || item.dataset.mine !== "true") return;
    var lease = parseInt(item.dataset.lease, 10) || 600;
    var every = Math.max(15, Math.min(60, Math.floor(lease / 3))) * 1000;
    setInterval(function () {
      fetch("/api/v1/items/" + item.dataset.item + "/claim", {
        method: "POST", credentials: "same-origin",
        headers: { "X-CSRF-Token": csrf, "Accept": "application/json" }
      }).then(function (r) {
        return r.json().then(function (body) {
          var until = $("#lease-until");
          if (r.ok && until) { until.textContent = new Date(body.claim_expires).toLocaleTimeString(); return; }
          var l = $("#lease");
          if (!r.ok && l) {
            l.classList.add("lost");
            l.textContent = "Your lease is lost: " + ((body.error && body.error.message) || r.status) + ". Reload the page.";
          }
        });
      }).catch(function () {});
    }, every);
  }

  function showErrors(form, body) {
    var byPath = {};
    (body.errors || []).forEach(function (e) { (byPath[e.path] = byPath[e.path] || []).push(e); });
    var placed = {};
    $$("[data-path]", form).forEach(function (el) {
      var p = el.dataset.path;
      var list = null;
      for (var i = 0; i < el.children.length; i++) {
        if (el.children[i].classList.contains("ferrs")) { list = el.children[i]; break; }
      }
      if (!list) return;
      list.textContent = "";
      var errs = byPath[p] || [];
      placed[p] = true;
      el.classList.toggle("has-err", errs.length > 0);
      errs.forEach(function (e) {
        var li = document.createElement("li");
        var k = document.createElement("span");
        k.className = "kind k-" + e.kind;
        k.textContent = e.kind;
        li.appendChild(k);
        li.appendChild(document.createTextNode(" " + e.message + " "));
        if (e.keyword) { var c = document.createElement("code"); c.textContent = e.keyword; li.appendChild(c); }
        list.appendChild(li);
      });
    });
    var rec = $("#rec-errs");
    if (rec) {
      rec.textContent = "";
      (body.errors || []).forEach(function (e) {
        if (placed[e.path]) return;
        var li = document.createElement("li");
        li.textContent = e.kind + " " + (e.path || "/") + " " + e.message;
        rec.appendChild(li);
      });
    }
    var st = $("#check-status");
    if (st) {
      st.textContent = "";
      var s = document.createElement("span");
      s.className = body.valid ? "ok" : "bad";
      var n = body.errors.length;
      s.textContent = body.valid ? "valid" : n + (n === 1 ? " error" : " errors");
      st.appendChild(s);
      if (body.overridable) st.appendChild(document.createTextNode(" · only grounding errors: approvable with a written reason"));
    }
    var msg = $("#msgtext");
    if (msg && typeof body.message_html === "string") {
      // Rendered and escaped by the server's template, as the page was.
      msg.innerHTML = body.message_html;
    }
    var ov = $("label.override");
    if (ov) ov.classList.toggle("needed", !!body.overridable);
    // The record these errors are of: Approve sends it, and the server
    // approves only that record.
    var vd = $("#validated");
    if (vd && typeof body.digest === "string") vd.value = body.digest;
  }

  // checkFirst is set by liveCheck: it returns a promise of the check of
  // the form as it is now when an edit is not checked yet, else null.
  var checkFirst = function () { return null; };

  function liveCheck() {
    var form = $("#editor");
    if (!form || $("#item").dataset.editable !== "true") return;
    var raw = $("#raw"), rawView = $("#rawview"), rawDirty = false, timer = null, dirty = false, last = 0;
    // Checks may answer out of order (a slow one overtaken by the next):
    // only the newest one's errors and digest are shown, so Approve
    // never sends the digest of a record older than the form's.
    function check(mode) {
      var fd = new FormData(form);
      fd.set("mode", mode);
      dirty = false;
      var n = ++last;
      return fetch(form.dataset.check, {
        method: "POST", credentials: "same-origin", body: new URLSearchParams(fd),
        headers: { "X-CSRF-Token": csrf, "Accept": "application/json" }
      }).then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
        .then(function (body) { if (!dirty && n === last) showErrors(form, body); return body; });
    }
    checkFirst = function () {
      if (!dirty && !timer) return null;
      clearTimeout(timer);
      timer = null;
      return check("form");
    };
    form.addEventListener("input", function (e) {
      if (e.target === raw) { rawDirty = true; return; }
      if (e.target.name === "override_reason") return;
      // A field the record left out is out no more once typed in.
      if (e.target.name && e.target.name.indexOf("v:") === 0) {
        var m = form.querySelector('input[type=hidden][name="m:' + e.target.name.slice(2).replace(/["\\]/g, "\\$&") + '"]');
        if (m) m.remove();
      }
      dirty = true;
      clearTimeout(timer);
      timer = setTimeout(function () { timer = null; check("form").catch(function () {}); }, 400);
    });
    // Approve sends what the page shows as checked: an edit not checked
    // yet is checked first, and the reviewer sees its errors before
    // approving (a record that validates is approved at once).
    var approve = $("#approve");
    if (approve) approve.addEventListener("click", function (e) {
      var p = checkFirst();
      if (!p) return;
      e.preventDefault();
      p.then(function (body) { if (body.valid) form.requestSubmit(approve); }).catch(function () {});
    });
    form.addEventListener("change", function (e) {
      if (e.target.tagName === "SELECT" || e.target.type === "checkbox") {
        clearTimeout(timer);
        dirty = true;
        clearTimeout(timer);
        timer = null;
        check("form").catch(function () {});
      }
    });
    if (rawView) {
      rawView.addEventListener("toggle", function () {
        if (rawView.open) {
          // Show the form's current record in the raw view.
          check("form").then(function (body) { if (body.record && !rawDirty) raw.value = body.record; }).catch(function () {});
        } else if (rawDirty) {
          // Back to the form: the server rebuilds it from the raw JSON.
          click($('button[name="mode"][value="raw"]:not([formaction])', rawView));
        }
      });
    }
  }

  function bulkConfirm() {
    $$("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) {
        if (!window.confirm(f.dataset.confirm)) e.preventDefault();
      });
    });
  }

  // ---- keys ---------------------------------------------------------------
  document.addEventListener("keydown", function (e) {
    // Ctrl+Enter in the override reason approves with it.
    if ((e.ctrlKey || e.metaKey) && e.key === "Enter" && e.target && e.target.id === "override-reason") {
      if (click($("#approve"))) e.preventDefault();
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "Escape") {
      toggleHelp(false);
      if (typing(document.activeElement)) document.activeElement.blur();
      return;
    }
    if (typing(e.target)) return;
    if (e.key === "?") { toggleHelp(); e.preventDefault(); return; }
    if (page === "queue") {
      switch (e.key) {
        case "j": select(sel + 1); break;
        case "k": select(sel - 1); break;
        case "Enter": case "o": if (sel >= 0) window.location.href = rows()[sel].dataset.href; else return; break;
        case "c": click($("#claim-next")); break;
        default: return;
      }
      e.preventDefault();
      return;
    }
    if (page === "item") {
      switch (e.key) {
        case "a":
          var rv = $("#rawview");
          if (!click(rv && rv.open ? $("#approve-raw") : $("#approve"))) return;
          break;
        case "r":
          var or = $("#override-reason");
          if (!or || or.disabled || or.closest("fieldset[disabled]")) return;
          or.focus();
          break;
        case "x": var rr = $("#reject-reason"); if (!rr || rr.disabled || rr.closest("fieldset[disabled]")) return; rr.focus(); break;
        case "e":
          var f = $("#editor .has-err input, #editor .has-err select, #editor .has-err textarea") ||
                  $("#editor input:not([type=hidden]):not([type=checkbox]), #editor select");
          if (!f || f.closest("fieldset[disabled]")) return;
          f.focus();
          break;
        case "j": go($("#next")); break;
        case "k": go($("#prev")); break;
        case "c": if (!click($("#claim"))) return; break;
        case "u": if (!click($("#reopen"))) return; break;
        default: return;
      }
      e.preventDefault();
    }
  });

  // An item page answered to a POST (a refused approve, a check) is shown
  // at the item's own address, so a reload reads it again instead of
  // posting the form again.
  var posted = /^(\/items\/\d+)\/(approve|check)$/.exec(window.location.pathname);
  if (posted && window.history && history.replaceState) history.replaceState(null, "", posted[1] + window.location.search);

  if (help) help.addEventListener("click", function () { toggleHelp(false); });
  bindRows();
  liveQueue();
  renewLease();
  liveCheck();
  bulkConfirm();
})();
