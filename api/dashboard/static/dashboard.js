// gpujobs console: vanilla JS, one module, no third-party code, no build step.
// Views (hash routes): #/jobs (every status, filtered, paged), #/jobs/<id> (one job: attempts,
// events, live logs, artifacts, cancel) and #/spend (usage, savings, preemption cost).
// Text from the API only ever reaches the page through textContent or attributes.
"use strict";

const TOKEN_KEY = "gpujobs.token";
const SVG_NS = "http://www.w3.org/2000/svg";
const CAPACITY_TYPES = ["reserved", "spot", "on_demand"];
const COLORS = { spot: "#2ea36b", on_demand: "#e07b39", reserved: "#4a7bd0", other: "#9aa3af" };
const LOST_COLOR = "#c0392b";
const ACTIVE = ["PENDING", "SCHEDULED", "RUNNING", "PREEMPTED"];
const TERMINAL = ["SUCCEEDED", "FAILED", "CANCELLED"];
const PAGE_SIZE = 25;
const POLL_MS = 5000;
const LOG_LIMIT = 400000; // characters kept in the log pane
const VIEWS = ["jobs", "job", "spend"];
const $ = (id) => document.getElementById(id);

// What the page shows now. `seq` grows on every navigation, so a slow answer for a page the
// user has left is dropped instead of drawn over the new one.
const state = {
  route: null,
  seq: 0,
  cursors: [null], // cursors[i] fetches page i of the job list
  page: 0,
  logs: null, // AbortController of the running log stream
  job: null, // the job on the job page, as last loaded
  attempts: [], // its attempts, as last loaded
  stored: null, // the step of its latest complete checkpoint in the store, once listed
  loading: false,
  deployment: null, // GET /v1/deployment: whether placements and costs are simulated
  linkedToken: null, // a link's token, other than the stored one, until the user chooses
};

// ---- token ---------------------------------------------------------------------------------

// A link carries the token in its fragment, "#token=gpj_...", optionally followed by a route
// ("#token=gpj_...&/jobs/<id>"): browsers never send a fragment, so it stays out of the
// server's access log and of proxies. It is kept in localStorage and taken off the address.
// A link anyone can send must not sign the page into their team unasked: with another token
// already stored, the link's is held in memory until the user chooses (askToSwitchToken).
function takeTokenFromFragment() {
  const match = /^#token=([^&]*)&?(.*)$/.exec(window.location.hash);
  if (!match) return;
  let linked = "";
  try {
    linked = decodeURIComponent(match[1]);
  } catch {
    // a malformed escape: no token, the page asks for one
  }
  const route = match[2] ? "#" + match[2] : "";
  history.replaceState(null, "", window.location.pathname + window.location.search + route);
  if (!linked || linked === token()) return;
  if (token()) askToSwitchToken(linked);
  else localStorage.setItem(TOKEN_KEY, linked);
}

function askToSwitchToken(linked) {
  state.linkedToken = linked;
  $("token-switch").hidden = false;
  $("token-switch-no").focus();
}

function answerTokenSwitch(use) {
  const linked = state.linkedToken;
  state.linkedToken = null;
  $("token-switch").hidden = true;
  if (!use || !linked) return;
  localStorage.setItem(TOKEN_KEY, linked);
  navigate();
}

// "?token=" (an older form of the link) reached the server in the request line, and with it the
// access log: it is dropped from the address and never used, so such links stop working.
function refuseTokenInQuery() {
  const url = new URL(window.location.href);
  if (!url.searchParams.has("token")) return false;
  url.searchParams.delete("token");
  history.replaceState(null, "", url.pathname + url.search + url.hash);
  return true;
}

function token() {
  return localStorage.getItem(TOKEN_KEY);
}

function askForToken(message) {
  stopLogs();
  state.seq += 1;
  for (const view of VIEWS) $("view-" + view).hidden = true;
  $("nav").hidden = true;
  $("controls").hidden = true;
  $("token-form").hidden = false;
  delete document.body.dataset.loaded;
  setStatus(message || "Enter an API token to see your jobs and spend.", Boolean(message));
}

function showSignedIn() {
  $("token-form").hidden = true;
  $("nav").hidden = false;
  $("controls").hidden = false;
}

// ---- formatting ----------------------------------------------------------------------------

function money(microusd) {
  if (microusd > 0 && microusd < 10000) return "$" + (microusd / 1e6).toPrecision(2); // not $0.00
  const negative = microusd < 0;
  const cents = Math.round(Math.abs(microusd) / 10000);
  const dollars = Math.floor(cents / 100);
  const text = dollars.toLocaleString("en-US") + "." + String(cents % 100).padStart(2, "0");
  return (negative ? "-$" : "$") + text;
}

function dollars(value) {
  if (value === null || value === undefined) return "–";
  if (value > 0 && value < 0.01) return "$" + value.toPrecision(2); // not $0.00
  return money(value * 1e6);
}

