// The Troupe preview page: the stage over WebRTC, the run's feed over server-sent events, and
// an input box that posts danmaku like any bridge.  window.troupe holds what the page measured.
"use strict";
const $ = (id) => document.getElementById(id);
const MARK = { cell: 12, bits: 16 };  // the frame number drawn in each video frame (app/webrtc.py)
const T = window.troupe = {
  run: null, pc: null, feedSource: null, frames: [], lastN: null, sent: {}, glass: {}, speaking: {},
  items: {}, roles: [], floor: [], latencies: [], state: "connecting",
};

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}
function token() { return $("token").value.trim(); }
function authHeaders() {
  const h = { "Content-Type": "application/json" };
  if (token()) h.Authorization = `Bearer ${token()}`;
  return h;
}
function setStatus(text) { $("status").textContent = text; }

// -- runs -----------------------------------------------------------------------------------
async function loadRuns() {
  const doc = await (await fetch("/api/runs")).json();
  const select = $("runs");
  const chosen = T.run;
  select.textContent = "";
  for (const r of doc.live) {
    const o = el("option", null, `${r.run} – ${r.title || "show"} (${r.ended ? "ended" : "live"}${r.replay_of ? ", playback" : ""})`);
    o.value = r.run;
    select.append(o);
  }
  if (chosen && !doc.live.some((r) => r.run === chosen)) {
    const o = el("option", null, `${chosen} (waiting)`);
    o.value = chosen;
    select.append(o);
  }
  if (chosen) select.value = chosen;
  const list = $("recorded-list");
  list.textContent = "";
  for (const r of doc.recorded) {
    const li = el("li");
    li.append(el("span", null, r.run), el("span", "muted", `${((r.duration_ms || 0) / 1000).toFixed(0)} s, ${r.status}`));
    const play = el("button", null, "Play");
    play.type = "button";
    play.onclick = () => playRecorded(r.run);
    li.append(play);
    list.append(li);
  }
  $("sent").textContent = doc.token ? "a token is needed to send" : "sending is off on this server (no TROUPE_PREVIEW_TOKEN)";
  return doc;
}

