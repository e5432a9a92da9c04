// spotplane's dashboard: a hand-written single page over the /v1 API (no libraries, no CDN).
// The token lives in sessionStorage only; every request sends it, so a tenant sees what the API allows.
"use strict";

const TOKEN_KEY = "spotplane.token";
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#14b8a6", "#e11d48", "#64748b"];
const STATE_COLORS = { PENDING: "#9ca3af", QUEUED: "#cbd5e1", STARTING: "#93c5fd", RUNNING: "#22c55e",
  CHECKPOINTING: "#eab308", PREEMPTED: "#ef4444", SUCCEEDED: "#3b82f6", FAILED: "#991b1b", CANCELLED: "#6b7280" };
const ACTION_COLORS = { spot: "#22c55e", on_demand: "#f59e0b", idle: "#9ca3af" };
const STATES = Object.keys(STATE_COLORS);
const REFRESH_MS = 2000;
const TOP = 26; // charts' top margin: room for the y axis label

let timer = null;
const jobsView = { sort: "submitted", desc: false, offset: 0, limit: 50, state: "", kind: "", tenant: "", q: "", cursors: [] };
let tenantNames = {};

// -- DOM helpers ------------------------------------------------------------------------------
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (v !== null && v !== undefined) el.setAttribute(k, v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}
const view = () => document.getElementById("view");
const money = (x) => "$" + Number(x).toFixed(2);
const hours = (secs) => (secs / 3600).toFixed(2) + " h";
const tenantName = (id) => tenantNames[id] || id;

// -- API ----------------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || "HTTP " + status);
    this.status = status;
    this.fix = body && body.fix;
  }
}
async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) throw new ApiError(r.status, body);
  return body;
}

async function apiText(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
  if (!r.ok) throw new ApiError(r.status, null);
  return await r.text();
}
const LOG_LINES = 200;
const lastLines = (text, n) => text.split("\n").slice(-n - 1).join("\n");

// -- login --------------------------------------------------------------------------------------
async function login(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
  try {
    const tenants = await api("/v1/tenants");
    tenantNames = Object.fromEntries(tenants.map((t) => [t.id, t.name]));
    const admin = await api("/v1/tenants/me").then(() => false, (e) => e.status === 403);
    sessionStorage.setItem("spotplane.who", admin ? "admin" : "tenant " + tenants[0].name);
    return null;
  } catch (e) {
    sessionStorage.removeItem(TOKEN_KEY);
    if (e.status === 401) return "That token was not accepted (" + e.message + "). Use a tenant's token or the admin token in the file `spotplane up` names (STATE/admin-token).";
    return "Could not reach the spotplane API: " + e.message;
  }
}
function showLogin(message) {
  stopRefresh();
  document.getElementById("login").hidden = false;
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("who").textContent = "";
  document.getElementById("login-error").textContent = message || "";
  view().replaceChildren();
}
async function onLogin(ev) {
  ev.preventDefault();
  const input = document.getElementById("token");
  const error = await login(input.value.trim());
  if (error) { showLogin(error); return; }
  input.value = "";
  if (!location.hash || location.hash === "#/") location.hash = "#/overview"; else route();
}

// -- routing ------------------------------------------------------------------------------------
function stopRefresh() { if (timer) { clearInterval(timer); timer = null; } }
function every(fn) { stopRefresh(); timer = setInterval(() => fn().catch(showError), REFRESH_MS); }
function showError(e) {
  if (e instanceof ApiError && e.status === 401) { sessionStorage.removeItem(TOKEN_KEY); showLogin("Your token is no longer accepted: " + e.message); return; }
  const box = document.getElementById("page-error");
  if (box) box.textContent = e.message + (e.fix ? " (" + e.fix + ")" : "");
}
async function route() {
  stopRefresh();
  if (!sessionStorage.getItem(TOKEN_KEY)) { showLogin(); return; }
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  document.getElementById("logout").hidden = false;
  document.getElementById("who").textContent = sessionStorage.getItem("spotplane.who") || "";
  if (!Object.keys(tenantNames).length) {
    try { tenantNames = Object.fromEntries((await api("/v1/tenants")).map((t) => [t.id, t.name])); }
    catch (e) { showError(e); return; }
  }
  const [, page, arg] = (location.hash || "#/overview").split("/");
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.getAttribute("href") === "#/" + page);
  const pages = { overview: overviewPage, jobs: jobsPage, job: jobPage, capacity: capacityPage, fleet: fleetPage, ...(window.spotplanePages || {}) };
  view().replaceChildren(h("p", { id: "page-error", class: "error", role: "alert" }));
  try { await (pages[page] || overviewPage)(decodeURIComponent(arg || "")); } catch (e) { showError(e); }
}

