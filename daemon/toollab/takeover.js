// Fingertip Tool Lab takeover: the live screen is GET /api/stream, and the screen is an input
// surface. A click taps, a drag swipes, the wheel scrolls, keys typed while the screen has
// focus go to the target. Every input is a tool call through callTool (app.js), so the catalog,
// the engine, the token and the log treat it like any other invocation. Loaded after app.js.
"use strict";

// No max_width: a capture that delivers MJPEG is then passed through, not re-encoded.
const STREAM_QUERY = "fps=25&quality=70";
const LIVE_POLL_MS = 500;
const TAP_SLOP = 20; // normalized units (2 %): a press moving less is a tap, as on the target
const LATENCY_DIFF = 3; // mean grey-level difference (0..255) that counts as "the frame changed"
const LATENCY_GIVE_UP_MS = 5000;
const MODIFIER_KEYS = new Set(["Control", "Shift", "Alt", "Meta", "AltGraph", "CapsLock"]);

const takeover = {
  frames: 0,
  frameTimes: [], // arrival times (performance.now) of the last second's frames
  lastBlob: null,
  queue: [], // input calls waiting, run one at a time so their order holds
  busy: false,
  pending: null, // a latency measurement: {t0, ref}
  abort: null,
  wake: null, // ends the stream loop's retry pause
};

// ---- the stream -------------------------------------------------------------------------

class StreamEnded extends Error {
  constructor(status, error) {
    super(error ? `${error.code}: ${error.message}` : `stream ended (${status})`);
    this.status = status;
    this.error = error;
  }
}

function indexOfHeadEnd(buf) {
  for (let i = 0; i + 3 < buf.length; i++) {
    if (buf[i] === 13 && buf[i + 1] === 10 && buf[i + 2] === 13 && buf[i + 3] === 10) return i;
  }
  return -1;
}