async function pickRun() {
  const wanted = new URLSearchParams(location.search).get("run");
  for (;;) {
    const doc = await loadRuns();
    const live = doc.live.find((r) => !r.ended) || doc.live[0];
    const run = wanted || (live && live.run);
    if (run) return switchRun(run);
    setStatus("no run yet: waiting for a show to start");
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

async function playRecorded(run) {
  const res = await fetch(`/api/runs/${encodeURIComponent(run)}/play`, { method: "POST", headers: authHeaders() });
  const doc = await res.json();
  if (!res.ok) { $("sent").textContent = `cannot play ${run}: ${doc.error}`; return; }
  await switchRun(doc.into);
}

async function switchRun(run) {
  if (T.feedSource) T.feedSource.close();
  if (T.pc) T.pc.close();
  Object.assign(T, { run, frames: [], lastN: null, speaking: {}, items: {}, latencies: [] });
  $("feed").textContent = "";
  history.replaceState(null, "", `?run=${encodeURIComponent(run)}`);
  openFeed(run);
  await connectMedia(run);
  loadRuns();
}

// -- the feed ---------------------------------------------------------------------------------
function openFeed(run) {
  const source = T.feedSource = new EventSource(`/api/runs/${encodeURIComponent(run)}/feed`);
  source.onmessage = (ev) => take(JSON.parse(ev.data));
  source.onerror = () => setStatus("feed interrupted: reconnecting…");
}

function take(m) {
  switch (m.type) {
    case "state":
      showRun(m.run); showRoles(m.roles); showFloor(m.floor); showOutputs(m.outputs);
      $("feed").textContent = "";
      for (const item of m.feed) showItem(item);
      T.latencies = m.latencies.map((s) => s.latency_ms);
      for (const s of m.latencies) T.speaking[s.id] = s.n;
      drawSpark();
      break;
    case "waiting": setStatus(`waiting for run ${m.run} to start`); break;
    case "run": showRun(m.run); break;
    case "roles": showRoles(m.roles); break;
    case "floor": showFloor(m.floor); break;
    case "resolution": $("resolution").textContent = `${m.after} (${m.reason})`; break;
    case "outputs": showOutputs(m.outputs); break;
    case "item": showItem(m.item); break;
    case "speaking":
      T.speaking[m.id] = m.n;
      if (m.latency_ms !== null) { T.latencies.push(m.latency_ms); drawSpark(); }
      glass(m.id);
      break;
  }
}

function showRun(r) {
  $("title").textContent = r.title ? `· ${r.title}` : "";
  $("resolution").textContent = r.width ? `${r.resolution} (${r.width}×${r.height})` : r.resolution;
  setStatus(`run ${r.run}: ${r.ended ? "ended" : "live"}${r.replay_of ? ` (playback of ${r.replay_of})` : ""}`);
}

function showRoles(roles) {
  T.roles = roles;
  const ul = $("roles");
  ul.textContent = "";
  for (const r of roles) {
    const li = el("li", T.floor.includes(r.id) ? "floor" : "");
    const sw = el("span", "swatch");
    sw.style.background = r.color;
    li.append(sw, el("b", null, r.name), el("span", "muted", `@${r.id}`),
      el("span", null, `weight ${(r.weight * r.factor).toFixed(2)}${r.factor !== 1 ? ` (×${r.factor})` : ""}`));
    ul.append(li);
  }
}

function showFloor(floor) {
  T.floor = floor;
  const names = T.roles.filter((r) => floor.includes(r.id)).map((r) => r.name);
  $("floor").textContent = names.length ? names.join(", ") : "nobody";
  showRoles(T.roles);
}

function showOutputs(outputs) {
  const box = $("outputs");
  box.textContent = "";
  for (const o of outputs) {
    const extra = o.state === "dropped" ? `: ${o.reason}` : o.state === "closed" ? `: ${o.packets_sent} sent, ${o.packets_lost} lost, ${o.reconnects} reconnects` : "";
    box.append(el("div", null, `${o.output} ${o.target} ${o.state}${extra}`));
  }
}

const OUTCOME = {
  cue: (i) => `→ ${i.role}`, merged: () => "merged", skipped: (i) => `skipped: ${i.reason}`,
  rejected: (i) => `rejected: ${i.reason}`, waiting: (i) => `waiting: ${i.detail}`,
};

function showItem(item) {
  T.items[item.id] = item;
  const id = `d-${item.id}`;
  let li = document.getElementById(id);
  if (!li) {
    li = el("li");
    li.id = id;
    $("feed").prepend(li);
  }
  li.textContent = "";
  li.dataset.outcome = item.outcome || "";
  const head = el("div");
  head.append(el("span", "who", `${item.user || "anonymous"}: `), el("span", "text", item.text));
  if (item.outcome) head.append(el("span", `badge ${item.outcome}`, OUTCOME[item.outcome](item)));
  if (item.kind !== "comment") head.append(el("span", "badge", item.kind));
  if (item.platform) head.append(el("span", "badge platform", item.platform));
  if (item.id in T.sent) head.append(el("span", "badge mine", "you"));
  if (item.returning) head.append(el("span", "badge returning", "welcomed back"));
  else if (item.regular) head.append(el("span", "badge returning", "regular"));
  if (item.forgotten) head.append(el("span", "badge forgotten", "forgotten"));
  li.append(head);
  if (item.recalled && item.recalled.length) li.append(el("div", "muted recalled", `remembered: ${item.recalled.join(" · ")}`));
  if (item.reply) li.append(el("div", "reply", `${item.reply}${item.reply_state === "dropped" ? ` (dropped: ${item.detail})` : ""}`));
  const times = [];
  if (item.latency_ms !== null) times.push(`first frame ${item.latency_ms} ms`);
  if (item.id in T.glass) times.push(`on this screen ${Math.round(T.glass[item.id])} ms`);
  if (times.length) li.append(el("div", "muted", times.join(" · ")));
  if (item.latency_ms !== null) T.speaking[item.id] = item.frame;
  glass(item.id);
}

function drawSpark() {
  const values = T.latencies.slice(-60);
  const svg = $("spark");
  svg.textContent = "";
  if (!values.length) return;
  const max = Math.max(...values, 1);
  const step = values.length > 1 ? 300 / (values.length - 1) : 0;
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", values.map((v, i) => `${(i * step).toFixed(1)},${(46 - 44 * v / max).toFixed(1)}`).join(" "));
  svg.append(line);
  const sorted = [...values].sort((a, b) => a - b);
  $("latest").textContent = `last ${values[values.length - 1]} · p50 ${sorted[Math.floor((sorted.length - 1) / 2)]} · max ${max}`;
}

// -- sending ------------------------------------------------------------------------------------
$("send").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  if (!T.run) return;
  const body = { text: $("text").value };
  if ($("user").value.trim()) body.user = $("user").value.trim();
  const started = performance.now();
  let res, doc;
  try {
    res = await fetch(`/runs/${encodeURIComponent(T.run)}/danmaku?wait=0`, { method: "POST", headers: authHeaders(), body: JSON.stringify(body) });
    doc = await res.json();
  } catch (err) {
    $("sent").textContent = `not sent: ${err}`;
    return;
  }
  if (!res.ok) {
    const items = (doc.items || []).map((i) => i.error).join("; ");
    $("sent").textContent = `not sent (${res.status}): ${doc.error}${items ? `: ${items}` : ""}`;
    $("sent").dataset.status = res.status;
    return;
  }
  const id = doc.results[0].id;
  T.sent[id] = started;
  $("sent").textContent = `sent as ${id}`;
  $("sent").dataset.status = res.status;
  $("text").value = "";
  if (T.items[id]) showItem(T.items[id]);
});

