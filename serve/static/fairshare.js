// The dashboard's fair-share page: each tenant's nominal, entitled, held, borrowed and lent GPUs
// per pool (GET /v1/fairshare; a tenant sees its own lines). Uses dashboard.js's helpers.
"use strict";

async function fairSharePage() {
  const root = h("div", { id: "fairshare" }, h("h1", {}, "Fair share"));
  const body = h("div", {});
  view().append(root);
  root.append(h("p", { class: "muted" }, "GPUs per pool: a tenant's nominal share, what it is entitled to now " +
    "(its nominal share plus what idle tenants lend), what it holds, and what it borrows or lends."), body);
  const draw = async () => {
    const lines = await api("/v1/fairshare");
    if (!lines.length) { body.replaceChildren(h("p", { class: "muted" }, "no share lines published yet")); return; }
    const bar = (line) => {
      const top = Math.max(line.entitled_gpus, line.held_gpus, 1);
      return h("td", {}, h("div", { class: "share-bar", title: `held ${line.held_gpus} of ${line.entitled_gpus.toFixed(1)} entitled` },
        h("div", { class: "share-held", style: `width:${(100 * line.held_gpus / top).toFixed(1)}%;background:${line.borrowed_gpus > 0 ? "#f59e0b" : "#22c55e"};height:10px` }),
        h("div", { class: "share-entitled", style: `width:${(100 * line.entitled_gpus / top).toFixed(1)}%;border-top:2px solid #3b82f6` })));
    };
    body.replaceChildren(table(["pool", "tenant", "weight", "nominal", "entitled", "held", "borrowed", "lent", "held vs entitled"],
      lines.map((l) => [l.pool, l.tenant, num(l.weight), num(l.nominal_gpus.toFixed(1)), num(l.entitled_gpus.toFixed(1)),
        num(l.held_gpus.toFixed(1)), num(l.borrowed_gpus.toFixed(1)), num(l.lent_gpus.toFixed(1)), bar(l)]), { id: "fairshare-lines" }));
  };
  await draw();
  every(draw);
}

window.SPOTPLANE_PAGES = { ...(window.SPOTPLANE_PAGES || {}), fairshare: fairSharePage };
