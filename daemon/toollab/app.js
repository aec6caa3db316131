// Fingertip Tool Lab: one view of the HTTP tools API. Every call goes through
// POST /api/tools/<name>, so the page has exactly the rights of its token.
"use strict";

const TOKEN_KEY = "fingertip.token";
// This page's label on its calls, so the "driving" badge (takeover.js) tells its own
// invocations from another caller's.
const CALLER_ID = `toollab-${Math.random().toString(36).slice(2, 10)}`;

const $ = (id) => document.getElementById(id);
const state = { tools: new Map(), current: null };

// ---- API --------------------------------------------------------------------------------

function authHeaders() {
  const token = localStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function callTool(name, body) {
  const started = performance.now();
  const resp = await fetch(`/api/tools/${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Fingertip-Caller": CALLER_ID, ...authHeaders() },
    body: JSON.stringify(body),
  });
  const reply = await resp.json();
  if (resp.status === 401) noteToken("this tool needs the token");
  return { status: resp.status, reply, roundTripMs: Math.round(performance.now() - started) };
}

function parseOutput(reply) {
  try {
    return JSON.parse(reply.output);
  } catch {
    return reply.output;
  }
}

// A screenshot inside a result: {data, format} at the top level (screenshot, evidence).
function imageOf(value) {
  if (value && typeof value === "object" && typeof value.data === "string" &&
      (value.format === "jpeg" || value.format === "png")) {
    return `data:image/${value.format};base64,${value.data}`;
  }
  return null;
}

// Long base64 strings make the output unreadable; the image is shown instead.
function elide(value) {
  return JSON.stringify(value, (key, v) =>
    typeof v === "string" && v.length > 256 && key === "data" ? `<base64, ${v.length} chars>` : v, 2);
}

// ---- token ------------------------------------------------------------------------------

function noteToken(message) {
  $("token-state").textContent = message;
  $("token").classList.toggle("needed", Boolean(message));
}

function setupToken() {
  $("token").value = localStorage.getItem(TOKEN_KEY) || "";
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token").value.trim();
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
    noteToken(token ? "saved" : "cleared");
    loadCatalog();
  });
}

// ---- catalog ----------------------------------------------------------------------------

async function loadCatalog() {
  const resp = await fetch("/api/tools", { headers: authHeaders() });
  const listing = await resp.json();
  $("platform").textContent = `target: ${listing.platform}`;
  state.tools = new Map(listing.tools.map((t) => [t.name, t]));
  renderCatalog();
  if (state.current && !state.tools.has(state.current.name)) selectTool(null);
}

function renderCatalog() {
  const filter = $("filter").value.trim().toLowerCase();
  const groups = new Map();
  for (const tool of state.tools.values()) {
    const hay = `${tool.name} ${tool.category} ${tool.description}`.toLowerCase();
    if (filter && !hay.includes(filter)) continue;
    if (!groups.has(tool.category)) groups.set(tool.category, []);
    groups.get(tool.category).push(tool);
  }
  const list = $("tool-list");
  list.replaceChildren();
  for (const category of [...groups.keys()].sort()) {
    const section = document.createElement("section");
    section.className = "category";
    section.dataset.category = category;
    const h = document.createElement("h3");
    h.textContent = category;
    const ul = document.createElement("ul");
    for (const tool of groups.get(category)) {
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button";
      b.className = "tool";
      b.dataset.tool = tool.name;
      b.title = tool.description;
      b.textContent = tool.name;
      if (tool.runtime) b.classList.add("unavailable");
      if (state.current && state.current.name === tool.name) b.classList.add("current");
      b.addEventListener("click", () => selectTool(tool.name));
      const badge = document.createElement("span");
      badge.className = `badge ${tool.policy}`;
      badge.textContent = tool.policy;
      li.append(b, badge);
      ul.append(li);
    }
    section.append(h, ul);
    list.append(section);
  }
}

function exampleText(tool) {
  if (tool.input_mode === "text") return tool.example_input;
  try {
    return JSON.stringify(JSON.parse(tool.example_input), null, 2);
  } catch {
    return tool.example_input;
  }
}

function selectTool(name, input) {
  const tool = name ? state.tools.get(name) : null;
  state.current = tool || null;
  $("tool-detail").hidden = !tool;
  $("pick-hint").hidden = Boolean(tool);
  for (const b of document.querySelectorAll("button.tool")) {
    b.classList.toggle("current", Boolean(tool) && b.dataset.tool === tool.name);
  }
  if (!tool) return;
  $("tool-name").textContent = tool.name;
  $("tool-policy").textContent = tool.policy;
  $("tool-policy").className = `badge ${tool.policy}`;
  $("tool-description").textContent = tool.description;
  const runtime = $("tool-runtime");
  runtime.hidden = !tool.runtime;
  runtime.textContent = tool.runtime ? `Unavailable: ${tool.runtime.reason || tool.runtime.code}` : "";
  $("tool-schema").textContent = JSON.stringify(tool.args_schema, null, 2);
  $("tool-input-label").textContent = tool.input_mode === "text" ? "Input (text)" : "Input (JSON)";
  $("tool-input").value = input === undefined ? exampleText(tool) : input;
}

// ---- invoke -----------------------------------------------------------------------------

async function invoke() {
  const tool = state.current;
  if (!tool) return;
  const button = $("invoke");
  button.disabled = true;
  showRunning(tool.name);
  // raw_input: the daemon parses it, so its error messages are the only ones.
  const raw = $("tool-input").value;
  try {
    showResponse(await callTool(tool.name, { raw_input: raw }));
    if (tool.name.startsWith("media_")) showMedia().catch(() => {});
  } catch (err) {
    showResponse({ status: 0, reply: { is_error: true, output: String(err) }, roundTripMs: 0 });
  } finally {
    button.disabled = false;
  }
}

// The previous answer must not pass for this one's.
function showRunning(name) {
  $("response").hidden = false;
  $("response-status").textContent = `running ${name}…`;
  $("response-status").className = "badge";
  $("response-timing").textContent = "";
  $("response-output").textContent = "";
  $("evidence").hidden = true;
}

function showResponse({ status, reply, roundTripMs }) {
  $("response").hidden = false;
  const badge = $("response-status");
  badge.textContent = `${status} ${reply.is_error ? (reply.error ? reply.error.code : "error") : "ok"}`;
  badge.className = `badge ${reply.is_error ? "bad" : "good"}`;
  $("response-timing").textContent =
    `tool ${reply.duration_ms ?? "?"} ms · round trip ${roundTripMs} ms · ${reply.called_at ?? ""}`;
  const value = parseOutput(reply);
  $("response-output").textContent = typeof value === "string" ? value : elide(value);
  const src = reply.is_error ? null : imageOf(value);
  const evidence = $("evidence");
  evidence.hidden = !src;
  if (src) evidence.src = src;
}

// What the target's USB drive holds (virtual media), after loading and after any media_ call.
async function showMedia() {
  const { status, reply } = await callTool("media_list", { input: {} });
  const value = status === 200 && !reply.is_error ? parseOutput(reply) : null;
  if (!value || !value.drive) {
    $("media").textContent = "";
    return;
  }
  const a = value.attached;
  $("media").textContent = a
    ? `USB drive: ${a.name} (${a.mode}${a.read_only ? ", read-only" : ""})`
    : "USB drive: empty";
}

// The live screen and its takeover are takeover.js.

// ---- start ------------------------------------------------------------------------------

function start() {
  setupToken();
  $("filter").addEventListener("input", renderCatalog);
  $("invoke").addEventListener("click", invoke);
  $("reset").addEventListener("click", () => state.current && selectTool(state.current.name));
  $("tool-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) invoke();
  });
  loadCatalog().catch((err) => {
    $("tool-list").textContent = `cannot load the catalog: ${err}`;
  });
  showMedia().catch(() => {});
}

start();