function hours(value) {
  return value.toLocaleString("en-US", { maximumFractionDigits: 1, minimumFractionDigits: 1 });
}

function when(iso) {
  if (!iso) return "–";
  return new Date(iso).toISOString().slice(0, 16).replace("T", " ") + " UTC";
}

function hoursBetween(fromIso, toIso) {
  if (!fromIso) return null;
  const end = toIso ? new Date(toIso) : new Date();
  return (end - new Date(fromIso)) / 3600000;
}

function setFigure(id, text, microusd) {
  const el = $(id);
  el.textContent = text;
  if (microusd !== undefined) el.dataset.microusd = String(microusd);
}

function setStatus(text, isError) {
  const el = $("status");
  el.textContent = text;
  el.classList.toggle("error", Boolean(isError));
  el.hidden = !text;
}

// ---- DOM helpers ---------------------------------------------------------------------------

function element(tag, props, children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "text") el.textContent = value;
    else if (key === "data") Object.assign(el.dataset, value);
    else el[key] = value;
  }
  for (const child of children || []) el.append(child);
  return el;
}

function badge(status) {
  return element("span", { className: "badge " + status, text: status });
}

function jobLink(job) {
  return element("a", { href: "#/jobs/" + encodeURIComponent(job.id), text: job.name });
}

function progressOf(p) {
  const wrap = document.createElement("span");
  if (p && p.total_steps) {
    const fill = element("span", { className: "fill" });
    fill.style.display = "block";
    fill.style.width = Math.min(100, (100 * p.step) / p.total_steps).toFixed(1) + "%";
    wrap.append(element("span", { className: "progress" }, [fill]), `${p.step} / ${p.total_steps}`);
  } else {
    wrap.textContent = p ? `step ${p.step}` : "–";
  }
  return wrap;
}

// ---- API -----------------------------------------------------------------------------------

class AuthError extends Error {}

class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

function authHeaders(accept) {
  return { Authorization: "Bearer " + token(), Accept: accept || "application/json" };
}

async function api(path, method) {
  const response = await fetch(path, { method: method || "GET", headers: authHeaders() });
  if (response.status === 401 || response.status === 403) {
    throw new AuthError("That token was refused (" + response.status + ").");
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const message = body && body.error ? body.error.message : "HTTP " + response.status;
    throw new ApiError(path + ": " + message, response.status);
  }
  return body;
}

function jobPath(id, rest) {
  return "/v1/jobs/" + encodeURIComponent(id) + (rest || "");
}

// ---- routing -------------------------------------------------------------------------------

// "#/jobs?status=FAILED" | "#/jobs/<id>" | "#/spend"; a link that fixes a period opens spend.
function parseRoute() {
  const hash = window.location.hash.replace(/^#\/?/, "");
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean);
  if (parts[0] === "jobs" && parts[1]) return { view: "job", id: decodeURIComponent(parts[1]) };
  if (parts[0] === "spend" || (!parts.length && linkedPeriod())) return { view: "spend" };
  const status = new URLSearchParams(query || "").get("status") || "";
  return { view: "jobs", status };
}

function navigate() {
  const route = parseRoute();
  const previous = state.route;
  state.route = route;
  state.seq += 1;
  if (!previous || previous.view !== "jobs" || previous.status !== route.status) {
    state.cursors = [null];
    state.page = 0;
  }
  stopLogs();
  state.job = null;
  // A view shows once its data is in, never the previous job's figures under a new title.
  for (const view of VIEWS) $("view-" + view).hidden = true;
  for (const link of $("nav").querySelectorAll("a")) {
    const current = link.dataset.view === route.view || (route.view === "job" && link.dataset.view === "jobs");
    link.classList.toggle("current", current);
  }
  document.body.dataset.view = route.view;
  delete document.body.dataset.loaded;
  load({ first: true });
}

// Loads the current view; `first` is set when the user just arrived on it.
async function load({ first } = {}) {
  if (!token()) {
    askForToken();
    return;
  }
  showSignedIn();
  const seq = state.seq;
  const route = state.route;
  if (first) setStatus("Loading…");
  state.loading = true;
  try {
    await loadDeployment();
    if (route.view === "jobs") await loadJobs(seq, route);
    else if (route.view === "job") await loadJob(seq, route.id, first);
    else await loadSpend(seq);
    if (seq !== state.seq) return;
    setStatus("");
    $("view-" + route.view).hidden = false;
    document.body.dataset.loaded = "true";
  } catch (error) {
    if (error instanceof AuthError) askForToken(error.message);
    else if (seq === state.seq) setStatus(error.message, true);
  } finally {
    state.loading = false;
  }
}

// The launcher does not change while the page is open: asked once, then shown on every view.
async function loadDeployment() {
  if (state.deployment) return;
  state.deployment = await api("/v1/deployment");
  $("simulated").textContent = state.deployment.notice || "";
  $("simulated").hidden = !state.deployment.simulated;
}

