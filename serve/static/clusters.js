// The dashboard's clusters page: every workload Ray cluster with its state, last health check,
// nodes and the jobs running there (GET /v1/dashboard/clusters; a tenant sees only the clusters
// its own jobs run on). The admin may drain an active cluster. Uses dashboard.js's helpers.
"use strict";

const CLUSTER_STATE_COLORS = { active: "#22c55e", draining: "#f59e0b", unhealthy: "#ef4444" };

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "never";
  if (seconds < 120) return Math.round(seconds) + " s ago";
  if (seconds < 7200) return Math.round(seconds / 60) + " min ago";
  return (seconds / 3600).toFixed(1) + " h ago";
}

async function drainCluster(name) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const r = await fetch("/v1/clusters/" + encodeURIComponent(name) + "/drain",
    { method: "POST", headers: { Authorization: "Bearer " + token } });
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) throw new ApiError(r.status, body);
}

async function clustersPage() {
  const admin = (sessionStorage.getItem("spotplane.who") || "") === "admin";
  const root = h("div", { id: "clusters" }, h("h1", {}, "Clusters"));
  const body = h("div", {});
  view().append(root);
  root.append(h("p", { class: "muted" }, admin
    ? "Every workload Ray cluster: a draining or unhealthy one takes no new work; what runs there is left alone."
    : "The workload clusters your jobs run on, with your jobs and the nodes they hold."), body);
  const draw = async () => {
    const rows = await api("/v1/dashboard/clusters");
    if (!rows.length) {
      body.replaceChildren(h("p", { class: "muted" }, admin ? "no workload cluster registered" : "none of your jobs is running"));
      return;
    }
    const stateCell = (c) => h("td", { class: "cluster-state", "data-state": c.state },
      h("span", { style: `color:${CLUSTER_STATE_COLORS[c.state] || "#6b7280"};font-weight:600`, title: c.health_message || "" }, c.state));
    const action = (c) => {
      if (!c.takes_work) return h("td", { class: "muted" }, c.state === "draining" ? "drained: finishing its jobs" : "no new work");
      return h("td", {}, h("button", { class: "drain", "data-cluster": c.name, on: { click: async () => {
        try { await drainCluster(c.name); await draw(); } catch (e) { showError(e); }
      } } }, "Drain"));
    };
    const headers = ["cluster", "cloud", "region", "state", "health checked", "nodes", "jobs running", "zones"];
    body.replaceChildren(table(admin ? [...headers, ""] : headers,
      rows.map((c) => {
        const cells = [c.name, c.cloud, c.region, stateCell(c), ago(c.health_age_s), num(c.nodes), num(c.jobs_running), c.zones.join(" ")];
        return admin ? [...cells, action(c)] : cells;
      }), { id: "clusters-table" }));
  };
  await draw();
  every(draw);
}

window.SPOTPLANE_PAGES = { ...(window.SPOTPLANE_PAGES || {}), clusters: clustersPage };