function concat(a, b) {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

// The multipart parts, as {headers, body}: each part names its Content-Length.
async function* parts(resp) {
  const reader = resp.body.getReader();
  const text = new TextDecoder("ascii");
  let buf = new Uint8Array(0);
  const more = async () => {
    const { value, done } = await reader.read();
    if (done) throw new StreamEnded(resp.status, null);
    buf = concat(buf, value);
  };
  for (;;) {
    let end;
    while ((end = indexOfHeadEnd(buf)) < 0) await more();
    const headers = new Map();
    for (const line of text.decode(buf.subarray(0, end)).split("\r\n")) {
      const at = line.indexOf(":");
      if (at > 0) headers.set(line.slice(0, at).trim().toLowerCase(), line.slice(at + 1).trim());
    }
    const length = Number(headers.get("content-length"));
    if (!Number.isInteger(length) || length < 0) throw new StreamEnded(0, null);
    const start = end + 4;
    while (buf.length < start + length) await more();
    const body = buf.slice(start, start + length);
    buf = buf.subarray(start + length);
    yield { headers, body };
  }
}

async function watch(signal) {
  const resp = await fetch(`/api/stream?${STREAM_QUERY}`, {
    headers: authHeaders(), signal, cache: "no-store",
  });
  if (!resp.ok) {
    const reply = await resp.json().catch(() => null);
    throw new StreamEnded(resp.status, reply && reply.error);
  }
  liveNote("live");
  for await (const { headers, body } of parts(resp)) {
    if (headers.get("content-type") === "application/json") {
      let error = null;
      try { error = JSON.parse(new TextDecoder().decode(body)); } catch { /* not ours */ }
      throw new StreamEnded(resp.status, error);
    }
    showFrame(new Blob([body], { type: "image/jpeg" }), headers);
  }
}

function showFrame(blob, headers) {
  const img = $("screen");
  // An HDMI source that sends nothing usable: the picture says NO SIGNAL, the note says which.
  const signal = headers.get("x-signal-state");
  liveNote(signal ? `live · ${signal.replace(/_/g, " ")}` : "live");
  img.dataset.signal = signal || "";
  const old = img.src;
  img.src = URL.createObjectURL(blob);
  if (old.startsWith("blob:")) URL.revokeObjectURL(old);
  const now = performance.now();
  takeover.frames += 1;
  takeover.lastBlob = blob;
  takeover.frameTimes.push(now);
  while (takeover.frameTimes[0] < now - 1000) takeover.frameTimes.shift();
  img.dataset.frames = String(takeover.frames);
  img.dataset.seq = headers.get("x-frame-seq") || "";
  const age = Date.now() / 1000 - Number(headers.get("x-timestamp"));
  $("stream-rate").textContent =
    `${takeover.frameTimes.length} fps · frame age ${Math.max(0, Math.round(age * 1000))} ms`;
  if (takeover.pending) checkLatency(blob, now);
}

function liveNote(text) {
  $("live-state").textContent = text;
}

function watching() {
  return !document.hidden && $("live-toggle").checked;
}

// One loop keeps the stream open while someone looks (a hidden tab or "live" off closes it,
// so the board captures nothing), and reconnects after a capture loss.
async function streamLoop() {
  let backoff = 500;
  let lastStatus = null;
  for (;;) {
    if (!watching()) {
      liveNote(document.hidden ? "paused (tab hidden)" : "paused");
      await until(watching);
      continue;
    }
    takeover.abort = new AbortController();
    const framesBefore = takeover.frames;
    try {
      await watch(takeover.abort.signal);
    } catch (err) {
      if (err.name === "AbortError") continue;
      // Said once per run of refusals, so a tool's own 401 note is not overwritten.
      if (err.status === 401 && lastStatus !== 401) noteToken("the screen needs the token");
      lastStatus = err.status;
      liveNote(`no stream: ${err.message}`);
    } finally {
      takeover.abort = null;
    }
    if (takeover.frames > framesBefore) backoff = 500;
    await nap(backoff);
    backoff = Math.min(backoff * 2, 4000);
  }
}

function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// A retry pause that a new token (or the tab coming back) cuts short.
function nap(ms) {
  return new Promise((resolve) => {
    takeover.wake = resolve;
    setTimeout(resolve, ms);
  });
}

function kickStream() {
  const wake = takeover.wake;
  takeover.wake = null;
  if (wake) wake();
}

async function until(condition) {
  while (!condition()) await delay(250);
}

function stopIfHidden() {
  if (!watching() && takeover.abort) takeover.abort.abort();
}

// ---- latency: from the input to the first frame that differs from the one before it -----

async function thumb(blob) {
  const bitmap = await createImageBitmap(blob, { resizeWidth: 32, resizeHeight: 32 });
  const canvas = new OffscreenCanvas(32, 32);
  const ctx = canvas.getContext("2d");
  ctx.drawImage(bitmap, 0, 0);
  bitmap.close();
  const px = ctx.getImageData(0, 0, 32, 32).data;
  const grey = new Float32Array(32 * 32);
  for (let i = 0; i < grey.length; i++) grey[i] = (px[4 * i] + px[4 * i + 1] + px[4 * i + 2]) / 3;
  return grey;
}

async function startLatency() {
  const t0 = performance.now();
  const pending = { t0, ref: null };
  takeover.pending = pending;
  if (takeover.lastBlob) pending.ref = await thumb(takeover.lastBlob);
}

async function checkLatency(blob, arrived) {
  const pending = takeover.pending;
  if (!pending || !pending.ref) return;
  if (arrived - pending.t0 > LATENCY_GIVE_UP_MS) {
    takeover.pending = null;
    $("latency").textContent = "input → changed frame: no change seen";
    return;
  }
  const now = await thumb(blob);
  let sum = 0;
  for (let i = 0; i < now.length; i++) sum += Math.abs(now[i] - pending.ref[i]);
  if (takeover.pending === pending && sum / now.length > LATENCY_DIFF) {
    takeover.pending = null;
    $("latency").textContent = `input → changed frame: ${Math.round(arrived - pending.t0)} ms`;
  }
}

// ---- input: one queue of tool calls -----------------------------------------------------

function send(tool, input) {
  const last = takeover.queue[takeover.queue.length - 1];
  if (tool === "keyboard_text" && last && last.tool === tool) {
    last.input.text += input.text; // typed while a call ran: one call for the run of text
  } else {
    takeover.queue.push({ tool, input });
  }
  startLatency();
  drain();
}

async function drain() {
  if (takeover.busy) return;
  takeover.busy = true;
  try {
    while (takeover.queue.length) {
      const { tool, input } = takeover.queue.shift();
      const status = $("takeover-status");
      status.textContent = `${tool} ${JSON.stringify(input)} …`;
      try {
        const { status: code, reply } = await callTool(tool, { input });
        const outcome = reply.is_error ? (reply.error ? reply.error.code : "error") : "ok";
        status.textContent = `${tool} ${JSON.stringify(input)} → ${code} ${outcome}`;
        status.className = reply.is_error ? "bad" : "good";
      } catch (err) {
        status.textContent = `${tool}: ${err}`;
        status.className = "bad";
      }
    }
  } finally {
    takeover.busy = false;
  }
}

function normalized(ev) {
  const box = $("screen").getBoundingClientRect();
  const clamp = (v) => Math.min(1000, Math.max(0, Math.round(v)));
  return {
    x: clamp(((ev.clientX - box.left) / box.width) * 1000),
    y: clamp(((ev.clientY - box.top) / box.height) * 1000),
  };
}

function setupInput() {
  const box = $("screen-box");
  const img = $("screen");
  let press = null;
  img.addEventListener("dragstart", (ev) => ev.preventDefault());
  img.addEventListener("pointerdown", (ev) => {
    if (ev.button !== 0) return;
    ev.preventDefault();
    box.focus();
    img.setPointerCapture(ev.pointerId);
    press = { point: normalized(ev), at: performance.now() };
  });
  img.addEventListener("pointerup", (ev) => {
    if (!press) return;
    const start = press.point;
    const end = normalized(ev);
    const held = performance.now() - press.at;
    press = null;
    if (Math.hypot(end.x - start.x, end.y - start.y) < TAP_SLOP) {
      send("touch_gesture", { type: "tap", point: start });
    } else {
      const duration_ms = Math.round(Math.min(5000, Math.max(100, held)));
      send("touch_gesture", { type: "swipe", start, end, duration_ms });
    }
  });
  img.addEventListener("pointercancel", () => { press = null; });
  let wheel = null;
  img.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    // A wheel turn arrives as many events: one scroll for the turn, 100 px = 100 units.
    if (!wheel) {
      wheel = { point: normalized(ev), delta: 0 };
      setTimeout(() => {
        const { point, delta } = wheel;
        wheel = null;
        if (delta === 0) return;
        const distance = Math.min(1000, Math.max(50, Math.round(Math.abs(delta))));
        send("touch_gesture", { type: "scroll", point, direction: delta > 0 ? "down" : "up", distance });
      }, 150);
    }
    wheel.delta += ev.deltaMode === 1 ? ev.deltaY * 40 : ev.deltaY;
  }, { passive: false });
  box.addEventListener("keydown", (ev) => {
    if (MODIFIER_KEYS.has(ev.key) || ev.isComposing) return;
    ev.preventDefault();
    const chord = ev.ctrlKey || ev.metaKey || ev.altKey;
    if (ev.key.length === 1 && !chord) {
      send("keyboard_text", { text: ev.key });
      return;
    }
    const keys = [];
    if (ev.ctrlKey) keys.push("ctrl");
    if (ev.metaKey) keys.push("cmd");
    if (ev.altKey) keys.push("alt");
    if (ev.shiftKey && (chord || ev.key.length > 1)) keys.push("shift");
    keys.push(ev.key === " " ? "space" : ev.key.toLowerCase());
    send("keyboard_tap", { keys });
  });
}

