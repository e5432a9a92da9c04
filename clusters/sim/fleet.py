"""The embedded default fleet: spot zones of two clouds replayed from public traces.

* AWS: the p3.2xlarge (1x V100) zones of ``spot-traces/availability/1-node/aws-02-15-2023``
  (9 zones, 195 s ticks, ~45 days). The traces carry no prices: on-demand is the public
  p3.2xlarge price (``AWS_P3_ON_DEMAND``), spot its typical ~70 % discount (``AWS_P3_SPOT``).
* GCP: the 13 a3-highgpu-8g (8x H100) zones of ``multiregion-h100`` (600 s ticks) with their
  own spot and on-demand prices. Spot VMs live at most 24 h; their lifetimes are drawn from the
  ``lifetime_model`` the assembly passes in (the control plane passes seed 001's GCE fit,
  ``policies.preemption.default_gce_model``); without one they live until the 24 h cap.

A spot instance is preempted at the first trace tick when its zone has no spot (the replay),
or at the end of its drawn lifetime (GCP), whichever is first; a notice comes
``notice_seconds`` before (AWS 120 s, GCP 30 s). Launching spot in a zone without spot raises
:class:`~controlplane.core.errors.CapacityUnavailable`. Instances become ready after a provisioning
delay. All times are the control plane's clock. Deterministic given ``seed``: the n-th
instance's lifetime and delay depend only on the seed, its zone and n.

Launch is idempotent on ``intent_id``; with ``state_path`` the fleet keeps its instances in its
own SQLite file (the cloud outlives the control plane's processes), so a restarted control plane
sees the same instances and a repeated launch returns them instead of creating new ones.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import os
import sqlite3
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from clusters.aws.notices import NOTICE_SECONDS as AWS_NOTICE_SECONDS
from clusters.data.catalog import DataCatalog
from clusters.data.spot import SpotTrace
from clusters.fleet import (
    EventKind,
    FleetEvent,
    FleetProvider,
    Instance,
    InstanceState,
    LaunchRequest,
    LifetimeModel,
    Offer,
    typed_options,
)
from clusters.gcp.lifetime import SPOT_MAX_HOURS
from clusters.gcp.notices import NOTICE_SECONDS as GCP_NOTICE_SECONDS
from clusters.providers import Capability, fleet_provider
from controlplane.core.clock import Clock, SimClock
from controlplane.core.config import data_dir
from controlplane.core.errors import CapacityUnavailable, ConfigError, InvalidInput, NotFound
from controlplane.core.models import Market
from controlplane.core.units import HOUR

log = logging.getLogger(__name__)

AWS_COLLECTION = "availability/1-node/aws-02-15-2023"
AWS_P3_ON_DEMAND = 3.06  # $/h, p3.2xlarge us-east-1 on-demand list price
AWS_P3_SPOT = 0.918  # $/h, ~70 % below on-demand (typical p3.2xlarge spot price in 2023)
NOTICE_SECONDS = {"aws": AWS_NOTICE_SECONDS, "gcp": GCP_NOTICE_SECONDS}
PROVISION_SECONDS = {"aws": 90.0, "gcp": 150.0}


@dataclass
class SimZone:
    """One zone of the simulated fleet and its availability replay."""

    trace: SpotTrace
    spot_price: float
    on_demand_price: float
    capacity: int  # most spot instances the zone holds at once
    down_ticks: np.ndarray = field(init=False)  # sorted tick indices with no spot

    def __post_init__(self) -> None:
        self.down_ticks = np.flatnonzero(self.trace.available < 1)

    @property
    def cloud(self) -> str:
        return self.trace.cloud

    @property
    def zone(self) -> str:
        return self.trace.zone

    def tick(self, t_rel: float) -> int:
        return int(t_rel // self.trace.gap_seconds) % self.trace.n_ticks

    def up(self, t_rel: float) -> bool:
        return bool(self.trace.available[self.tick(t_rel)] >= 1)

    def next_down(self, t_rel: float) -> float:
        """The first time >= ``t_rel`` when the zone has no spot (inf if never)."""
        if self.down_ticks.size == 0:
            return float("inf")
        gap, n = self.trace.gap_seconds, self.trace.n_ticks
        cycle, _ = divmod(t_rel, gap * n)
        i = self.tick(t_rel)
        j = int(np.searchsorted(self.down_ticks, i))
        if j < self.down_ticks.size:
            k = int(self.down_ticks[j])
            return max(t_rel, (cycle * n + k) * gap)
        return ((cycle + 1) * n + int(self.down_ticks[0])) * gap

    def offer(self) -> Offer:
        t = self.trace
        return Offer(cloud=t.cloud, zone=t.zone, instance_type=t.instance_type,
                     accelerator=t.accelerator, accelerator_count=t.accelerator_count,
                     spot_price=self.spot_price, on_demand_price=self.on_demand_price,
                     region=t.region)


@dataclass
class _Sim:
    """An instance plus its scheduled future (what the simulator knows and the user does not)."""

    inst: Instance
    ready_at: float
    preempt_at: float | None  # None for on-demand
    notice_at: float | None
    # why a spot instance dies at preempt_at: 'zone outage', 'lifetime' or '24 h stop' (None
    # for on-demand, and for one restored from the state file, whose draw is not kept)
    cause: str | None = None

    def to_json(self) -> str:
        i = self.inst
        return json.dumps({"instance_id": i.instance_id, "cloud": i.cloud, "zone": i.zone,
                           "instance_type": i.instance_type, "market": i.market.value,
                           "state": i.state.value, "launched_at": i.launched_at,
                           "price_per_hour": i.price_per_hour, "accelerator": i.accelerator,
                           "accelerator_count": i.accelerator_count, "intent_id": i.intent_id,
                           "tags": i.tags, "ready_at": self.ready_at,
                           "preempt_at": self.preempt_at, "notice_at": self.notice_at})

    @classmethod
    def from_json(cls, s: str) -> _Sim:
        d = json.loads(s)
        inst = Instance(instance_id=d["instance_id"], cloud=d["cloud"], zone=d["zone"],
                        instance_type=d["instance_type"], market=Market(d["market"]),
                        state=InstanceState(d["state"]), launched_at=d["launched_at"],
                        price_per_hour=d["price_per_hour"], accelerator=d["accelerator"],
                        accelerator_count=d["accelerator_count"], intent_id=d["intent_id"],
                        tags=d["tags"])
        return cls(inst, d["ready_at"], d["preempt_at"], d["notice_at"])


@dataclass(frozen=True)
class SimOptions:
    """What ``--fleet sim`` takes: the data, which zones (the AWS collection's, GCP's H100 zones
    unless ``gcp`` is off, or only those named), their spot capacity, the lifetime model spot
    VMs die by, and the cloud's own state file."""

    clock: Clock | None = None
    data_dir: str | Path | None = None
    seed: int = 0
    state_path: str | Path | None = None
    aws_collection: str = AWS_COLLECTION
    gcp: bool = True
    zones: Sequence[str] = ()
    spot_capacity: int = 64
    trace_offset_hours: float = 0.0
    lifetime_model: LifetimeModel | None = None
    provision_seconds: Mapping[str, float] | None = None
    epoch: float | None = None