// -- charts (inline SVG) ------------------------------------------------------------------------
function axes(svg, w, ht, pad, xmax, ymax, xlabel, ylabel) {
  svg.append(s("line", { x1: pad, y1: ht - pad, x2: w - 10, y2: ht - pad, stroke: "#9ca3af" }),
    s("line", { x1: pad, y1: TOP, x2: pad, y2: ht - pad, stroke: "#9ca3af" }),
    s("text", { x: w - 10, y: ht - pad + 28, "text-anchor": "end" }, xlabel),
    s("text", { x: 4, y: 12 }, ylabel));
  for (let i = 0; i <= 4; i++) {
    const xv = (xmax * i) / 4, yv = (ymax * i) / 4;
    svg.append(s("text", { x: pad + ((w - pad - 10) * i) / 4, y: ht - pad + 14, "text-anchor": "middle" }, fmt(xv)),
      s("text", { x: pad - 4, y: ht - pad - ((ht - pad - TOP) * i) / 4 + 4, "text-anchor": "end" }, fmt(yv)));
  }
}
function fmt(v) { return Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2); }
function scaler(w, ht, pad, xmax, ymax) {
  return [(x) => pad + ((w - pad - 10) * x) / (xmax || 1), (y) => ht - pad - ((ht - pad - TOP) * y) / (ymax || 1)];
}
function lineChart(series, xs, opts) {
  const w = opts.width || 520, ht = opts.height || 220, pad = 44;
  const xmax = Math.max(...xs, 1e-9), ymax = Math.max(1, ...Object.values(series).flat());
  const svg = s("svg", { width: w, height: ht, class: opts.cls || "chart" });
  axes(svg, w, ht, pad, xmax, ymax, opts.xlabel, opts.ylabel);
  const [X, Y] = scaler(w, ht, pad, xmax, ymax);
  Object.entries(series).forEach(([name, ys], i) => {
    const d = ys.map((y, j) => (j ? "L" : "M") + X(xs[j]).toFixed(1) + "," + Y(y).toFixed(1)).join(" ");
    const dash = opts.dashed && opts.dashed.includes(name) ? { "stroke-dasharray": "6 4" } : {};
    svg.append(s("path", { d, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 2, "data-series": name, ...dash }));
    if (opts.points) ys.forEach((y, j) => svg.append(s("circle", { cx: X(xs[j]).toFixed(1), cy: Y(y).toFixed(1), r: 2, fill: COLORS[i % COLORS.length], "data-series": name })));
  });
  return h("div", {}, svg, legend(Object.keys(series)));
}
function legend(names, colors) {
  return h("div", { class: "legend" }, names.map((n, i) => h("span", {}, h("i", { style: "background:" + ((colors && colors[n]) || COLORS[i % COLORS.length]) }), n)));
}
function barChart(rows, opts) {
  // rows: [{label, values: {name: number}}], grouped bars
  const names = [...new Set(rows.flatMap((r) => Object.keys(r.values)))];
  const w = opts.width || 520, rowH = 18 * names.length + 10, pad = 110;
  const max = Math.max(1e-9, ...rows.flatMap((r) => Object.values(r.values)));
  const svg = s("svg", { width: w, height: rows.length * rowH + 10, class: opts.cls || "bars" });
  rows.forEach((r, i) => {
    svg.append(s("text", { x: pad - 6, y: i * rowH + 16, "text-anchor": "end" }, r.label));
    names.forEach((n, k) => {
      const v = r.values[n] || 0, bw = ((w - pad - 80) * v) / max;
      svg.append(s("rect", { x: pad, y: i * rowH + 4 + 18 * k, width: Math.max(bw, 1), height: 14, fill: (opts.colors && opts.colors[n]) || COLORS[k % COLORS.length] }),
        s("text", { x: pad + bw + 4, y: i * rowH + 15 + 18 * k }, opts.format ? opts.format(v) : v));
    });
  });
  return h("div", {}, svg, names.length > 1 ? legend(names, opts.colors) : null);
}
function table(headers, rows, attrs) {
  return h("table", attrs || {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c) => (c instanceof Node && c.tagName === "TD" ? c : h("td", {}, c)))))));
}
const num = (x) => h("td", { class: "num" }, x);