function simulated() {
  return Boolean(state.deployment && state.deployment.simulated);
}

// ---- auto-refresh --------------------------------------------------------------------------

function poll() {
  if (document.hidden || !$("auto-refresh").checked || state.loading || !token()) return;
  if (!$("token-form").hidden) return;
  load();
}

function onVisibilityChange() {
  if (!document.hidden) poll();
}

// ---- jobs ----------------------------------------------------------------------------------

function statusQuery(status) {
  if (!status) return "";
  const wanted = status === "active" ? ACTIVE : [status];
  return wanted.map((s) => "&status=" + encodeURIComponent(s)).join("");
}

async function loadJobs(seq, route) {
  $("status-filter").value = route.status;
  const cursor = state.cursors[state.page];
  let path = "/v1/jobs?limit=" + PAGE_SIZE + statusQuery(route.status);
  if (cursor) path += "&cursor=" + encodeURIComponent(cursor);
  const page = await api(path);
  if (seq !== state.seq) return;
  state.cursors[state.page + 1] = page.next_cursor || null;
  renderJobs(page.items);
  renderPager(Boolean(page.next_cursor));
}

function renderJobs(jobs) {
  const body = $("jobs").querySelector("tbody");
  body.replaceChildren();
  for (const job of jobs) {
    const row = element("tr", { data: { job: job.id, status: job.status } });
    cell(row, jobLink(job));
    cell(row, job.team);
    cell(row, badge(job.status));
    cell(row, progressOf(job.progress));
    cell(row, resourcesOf(job));
    cell(row, capacityOf(job.placement));
    cell(row, money(job.cost_microusd), true).dataset.microusd = String(job.cost_microusd);
    cell(row, String(job.attempts), true);
    cell(row, String(job.preemptions), true);
    cell(row, when(job.created_at));
    cell(row, when(job.updated_at));
    body.appendChild(row);
  }
  if (!jobs.length) body.appendChild(rowOf(empty("No jobs match."), 11));
  $("jobs-updated").textContent = "updated " + new Date().toLocaleTimeString();
}

function renderPager(hasNext) {
  $("page-prev").disabled = state.page === 0;
  $("page-next").disabled = !hasNext;
  $("page-label").textContent = "page " + (state.page + 1);
}

function turnPage(delta) {
  const target = state.page + delta;
  if (target < 0 || (delta > 0 && !state.cursors[target])) return;
  state.page = target;
  state.seq += 1;
  load();
}

function onFilterChange() {
  const status = $("status-filter").value;
  window.location.hash = "#/jobs" + (status ? "?status=" + encodeURIComponent(status) : "");
}

// ---- one job -------------------------------------------------------------------------------

async function loadJob(seq, id, first) {
  const [job, attempts, events] = await Promise.all([
    api(jobPath(id)),
    api(jobPath(id, "/attempts")),
    api(jobPath(id, "/events")),
  ]);
  if (seq !== state.seq) return;
  // The store is listed again when the job says a newer checkpoint completed: its note and the
  // facts name one step.
  const changed = !state.job || state.job.id !== job.id || state.job.status !== job.status ||
    reportedCheckpoint(state.job) !== reportedCheckpoint(job);
  if (!state.job || state.job.id !== job.id) state.stored = null;
  state.job = job;
  state.attempts = attempts;
  renderJobHeader(job);
  renderJobFacts(job, attempts);
  renderAttempts(attempts);
  renderEvents(events);
  if (first) hideCancelConfirm();
  if (first || (!state.logs && !TERMINAL.includes(job.status))) followLogs(id, seq);
  if (changed) loadArtifacts(id, seq);
}

function renderJobHeader(job) {
  document.title = job.name + " · gpujobs";
  $("job-name").textContent = job.name;
  const status = $("job-status");
  status.textContent = job.status;
  status.className = "badge " + job.status;
  $("job-reason").textContent = job.status_reason || "";
  $("cancel-box").hidden = TERMINAL.includes(job.status);
}

function fact(label, value) {
  return element("div", {}, [element("dt", { text: label }), element("dd", { text: value })]);
}

function progressText(p) {
  if (!p) return "no report yet";
  let text = p.total_steps ? `step ${p.step} / ${p.total_steps} (${Math.floor((100 * p.step) / p.total_steps)}%)` : `step ${p.step}`;
  if (p.loss !== null && p.loss !== undefined) text += ` · loss ${p.loss.toFixed(3)}`;
  return text;
}

// Where the latest attempt runs or ran: the job's `placement`, as the server reports it.
function placement(p) {
  if (!p) return "not placed yet";
  return `${p.cloud} ${p.region} / ${p.zone} · ${p.instance_type} · ` +
    `${p.capacity_type.replace("_", "-")} at ${dollars(p.price_per_hour)}/h` +
    (simulated() ? " (simulated)" : "");
}

