"""The job SDK: what a user's training script calls to survive preemptions.

```python
from controlplane import sdk

with sdk.session() as s:            # finds its job, replica and checkpoint actor
    state = s.restore() or fresh()  # newest valid checkpoint, or None
    while not done(state):
        step(state)
        s.progress(fraction_done(state))
        if s.should_checkpoint():   # the planned schedule, or now if a preemption notice came
            s.save(state)
```

Inside spotplane the executor sets ``SPOTPLANE_JOB_ID``, ``SPOTPLANE_REPLICA_ID``,
``SPOTPLANE_ARTIFACT_URI`` (``s3://bucket/prefix`` or a directory) and
``SPOTPLANE_CHECKPOINT_ACTOR`` (+ ``SPOTPLANE_RAY_NAMESPACE``): the session then asks the
replica's :class:`~actors.checkpoint.CheckpointActor` when to checkpoint (the DP schedule of
seed 001, or at once after a preemption notice) and reports every save and restore to it.

Outside spotplane (a laptop) the same script runs unchanged: checkpoints go to
``SPOTPLANE_CHECKPOINT_DIR`` (default ``./.spotplane/checkpoints``) every
``SPOTPLANE_CHECKPOINT_INTERVAL_S`` seconds (default 300), and ``restore`` reads them back.

``save`` takes bytes, numpy arrays, any picklable object, and torch state dicts (written with
``torch.save`` when torch is already imported by the script; torch is never imported here
otherwise).
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from clusters.artifacts import ArtifactRef, ArtifactStore, open_store
from controlplane.core.clock import Clock, WallClock
from controlplane.core.errors import DataCorrupt, InvalidInput

log = logging.getLogger(__name__)

ENV_JOB_ID = "SPOTPLANE_JOB_ID"
ENV_REPLICA_ID = "SPOTPLANE_REPLICA_ID"
ENV_ARTIFACT_URI = "SPOTPLANE_ARTIFACT_URI"
ENV_S3_ENDPOINT = "SPOTPLANE_S3_ENDPOINT_URL"
ENV_CHECKPOINT_ACTOR = "SPOTPLANE_CHECKPOINT_ACTOR"
ENV_RAY_NAMESPACE = "SPOTPLANE_RAY_NAMESPACE"
ENV_NODE_ID = "SPOTPLANE_NODE_ID"
ENV_PLACEMENT_GROUP = "SPOTPLANE_PLACEMENT_GROUP"
ENV_CHECKPOINT_DIR = "SPOTPLANE_CHECKPOINT_DIR"
ENV_INTERVAL_S = "SPOTPLANE_CHECKPOINT_INTERVAL_S"

MAGIC = b"SPCK1"
KIND_BYTES, KIND_NUMPY, KIND_PICKLE, KIND_TORCH = b"B", b"N", b"P", b"T"


# --------------------------------------------------------------------------------------------
# Serialisation
# --------------------------------------------------------------------------------------------
def _is_torch_state(obj: Any) -> bool:
    """A torch state dict (or tensor), recognised without importing torch."""
    if "torch" not in sys.modules:
        return False
    values = obj.values() if isinstance(obj, dict) else [obj]
    return any(type(v).__module__.startswith("torch") for v in values)


def dumps(obj: Any) -> bytes:
    """Checkpoint bytes for ``obj``: a 6-byte header (magic + kind) and the payload."""
    if isinstance(obj, bytes | bytearray | memoryview):
        return MAGIC + KIND_BYTES + bytes(obj)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray) and obj.dtype != object:
        buf = io.BytesIO()
        np.save(buf, obj, allow_pickle=False)
        return MAGIC + KIND_NUMPY + buf.getvalue()
    if _is_torch_state(obj):
        torch = sys.modules["torch"]
        buf = io.BytesIO()
        torch.save(obj, buf)
        return MAGIC + KIND_TORCH + buf.getvalue()
    try:
        return MAGIC + KIND_PICKLE + pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise InvalidInput(
            "state",
            f"cannot checkpoint a {type(obj).__name__}: {e}",
            fix="save bytes, numpy arrays or picklable objects",
        ) from e


def loads(data: bytes) -> Any:
    """The object :func:`dumps` wrote."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 1:
        raise DataCorrupt(
            "checkpoint has no spotplane header", fix="it was not written by sdk.save"
        )
    kind, payload = data[len(MAGIC) : len(MAGIC) + 1], data[len(MAGIC) + 1 :]
    if kind == KIND_BYTES:
        return payload
    if kind == KIND_NUMPY:
        import numpy as np

        return np.load(io.BytesIO(payload), allow_pickle=False)
    if kind == KIND_PICKLE:
        return pickle.loads(payload)  # noqa: S301 - our own artifacts, hash-verified
    if kind == KIND_TORCH:
        import torch  # only when the checkpoint holds torch state

        return torch.load(io.BytesIO(payload), weights_only=False)
    raise DataCorrupt(f"unknown checkpoint kind {kind!r}")