// -- Overview -----------------------------------------------------------------------------------
async function overviewPage() {
  const root = h("div", { id: "overview" }, h("h1", {}, "Overview"));
  view().append(root);
  const draw = async () => {
    const o = await api("/v1/dashboard/overview");
    const hist = o.node_history, t0 = hist.times[0] || 0;
    const cost = o.cost.tenants.map((t) => ({ label: t.tenant_name, values: { spend: t.cost, "on-demand": t.on_demand_cost } }));
    root.replaceChildren(h("h1", {}, "Overview"), h("div", { class: "cards" },
      h("div", { class: "card" }, h("h2", {}, "Jobs by state"),
        barChart(STATES.map((st) => ({ label: st, values: { jobs: o.jobs_by_state[st] || 0 } })), { cls: "jobs-by-state", colors: { jobs: "#3b82f6" } })),
      h("div", { class: "card" }, h("h2", {}, "Live nodes by cloud and market"),
        hist.times.length ? lineChart(hist.series, hist.times.map((t) => (t - t0) / 3600), { xlabel: "hours", ylabel: "nodes", cls: "nodes-over-time" })
          : h("p", { class: "muted" }, "no nodes yet")),
      h("div", { class: "card" }, h("h2", {}, "Spend against on-demand"),
        h("p", {}, "total " + money(o.cost.total_cost) + " vs " + money(o.cost.on_demand_cost) + " on-demand: " + o.cost.savings_pct.toFixed(1) + "% saved"),
        barChart(cost, { format: money, cls: "cost-bars" }))),
      h("h2", {}, "Nodes now by cloud, zone and market"),
      table(["cloud", "zone", "market", "nodes"], o.nodes_now.map((n) => [n.cloud, n.zone, n.market, num(n.nodes)]), { id: "nodes-now" }));
  };
  await draw();
  every(draw);
}

// -- Jobs ---------------------------------------------------------------------------------------
const COLUMNS = [["name", "job"], ["state", "state"], ["kind", "kind"], ["tenant", "tenant"], ["progress", "progress"],
  ["cost", "cost"], ["preemptions", "preemptions"], ["checkpoints", "checkpoints"], ["slack", "deadline slack"]];
