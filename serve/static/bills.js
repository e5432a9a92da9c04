// spotplane's dashboard: the Bills page (each job's bill as a stacked bar, per tenant and per
// job) and the budget banner over every page. Loaded before dashboard.js, whose helpers
// (h, s, api, money, table, legend, tenantName, COLORS) it calls once a page is drawn.
"use strict";

const BILL_LINES = ["spot_compute", "on_demand_compute", "lost_work", "checkpoint", "changeover",
  "provisioning", "probes", "egress", "spares"];
const BILL_COLORS = { spot_compute: "#22c55e", on_demand_compute: "#f59e0b", lost_work: "#ef4444",
  checkpoint: "#eab308", changeover: "#8b5cf6", provisioning: "#64748b", probes: "#14b8a6",
  egress: "#3b82f6", spares: "#e11d48" };
const BILL_JOBS = 30; // the costliest jobs drawn

function stackedBars(rows, cls) {
  // rows: [{label, lines: {line: dollars}, total}]: one bar per row, a segment per line
  const w = 720, rowH = 22, pad = 170;
  const max = Math.max(1e-9, ...rows.map((r) => r.total));
  const svg = s("svg", { width: w, height: rows.length * rowH + 10, class: cls });
  rows.forEach((r, i) => {
    let x = pad;
    svg.append(s("text", { x: pad - 6, y: i * rowH + 16, "text-anchor": "end" }, r.label));
    for (const line of BILL_LINES) {
      const v = r.lines[line] || 0, bw = ((w - pad - 80) * v) / max;
      if (v <= 0) continue;
      svg.append(s("rect", { x: x, y: i * rowH + 4, width: bw, height: 16, fill: BILL_COLORS[line], "data-line": line },
        s("title", {}, line + " " + money(v))));
      x += bw;
    }
    svg.append(s("text", { x: x + 4, y: i * rowH + 16 }, money(r.total)));
  });
  return svg;
}

async function download(format) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const r = await fetch("/v1/bills?per=job&format=" + format, { headers: { Authorization: "Bearer " + token } });
  const a = h("a", { href: URL.createObjectURL(await r.blob()), download: "bills." + format });
  a.click();
}

async function billsPage() {
  const [tenants, jobs, spend] = await Promise.all([api("/v1/bills?per=tenant"), api("/v1/bills"), api("/v1/budgets")]);
  const costly = jobs.slice().sort((a, b) => b.total - a.total).slice(0, BILL_JOBS);
  view().append(h("h1", {}, "Bills"),
    h("p", {}, h("button", { on: { click: () => download("csv") } }, "Export CSV"), " ",
      h("button", { on: { click: () => download("json") } }, "Export JSON"),
      h("span", { class: "muted" }, " every job's bill; its lines add up to its total to the cent")),
    h("h2", {}, "Spend and headroom this month"),
    table(["tenant", "month", "spent", "monthly budget", "headroom", "line", "$/h now", "hourly cap", "line"],
      spend.map((b) => [tenantName(b.tenant_id), b.month, money(b.month_spend), b.monthly_budget === null ? "-" : money(b.monthly_budget),
        b.monthly_headroom === null ? "-" : money(b.monthly_headroom), b.monthly_level, money(b.spend_rate),
        b.hourly_cap === null ? "-" : money(b.hourly_cap), b.hourly_level]), { id: "spend" }),
    h("h2", {}, "Per tenant and month"),
    tenants.length ? stackedBars(tenants.map((b) => ({ label: tenantName(b.tenant_id) + " " + b.month, lines: b.lines, total: b.total })), "bills-tenants")
      : h("p", { class: "muted" }, "no bills yet"),
    legend(BILL_LINES, BILL_COLORS),
    h("h2", {}, "Per job (the " + BILL_JOBS + " costliest)"),
    costly.length ? stackedBars(costly.map((b) => ({ label: b.job_name || b.job_id, lines: b.lines, total: b.total })), "bills-jobs") : null,
    table(["job", "tenant", ...BILL_LINES, "total"], costly.map((b) => [h("a", { href: "#/job/" + b.job_id }, b.job_name || b.job_id),
      tenantName(b.tenant_id), ...BILL_LINES.map((k) => money(b.lines[k] || 0)), money(b.total)]), { id: "bills" }));
}

async function budgetBanner() {
  const spend = await api("/v1/budgets");
  const crossed = spend.flatMap((b) => [["monthly budget", b.monthly_level, money(b.month_spend) + " of " + money(b.monthly_budget || 0)],
    ["hourly spend cap", b.hourly_level, money(b.spend_rate) + "/h of " + money(b.hourly_cap || 0) + "/h"]]
    .filter(([, lvl]) => lvl !== "ok").map(([what, lvl, text]) => tenantName(b.tenant_id) + ": " + what + " past its " + lvl + " line, " + text));
  const shown = document.getElementById("budget-banner");
  if (shown) shown.remove(); // one banner, however many routes drew the page
  if (crossed.length) view().prepend(h("div", { class: "banner", id: "budget-banner", role: "status" }, crossed.join("; ")));
}

window.SPOTPLANE_PAGES = { ...(window.SPOTPLANE_PAGES || {}), bills: billsPage };
window.SPOTPLANE_BANNER = budgetBanner;