// ---- who is driving ---------------------------------------------------------------------

async function pollDriving() {
  for (;;) {
    if (!document.hidden) {
      try {
        const resp = await fetch("/api/live", { headers: authHeaders(), cache: "no-store" });
        if (resp.ok) {
          const live = await resp.json();
          showDriving(live.running);
          showGeometry(live.screen);
          showUsb(live.usb);
        }
      } catch { /* the daemon is restarting: try again */ }
    }
    await delay(LIVE_POLL_MS);
  }
}

function showDriving(running) {
  const mine = `/${CALLER_ID}`;
  const others = running.filter((r) => !r.caller.endsWith(mine));
  const badge = $("driving");
  badge.hidden = others.length === 0;
  badge.textContent = others.length
    ? `driving: ${others.map((r) => `${r.tool} (${r.transport} ${r.caller})`).join(", ")}`
    : "";
  badge.title = badge.textContent;
}

// The live view is the target's own screen, cut out of the captured frame (the bars an HDMI
// adapter adds are not shown, and clicks count in the screen): where it sits in the frame.
function showGeometry(g) {
  if (!g || !g.known) return;
  const s = g.screen;
  $("geometry").textContent =
    `screen ${s.width}×${s.height} at ${s.x},${s.y} of the ${g.frame.width}×${g.frame.height} ` +
    `frame · ${g.orientation} · ${g.source} · the pointer spans the ${g.hid_span}`;
}

// The target's USB link when it is not simply configured: a sleeping target gets no input.
const USB_WORDS = {
  suspended: "target asleep (USB suspended): input is refused; wake_target wakes it",
  attached: "target enumerating the USB device",
  not_attached: "target not connected",
};

function showUsb(usb) {
  const badge = $("usb-state");
  const words = usb ? USB_WORDS[usb.state] : undefined;
  badge.hidden = !words;
  badge.textContent = words || "";
}

function startTakeover() {
  setupInput();
  document.addEventListener("visibilitychange", stopIfHidden);
  $("live-toggle").addEventListener("change", stopIfHidden);
  $("token-form").addEventListener("submit", kickStream);
  streamLoop();
  pollDriving();
}

startTakeover();
