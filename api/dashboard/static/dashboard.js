// gpujobs spend dashboard: vanilla JS, inline SVG charts, no third-party code.
// Reads /v1/usage (grouped by day, job and capacity type) and /v1/jobs with the user's token.
"use strict";

const TOKEN_KEY = "gpujobs.token";
const SVG_NS = "http://www.w3.org/2000/svg";
const CAPACITY_TYPES = ["reserved", "spot", "on_demand"];
const COLORS = { spot: "#2ea36b", on_demand: "#e07b39", reserved: "#4a7bd0", other: "#9aa3af" };
const LOST_COLOR = "#c0392b";
const $ = (id) => document.getElementById(id);

// ---- token ---------------------------------------------------------------------------------

function takeTokenFromUrl() {
  const url = new URL(window.location.href);
  const token = url.searchParams.get("token");
  if (token) {
    localStorage.setItem(TOKEN_KEY, token);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
}

function token() {
  return localStorage.getItem(TOKEN_KEY);
}

function askForToken(message) {
  $("content").hidden = true;
  $("token-form").hidden = false;
  setStatus(message || "Enter an API token to see spend.", Boolean(message));
}

// ---- formatting ----------------------------------------------------------------------------

function money(microusd) {
  const negative = microusd < 0;
  const cents = Math.round(Math.abs(microusd) / 10000);
  const dollars = Math.floor(cents / 100);
  const text = dollars.toLocaleString("en-US") + "." + String(cents % 100).padStart(2, "0");
  return (negative ? "-$" : "$") + text;
}

function hours(value) {
  return value.toLocaleString("en-US", { maximumFractionDigits: 1, minimumFractionDigits: 1 });
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

// ---- API -----------------------------------------------------------------------------------

class AuthError extends Error {}

async function api(path) {
  const response = await fetch(path, {
    headers: { Authorization: "Bearer " + token(), Accept: "application/json" },
  });
  if (response.status === 401 || response.status === 403) {
    throw new AuthError("That token was refused (" + response.status + ").");
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const message = body && body.error ? body.error.message : "HTTP " + response.status;
    throw new Error(path + ": " + message);
  }
  return body;
}

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

async function load() {
  if (!token()) {
    askForToken();
    return;
  }
  $("token-form").hidden = true;
  setStatus("Loading…");
  const period = periodQuery();
  try {
    const [byDay, byJob, byCapacity, running] = await Promise.all([
      api("/v1/usage?group_by=day" + period),
      api("/v1/usage?group_by=job" + period),
      api("/v1/usage?group_by=capacity_type" + period),
      api("/v1/jobs?status=RUNNING&status=SCHEDULED&status=PREEMPTED&limit=100"),
    ]);
    render({ byDay, byJob, byCapacity, running: running.items });
    setStatus("");
    $("content").hidden = false;
    document.body.dataset.loaded = "true";
  } catch (error) {
    if (error instanceof AuthError) askForToken(error.message);
    else setStatus(error.message, true);
  }
}

// ---- rendering -----------------------------------------------------------------------------

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
  renderRunning(running, byJob.groups);
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
    if (b.monthly_budget_microusd === null) {
      line.textContent = `${b.team}: ${money(b.used_microusd)} used · no budget set`;
      div.appendChild(line);
    } else {
      const share = b.monthly_budget_microusd > 0 ? b.used_microusd / b.monthly_budget_microusd : 1;
      line.textContent =
        `${b.team}: ${money(b.used_microusd)} of ${money(b.monthly_budget_microusd)} · ` +
        `${money(b.left_microusd)} left`;
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

function renderRunning(jobs, jobGroups) {
  const spend = new Map(jobGroups.map((g) => [g.key, g.cost_microusd]));
  const body = $("running-jobs").querySelector("tbody");
  body.replaceChildren();
  jobs.forEach((job) => {
    const row = document.createElement("tr");
    row.dataset.job = job.id;
    cell(row, job.name);
    cell(row, job.team);
    cell(row, job.status);
    const p = job.progress;
    const wrap = document.createElement("span");
    if (p && p.total_steps) {
      const bar = document.createElement("span");
      bar.className = "progress";
      const fill = document.createElement("span");
      fill.className = "fill";
      fill.style.display = "block";
      fill.style.width = Math.min(100, (100 * p.step) / p.total_steps).toFixed(1) + "%";
      bar.appendChild(fill);
      wrap.append(bar, `${p.step} / ${p.total_steps}`);
    } else {
      wrap.textContent = p ? `step ${p.step}` : "–";
    }
    cell(row, wrap);
    cell(row, String(job.attempts), true);
    cell(row, spend.has(job.id) ? money(spend.get(job.id)) : "–", true);
    body.appendChild(row);
  });
  if (!jobs.length) body.appendChild(rowOf(empty("Nothing running."), 6));
}

// ---- wiring --------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromUrl();
  if (linkedPeriod()) {
    const option = new Option("From the link", "link", true, true);
    $("period").prepend(option);
  }
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    localStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
    $("token-input").value = "";
    load();
  });
  $("sign-out").addEventListener("click", () => {
    localStorage.removeItem(TOKEN_KEY);
    askForToken();
  });
  $("refresh").addEventListener("click", load);
  $("period").addEventListener("change", load);
  load();
});