@fleet_provider("sim", capabilities=frozenset({Capability.SIMULATED}))
class SimulatedFleet(FleetProvider):
    """A FleetProvider over replayed spot traces (see the module docstring)."""

    name = "sim"

    def __init__(self, zones: Sequence[SimZone], clock: Clock, *, seed: int = 0,
                 lifetime_model: LifetimeModel | None = None, epoch: float | None = None,
                 trace_offset_hours: float = 0.0, state_path: str | Path | None = None,
                 provision_seconds: dict[str, float] | None = None) -> None:
        if not zones:
            raise ConfigError("simulated fleet: no zones", fix="check the spot-traces dataset")
        self.zones = {z.zone: z for z in zones}
        self.clock = clock
        self.seed = seed
        self.lifetimes = lifetime_model
        self.provision_seconds = provision_seconds or dict(PROVISION_SECONDS)
        self._lock = threading.RLock()
        self._sims: dict[str, _Sim] = {}
        self._by_intent: dict[str, list[str]] = {}
        self.preemptions: dict[str, int] = {}  # spot deaths so far, by their _Sim.cause
        self._failed: dict[str, str] = {}  # intent -> zone of a launch refused for capacity
        self._queue: list[tuple[float, int, str, str]] = []  # (at, seq, kind, instance)
        self._seq = 0
        self._events: list[FleetEvent] = []
        self.launch_calls: dict[str, int] = {}  # intent -> calls (tests count these)
        self._db: sqlite3.Connection | None = None
        self.epoch = clock.now() if epoch is None else epoch
        self.trace_offset = trace_offset_hours * HOUR
        if state_path is not None:
            self._open(Path(state_path))

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_options(cls, **options: Any) -> SimulatedFleet:
        """Build from :class:`SimOptions`: the traces' zones of both clouds (or those named)."""
        opts = typed_options(SimOptions, "simulated", options)
        cat = DataCatalog(data_dir(opts.data_dir))
        zones = [SimZone(t, AWS_P3_SPOT, AWS_P3_ON_DEMAND, opts.spot_capacity)
                 for t in cat.spot_traces(opts.aws_collection)]
        if opts.gcp:
            zones += [SimZone(t, float(t.spot_price_per_hour or 0.0),
                              float(t.on_demand_price_per_hour or 0.0), opts.spot_capacity)
                      for t in cat.h100_zones()]
        if opts.zones:
            zones = [z for z in zones if z.zone in set(opts.zones)]
        return cls(zones, opts.clock or SimClock(), seed=opts.seed, lifetime_model=opts.lifetime_model,
                   epoch=opts.epoch, trace_offset_hours=opts.trace_offset_hours,
                   state_path=opts.state_path,
                   provision_seconds=dict(opts.provision_seconds) if opts.provision_seconds else None)

    # -- persistence (the cloud's own database) ------------------------------------------------
    def _open(self, path: Path) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))  # owner only; -wal/-shm follow
        path.chmod(0o600)
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False,
                                   timeout=60)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.executescript(
            "CREATE TABLE IF NOT EXISTS instances (id TEXT PRIMARY KEY, intent TEXT, body TEXT);"
            "CREATE TABLE IF NOT EXISTS failed (intent TEXT PRIMARY KEY, zone TEXT);"
            "CREATE TABLE IF NOT EXISTS calls (intent TEXT PRIMARY KEY, n INTEGER);"
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);")
        row = self._db.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('epoch', ?)", (repr(self.epoch),))
        else:
            self.epoch = float(row[0])
        for iid, intent, body in self._db.execute("SELECT id, intent, body FROM instances"):
            sim = _Sim.from_json(body)
            self._sims[iid] = sim
            self._by_intent.setdefault(intent, []).append(iid)
            self._schedule(sim)
        self._failed = dict(self._db.execute("SELECT intent, zone FROM failed").fetchall())
        self.launch_calls = dict(self._db.execute("SELECT intent, n FROM calls").fetchall())

    def _save(self, sims: Sequence[_Sim]) -> None:
        if self._db is None or not sims:
            return
        self._db.execute("BEGIN IMMEDIATE")
        self._db.executemany("INSERT OR REPLACE INTO instances VALUES (?, ?, ?)",
                             [(s.inst.instance_id, s.inst.intent_id, s.to_json()) for s in sims])
        self._db.execute("COMMIT")

    # -- the protocol --------------------------------------------------------------------------
    def offers(self) -> list[Offer]:
        return [z.offer() for z in self.zones.values()]

    def _rel(self, t: float) -> float:
        return t - self.epoch + self.trace_offset

    def _zone(self, zone: str, instance_type: str) -> SimZone:
        z = self.zones.get(zone)
        if z is None or z.trace.instance_type != instance_type:
            raise InvalidInput("zone", f"{zone}/{instance_type} is not in the simulated fleet",
                               fix=f"use one of {sorted(self.zones)}")
        return z

    def spot_available(self, zone: str, instance_type: str) -> bool:
        return self._zone(zone, instance_type).up(self._rel(self.clock.now()))

    def spot_availability(self, at: float | None = None) -> dict[str, bool]:
        """Every zone's spot availability at ``at`` (now) in one call (the controller's snapshot)."""
        t = self._rel(self.clock.now() if at is None else at)
        return {name: z.up(t) for name, z in self.zones.items()}

    def launch(self, request: LaunchRequest) -> list[Instance]:
        if request.count < 1:
            raise InvalidInput("count", f"must be >= 1, got {request.count}")
        with self._lock:
            self.launch_calls[request.intent_id] = self.launch_calls.get(request.intent_id, 0) + 1
            if self._db is not None:
                self._db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?)",
                                 (request.intent_id, self.launch_calls[request.intent_id]))
            self._advance()
            if request.intent_id in self._by_intent:
                return [self._sims[i].inst for i in self._by_intent[request.intent_id]]
            z = self._zone(request.zone, request.instance_type)
            now = self.clock.now()
            if request.intent_id in self._failed:
                raise CapacityUnavailable(z.zone, request.instance_type, "no spot (earlier refusal)")
            if request.market is Market.SPOT:
                running = sum(1 for s in self._sims.values() if s.inst.zone == z.zone
                              and s.inst.market is Market.SPOT and s.inst.state in _LIVE)
                reason = None
                if not z.up(self._rel(now)):
                    reason = "the trace shows no spot in this zone now"
                elif running + request.count > z.capacity:
                    reason = f"zone holds {running}/{z.capacity} spot instances"
                if reason is not None:
                    self._failed[request.intent_id] = z.zone
                    if self._db is not None:
                        self._db.execute("INSERT OR REPLACE INTO failed VALUES (?, ?)",
                                         (request.intent_id, z.zone))
                    raise CapacityUnavailable(z.zone, request.instance_type, reason)
            sims = [self._create(request, z, k, now) for k in range(request.count)]
            self._by_intent[request.intent_id] = [s.inst.instance_id for s in sims]
            self._save(sims)
            return [s.inst for s in sims]

    def _rng(self, key: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(key.encode())])

    def _create(self, req: LaunchRequest, z: SimZone, k: int, now: float) -> _Sim:
        iid = "i-" + hashlib.sha1(f"{req.intent_id}/{k}".encode()).hexdigest()[:12]
        rng = self._rng(f"{z.zone}/{len(self._sims)}")  # the n-th instance: seed-deterministic
        ready = now + self.provision_seconds[z.cloud] * float(rng.uniform(0.8, 1.2))
        preempt = notice = cause = None
        spot = req.market is Market.SPOT
        if spot:
            preempt = self.epoch - self.trace_offset + z.next_down(self._rel(now))
            cause = "zone outage"
            if z.cloud == "gcp":
                life = SPOT_MAX_HOURS
                if self.lifetimes is not None:
                    life = min(life, float(self.lifetimes.sample(1, rng)[0]))
                if now + life * HOUR < preempt:
                    preempt = now + life * HOUR
                    cause = "24 h stop" if life >= SPOT_MAX_HOURS else "lifetime"
            preempt = max(preempt, now + 1.0)
            notice = max(now, preempt - NOTICE_SECONDS[z.cloud])
        inst = Instance(instance_id=iid, cloud=z.cloud, zone=z.zone,
                        instance_type=z.trace.instance_type, market=req.market,
                        state=InstanceState.PENDING, launched_at=now,
                        price_per_hour=z.spot_price if spot else z.on_demand_price,
                        accelerator=z.trace.accelerator,
                        accelerator_count=z.trace.accelerator_count,
                        intent_id=req.intent_id, tags=dict(req.tags))
        sim = _Sim(inst, ready, preempt, notice, cause)
        self._sims[iid] = sim
        self._schedule(sim)
        return sim

    def _schedule(self, sim: _Sim) -> None:
        iid = sim.inst.instance_id
        if sim.inst.state is InstanceState.PENDING:
            self._push(sim.ready_at, "ready", iid)
        if sim.inst.state in _LIVE and sim.preempt_at is not None:
            if sim.inst.state is not InstanceState.NOTICED and sim.notice_at is not None:
                self._push(sim.notice_at, "notice", iid)
            self._push(sim.preempt_at, "preempt", iid)

    def _push(self, at: float, kind: str, iid: str) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, kind, iid))

    def _advance(self) -> None:
        """Apply every scheduled happening up to now, in time order."""
        now = self.clock.now()
        changed: dict[str, _Sim] = {}
        while self._queue and self._queue[0][0] <= now:
            at, _, kind, iid = heapq.heappop(self._queue)
            sim = self._sims[iid]
            st = sim.inst.state
            if kind == "ready" and st is InstanceState.PENDING:
                sim.inst = replace(sim.inst, state=InstanceState.RUNNING)
                self._events.append(FleetEvent(EventKind.READY, iid, sim.inst.zone, at))
            elif kind == "notice" and st in (InstanceState.PENDING, InstanceState.RUNNING):
                sim.inst = replace(sim.inst, state=InstanceState.NOTICED)
                left = (sim.preempt_at or at) - at
                self._events.append(FleetEvent(EventKind.PREEMPTION_NOTICE, iid, sim.inst.zone,
                                               at, seconds_left=left))
            elif kind == "preempt" and st in _LIVE:
                sim.inst = replace(sim.inst, state=InstanceState.PREEMPTED)
                cause = sim.cause or "reclaimed"
                self.preemptions[cause] = self.preemptions.get(cause, 0) + 1
                self._events.append(FleetEvent(EventKind.PREEMPTED, iid, sim.inst.zone, at,
                                               detail="spot capacity reclaimed"))
            else:
                continue
            changed[iid] = sim
        self._save(list(changed.values()))

    def terminate(self, instance_ids: Sequence[str]) -> None:
        with self._lock:
            self._advance()
            now = self.clock.now()
            changed = []
            for iid in instance_ids:
                sim = self._sims.get(iid)
                if sim is None or sim.inst.state not in _LIVE:
                    continue
                sim.inst = replace(sim.inst, state=InstanceState.TERMINATED)
                self._events.append(FleetEvent(EventKind.TERMINATED, iid, sim.inst.zone, now))
                changed.append(sim)
            self._save(changed)

    def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
        with self._lock:
            self._advance()
            if instance_ids is None:
                return [s.inst for s in self._sims.values()]
            return [self._sims[i].inst for i in instance_ids if i in self._sims]

    def poll_events(self) -> list[FleetEvent]:
        with self._lock:
            self._advance()
            out, self._events = self._events, []
            return out

    # -- extras --------------------------------------------------------------------------------
    def lose(self, instance_id: str, detail: str = "node lost") -> None:
        self.preempt_now(instance_id, detail)

    def preempt_now(self, instance_id: str, detail: str = "node lost") -> None:
        """Reclaim one live instance now (its Ray node was removed under it; chaos tests)."""
        with self._lock:
            if instance_id not in self._sims:
                raise NotFound(f"no simulated instance {instance_id}")
            self._push(self.clock.now(), "preempt", instance_id)

    def instances_per_intent(self) -> dict[str, int]:
        """How many instances each launch intent created (a relaunch would show up here)."""
        return {k: len(v) for k, v in self._by_intent.items()}

    def ray_resources(self, instance_id: str) -> dict[str, float]:
        """Ray custom resources a simulated node maps to (the executor pins a replica's work onto them)."""
        i = self._sims[instance_id].inst
        return {f"spotplane_node:{instance_id}": 1.0, f"spotplane_zone:{i.zone}": 1.0,
                f"accelerator_type:{i.accelerator}": float(i.accelerator_count),
                "spotplane_spot" if i.market is Market.SPOT else "spotplane_on_demand": 1.0}

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


_LIVE = frozenset({InstanceState.PENDING, InstanceState.RUNNING, InstanceState.NOTICED})