// GPUs × model (× nodes): as placed, or as asked for before the first placement.
function resourcesOf(job) {
  const p = job.placement;
  const r = job.spec.resources || {};
  const gpus = p ? p.gpu_count : r.gpus_per_node || 1;
  const model = p ? p.gpu_model : (r.gpu_models || []).join("|") || "any GPU";
  const nodes = p ? p.nodes : r.nodes || 1;
  return `${gpus}× ${model}` + (nodes > 1 ? ` × ${nodes} nodes` : "");
}

function capacityOf(p) {
  return p ? `${p.capacity_type.replace("_", "-")} · ${p.zone}` : "–";
}

// An attempt's cost: recorded once it ended, estimated from its price while it runs.
function attemptCost(a) {
  if (a.cost !== null && a.cost !== undefined) return { value: a.cost, estimate: false };
  const took = a.ended_at ? null : hoursBetween(a.started_at, null);
  if (took === null) return { value: null, estimate: false };
  return { value: took * a.price_per_hour, estimate: true }; // the price covers every node
}

function costText({ value, estimate }) {
  return value === null ? "–" : (estimate ? "≈" : "") + dollars(value);
}

// The share of a preempted attempt's cost that paid for the steps it lost: the steps it ran
// are the next attempt's starting step plus the lost ones, minus its own starting step.
function lostCost(attempts) {
  let total = 0;
  attempts.forEach((a, i) => {
    const next = attempts[i + 1];
    if (a.end_reason !== "preempted" || !a.steps_lost || !a.cost || !next) return;
    const ran = (next.resume_from_step || 0) + a.steps_lost - (a.resume_from_step || 0);
    if (ran > 0) total += (a.cost * a.steps_lost) / ran;
  });
  return total;
}

function known(value) {
  return value !== null && value !== undefined;
}

// What the job's record says: the last report's checkpoint, or the resume point it keeps.
function reportedCheckpoint(job) {
  const steps = [job.progress && job.progress.checkpoint_step, job.resume_from_step].filter(known);
  return steps.length ? Math.max(...steps) : null;
}

// One checkpoint step for the whole page. The store's listing wins when it is ahead: a trainer
// stopped (preempted, moved, cancelled) saves a last checkpoint whose report may never reach
// the API, and a next attempt resumes from the store's latest, not from the record.
function latestCheckpoint(job) {
  const steps = [reportedCheckpoint(job), state.stored].filter(known);
  return steps.length ? Math.max(...steps) : null;
}

function checkpointText(job) {
  const step = latestCheckpoint(job);
  if (step === null) return "none yet";
  return `step ${step}` + (TERMINAL.includes(job.status) ? "" : " · the next attempt resumes from it");
}

function renderJobFacts(job, attempts) {
  const lost = attempts.reduce((sum, a) => sum + (a.steps_lost || 0), 0);
  const p = job.progress;
  $("job-facts").replaceChildren(
    fact("Job id", job.id),
    fact("Team", job.team),
    fact("Progress", progressText(p)),
    fact("Checkpoint", checkpointText(job)),
    fact("Deadline", job.deadline_at ? when(job.deadline_at) : "none"),
    fact("Attempts", `${job.attempts} (${job.restarts} restarts, ${job.preemptions} preemptions)`),
    fact("Placement", placement(job.placement)),
    // The server's sum in micro-dollars (a running attempt up to the response), not re-added.
    fact(TERMINAL.includes(job.status) ? "Cost" : "Cost so far", money(job.cost_microusd)),
    fact("Lost work", `${lost} steps` + (lost ? ` · ≈${dollars(lostCost(attempts))} of compute` : "")),
    fact("Created", when(job.created_at)),
    fact("Updated", when(job.updated_at)),
  );
}

function renderAttempts(attempts) {
  const body = $("attempts").querySelector("tbody");
  body.replaceChildren();
  for (const a of attempts) {
    const row = element("tr", { data: { attempt: a.id, capacity: a.capacity_type } });
    const took = hoursBetween(a.started_at, a.ended_at);
    cell(row, String(a.number));
    // As the CLI marks it: a standby is held beside the running attempt until a handover.
    cell(row, a.capacity_type.replace("_", "-") + (a.standby ? " standby" : ""));
    cell(row, `${a.cloud} ${a.region} / ${a.zone}`);
    cell(row, `${a.instance_type} · ${a.gpu_count}× ${a.gpu_model}` + (a.nodes > 1 ? ` × ${a.nodes} nodes` : ""));
    cell(row, dollars(a.price_per_hour), true);
    cell(row, when(a.started_at));
    cell(row, a.ended_at ? when(a.ended_at) : a.started_at ? "running" : "–");
    cell(row, took === null ? "–" : hours(took), true);
    cell(row, a.end_reason ? a.end_reason.replaceAll("_", " ") : "–"); // words: "handed over"
    cell(row, a.resume_from_step === null || a.resume_from_step === undefined ? "0" : String(a.resume_from_step), true);
    cell(row, a.steps_lost === null || a.steps_lost === undefined ? "–" : String(a.steps_lost), true);
    cell(row, costText(attemptCost(a)), true);
    body.appendChild(row);
  }
  if (!attempts.length) body.appendChild(rowOf(empty("Not placed yet."), 12));
}

