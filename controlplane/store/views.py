"""Read models of the store: the fleet, the cost, quotas and forecasts, and the metrics snapshot."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from controlplane.core.counters import Buckets
from controlplane.core.models import JobState, Node, NodeState
from controlplane.core.readmodels import CapacityPoint, CostSummary, ForecastRow, Quota, ZoneInfo
from controlplane.core.units import HOUR
from controlplane.store.base import StoreBase
from controlplane.store.rows import (
    CAPACITY_MAX_AGE_S,
    CAPACITY_MAX_ROWS,
    COUNT_UP,
    LIVE_NODE_STATES,
    NODE_COLUMNS,
    BadRow,
    in_list,
    limit_clause,
    load_error,
    log_bad,
    replace_sql,
    split_bad,
)


class ViewRows(StoreBase):
    """The fleet, cost, quota, forecast and metrics views."""

    # -- fleet views ---------------------------------------------------------------------------
    def list_nodes(self, state: NodeState | Iterable[NodeState] | None = None,
                   *, live_only: bool = False) -> list[Node]:
        """Nodes that load (a row that does not is logged and left out)."""
        return log_bad(*self.load_nodes(state, live_only=live_only))

    def node_page(self, *, tenant_id: str | None = None, live_only: bool = False,
                  after: str | None = None, limit: int | None = None) -> list[Node]:
        """One cursor page of the nodes in launch order: those running ``tenant_id``'s jobs
        (every node for None), ``live_only`` without gone ones."""
        scope: list[str] = []
        args: list[Any] = []
        if live_only:
            scope.append(f"state IN {in_list(len(LIVE_NODE_STATES))}")
            args += LIVE_NODE_STATES
        if tenant_id is not None:
            scope.append(f"{self._sql.json('body', 'tenant_id')} = ?")
            args.append(tenant_id)
        where, args = self._after("nodes", "rowid", after, scope, args)
        rows = self._q(f"SELECT {NODE_COLUMNS} FROM nodes{where} ORDER BY rowid, id{limit_clause(limit)}",
                       args)
        return log_bad(*split_bad(self._node_row(r) for r in rows))

    def load_nodes(self, state: NodeState | Iterable[NodeState] | None = None, *,
                   live_only: bool = False) -> tuple[list[Node], list[BadRow]]:
        """Nodes that load, and the rows that do not."""
        if live_only:
            state = [NodeState(s) for s in LIVE_NODE_STATES]
        if state is None:
            rows = self._q(f"SELECT {NODE_COLUMNS} FROM nodes ORDER BY rowid")
        else:
            states = [NodeState(state).value] if isinstance(state, str) else [
                NodeState(s).value for s in state]
            rows = self._q(f"SELECT {NODE_COLUMNS} FROM nodes WHERE state IN "
                           f"({','.join('?' * len(states))}) ORDER BY rowid", states)
        return split_bad(self._node_row(r) for r in rows)

    def job_nodes(self, job_id: str, node_ids: Iterable[str] = ()) -> list[Node]:
        """The nodes a job holds or held (by their job column, or named in ``node_ids``)."""
        ids = sorted(set(node_ids))
        rows = self._q(f"SELECT {NODE_COLUMNS} FROM nodes WHERE job_id = ? OR id IN "
                       f"{in_list(len(ids))} ORDER BY rowid", [job_id, *ids])
        return log_bad(*split_bad(self._node_row(r) for r in rows))

    def node_by_instance(self, instance_id: str, *, live_only: bool = True) -> Node | None:
        """The node that holds ``instance_id`` (the newest if several did), through the
        ``nodes_instance`` index; ``live_only`` leaves out gone nodes."""
        scope, args = "instance_id = ?", [instance_id]
        if live_only:
            scope += f" AND state IN {in_list(len(LIVE_NODE_STATES))}"
            args += LIVE_NODE_STATES
        rows = self._q(f"SELECT {NODE_COLUMNS} FROM nodes WHERE {scope} ORDER BY rowid DESC", args)
        found = log_bad(*split_bad(self._node_row(r) for r in rows))
        return found[0] if found else None

    @staticmethod
    def _node_row(r: tuple[Any, ...]) -> Node | BadRow:
        """A node from its row (``NODE_COLUMNS``), or the reason it does not load."""
        node_id, state, job_id, body = r
        try:
            node = Node.model_validate_json(body)
            if node.id != node_id:
                raise ValueError(f"the body is node {node.id}, the row node {node_id}")
        except Exception as exc:  # noqa: BLE001 - any unloadable row is quarantined, not fatal
            return BadRow("nodes", str(node_id), load_error(exc), state=state, job_id=job_id,
                          body=body if isinstance(body, str) else None)
        return node

    def zones(self) -> list[ZoneInfo]:
        """The latest catalog + availability snapshot the controller wrote."""
        return [ZoneInfo.model_validate_json(r[0])
                for r in self._q("SELECT body FROM zones ORDER BY zone, instance_type")]

    def put_zones(self, zones: Sequence[ZoneInfo]) -> None:
        with self._tx() as db:
            db.executemany(replace_sql("zones"),
                           [(z.zone, z.instance_type, z.model_dump_json()) for z in zones])

    # -- cost ----------------------------------------------------------------------------------
    def cost_by_tenant(self, tenant_id: str | None = None) -> list[CostSummary]:
        """Spend per tenant against the on-demand-only counterfactual (same GPU hours)."""
        sql = ("SELECT t.id, t.name, COALESCE(SUM(j.cost), 0), COALESCE(SUM(j.on_demand_cost), 0), "
               "COALESCE(SUM(j.gpu_hours), 0), COUNT(j.id) FROM tenants t LEFT JOIN jobs j "
               "ON j.tenant_id = t.id")
        args: list[Any] = []
        if tenant_id is not None:
            sql += " WHERE t.id = ?"
            args.append(tenant_id)
        out = []
        for tid, name, cost, od, gh, n in self._q(sql + " GROUP BY t.id ORDER BY t.name", args):
            savings = 100.0 * (1 - cost / od) if od > 0 else 0.0
            out.append(CostSummary(tenant_id=tid, tenant_name=name, cost=cost, on_demand_cost=od,
                                   savings_pct=savings, gpu_hours=gh, jobs=n))
        return out

    # -- quotas and forecasts ------------------------------------------------------------------
    def set_quotas(self, quotas: Sequence[Quota]) -> None:
        with self._tx() as db:
            db.executemany(replace_sql("quotas"),
                           [(q.pool, q.accelerator, q.model_dump_json()) for q in quotas])

    def quotas(self) -> list[Quota]:
        return [Quota.model_validate_json(r[0])
                for r in self._q("SELECT body FROM quotas ORDER BY pool, accelerator")]

    def add_capacity(self, points: Sequence[CapacityPoint], *,
                     max_age_s: float = CAPACITY_MAX_AGE_S,
                     max_rows: int = CAPACITY_MAX_ROWS) -> int:
        """Append one refresh's points, then prune points older than ``max_age_s`` before the
        newest point and all but the newest ``max_rows``; returns how many were pruned."""
        if not points:
            return 0
        newest = max(p.at for p in points)
        with self._tx() as db:
            db.executemany("INSERT INTO capacity_history (at, accelerator, body) VALUES (?, ?, ?)",
                           [(p.at, p.accelerator, p.model_dump_json(exclude={"id"})) for p in points])
            gone = db.execute("DELETE FROM capacity_history WHERE at < ?",
                              (newest - max_age_s,)).rowcount
            gone += db.execute("DELETE FROM capacity_history WHERE id <= (SELECT id FROM "
                               "capacity_history ORDER BY id DESC LIMIT 1 OFFSET ?)",
                               (max_rows,)).rowcount
        return gone

    def capacity_history(self, *, accelerator: str | None = None, after: int | None = None,
                         limit: int = 500) -> list[CapacityPoint]:
        """Points oldest first: those with ``id > after``, or without ``after`` the newest
        ``limit`` (a chart's window); at most ``limit`` either way."""
        where: list[str] = []
        args: list[Any] = []
        if accelerator is not None:
            where.append("accelerator = ?")
            args.append(accelerator)
        if after is not None:
            where.append("id > ?")
            args.append(after)
        sql = "SELECT id, body FROM capacity_history"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY id {'ASC' if after is not None else 'DESC'} LIMIT ?"
        rows = self._q(sql, [*args, limit])
        points = [CapacityPoint.model_validate_json(body).model_copy(update={"id": i})
                  for i, body in rows]
        return points if after is not None else points[::-1]

    def put_forecasts(self, rows: Sequence[ForecastRow]) -> None:
        with self._tx() as db:
            db.executemany(replace_sql("forecasts"),
                           [(f.tenant_id, f.model_dump_json()) for f in rows])

    def forecasts(self, tenant_id: str | None = None) -> list[ForecastRow]:
        rows = self._q("SELECT body FROM forecasts ORDER BY tenant_id")
        out = [ForecastRow.model_validate_json(r[0]) for r in rows]
        return [f for f in out if tenant_id is None or f.tenant_id == tenant_id]

    # -- metrics -------------------------------------------------------------------------------
    def incr(self, name: str, by: float = 1.0) -> None:
        with self._tx() as db:
            db.execute(COUNT_UP, (name, by))

    def metrics(self) -> dict[str, float]:
        """Counters (``*_total``) and gauges (jobs per state/kind, nodes per state, cost)."""
        out: dict[str, float] = {k: float(v) for k, v in self._q("SELECT name, value FROM counters")}
        for state in JobState:
            out[f"jobs{{state=\"{state.value}\"}}"] = 0.0
        cost = od = 0.0
        for state, kind, n, c, o in self._q("SELECT state, kind, n, cost, on_demand_cost FROM job_totals "
                                            "WHERE n > 0"):
            out[f"jobs{{state=\"{state}\"}}"] += n
            out[f"jobs_by_kind{{kind=\"{kind}\",state=\"{state}\"}}"] = float(n)
            cost, od = cost + c, od + o
        for state, n in self._q("SELECT state, COUNT(*) FROM nodes GROUP BY state"):
            out[f"nodes{{state=\"{state}\"}}"] = float(n)
        out["cost_dollars"] = float(cost)
        out["on_demand_cost_dollars"] = float(od)
        out["control_time_seconds"] = self.control_time()
        return out

    def tx_histogram(self) -> Buckets:
        """A copy of this process's write-transaction latency histogram."""
        return self.tx_seconds.copy()

    def metrics_snapshot(self) -> dict[str, Any]:
        """Everything ``serve.metrics.StoreCollector`` exports, read at scrape time."""
        now = self.control_time()
        names = dict(self._q("SELECT id, name FROM tenants"))
        queue: dict[tuple[str, str, str], tuple[float, float]] = {}
        j = self._sql.json
        for pool, kind, tenant, entered in self._q(
                f"SELECT COALESCE({j('j.body', 'spec.accelerator')}, 'any'), j.kind, "
                "j.tenant_id, COALESCE((SELECT MAX(e.at) FROM events e WHERE e.job_id = j.id "
                "AND e.dst = 'QUEUED'), j.submitted_at) FROM jobs j WHERE j.state = 'QUEUED'"):
            key = (pool, kind, names.get(tenant, tenant))
            depth, oldest = queue.get(key, (0.0, 0.0))
            queue[key] = (depth + 1, max(oldest, now - entered))
        live = [s.value for s in NodeState if s not in (NodeState.TERMINATED,
                                                        NodeState.PREEMPTED, NodeState.FAILED)]
        nodes = [((c, z, m, a, st), n) for c, z, m, a, st, n in self._q(
            f"SELECT {j('body', 'cloud')}, {j('body', 'zone')}, "
            f"{j('body', 'market')}, {j('body', 'accelerator')}, state, "
            f"COUNT(*) FROM nodes WHERE state IN ({','.join('?' * len(live))}) GROUP BY 1, 2, 3, "
            "4, 5 ORDER BY 1, 2, 3, 4, 5", live)]
        # the current hour so far; on an hour's boundary, the hour that just ended
        hour, elapsed = int(now // HOUR), (now % HOUR) / HOUR
        if elapsed == 0:
            hour, elapsed = hour - 1, 1.0
        forecast = {}
        for f in self.forecasts():
            i = hour - int(f.at // HOUR)
            if 0 <= i < min(len(f.mean), len(f.upper)):
                forecast[names.get(f.tenant_id, f.tenant_id)] = (f.mean[i], f.upper[i])
        realised = {names.get(t, t): gh / elapsed for t, gh in self._q(
            "SELECT tenant_id, hp_gpu_hours FROM demand WHERE hour = ?", (hour,))}
        return {
            "control_time": now,
            "counters": {k: float(v) for k, v in self._q("SELECT name, value FROM counters")},
            "jobs": self._q("SELECT state, kind, COUNT(*) FROM jobs GROUP BY 1, 2 ORDER BY 1, 2"),
            "queue": queue,
            "nodes": nodes,
            "cost": [(c.tenant_name, c.cost, c.on_demand_cost, c.gpu_hours)
                     for c in self.cost_by_tenant()],
            "quotas": self.quotas(),
            "allocators": json.loads(self.get_meta("quota_allocators", "{}") or "{}"),
            "forecast": forecast,
            "realised": realised,
        }

    def max_spot_queue_seconds(self, now: float, window_seconds: float) -> float:
        """Longest time a spot job waited in QUEUED among waits that ended in the last
        ``window_seconds`` or are still going on, a PENDING one since its submission (GFS
        Eq. 11's max spot queueing time over H)."""
        entered = ("(SELECT MAX(q.at) FROM events q WHERE q.job_id = {job} AND q.dst = 'QUEUED'"
                   " AND q.id < {before})")
        ended = self._q(
            "SELECT MAX(e.at - " + entered.format(job="e.job_id", before="e.id") + ") "
            "FROM events e JOIN jobs j ON j.id = e.job_id "
            "WHERE j.kind = 'spot' AND e.src = 'QUEUED' AND e.at >= ?", (now - window_seconds,))
        ongoing = self._q(
            "SELECT MAX(? - " + entered.format(job="j.id", before="1e18") + ") "
            "FROM jobs j WHERE j.kind = 'spot' AND j.state = 'QUEUED'", (now,))
        # a backlog the controller has not admitted yet waits too: since its submission (the
        # oldest is one probe of the jobs_waiting index, however long the backlog)
        pending = self._q("SELECT ? - MIN(submitted_at) FROM jobs WHERE state = 'PENDING' "
                          "AND kind = 'spot'", (now,))
        waits = [w for (w,) in ended + ongoing + pending if w is not None]
        return max([0.0, *waits])

