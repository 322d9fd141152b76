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

  // ---- item: select-to-fill -------------------------------------------------
  // Text selected in the message fills the text field the reviewer was
  // last in with the selected text, and records where it is: a hidden
  // "s:<path>" = "<start>-<end>", code-point offsets into the stored text
  // (End exclusive), as the stored evidence has them. JavaScript strings
  // count UTF-16 units, so an emoji before the selection would shift
  // them: every count here is of code points (Array.from). Each segment
  // of the message says where it starts in the stored text (data-at), a
  // control marker which control it shows (data-cp), and a CR the page
  // drops before a line feed is the gap between two segments.
  function cpLength(s) { return Array.from(s).length; }

  function selectToFill() {
    var msg = $("#msgtext"), form = $("#editor");
    if (!msg || !form || msg.dataset.selectFill !== "true") return;
    var field = null, filling = false;
    function fillable(el) {
      return el && el.tagName === "INPUT" && el.type === "text" && el.name.indexOf("v:") === 0;
    }
    form.addEventListener("focusin", function (e) {
      if (fillable(e.target)) field = e.target;
      else if (e.target.tagName !== "BUTTON") field = null;
    });
    // A value typed by hand has no span any more.
    form.addEventListener("input", function (e) {
      if (filling || !fillable(e.target)) return;
      var sp = spanInput(e.target.name.slice(2), false);
      if (sp) sp.remove();
    });
    function spanInput(path, make) {
      var name = "s:" + path;
      var el = $$('input[type=hidden]', form).filter(function (i) { return i.name === name; })[0];
      if (!el && make) {
        el = document.createElement("input");
        el.type = "hidden";
        el.name = name;
        form.appendChild(el);
      }
      return el;
    }
    // stored returns the stored text as an array of code points.
    function stored() {
      var out = [];
      $$("[data-at]", msg).forEach(function (seg) {
        var at = parseInt(seg.dataset.at, 10);
        while (out.length < at) out.push("\r");
        if (seg.dataset.cp) out.push(String.fromCodePoint(parseInt(seg.dataset.cp, 16)));
        else Array.prototype.push.apply(out, Array.from(seg.textContent));
      });
      return out;
    }
    // offsetOf returns the code-point offset in the stored text of a
    // point of the page's message: the last segment before the point
    // (cut there by the range) says where it starts.
    function offsetOf(node, offset) {
      var r = document.createRange();
      r.setStart(msg, 0);
      r.setEnd(node, offset);
      var cut = r.cloneContents().querySelectorAll("[data-at]");
      if (!cut.length) return 0;
      var last = cut[cut.length - 1], at = parseInt(last.dataset.at, 10);
      if (last.dataset.cp) {
        // A marker counts once it is wholly before the point.
        var whole = $$("[data-at]", msg)[cut.length - 1];
        return at + (last.textContent.length === whole.textContent.length ? 1 : 0);
      }
      return at + cpLength(last.textContent);
    }
    function fill() {
      var sel = window.getSelection();
      if (!field || !sel || sel.isCollapsed || !sel.rangeCount) return;
      var r = sel.getRangeAt(0);
      if (!msg.contains(r.startContainer) || !msg.contains(r.endContainer)) return;
      var text = stored();
      var start = offsetOf(r.startContainer, r.startOffset), end = offsetOf(r.endContainer, r.endOffset);
      // Space at the ends of a selection is not part of the value.
      while (start < end && /\s/.test(text[start])) start++;
      while (end > start && /\s/.test(text[end - 1])) end--;
      if (start >= end || field.disabled) return;
      filling = true;
      field.value = text.slice(start, end).join("");
      spanInput(field.name.slice(2), true).value = start + "-" + end;
      field.dispatchEvent(new Event("input", { bubbles: true }));
      filling = false;
      field.classList.add("filled");
      sel.removeAllRanges();
    }
    // At the mouse's release the selection is final (a drag, or the
    // double click's word): fill at once, so a key pressed right after
    // (a) sees the filled field.
    msg.addEventListener("mouseup", fill);
  }
  if (page === "item") selectToFill();

  // ---- item: live across replicas -----------------------------------------
  // Another reviewer's decision on this item, made on any replica,
  // reaches the page (GET /items/{id}/events, fed by NATS): the page says
  // who decided what, and its forms stop, since a post would be refused.
  function liveItem() {
    var item = $("#item");
    if (!item || item.dataset.live !== "true" || !window.EventSource) return;
    var es = new EventSource("/items/" + item.dataset.item + "/events");
    es.addEventListener("live", function () { item.dataset.liveState = "on"; });
    es.addEventListener("item", function (e) {
      var ev;
      try { ev = JSON.parse(e.data); } catch (err) { return; }
      var box = $("#live-decided");
      if (!box) return;
      var what = ev.event === "reopened" ? "reopened" : ev.status;
      box.textContent = "Item " + ev.item_id + " was " + what + " by " + ev.by + " at " +
        new Date(ev.at).toLocaleTimeString() + ". This page shows it as it was: reload it.";
      box.hidden = false;
      if (ev.event === "decided") {
        $$("#item fieldset").forEach(function (f) { f.disabled = true; });
      }
      item.dataset.liveState = ev.event;
    });
  }
  if (page === "item") liveItem();
})();
