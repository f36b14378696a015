// Live updates from the completions feed. Pages are whole without this script; it only
// adds completions to the overview as they happen and reloads a transaction's page when
// that transaction becomes final.
(function () {
  "use strict";
  var feed = document.querySelector("[data-live-feed]");
  var tx = document.querySelector("[data-live-tx]");
  if (!feed && !tx) { return; }
  var after = (feed || tx).getAttribute("data-after") || "";
  var watched = tx ? tx.getAttribute("data-live-tx") : "";
  var note = document.querySelector(".live-note");
  if (note) { note.textContent = "live"; }

  function cell(row, text, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function add(c) {
    var body = feed.querySelector("tbody");
    var row = document.createElement("tr");
    row.className = "fresh";
    var state = cell(row, "");
    var badge = document.createElement("span");
    badge.className = "badge " + (c.status === "CONFIRMED" ? "ok" : "bad");
    badge.textContent = c.status;
    state.appendChild(badge);
    var link = document.createElement("a");
    link.href = "/console/tx/" + encodeURIComponent(c.txId);
    var code = document.createElement("code");
    code.textContent = c.txId.slice(0, 8) + "…" + c.txId.slice(-4);
    link.appendChild(code);
    cell(row, "").appendChild(link);
    cell(row, c.signer.slice(0, 8) + "…" + c.signer.slice(-4));
    cell(row, String(c.nonce), "num");
    cell(row, c.requestId || "");
    cell(row, c.at);
    body.insertBefore(row, body.firstChild);
    while (body.rows.length > 50) { body.deleteRow(body.rows.length - 1); }
  }

  function poll() {
    fetch("/console/live?after=" + encodeURIComponent(after), { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) {
        // The session ended (idle, signed out elsewhere): the page itself says so.
        if (r.status === 401) { window.location.reload(); return new Promise(function () {}); }
        if (!r.ok) { throw new Error(String(r.status)); }
        return r.json();
      })
      .then(function (page) {
        after = page.next || after;
        for (var i = 0; i < page.items.length; i++) {
          var c = page.items[i];
          if (watched && c.txId === watched) { window.location.reload(); return; }
          if (feed) { add(c); }
        }
        setTimeout(poll, 250);
      })
      .catch(function () {
        if (note) { note.textContent = "live updates paused"; }
        setTimeout(poll, 5000);
      });
  }

  poll();
})();
