// The Tool Lab's History view: the flight recorder's timeline (GET /api/trace, newest first)
// and one invocation's before/after screenshots side by side (GET /api/trace/<id>). Same token
// as the rest of the page (localStorage), so it sees what that token may see. A page of the
// timeline is bounded in bytes: when the daemon says there is more (next), "More" appends the
// page that follows.
"use strict";

(() => {
  const TOKEN_KEY = "fingertip.token";
  const $ = (id) => document.getElementById(id);

  function headers() {
    const token = localStorage.getItem(TOKEN_KEY);
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
  }

  let next = null; // the cursor of the page after the rows shown

  async function load(more) {
    const params = new URLSearchParams({ limit: "100" });
    const tool = $("history-tool").value.trim();
    const outcome = $("history-outcome").value;
    if (tool) params.set("tool", tool);
    if (outcome) params.set("outcome", outcome);
    if (more && next) params.set("cursor", next);
    const resp = await fetch(`/api/trace?${params}`, { headers: headers() });
    const body = await resp.json();
    const state = $("history-state");
    const rows = $("history-rows");
    if (!more) rows.replaceChildren();
    if (!resp.ok) {
      state.textContent = body.error ? `${body.error.code}: ${body.error.message}` : resp.status;
      return;
    }
    next = body.next || null;
    $("history-more").hidden = !next;
    const trace = body.trace || {};
    state.textContent = trace.recording
      ? `${rows.children.length + body.count} shown${next ? " (more)" : ""}`
      : `recording is off: ${trace.reason || "unknown"}`;
    for (const inv of body.invocations) {
      const tr = document.createElement("tr");
      tr.dataset.id = inv.id;
      tr.tabIndex = 0;
      cell(tr, inv.started_at_iso.replace("T", " ").replace("Z", ""));
      cell(tr, inv.tool);
      cell(tr, inv.transport);
      cell(tr, [inv.client, inv.token_id].filter(Boolean).join(" · "));
      cell(tr, inv.error_code || inv.outcome, inv.outcome === "ok" ? "ok" : "bad");
      cell(tr, `${Math.round(inv.duration_ms)} ms`);
      // Words, not an emoji: without an emoji font (Debian's Chromium) it is an empty box.
      const shots = inv.images.length;
      cell(tr, shots ? `${shots} image${shots === 1 ? "" : "s"}` : "");
      tr.addEventListener("click", () => show(inv.id));
      tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter") show(inv.id); });
      rows.appendChild(tr);
    }
  }

  async function show(id) {
    const resp = await fetch(`/api/trace/${encodeURIComponent(id)}`, { headers: headers() });
    const inv = await resp.json();
    const detail = $("history-detail");
    detail.hidden = false;
    $("history-title").textContent = `${inv.tool} · ${inv.transport} · ${inv.outcome}`;
    const text = { args: inv.args, result: inv.result, released: inv.released,
      profile_switches: inv.profile_switches };
    if (inv.hidden) text.hidden = inv.hidden;
    $("history-json").textContent = JSON.stringify(text, null, 2);
    for (const kind of ["before", "after"]) {
      const img = $(`history-${kind}`);
      const found = (inv.images || []).find((i) => i.kind === kind);
      img.hidden = !found;
      if (found) img.src = `data:image/jpeg;base64,${found.data}`;
      else img.removeAttribute("src");
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("history-refresh").addEventListener("click", () => load(false));
    $("history-more").addEventListener("click", () => load(true));
    $("history-form").addEventListener("submit", (ev) => { ev.preventDefault(); load(false); });
    $("history-section").addEventListener("toggle", () => {
      if ($("history-section").open) load(false);
    });
  });
})();