function renderEvents(events) {
  const body = $("events").querySelector("tbody");
  body.replaceChildren();
  for (const e of events.slice().reverse()) {
    const row = element("tr", { data: { event: e.id } });
    cell(row, when(e.at));
    cell(row, e.from_status ? `${e.from_status} → ${e.to_status}` : e.to_status || "–");
    cell(row, e.reason || "").className = "reason";
    const data = e.data && Object.keys(e.data).length ? JSON.stringify(e.data, null, 1) : "";
    cell(row, element("code", { text: data }));
    body.appendChild(row);
  }
  if (!events.length) body.appendChild(rowOf(empty("No events yet."), 4));
}

// ---- cancel --------------------------------------------------------------------------------

function hideCancelConfirm() {
  $("cancel-confirm").hidden = true;
  $("cancel").hidden = false;
}

function askToCancel() {
  $("cancel").hidden = true;
  $("cancel-confirm").hidden = false;
  $("cancel-no").focus();
}

async function confirmCancel() {
  const job = state.job;
  hideCancelConfirm();
  if (!job) return;
  try {
    await api(jobPath(job.id, "/cancel"), "POST");
    setStatus("Cancelled " + job.name + ".");
  } catch (error) {
    if (error instanceof AuthError) return askForToken(error.message);
    setStatus(error.message, true);
  }
  load();
}

// ---- live logs -----------------------------------------------------------------------------

function stopLogs() {
  if (state.logs) state.logs.abort();
  state.logs = null;
}

function setLogsState(text) {
  $("logs-state").textContent = text;
}

function appendLog(text) {
  const pane = $("logs");
  const atBottom = pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 4;
  pane.append(text);
  while (pane.textContent.length > LOG_LIMIT && pane.firstChild) pane.firstChild.remove();
  if (atBottom) pane.scrollTop = pane.scrollHeight;
}

// Streams `/logs?follow=true` with fetch (an EventSource could not send the token); leaving the
// page aborts the request, which ends the server's follower too.
async function followLogs(id, seq) {
  stopLogs();
  const controller = new AbortController();
  state.logs = controller;
  $("logs").textContent = "";
  setLogsState("· following");
  try {
    const response = await fetch(jobPath(id, "/logs?follow=true"), {
      headers: authHeaders("text/plain"),
      signal: controller.signal,
    });
    if (!response.ok) {
      setLogsState(response.status === 501 ? "· this API process serves no logs" : "· HTTP " + response.status);
      return;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      appendLog(value);
    }
    if (seq === state.seq) setLogsState("· ended");
  } catch (error) {
    if (error.name !== "AbortError" && seq === state.seq) setLogsState("· stopped: " + error.message);
  } finally {
    if (state.logs === controller) state.logs = null;
  }
}

// ---- artifacts -----------------------------------------------------------------------------

async function loadArtifacts(id, seq) {
  let listing;
  try {
    listing = await api(jobPath(id, "/artifacts"));
  } catch (error) {
    // 404/405: an API without artifacts; anything else is worth a line.
    const missing = error instanceof ApiError && (error.status === 404 || error.status === 405);
    if (seq === state.seq) showArtifactsError(missing ? null : error.message);
    return;
  }
  if (seq === state.seq) renderArtifacts(listing);
}

function showArtifactsError(message) {
  $("artifacts-panel").hidden = !message;
  $("artifacts-note").textContent = message || "";
  $("artifacts").replaceChildren();
}

function renderArtifacts(listing) {
  const checkpoints = listing.checkpoints || [];
  const final = checkpoints.find((c) => c.step === listing.final_step);
  const shown = final || checkpoints[checkpoints.length - 1];
  state.stored = shown ? shown.step : null;
  if (state.job) renderJobFacts(state.job, state.attempts); // the same step in both places
  $("artifacts-panel").hidden = false;
  $("artifacts-note").textContent = final
    ? `The trained weights: checkpoint at step ${final.step}.`
    : shown
      ? `No final weights yet; the files of the checkpoint at step ${shown.step}:`
      : "No checkpoint yet.";
  $("artifacts").replaceChildren(...(shown ? shown.files.map(artifactItem) : []));
}