function jobsQuery() {
  const p = new URLSearchParams({ sort: jobsView.sort, desc: jobsView.desc, limit: jobsView.limit, offset: jobsView.offset });
  const after = jobsView.cursors[jobsView.cursors.length - 1];  // submission order pages by cursor
  if (after) p.append("after", after);
  if (jobsView.state) p.append("state", jobsView.state);
  if (jobsView.kind) p.append("kind", jobsView.kind);
  if (jobsView.tenant) p.append("tenant_id", jobsView.tenant);
  if (jobsView.q) p.append("q", jobsView.q);
  return "/v1/dashboard/jobs?" + p;
}
function select(id, options, value, onchange) {
  return h("select", { id, on: { change: (e) => onchange(e.target.value) } },
    options.map(([v, label]) => { const o = h("option", { value: v }, label); if (v === value) o.selected = true; return o; }));
}
async function jobsPage() {
  const body = h("tbody", {}), info = h("span", { id: "jobs-info", class: "muted" });
  const head = h("tr", {}, COLUMNS.map(([key, label]) => h("th", { class: "sortable", "data-sort": key, on: { click: () => {
    jobsView.desc = jobsView.sort === key ? !jobsView.desc : key === "cost" || key === "preemptions";
    jobsView.sort = key; jobsView.offset = 0; jobsView.cursors = []; draw();
  } } }, label)));
  const refilter = (k) => (v) => { jobsView[k] = v; jobsView.offset = 0; jobsView.cursors = []; draw(); };
  let nextAfter = null;
  const admin = (sessionStorage.getItem("spotplane.who") || "") === "admin";
  const filters = h("div", { class: "filters" },
    select("filter-state", [["", "any state"], ...STATES.map((x) => [x, x])], jobsView.state, refilter("state")),
    select("filter-kind", [["", "any kind"], ["hp", "hp"], ["spot", "spot"], ["deadline", "deadline"]], jobsView.kind, refilter("kind")),
    admin ? select("filter-tenant", [["", "any tenant"], ...Object.entries(tenantNames)], jobsView.tenant, refilter("tenant")) : null,
    h("input", { id: "filter-q", type: "search", placeholder: "id or name", value: jobsView.q, on: { change: (e) => refilter("q")(e.target.value) } }),
    h("button", { id: "prev", on: { click: () => { jobsView.offset = Math.max(0, jobsView.offset - jobsView.limit); jobsView.cursors.pop(); draw(); } } }, "◀ prev"),
    h("button", { id: "next", on: { click: () => {
      if (jobsView.sort === "submitted" && !nextAfter) return;  // the last page
      if (nextAfter) jobsView.cursors.push(nextAfter);
      jobsView.offset += jobsView.limit; draw();
    } } }, "next ▶"), info);
  view().append(h("h1", {}, "Jobs"), filters, h("table", { id: "jobs" }, h("thead", {}, head), body));
  async function draw() {
    const page = await api(jobsQuery());
    nextAfter = page.next_after || null;
    if (page.total && jobsView.offset >= page.total && !jobsView.cursors.length) { jobsView.offset = Math.floor((page.total - 1) / jobsView.limit) * jobsView.limit; return draw(); }
    for (const th of head.children) {
      th.classList.toggle("sorted-asc", th.dataset.sort === jobsView.sort && !jobsView.desc);
      th.classList.toggle("sorted-desc", th.dataset.sort === jobsView.sort && jobsView.desc);
    }
    info.textContent = page.total ? `${page.offset + 1}-${page.offset + page.items.length} of ${page.total}` : "no jobs";
    body.replaceChildren(...page.items.map((j) => h("tr", { "data-job": j.id },
      h("td", {}, h("a", { href: "#/job/" + j.id }, j.name), " ", h("span", { class: "muted" }, j.id)),
      h("td", { class: "state state-" + j.state }, j.state), h("td", {}, j.kind), h("td", {}, tenantName(j.tenant_id)),
      h("td", {}, h("span", { class: "bar", title: (100 * j.progress_fraction).toFixed(0) + "%" }, h("span", { style: `width:${(100 * j.progress_fraction).toFixed(1)}%` })),
        " " + (100 * j.progress_fraction).toFixed(0) + "%"),
      num(money(j.cost)), num(j.preemptions), num(j.checkpoints), num(j.slack_hours === null ? "" : j.slack_hours.toFixed(2) + " h"))));
    // first paint of the table (read by benchmarks/dashboard.py): the frame after the first rows
    if (window.spotplaneJobsPainted === undefined) requestAnimationFrame(() => { window.spotplaneJobsPainted ??= performance.now(); });
  }
  await draw();
  every(draw);
}