# --------------------------------------------------------------------------------------------
# Who decides when to checkpoint
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Directive:
    """The checkpoint actor's answer: save now (a notice came) and/or at which progress next."""

    checkpoint_now: bool = False
    next_at_progress: float | None = None
    reason: str = ""
    hold_seconds: float = 0.0  # after an emergency checkpoint: work until the node dies is lost


class Coordinator(Protocol):
    """The session's link to whoever plans its checkpoints."""

    def directive(self, progress: float) -> Directive | None:
        """The latest directive, without blocking (``None``: nothing new)."""
        ...

    def saved(self, ref: ArtifactRef, seconds: float) -> Directive | None:
        """A checkpoint completed after ``seconds`` of wall time; may answer a new directive."""
        ...

    def restored(self, ref: ArtifactRef | None) -> None:
        """The replica (re)started from ``ref`` (``None``: from scratch)."""
        ...

    def finished(self) -> None:
        """The script's session ended normally."""
        ...


class IntervalCoordinator:
    """Outside spotplane: checkpoint every ``interval_s`` wall seconds."""

    def __init__(self, interval_s: float, clock: Clock) -> None:
        if interval_s <= 0:
            raise InvalidInput(ENV_INTERVAL_S, f"must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self.clock = clock
        self._last = clock.now()

    def directive(self, progress: float) -> Directive | None:
        due = self.clock.now() - self._last >= self.interval_s
        return Directive(checkpoint_now=due, reason="interval" if due else "")

    def saved(self, ref: ArtifactRef, seconds: float) -> Directive | None:
        self._last = self.clock.now()
        return None

    def restored(self, ref: ArtifactRef | None) -> None:
        self._last = self.clock.now()

    def finished(self) -> None:
        pass


class ActorCoordinator:
    """Inside spotplane: polls the replica's checkpoint actor without blocking training steps.

    When the actor dies (it does not restart), training goes on with ``fallback`` (interval
    checkpoints) instead of crashing the job.
    """

    def __init__(self, handle: Any, *, poll_s: float = 0.2,
                 fallback: Coordinator | None = None) -> None:
        self.handle = handle
        self.poll_s = poll_s
        self.fallback = fallback
        self.lost = False
        self._pending: Any = None
        self._last_poll = 0.0

    def _lose(self, exc: Exception) -> Coordinator:
        """The actor is gone: the fallback from now on (or the error, when there is none)."""
        if self.fallback is None:
            raise exc
        if not self.lost:
            log.warning("checkpoint actor lost (%s): falling back to interval checkpoints", exc)
            self.lost = True
        return self.fallback

    def directive(self, progress: float) -> Directive | None:
        if self.lost and self.fallback is not None:
            return self.fallback.directive(progress)
        try:
            return self._directive(progress)
        except Exception as exc:  # noqa: BLE001 - RayActorError and friends: the actor died
            return self._lose(exc).directive(progress)

    def _directive(self, progress: float) -> Directive | None:
        import ray

        out: Directive | None = None
        if self._pending is not None:
            ready, _ = ray.wait([self._pending], timeout=0)
            if not ready:
                return None
            out = _as_directive(ray.get(self._pending))
            self._pending = None
        now = time.monotonic()
        if now - self._last_poll >= self.poll_s:
            self._pending = self.handle.directive.remote(progress)
            self._last_poll = now
        return out

    def saved(self, ref: ArtifactRef, seconds: float) -> Directive | None:
        import ray

        self._pending = None  # an answer computed before the save is stale
        if self.lost and self.fallback is not None:
            return self.fallback.saved(ref, seconds)
        try:
            return _as_directive(ray.get(self.handle.record_save.remote(ref.to_dict(), seconds)))
        except Exception as exc:  # noqa: BLE001 - the actor died
            return self._lose(exc).saved(ref, seconds)

    def restored(self, ref: ArtifactRef | None) -> None:
        import ray

        if self.lost and self.fallback is not None:
            return self.fallback.restored(ref)
        try:
            ray.get(self.handle.record_restore.remote(None if ref is None else ref.to_dict()))
        except Exception as exc:  # noqa: BLE001 - the actor died
            self._lose(exc).restored(ref)

    def finished(self) -> None:
        import ray

        if self.lost and self.fallback is not None:
            return self.fallback.finished()
        try:
            ray.get(self.handle.record_finished.remote())
        except Exception as exc:  # noqa: BLE001 - the actor died
            self._lose(exc).finished()


def _as_directive(d: Any) -> Directive:
    if isinstance(d, Directive):
        return d
    return Directive(
        bool(d.get("checkpoint_now")),
        d.get("next_at_progress"),
        str(d.get("reason", "")),
        float(d.get("hold_seconds") or 0.0),
    )


# --------------------------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------------------------
class Session:
    """One run of a replica: restore, report progress, checkpoint when told."""

    def __init__(
        self,
        job_id: str,
        replica_id: str,
        store: ArtifactStore,
        coordinator: Coordinator,
        *,
        inside_spotplane: bool,
        clock: Clock | None = None,
    ) -> None:
        self.job_id = job_id
        self.replica_id = replica_id
        self.store = store
        self.coordinator = coordinator
        self.inside_spotplane = inside_spotplane
        self.clock = clock or WallClock()
        self.restored_ref: ArtifactRef | None = None
        self.last_saved: ArtifactRef | None = None
        self.saves = 0
        self._progress = 0.0
        self._directive = Directive()
        self._restore_called = False
        self._due_since: float | None = None  # when should_checkpoint() last said yes

    # the four calls of a training loop ----------------------------------------------------
    def restore(self) -> Any | None:
        """The newest checkpoint that verifies (falling back past corrupt ones), or ``None``."""
        found = self.store.restore_latest(self.job_id)
        self._restore_called = True
        self.restored_ref = found.ref if found else None
        if found is not None:
            self._progress = found.ref.progress
        self.coordinator.restored(self.restored_ref)
        if found is None:
            log.info(
                "job %s replica %s: no checkpoint, starting fresh", self.job_id, self.replica_id
            )
            return None
        log.info(
            "job %s replica %s: restored %s (progress %.4f)",
            self.job_id,
            self.replica_id,
            found.ref.key,
            found.ref.progress,
        )
        return loads(found.data)

    def progress(self, fraction: float) -> None:
        """Tell spotplane how much of the job is done (0..1)."""
        f = float(fraction)
        if not 0.0 <= f <= 1.0:
            raise InvalidInput(
                "fraction", f"must be within [0, 1], got {fraction}", fix="report done/total"
            )
        self._progress = f
        d = self.coordinator.directive(f)
        if d is not None:
            self._directive = d

    def should_checkpoint(self) -> bool:
        """True when the schedule says so or a preemption notice asks for a checkpoint now."""
        d = self.coordinator.directive(self._progress)
        if d is not None:
            self._directive = d
        d = self._directive
        due = d.checkpoint_now or (
            d.next_at_progress is not None and self._progress >= d.next_at_progress
        )
        if due and self._due_since is None:
            self._due_since = time.perf_counter()  # the checkpoint's cost counts from here
        return due

    def save(self, state: Any, *, meta: dict[str, Any] | None = None) -> ArtifactRef:
        """Checkpoint ``state`` now (atomic, content-addressed); returns the artifact.

        Its cost, reported to the checkpoint actor, runs from the ``should_checkpoint()`` that
        asked for it (gathering state off the GPU counts) to the artifact being durable."""
        started = time.perf_counter() if self._due_since is None else self._due_since
        self._due_since = None
        data = dumps(state)
        ref = self.store.put(self.job_id, self.replica_id, data, progress=self._progress, meta=meta)
        seconds = time.perf_counter() - started
        self.last_saved = ref
        self.saves += 1
        self._directive = Directive()  # consumed; the next directive comes from the coordinator
        answer = self.coordinator.saved(ref, seconds)
        if answer is not None:
            self._directive = Directive(False, answer.next_at_progress, answer.reason)
            if answer.hold_seconds > 0:  # the node is about to die: more work would be lost
                log.info(
                    "job %s replica %s: emergency checkpoint done, holding %.1f s for the preemption",
                    self.job_id,
                    self.replica_id,
                    answer.hold_seconds,
                )
                self.clock.sleep(answer.hold_seconds)
        log.info(
            "job %s replica %s: checkpoint %d at progress %.4f (%d bytes, %.3f s)",
            self.job_id,
            self.replica_id,
            self.saves,
            ref.progress,
            ref.size,
            seconds,
        )
        return ref

    @property
    def fraction_done(self) -> float:
        return self._progress


def _env(name: str, default: str | None = None) -> str | None:
    v = os.environ.get(name)
    return v if v else default


@contextmanager
def session(
    *,
    job_id: str | None = None,
    replica_id: str | None = None,
    artifact_uri: str | Path | None = None,
    interval_s: float | None = None,
    coordinator: Coordinator | None = None,
    clock: Clock | None = None,
) -> Iterator[Session]:
    """Open the replica's session (arguments override the ``SPOTPLANE_*`` environment)."""
    clock = clock or WallClock()
    inside = _env(ENV_JOB_ID) is not None and _env(ENV_ARTIFACT_URI) is not None
    job = job_id or _env(ENV_JOB_ID, "local")
    replica = replica_id or _env(ENV_REPLICA_ID, "r0")
    assert job is not None and replica is not None
    uri = (
        artifact_uri
        or _env(ENV_ARTIFACT_URI)
        or _env(ENV_CHECKPOINT_DIR)
        or str(Path.cwd() / ".spotplane" / "checkpoints")
    )
    store = open_store(uri, endpoint_url=_env(ENV_S3_ENDPOINT), clock=clock)
    coord = coordinator or _connect(clock, interval_s)
    s = Session(job, replica, store, coord, inside_spotplane=inside, clock=clock)
    yield s
    coord.finished()


def _get_actor(name: str, namespace: str | None, timeout_s: float = 120.0) -> Any:
    """The named actor, retried for a while (a loaded cluster may answer late)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get_actor(name, namespace=namespace)
        except ValueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _connect(clock: Clock, interval_s: float | None) -> Coordinator:
    """The checkpoint actor named in the environment, or a wall-clock interval outside spotplane."""
    name = _env(ENV_CHECKPOINT_ACTOR)
    if name:
        try:
            import ray

            if not ray.is_initialized():
                ray.init(
                    address=_env("RAY_ADDRESS", "auto"),
                    namespace=_env(ENV_RAY_NAMESPACE),
                    log_to_driver=False,
                    configure_logging=False,
                )
            return ActorCoordinator(_get_actor(name, _env(ENV_RAY_NAMESPACE)),
                                    fallback=_interval(clock, interval_s))
        except Exception as e:  # the job still runs, with interval checkpoints
            log.warning(
                "checkpoint actor %s unreachable (%s): falling back to interval checkpoints",
                name,
                e,
            )
    return _interval(clock, interval_s)


def placement_group() -> Any | None:
    """The gang's Ray placement group (``workers > 1``): one bundle per worker, each on its own
    node with its ``gpus_per_worker`` GPUs (STRICT_SPREAD); None for a single-worker job.
    Start the workers in it (``PlacementGroupSchedulingStrategy(pg, bundle_index=i)``, or Ray
    Train's / torch.distributed's launchers); the driver itself holds no GPU."""
    name = _env(ENV_PLACEMENT_GROUP)
    if not name:
        return None
    import ray

    if not ray.is_initialized():
        ray.init(address=_env("RAY_ADDRESS", "auto"), namespace=_env(ENV_RAY_NAMESPACE),
                 log_to_driver=False, configure_logging=False)
    return ray.util.get_placement_group(name)


def _interval(clock: Clock, interval_s: float | None) -> IntervalCoordinator:
    seconds = interval_s if interval_s is not None else float(_env(ENV_INTERVAL_S, "300") or 300)
    return IntervalCoordinator(seconds, clock)