function artifactItem(file) {
  const url = new URL(file.url, window.location.href);
  const label = `${file.name} (${(file.size / 1048576).toFixed(1)} MiB)`;
  const link = element("a", { href: "#", text: label, data: { url: url.href } });
  if (url.origin === window.location.origin) {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      download(url.href, file.name, link);
    });
  } else if (url.protocol === "https:" || url.protocol === "http:") {
    link.href = url.href; // presigned elsewhere: never send our token there
    link.rel = "noreferrer";
  }
  return element("li", {}, [link, element("span", { className: "muted", text: " sha256 " + file.sha256.slice(0, 12) + "…" })]);
}

// The download needs the bearer token, so a plain link cannot do it: fetch, then save a Blob.
async function download(href, name, link) {
  link.dataset.state = "downloading";
  try {
    const response = await fetch(href, { headers: authHeaders("application/octet-stream") });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const blob = await response.blob();
    const save = element("a", { href: URL.createObjectURL(blob), download: name });
    document.body.appendChild(save);
    save.click();
    save.remove();
    setTimeout(() => URL.revokeObjectURL(save.href), 60000);
    link.dataset.state = "done";
  } catch (error) {
    link.dataset.state = "failed";
    setStatus(`Download of ${name} failed: ${error.message}`, true);
  }
}

// ---- spend ---------------------------------------------------------------------------------

// A link may fix the period: /dashboard?from=2025-03-01T00:00:00Z&to=2025-03-08T00:00:00Z
function linkedPeriod() {
  const params = new URLSearchParams(window.location.search);
  let query = "";
  for (const name of ["from", "to"]) {
    if (params.get(name)) query += "&" + name + "=" + encodeURIComponent(params.get(name));
  }
  return query;
}

function periodQuery() {
  const value = $("period").value;
  if (value === "link") return linkedPeriod();
  if (value === "month") return "";
  const from = new Date(Date.now() - Number(value) * 86400000);
  from.setUTCHours(0, 0, 0, 0);
  return "&from=" + encodeURIComponent(from.toISOString());
}

async function loadSpend(seq) {
  const period = periodQuery();
  const [byDay, byJob, byCapacity, running] = await Promise.all([
    api("/v1/usage?group_by=day" + period),
    api("/v1/usage?group_by=job" + period),
    api("/v1/usage?group_by=capacity_type" + period),
    api("/v1/jobs?status=RUNNING&status=SCHEDULED&status=PREEMPTED&limit=100"),
  ]);
  if (seq !== state.seq) return;
  render({ byDay, byJob, byCapacity, running: running.items });
}

function render({ byDay, byJob, byCapacity, running }) {
  const total = byDay.total;
  const from = new Date(byDay.from);
  const to = new Date(byDay.to);
  $("period-label").textContent =
    from.toISOString().slice(0, 10) + " → " + to.toISOString().slice(0, 16).replace("T", " ") +
    " UTC";
  setFigure("total-cost", money(total.cost_microusd), total.cost_microusd);
  setFigure("on-demand-cost", money(total.on_demand_cost_microusd), total.on_demand_cost_microusd);
  setFigure("savings", money(total.savings_microusd), total.savings_microusd);
  setFigure("savings-pct", total.savings_pct === null ? "–" : total.savings_pct.toFixed(1) + "%");
  setFigure("gpu-hours", hours(total.gpu_hours));
  setFigure("preemptions", String(total.preemptions));
  setFigure("lost-gpu-hours", hours(total.lost_gpu_hours));
  setFigure("lost-cost", money(total.lost_cost_microusd), total.lost_cost_microusd);
  renderSpendChart(byDay);
  renderSavingsChart(byCapacity.groups);
  renderPreemptionChart(byDay);
  renderTopJobs(byJob.groups);
  renderBudgets(byDay.budgets);
  renderRunning(running);
}

function days(fromIso, toIso) {
  const out = [];
  const day = new Date(fromIso);
  day.setUTCHours(0, 0, 0, 0);
  const end = new Date(toIso);
  while (day < end && out.length < 400) {
    out.push(day.toISOString().slice(0, 10));
    day.setUTCDate(day.getUTCDate() + 1);
  }
  return out;
}

function svg(tag, attrs, parent) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  if (parent) parent.appendChild(el);
  return el;
}

function text(parent, x, y, content, attrs) {
  const el = svg("text", Object.assign({ x, y, class: "axis" }, attrs || {}), parent);
  el.textContent = content;
  return el;
}

function niceMax(value) {
  if (value <= 0) return 1;
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

// A bar chart frame: returns the svg, a y scale and the plot box.
function frame(container, { width, height, max, label, left }) {
  container.replaceChildren();
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" }, container);
  const box = { left: left || 64, right: width - 12, top: 10, bottom: height - 28 };
  const top = niceMax(max);
  const y = (v) => box.bottom - (v / top) * (box.bottom - box.top);
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    svg("line", { x1: box.left, x2: box.right, y1: y(v), y2: y(v), class: "grid" }, root);
    text(root, box.left - 6, y(v) + 4, label(v), { "text-anchor": "end" });
  }
  return { root, y, box };
}