// -- one job ------------------------------------------------------------------------------------
async function jobPage(id) {
  const root = h("div", { id: "job" });
  view().append(root);
  const draw = async () => {
    const [job, events, decisions, segments, clock] = await Promise.all([api("/v1/jobs/" + encodeURIComponent(id)),
      api(`/v1/jobs/${encodeURIComponent(id)}/events`), api(`/v1/jobs/${encodeURIComponent(id)}/decisions`),
      api(`/v1/dashboard/jobs/${encodeURIComponent(id)}/timeline`), api("/v1/clock")]);
    const now = clock.now;
    const logs = job.spec.entrypoint ? await apiText(`/v1/jobs/${encodeURIComponent(id)}/logs`).catch(() => null) : null;
    const checkpoints = events.filter((e) => e.kind === "transition" && e.src === "CHECKPOINTING");
    root.replaceChildren(h("div", {},  // h() flattens arrays and drops nulls; replaceChildren would print them
      h("h1", {}, job.name + " ", h("span", { class: "muted" }, job.id)),
      h("p", {}, h("span", { class: "state state-" + job.state, id: "job-state" }, job.state), ` · ${job.kind} · tenant ${tenantName(job.tenant_id)} · `
        + `${job.spec.workers}x${job.spec.gpus_per_worker} ${job.spec.accelerator || "any GPU"} · progress ${job.progress_hours.toFixed(2)}/${job.spec.compute_hours} h · `
        + `cost ${money(job.cost)} (on-demand ${money(job.on_demand_cost)}) · ${job.preemptions} preemptions · ${job.checkpoints} checkpoints`),
      h("h2", {}, "Timeline"), timelineChart(segments, job.submitted_at),
      job.kind === "deadline" ? [h("h2", {}, "Decision trace against Uniform Progress"), traceChart(job, decisions, now)] : null,
      h("h2", {}, "Checkpoints"),
      checkpoints.length ? table(["at", "cause"], checkpoints.map((e) => [hours(e.at - job.submitted_at), e.cause]), { id: "checkpoints" })
        : h("p", { class: "muted" }, job.checkpointed_hours ? `${job.checkpointed_hours.toFixed(2)} h checkpointed` : "none yet"),
      h("h2", {}, "Events"),
      table(["at", "kind", "from", "to", "node", "cause"], events.map((e) => [hours(e.at - job.submitted_at), e.kind, e.src || "", e.dst || "", e.node_id || "", e.cause]), { id: "events" }),
      job.spec.entrypoint ? [h("h2", {}, "Logs"), h("p", { class: "muted" }, "every attempt, newest lines last (entrypoint " + job.spec.entrypoint + "; `spotplane logs " + job.id + " -f`)"),
        h("pre", { id: "job-logs", class: "logs" }, logs === null ? "(logs unavailable)" : lastLines(logs, LOG_LINES) || "(no output yet)")] : null));
    if (job.state === "SUCCEEDED" || job.state === "FAILED" || job.state === "CANCELLED") stopRefresh();
  };
  await draw();
  every(draw);
}
function timelineChart(segments, t0) {
  const w = 760, ht = 70, pad = 44;
  const end = Math.max(t0 + 1, ...segments.map((x) => x.end));
  const svg = s("svg", { width: w, height: ht, id: "timeline" });
  const X = (t) => pad + ((w - pad - 10) * (t - t0)) / (end - t0);
  for (const seg of segments) {
    const r = s("rect", { x: X(seg.start), y: 10, width: Math.max(1, X(seg.end) - X(seg.start)), height: 26, fill: STATE_COLORS[seg.state] || "#ccc", "data-state": seg.state });
    r.append(s("title", {}, `${seg.state} ${hours(seg.start - t0)}-${hours(seg.end - t0)}` + (seg.node_ids.length ? ` on ${seg.node_ids.join(", ")}` : "") + (seg.zone ? ` in ${seg.zone} (${seg.market})` : "") + ` — ${seg.cause}`));
    svg.append(r);
  }
  svg.append(s("text", { x: pad, y: 52 }, "0 h"), s("text", { x: w - 10, y: 52, "text-anchor": "end" }, hours(end - t0)));
  const attempts = segments.filter((x) => x.node_ids.length);
  return h("div", {}, svg, legend([...new Set(segments.map((x) => x.state))], STATE_COLORS),
    attempts.length ? table(["state", "from", "to", "nodes", "zone", "market"], attempts.map((x) => [x.state, hours(x.start - t0), hours(x.end - t0), x.node_ids.join(" "), x.zone || "", x.market || ""]), { id: "attempts" }) : null);
}
function traceChart(job, decisions, now) {
  const C = job.spec.compute_hours, R = (job.deadline_at - job.submitted_at) / 3600;
  const elapsed = ((job.finished_at ?? now) - job.submitted_at) / 3600;
  const pts = decisions.filter((d) => d.observation && d.observation.elapsed_hours !== undefined)
    .map((d) => ({ x: d.observation.elapsed_hours, y: d.observation.progress_hours, action: d.action, zone: d.zone, reason: d.reason }));
  pts.push({ x: Math.max(0, elapsed), y: job.progress_hours, action: "now" });
  const w = 620, ht = 300, pad = 44, xmax = Math.max(R, elapsed) * 1.05, ymax = C * 1.05;
  const svg = s("svg", { width: w, height: ht, id: "decision-trace" });
  axes(svg, w, ht, pad, xmax, ymax, "elapsed hours", "progress (compute hours)");
  const [X, Y] = scaler(w, ht, pad, xmax, ymax);
  svg.append(s("path", { class: "uniform-progress", d: `M${X(0)},${Y(0)} L${X(R)},${Y(C)}`, stroke: "#9ca3af", "stroke-dasharray": "6 4", fill: "none" }),
    s("line", { class: "deadline", x1: X(R), x2: X(R), y1: TOP, y2: ht - pad, stroke: "#b00020", "stroke-dasharray": "3 3" }),
    s("text", { x: X(R) - 4, y: TOP + 10, "text-anchor": "end", fill: "#b00020" }, "deadline"),
    s("line", { x1: pad, x2: w - 10, y1: Y(C), y2: Y(C), stroke: "#d1d5db" }));
  const d = pts.map((p, i) => (i ? "L" : "M") + X(p.x).toFixed(1) + "," + Y(p.y).toFixed(1)).join(" ");
  svg.append(s("path", { class: "trace", d, fill: "none", stroke: "#1d4ed8", "stroke-width": 2 }));
  for (const p of pts) {
    const c = s("circle", { cx: X(p.x), cy: Y(p.y), r: 4, fill: ACTION_COLORS[p.action] || "#1d4ed8", class: "decision", "data-action": p.action });
    c.append(s("title", {}, p.action + (p.zone ? " in " + p.zone : "") + (p.reason ? ": " + p.reason : "")));
    svg.append(c);
  }
  return h("div", {}, svg, legend(["spot", "on_demand", "idle", "Uniform Progress (dashed)"], { ...ACTION_COLORS, "Uniform Progress (dashed)": "#9ca3af" }),
    table(["elapsed", "progress", "action", "zone"], decisions.map((x) => [x.observation.elapsed_hours === undefined ? "" : x.observation.elapsed_hours.toFixed(2) + " h", x.observation.progress_hours === undefined ? "" : x.observation.progress_hours.toFixed(2) + " h", x.action, x.zone || ""]), { id: "decisions" }));
}

