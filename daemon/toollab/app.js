// Fingertip Tool Lab: one view of the HTTP tools API. Every call goes through
// POST /api/tools/<name>, so the page has exactly the rights of its token.
"use strict";

const TOKEN_KEY = "fingertip.token";
const LIVE_INTERVAL_MS = 1000;
const LIVE_ARGS = { max_width: 720, quality: 70 };
const TAP_TOOL = "touch_gesture";

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
    headers: { "Content-Type": "application/json", ...authHeaders() },
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
  if (src) {
    evidence.src = src;
    showScreen(src, "from the last response");
  }
}

// ---- live screen ------------------------------------------------------------------------

function showScreen(src, note) {
  $("screen").src = src;
  $("live-state").textContent = `${note} · ${new Date().toLocaleTimeString()}`;
}

async function refreshScreen() {
  try {
    const { reply } = await callTool("screenshot", { input: LIVE_ARGS });
    const src = reply.is_error ? null : imageOf(parseOutput(reply));
    if (src) showScreen(src, "live");
    else $("live-state").textContent = reply.error ? reply.error.message : "no screenshot";
  } catch (err) {
    $("live-state").textContent = `offline: ${err}`;
  }
}

// One loop refreshes the screen, only while someone looks: a hidden tab costs the board no
// capture. poke() wakes it early (tab shown, live switched on).
let wake = null;

function nap(ms) {
  return new Promise((resolve) => {
    wake = resolve;
    if (ms !== null) setTimeout(resolve, ms);
  });
}

function poke() {
  const resolve = wake;
  wake = null;
  if (resolve) resolve();
}

async function liveLoop() {
  for (;;) {
    if (document.hidden || !$("live-toggle").checked) {
      $("live-state").textContent = document.hidden ? "paused (tab hidden)" : "paused";
      await nap(null);
      continue;
    }
    await refreshScreen();
    await nap(LIVE_INTERVAL_MS);
  }
}

function setupScreen() {
  const img = $("screen");
  img.addEventListener("click", (ev) => {
    const box = img.getBoundingClientRect();
    const x = Math.round(((ev.clientX - box.left) / box.width) * 1000);
    const y = Math.round(((ev.clientY - box.top) / box.height) * 1000);
    const point = { x: Math.min(1000, Math.max(0, x)), y: Math.min(1000, Math.max(0, y)) };
    const marker = $("marker");
    marker.style.left = `${(point.x / 10).toFixed(1)}%`;
    marker.style.top = `${(point.y / 10).toFixed(1)}%`;
    marker.hidden = false;
    const offer = $("tap-offer");
    const go = $("tap-go");
    go.disabled = !state.tools.has(TAP_TOOL);
    go.textContent = go.disabled ? `${TAP_TOOL} not available` : `Tap (${point.x}, ${point.y})`;
    go.dataset.point = JSON.stringify(point);
    offer.style.left = marker.style.left;
    offer.style.top = marker.style.top;
    offer.hidden = false;
  });
  $("tap-cancel").addEventListener("click", hideOffer);
  $("tap-go").addEventListener("click", () => {
    const point = JSON.parse($("tap-go").dataset.point);
    hideOffer();
    selectTool(TAP_TOOL, JSON.stringify({ type: "tap", point }, null, 2));
    invoke();
  });
  document.addEventListener("visibilitychange", poke);
  $("live-toggle").addEventListener("change", poke);
}

function hideOffer() {
  $("tap-offer").hidden = true;
  $("marker").hidden = true;
}

// ---- start ------------------------------------------------------------------------------

function start() {
  setupToken();
  setupScreen();
  $("filter").addEventListener("input", renderCatalog);
  $("invoke").addEventListener("click", invoke);
  $("reset").addEventListener("click", () => state.current && selectTool(state.current.name));
  $("tool-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) invoke();
  });
  loadCatalog().catch((err) => {
    $("tool-list").textContent = `cannot load the catalog: ${err}`;
  });
  liveLoop();
}

start();