function renderSpendChart(report) {
  const container = $("spend-chart");
  const labels = days(report.from, report.to);
  const byDay = new Map(report.groups.map((g) => [g.key, g]));
  const seen = new Set();
  report.groups.forEach((g) => Object.keys(g.cost_microusd_by_capacity_type).forEach((c) => seen.add(c)));
  const types = CAPACITY_TYPES.filter((c) => seen.has(c)).concat(
    [...seen].filter((c) => !CAPACITY_TYPES.includes(c)),
  );
  const legend = $("spend-legend");
  legend.replaceChildren();
  types.forEach((c) => {
    const span = document.createElement("span");
    span.className = COLORS[c] ? c : "other";
    span.textContent = c.replace("_", "-");
    legend.appendChild(span);
  });
  const max = Math.max(0, ...report.groups.map((g) => g.cost_microusd)) / 1e6;
  const { root, y, box } = frame(container, {
    width: 1180, height: 300, max, label: (v) => "$" + v.toLocaleString("en-US"),
  });
  const slot = (box.right - box.left) / Math.max(1, labels.length);
  const every = Math.ceil(labels.length / 16);
  labels.forEach((day, i) => {
    const x = box.left + i * slot + slot * 0.15;
    const group = byDay.get(day);
    let base = 0;
    if (group) {
      types.forEach((c) => {
        const value = (group.cost_microusd_by_capacity_type[c] || 0) / 1e6;
        if (value <= 0) return;
        const rect = svg("rect", {
          x, width: slot * 0.7, y: y(base + value), height: y(base) - y(base + value),
          fill: COLORS[c] || COLORS.other, "data-day": day, "data-capacity": c,
        }, root);
        svg("title", {}, rect).textContent = `${day} ${c}: ${money(value * 1e6)}`;
        base += value;
      });
    }
    if (i % every === 0) text(root, x + slot * 0.35, box.bottom + 16, day.slice(5), { "text-anchor": "middle" });
  });
}

function renderSavingsChart(groups) {
  const container = $("savings-chart");
  if (!groups.length) {
    container.replaceChildren(empty("No spend in this period."));
    return;
  }
  const max = Math.max(...groups.map((g) => Math.max(g.on_demand_cost_microusd, g.cost_microusd))) / 1e6;
  const { root, y, box } = frame(container, {
    width: 560, height: 260, max, label: (v) => "$" + v.toLocaleString("en-US"),
  });
  const slot = (box.right - box.left) / groups.length;
  groups.forEach((g, i) => {
    const x = box.left + i * slot + slot * 0.15;
    const w = slot * 0.32;
    const paid = g.cost_microusd / 1e6;
    const onDemand = g.on_demand_cost_microusd / 1e6;
    svg("rect", { x, width: w, y: y(onDemand), height: box.bottom - y(onDemand), fill: "#cfd5dd" }, root);
    svg("rect", {
      x: x + w, width: w, y: y(paid), height: box.bottom - y(paid),
      fill: COLORS[g.key] || COLORS.other,
    }, root);
    const saved = g.savings_pct > 0 ? ` (−${g.savings_pct.toFixed(0)}%)` : "";
    text(root, x + w, box.bottom + 16, g.key.replace("_", "-") + saved, { "text-anchor": "middle" });
  });
  text(root, box.right, box.top + 10, "grey: on-demand price · colour: paid", { "text-anchor": "end" });
}

function renderPreemptionChart(report) {
  const container = $("preemption-chart");
  const withLoss = report.groups.filter((g) => g.preemptions > 0);
  if (!withLoss.length) {
    container.replaceChildren(empty("No preemptions in this period."));
    return;
  }
  const labels = days(report.from, report.to);
  const byDay = new Map(report.groups.map((g) => [g.key, g]));
  const max = Math.max(...withLoss.map((g) => g.lost_cost_microusd)) / 1e6;
  const { root, y, box } = frame(container, {
    width: 560, height: 260, max, label: (v) => "$" + v.toLocaleString("en-US"),
  });
  const slot = (box.right - box.left) / Math.max(1, labels.length);
  const every = Math.ceil(labels.length / 8);
  labels.forEach((day, i) => {
    const g = byDay.get(day);
    const x = box.left + i * slot + slot * 0.15;
    if (g && g.preemptions > 0) {
      const lost = g.lost_cost_microusd / 1e6;
      const rect = svg("rect", {
        x, width: slot * 0.7, y: y(lost), height: box.bottom - y(lost), fill: LOST_COLOR,
      }, root);
      svg("title", {}, rect).textContent =
        `${day}: ${g.preemptions} preemption(s), ${hours(g.lost_gpu_hours)} GPU-h lost, ${money(g.lost_cost_microusd)}`;
      text(root, x + slot * 0.35, y(lost) - 4, "×" + g.preemptions, { "text-anchor": "middle" });
    }
    if (i % every === 0) text(root, x + slot * 0.35, box.bottom + 16, day.slice(5), { "text-anchor": "middle" });
  });
  text(root, box.right, box.top + 10, "cost of work lost (× preemptions)", { "text-anchor": "end" });
}