// -- Capacity -----------------------------------------------------------------------------------
const CAPACITY_WINDOW = 500; // points kept on the page (the API's page size)
async function capacityPage() {
  const root = h("div", { id: "capacity" }, h("h1", {}, "Capacity"));
  const pools = h("div", { class: "cards", id: "capacity-pools" }), rest = h("div", {});
  view().append(root);
  root.append(h("h2", {}, "GPU pools over time"), pools, rest);
  let points = [], cursor = null;
  const draw = async () => {
    const page = await api("/v1/capacity/history?limit=" + CAPACITY_WINDOW + (cursor === null ? "" : "&after=" + cursor));
    points = points.concat(page.items).slice(-CAPACITY_WINDOW);
    cursor = page.next_cursor;
    pools.replaceChildren(...capacityCards(points));
  };
  const [quotas, forecasts] = await Promise.all([api("/v1/quotas"), api("/v1/forecasts")]);
  rest.append(h("h2", {}, "Spot quota per pool now"),
    table(["pool", "accelerator", "capacity GPUs", "spot quota GPUs"], quotas.map((q) => [q.pool, q.accelerator, num(q.capacity_gpus), num(q.spot_quota_gpus)]), { id: "quotas" }),
    h("h2", {}, "Forecast HP demand per tenant (GPUs, hours ahead) with its upper bound"),
    forecasts.length ? h("div", { class: "cards" }, forecasts.map((f) => h("div", { class: "card" }, h("h2", {}, tenantName(f.tenant_id)),
      lineChart({ mean: f.mean, upper: f.upper }, f.mean.map((_, i) => i + 1), { xlabel: "hours ahead", ylabel: "GPUs", cls: "forecast" }))))
      : h("p", { class: "muted" }, "no forecasts yet"));
  await draw();
  every(draw);
}
function capacityCards(points) {
  if (!points.length) return [h("p", { class: "muted", id: "capacity-empty" }, "no quota refresh yet: the forecaster waits for HP demand history")];
  const byPool = {};
  for (const p of points) (byPool[p.pool + "/" + p.accelerator] ||= []).push(p);
  const t0 = points[0].at;
  return Object.entries(byPool).map(([pool, ps]) => {
    const xs = ps.map((p) => (p.at - t0) / 3600);
    const gpus = { "spot quota": ps.map((p) => p.spot_quota_gpus), capacity: ps.map((p) => p.capacity_gpus) };
    const demand = ps[0].hp_demand_gpus !== null;
    if (demand) {
      gpus["HP demand (forecast)"] = ps.map((p) => p.hp_demand_gpus);
      gpus["HP demand upper bound"] = ps.map((p) => p.hp_demand_upper_gpus);
    }
    const last = ps[ps.length - 1];
    return h("div", { class: "card capacity-pool", "data-pool": pool, "data-points": ps.length },
      h("h2", {}, pool),
      lineChart(gpus, xs, { xlabel: "hours", ylabel: "GPUs", cls: "capacity-gpus", points: true, dashed: ["HP demand upper bound", "capacity"] }),
      lineChart({ "η (Eq. 11)": ps.map((p) => p.eta), "guarantee hours H": ps.map((p) => p.guarantee_hours) }, xs,
        { xlabel: "hours", ylabel: "η / hours", cls: "capacity-eta", height: 160, points: true, dashed: ["guarantee hours H"] }),
      h("p", { class: "muted" }, `now: quota ${last.spot_quota_gpus}/${last.capacity_gpus} GPUs, η ${last.eta.toFixed(3)}, H ${last.guarantee_hours} h`
        + (demand ? `, HP demand ${last.hp_demand_gpus.toFixed(2)} (upper ${last.hp_demand_upper_gpus.toFixed(2)}) GPUs` : " (HP demand: admin only, it sums every tenant's forecast)")));
  });
}