// -- the operator's controls: hold, resume, next segment, say (the token holder only) -------------
document.querySelectorAll("#operator button").forEach((button) => button.addEventListener("click", async () => {
  if (!T.run) return;
  const body = { action: button.dataset.action };
  if (button.dataset.target) body.target = button.dataset.target;
  if (body.action === "say") {
    body.text = $("say-text").value;
    if ($("say-role").value.trim()) body.target = $("say-role").value.trim();
  }
  let res, doc;
  try {
    res = await fetch(`/api/runs/${encodeURIComponent(T.run)}/control`, { method: "POST", headers: authHeaders(), body: JSON.stringify(body) });
    doc = await res.json();
  } catch (err) {
    $("controlled").textContent = `not sent: ${err}`;
    return;
  }
  $("controlled").dataset.status = res.status;
  $("controlled").textContent = res.ok ? `${body.action}: ${doc.detail || doc.outcome}` : `refused (${res.status}): ${doc.error || doc.detail}`;
  if (res.ok && body.action === "say") $("say-text").value = "";
}));

// -- media ---------------------------------------------------------------------------------------
async function connectMedia(run) {
  const pc = T.pc = new RTCPeerConnection({ iceServers: [] });
  pc.addTransceiver("video", { direction: "recvonly" });
  pc.addTransceiver("audio", { direction: "recvonly" });
  const stream = new MediaStream();
  pc.ontrack = (ev) => { stream.addTrack(ev.track); $("video").srcObject = stream; };
  pc.onconnectionstatechange = () => { $("media").textContent = `media ${pc.connectionState}`; };
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((done) => {
    if (pc.iceGatheringState === "complete") return done();
    pc.addEventListener("icegatheringstatechange", () => pc.iceGatheringState === "complete" && done());
    setTimeout(done, 2000);
  });
  const res = await fetch(`/api/runs/${encodeURIComponent(run)}/webrtc`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(pc.localDescription),
  });
  if (!res.ok) { $("media").textContent = `media refused: ${(await res.json()).error}`; return; }
  await pc.setRemoteDescription(await res.json());
}

// The frame number drawn in the picture's corner: which frame this screen shows, and when.
const probe = document.createElement("canvas");
probe.width = MARK.cell * (MARK.bits + 2);
probe.height = MARK.cell;
const probeCtx = probe.getContext("2d", { willReadFrequently: true });

function readMark(video) {
  probeCtx.drawImage(video, 0, 0, probe.width, probe.height, 0, 0, probe.width, probe.height);
  const data = probeCtx.getImageData(0, 0, probe.width, probe.height).data;
  const half = MARK.cell >> 1;
  const luma = (i) => {
    const p = (half * probe.width + i * MARK.cell + half) * 4;
    return 0.299 * data[p] + 0.587 * data[p + 1] + 0.114 * data[p + 2];
  };
  const white = luma(0), black = luma(1);
  if (white - black < 60) return null;  // no mark: the picture before the first frame
  const threshold = (white + black) / 2;
  let n = 0;
  for (let i = 0; i < MARK.bits; i++) n = n * 2 + (luma(i + 2) > threshold ? 1 : 0);
  return n;
}

function onVideoFrame() {
  const video = $("video");
  const now = performance.now();
  if (video.videoWidth) {
    const n = readMark(video);
    if (n !== null && n !== T.lastN) {
      T.lastN = n;
      T.frames.push([n, now]);
      if (T.frames.length > 3000) T.frames.splice(0, 1000);
      $("frame").textContent = n;
      for (const id in T.sent) if (!(id in T.glass)) glass(id);
    }
  }
  video.requestVideoFrameCallback(onVideoFrame);
}

// Glass to glass: from pressing Send to this screen showing the first frame of the reply's speech.
function glass(id) {
  if (!(id in T.sent) || id in T.glass || T.speaking[id] === undefined || T.speaking[id] === null) return;
  const target = T.speaking[id], sent = T.sent[id];
  const shown = T.frames.find(([n, t]) => n >= target && t >= sent);
  if (!shown) return;
  T.glass[id] = shown[1] - sent;
  if (T.items[id]) showItem(T.items[id]);
}

$("sound").onclick = () => {
  const video = $("video");
  video.muted = !video.muted;
  $("sound").textContent = video.muted ? "Sound on" : "Sound off";
  video.play();
};
$("runs").onchange = (ev) => switchRun(ev.target.value);
$("video").requestVideoFrameCallback(onVideoFrame);
pickRun();