function empty(message) {
  const p = document.createElement("p");
  p.className = "empty";
  p.textContent = message;
  return p;
}

function cell(row, content, numeric) {
  const td = document.createElement("td");
  if (content instanceof Node) td.appendChild(content);
  else td.textContent = content;
  if (numeric) td.className = "num";
  row.appendChild(td);
  return td;
}

function renderTopJobs(groups) {
  const body = $("top-jobs").querySelector("tbody");
  body.replaceChildren();
  groups.slice(0, 10).forEach((g) => {
    const row = document.createElement("tr");
    row.dataset.job = g.key;
    cell(row, g.label || g.key);
    cell(row, money(g.cost_microusd), true).dataset.microusd = String(g.cost_microusd);
    cell(row, hours(g.gpu_hours), true);
    cell(row, money(g.savings_microusd), true);
    cell(row, String(g.preemptions), true);
    body.appendChild(row);
  });
  if (!groups.length) body.appendChild(rowOf(empty("No spend in this period."), 5));
}

function rowOf(node, span) {
  const row = document.createElement("tr");
  const td = cell(row, node);
  td.colSpan = span;
  return row;
}

function renderBudgets(budgets) {
  const container = $("budgets");
  container.replaceChildren();
  budgets.forEach((b) => {
    const div = document.createElement("div");
    div.className = "budget";
    div.dataset.team = b.team;
    const line = document.createElement("div");
    const held = b.held_microusd > 0 ? ` · ${money(b.held_microusd)} held` : "";
    if (b.monthly_microusd === null) {
      line.textContent = `${b.team}: ${money(b.spent_microusd)} spent${held} · no budget set`;
      div.appendChild(line);
    } else {
      // Held money is as good as spent for what can still be admitted, so the bar counts it.
      const committed = b.spent_microusd + b.held_microusd;
      const share = b.monthly_microusd > 0 ? committed / b.monthly_microusd : 1;
      line.textContent =
        `${b.team}: ${money(b.spent_microusd)} of ${money(b.monthly_microusd)}${held} · ` +
        `${money(b.remaining_microusd)} left`;
      const bar = document.createElement("div");
      bar.className = "bar";
      const fill = document.createElement("div");
      fill.className = "fill" + (share > 1 ? " over" : share > 0.8 ? " high" : "");
      fill.style.width = Math.min(100, share * 100).toFixed(1) + "%";
      bar.appendChild(fill);
      div.append(line, bar);
    }
    container.appendChild(div);
  });
  if (!budgets.length) container.appendChild(empty("No teams."));
}

function renderRunning(jobs) {
  const body = $("running-jobs").querySelector("tbody");
  body.replaceChildren();
  jobs.forEach((job) => {
    const row = element("tr", { data: { job: job.id } });
    cell(row, jobLink(job));
    cell(row, job.team);
    cell(row, badge(job.status));
    cell(row, progressOf(job.progress));
    cell(row, String(job.attempts), true);
    cell(row, money(job.cost_microusd), true);
    body.appendChild(row);
  });
  if (!jobs.length) body.appendChild(rowOf(empty("Nothing running."), 6));
}

// ---- wiring --------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  const refused = refuseTokenInQuery();
  takeTokenFromFragment();
  if (linkedPeriod()) {
    const option = new Option("From the link", "link", true, true);
    $("period").prepend(option);
  }
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    localStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
    $("token-input").value = "";
    navigate();
  });
  $("sign-out").addEventListener("click", () => {
    localStorage.removeItem(TOKEN_KEY);
    answerTokenSwitch(false);
    askForToken();
  });
  $("token-switch-yes").addEventListener("click", () => answerTokenSwitch(true));
  $("token-switch-no").addEventListener("click", () => answerTokenSwitch(false));
  $("refresh").addEventListener("click", () => load());
  $("period").addEventListener("change", () => load({ first: true }));
  $("status-filter").addEventListener("change", onFilterChange);
  $("page-prev").addEventListener("click", () => turnPage(-1));
  $("page-next").addEventListener("click", () => turnPage(1));
  $("cancel").addEventListener("click", askToCancel);
  $("cancel-no").addEventListener("click", hideCancelConfirm);
  $("cancel-yes").addEventListener("click", confirmCancel);
  window.addEventListener("hashchange", () => {
    takeTokenFromFragment(); // a link opened in a tab already on the page
    navigate();
  });
  document.addEventListener("visibilitychange", onVisibilityChange);
  setInterval(poll, POLL_MS);
  navigate();
  if (refused && !token()) {
    askForToken("A token in the address (?token=) is not used: it reaches server logs. Paste it "
      + "here, or open /dashboard#token=….");
  }
});