// -- Fleet --------------------------------------------------------------------------------------
async function fleetPage() {
  const [prices, zones, preemptions] = await Promise.all([api("/v1/fleet/prices"), api("/v1/fleet/zones"), api("/v1/dashboard/preemptions")]);
  const up = Object.fromEntries(zones.map((z) => [z.zone + "/" + z.instance_type, z.spot_available]));
  view().append(h("h1", {}, "Fleet"), h("h2", {}, "Zones"),
    table(["cloud", "zone", "instance", "accelerator", "spot", "spot $/h", "on-demand $/h", "discount"], prices.map((p) => [p.cloud, p.zone, p.instance_type, p.accelerator || "",
      up[p.zone + "/" + p.instance_type] ? "available" : "unavailable", num(money(p.spot_price)),
      num(money(p.on_demand_price)), num(p.spot_discount_pct.toFixed(0) + "%")]), { id: "zones" }),
    h("h2", {}, "Recent preemptions"),
    preemptions.length ? table(["at", "job", "tenant", "cause"], preemptions.map((e) => [new Date(e.at * 1000).toISOString().slice(0, 19).replace("T", " "), h("a", { href: "#/job/" + e.job_id }, e.job_id), tenantName(e.tenant_id), e.cause]), { id: "preemptions" })
      : h("p", { class: "muted" }, "no preemptions yet"));
}

// -- start --------------------------------------------------------------------------------------
document.getElementById("login").addEventListener("submit", onLogin);
document.getElementById("logout").addEventListener("click", () => { sessionStorage.clear(); tenantNames = {}; location.hash = ""; showLogin(); });
window.addEventListener("hashchange", route);
route();
