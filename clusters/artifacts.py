"""Checkpoint artifacts: immutable, content-addressed (sha256), versioned by (job_id, replica_id, t).

Seed 004, Sec. III: every checkpoint is uploaded to shared storage with integrity metadata
(hash, size, timestamp); the controller keeps the freshest consistent recovery point. Here an
artifact is two objects:

- the blob ``jobs/<job>/blobs/<sha256>``: the checkpoint bytes, named by their hash (identical
  checkpoints are stored once per job);
- the manifest ``jobs/<job>/replicas/<replica>/<t>-<seq>-<sha12>.json``: :class:`ArtifactRef`
  (hash, size, timestamp ``t``, the progress the checkpoint holds, free-form ``meta``).

A manifest is written only after its blob is complete, and both are written atomically
(temp file + ``os.replace`` locally; single PUT or completed multipart upload on S3), so a
reader never sees a half-written artifact. :meth:`ArtifactStore.restore_latest` verifies the
hash and, on a corrupt or missing blob, falls back to the previous artifact and records an
:class:`ArtifactEvent` (kept with the job and passed to ``on_event``). :meth:`ArtifactStore.gc`
applies a :class:`RetentionRule` and deletes blobs no remaining manifest names.

Backends: :class:`LocalArtifactStore` (a directory; the default) and :class:`S3ArtifactStore`
(boto3 with ``endpoint_url``: AWS S3, GCS's S3 interoperability endpoint, MinIO). Both share
the logic in :class:`_ObjectArtifactStore`; a backend only moves bytes by key.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import re
import tempfile
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlparse

from controlplane.core.clock import Clock, WallClock
from controlplane.core.config import load_settings
from controlplane.core.errors import DataCorrupt, InvalidInput, NotFound

log = logging.getLogger(__name__)
_List = list  # the stores have a method named `list`

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:=+-]{0,127}$")
_EVENT_COUNTER = itertools.count()
MULTIPART_THRESHOLD = 8 * 1024 * 1024  # bytes; S3 parts must be >= 5 MiB except the last


def sha256_hex(data: bytes) -> str:
    """The content address of ``data``."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    """One checkpoint of one replica of one job (seed 004: versioned by (job_id, replica_id, t))."""

    job_id: str
    replica_id: str
    t: float  # control-plane clock seconds when the checkpoint was taken
    seq: int  # per-replica sequence number, breaks ties between equal t
    sha256: str
    size: int
    progress: float  # fraction of the job's work the checkpoint holds, 0..1
    created_at: float  # when the manifest was written
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The manifest's key inside the store."""
        return f"{_replica_prefix(self.job_id, self.replica_id)}{self.t:018.6f}-{self.seq:06d}-{self.sha256[:12]}.json"

    @property
    def blob_key(self) -> str:
        return _blob_key(self.job_id, self.sha256)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArtifactRef:
        return cls(
            job_id=str(d["job_id"]),
            replica_id=str(d["replica_id"]),
            t=float(d["t"]),
            seq=int(d["seq"]),
            sha256=str(d["sha256"]),
            size=int(d["size"]),
            progress=float(d["progress"]),
            created_at=float(d["created_at"]),
            meta=dict(d.get("meta") or {}),
        )


@dataclass(frozen=True, slots=True)
class ArtifactEvent:
    """Something the store noticed about an artifact: corrupt, missing, fallback, gc."""

    kind: str  # "corrupt" | "missing" | "fallback" | "gc"
    job_id: str
    replica_id: str
    artifact_key: str
    at: float
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class RetentionRule:
    """Which artifacts GC keeps: the newest ``keep_last`` per replica, plus any younger than
    ``keep_within_s`` seconds; everything else of the job goes."""

    keep_last: int = 3
    keep_within_s: float | None = None

    def __post_init__(self) -> None:
        if self.keep_last < 1:
            raise InvalidInput(
                "keep_last",
                f"must be >= 1, got {self.keep_last}",
                fix="keep at least the newest artifact",
            )
        if self.keep_within_s is not None and self.keep_within_s < 0:
            raise InvalidInput("keep_within_s", f"must be >= 0, got {self.keep_within_s}")


@dataclass(frozen=True, slots=True)
class Restored:
    """What :meth:`ArtifactStore.restore_latest` found: the artifact, its verified bytes, and the
    newer artifacts it had to skip."""

    ref: ArtifactRef
    data: bytes
    skipped: tuple[ArtifactRef, ...] = ()


EventSink = Callable[[ArtifactEvent], None]


@runtime_checkable
class ArtifactStore(Protocol):
    """What the SDK, the checkpoint actors and the controller need from checkpoint storage."""

    uri: str

    def put(
        self,
        job_id: str,
        replica_id: str,
        data: bytes,
        *,
        progress: float,
        t: float | None = None,
        meta: dict[str, Any] | None = None,
    ) -> ArtifactRef:
        """Store ``data`` as a new artifact (atomic); returns its reference."""
        ...

    def list(self, job_id: str, replica_id: str | None = None) -> _List[ArtifactRef]:
        """The job's artifacts (of one replica, or all), oldest first by (progress, t, seq)."""
        ...

    def get(self, ref: ArtifactRef) -> bytes:
        """The artifact's bytes, hash verified; raises ``DataCorrupt`` / ``NotFound``."""
        ...

    def restore_latest(self, job_id: str) -> Restored | None:
        """The freshest artifact whose blob verifies, falling back past corrupt or missing ones."""
        ...

    def events(self, job_id: str) -> _List[ArtifactEvent]:
        """Events recorded for the job, oldest first."""
        ...

    def gc(self, job_id: str, rule: RetentionRule = RetentionRule()) -> _List[ArtifactRef]:
        """Delete the artifacts ``rule`` does not keep (and unreferenced blobs); returns them."""
        ...

    def delete_job(self, job_id: str) -> None:
        """Remove everything of the job."""
        ...


def _check_id(name: str, value: str) -> str:
    if not isinstance(value, str) or not _SAFE_ID.match(value):
        raise InvalidInput(
            name,
            f"{value!r} is not a valid id",
            fix="use 1-128 characters of letters, digits and _.:=+- , starting with a letter or digit",
        )
    return value


def check_id(name: str, value: str) -> str:
    """``value`` when it is a safe id for a key or path segment (no ``/``, no ``..``), else
    InvalidInput naming ``name``."""
    return _check_id(name, value)


def _job_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/"


def _replica_prefix(job_id: str, replica_id: str) -> str:
    return f"jobs/{job_id}/replicas/{replica_id}/"


def _blob_key(job_id: str, sha: str) -> str:
    return f"jobs/{job_id}/blobs/{sha}"


def _order(ref: ArtifactRef) -> tuple[float, float, int, str]:
    """Freshness: most progress first, then latest t (a restored replica re-saves lower progress
    only after a rollback; progress is what a restore needs)."""
    return (ref.progress, ref.t, ref.seq, ref.replica_id)


class _ObjectArtifactStore(ABC):
    """The artifact logic over a minimal key -> bytes backend."""

    uri: str

    def __init__(self, *, clock: Clock | None = None, on_event: EventSink | None = None) -> None:
        self.clock: Clock = clock or WallClock()
        self.on_event = on_event

    # -- backend primitives -------------------------------------------------------------------
    @abstractmethod
    def _write(self, key: str, data: bytes) -> None:
        """Write ``data`` under ``key`` atomically (readers see all of it or nothing)."""

    @abstractmethod
    def _read(self, key: str) -> bytes:
        """The bytes under ``key``; raises ``FileNotFoundError`` when absent."""

    @abstractmethod
    def _keys(self, prefix: str) -> Iterator[str]:
        """Every key under ``prefix``."""

    @abstractmethod
    def _delete(self, key: str) -> None:
        """Delete ``key``; absent keys are ignored."""

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    # -- public API ---------------------------------------------------------------------------
    def put(
        self,
        job_id: str,
        replica_id: str,
        data: bytes,
        *,
        progress: float,
        t: float | None = None,
        meta: dict[str, Any] | None = None,
    ) -> ArtifactRef:
        _check_id("job_id", job_id)
        _check_id("replica_id", replica_id)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidInput(
                "data",
                f"must be bytes, got {type(data).__name__}",
                fix="serialise it first (sdk.save does)",
            )
        if not 0.0 <= float(progress) <= 1.0:
            raise InvalidInput("progress", f"must be within [0, 1], got {progress}")
        payload = bytes(data)
        sha = sha256_hex(payload)
        now = self.clock.now()
        seq = 1 + self._last_seq(job_id, replica_id)
        ref = ArtifactRef(
            job_id=job_id,
            replica_id=replica_id,
            t=float(now if t is None else t),
            seq=seq,
            sha256=sha,
            size=len(payload),
            progress=float(progress),
            created_at=now,
            meta=dict(meta or {}),
        )
        if not self._exists(ref.blob_key):  # content-addressed: an identical blob is reused
            self._write(ref.blob_key, payload)
        self._write(ref.key, json.dumps(ref.to_dict(), sort_keys=True).encode())
        log.debug("artifact %s (%d bytes, progress %.4f)", ref.key, ref.size, ref.progress)
        return ref

    def list(self, job_id: str, replica_id: str | None = None) -> _List[ArtifactRef]:
        _check_id("job_id", job_id)
        prefix = (
            _replica_prefix(job_id, replica_id) if replica_id else f"{_job_prefix(job_id)}replicas/"
        )
        refs: _List[ArtifactRef] = []
        for key in self._keys(prefix):
            if not key.endswith(".json"):
                continue
            try:
                refs.append(ArtifactRef.from_dict(json.loads(self._read(key))))
            except (
                FileNotFoundError,
                ValueError,
                KeyError,
            ) as e:  # a manifest deleted meanwhile or damaged
                log.warning("skipping unreadable manifest %s: %s", key, e)
        return sorted(refs, key=_order)

    def get(self, ref: ArtifactRef) -> bytes:
        try:
            data = self._read(ref.blob_key)
        except FileNotFoundError as e:
            raise NotFound(
                f"artifact blob {ref.blob_key} is missing", fix="restore from an earlier artifact"
            ) from e
        got = sha256_hex(data)
        if got != ref.sha256 or len(data) != ref.size:
            raise DataCorrupt(
                f"artifact {ref.key}: sha256 {got[:12]}… size {len(data)} != recorded {ref.sha256[:12]}… size {ref.size}",
                fix="restore from an earlier artifact",
            )
        return data

    def restore_latest(self, job_id: str) -> Restored | None:
        skipped: list[ArtifactRef] = []
        for ref in reversed(self.list(job_id)):
            try:
                data = self.get(ref)
            except (NotFound, DataCorrupt) as e:
                kind = "missing" if isinstance(e, NotFound) else "corrupt"
                self._record(
                    ArtifactEvent(kind, job_id, ref.replica_id, ref.key, self.clock.now(), str(e))
                )
                self._quarantine(ref)
                skipped.append(ref)
                continue
            if skipped:
                detail = f"restored {ref.key} (progress {ref.progress:.4f}) after skipping {len(skipped)} newer artifact(s)"
                self._record(
                    ArtifactEvent(
                        "fallback", job_id, ref.replica_id, ref.key, self.clock.now(), detail
                    )
                )
            return Restored(ref=ref, data=data, skipped=tuple(skipped))
        if skipped:
            self._record(
                ArtifactEvent(
                    "fallback",
                    job_id,
                    "",
                    "",
                    self.clock.now(),
                    f"no valid artifact among {len(skipped)}: starting fresh",
                )
            )
        return None

    def quarantined(self, job_id: str) -> _List[str]:
        """Manifest keys of artifacts found corrupt or missing (moved out of the restore path)."""
        _check_id("job_id", job_id)
        return sorted(self._keys(f"{_job_prefix(job_id)}quarantine/"))

    def events(self, job_id: str) -> _List[ArtifactEvent]:
        _check_id("job_id", job_id)
        out: _List[ArtifactEvent] = []
        for key in sorted(self._keys(f"{_job_prefix(job_id)}events/")):
            with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
                out.append(ArtifactEvent(**json.loads(self._read(key))))
        return out  # keys sort by (at, per-process counter): recording order

    def gc(self, job_id: str, rule: RetentionRule = RetentionRule()) -> _List[ArtifactRef]:
        refs = self.list(job_id)
        now = self.clock.now()
        keep: set[str] = set()
        by_replica: dict[str, list[ArtifactRef]] = {}
        for r in refs:
            by_replica.setdefault(r.replica_id, []).append(r)
        for rs in by_replica.values():
            keep.update(r.key for r in rs[-rule.keep_last :])
            if rule.keep_within_s is not None:
                keep.update(r.key for r in rs if now - r.t <= rule.keep_within_s)
        removed = [r for r in refs if r.key not in keep]
        for r in removed:
            self._delete(r.key)
        live = {r.sha256 for r in refs if r.key in keep}
        for key in list(self._keys(f"{_job_prefix(job_id)}blobs/")):
            if key.rsplit("/", 1)[-1] not in live:
                self._delete(key)
        if removed:
            self._record(
                ArtifactEvent(
                    "gc",
                    job_id,
                    "",
                    "",
                    now,
                    f"removed {len(removed)} artifact(s), kept {len(keep)}",
                )
            )
        return removed

    def delete_job(self, job_id: str) -> None:
        _check_id("job_id", job_id)
        for key in list(self._keys(_job_prefix(job_id))):
            self._delete(key)

    # -- helpers ------------------------------------------------------------------------------
    def _last_seq(self, job_id: str, replica_id: str) -> int:
        """The highest sequence number used by the replica, quarantined artifacts included."""
        seqs = [0]
        keys = list(self._keys(_replica_prefix(job_id, replica_id)))
        quarantine = f"{_job_prefix(job_id)}quarantine/{replica_id}-"
        keys += [
            k for k in self._keys(f"{_job_prefix(job_id)}quarantine/") if k.startswith(quarantine)
        ]
        for key in keys:
            parts = key.rsplit("/", 1)[-1].rsplit("-", 2)
            if len(parts) == 3 and parts[1].isdigit():
                seqs.append(int(parts[1]))
        return max(seqs)

    def _quarantine(self, ref: ArtifactRef) -> None:
        """Move a bad artifact's manifest out of the restore path (its record is kept)."""
        name = ref.key.rsplit("/", 1)[-1]
        try:
            self._write(
                f"{_job_prefix(ref.job_id)}quarantine/{ref.replica_id}-{name}",
                json.dumps(ref.to_dict(), sort_keys=True).encode(),
            )
            self._delete(ref.key)
            self._delete(ref.blob_key)  # a bad blob must not be reused by a later identical save
        except OSError as e:
            log.error("could not quarantine %s: %s", ref.key, e)

    def _record(self, event: ArtifactEvent) -> None:
        level = logging.INFO if event.kind == "gc" else logging.WARNING
        log.log(level, "artifact event %s for job %s: %s", event.kind, event.job_id, event.detail)
        key = f"{_job_prefix(event.job_id)}events/{event.at:018.6f}-{next(_EVENT_COUNTER):08d}-{uuid.uuid4().hex[:8]}.json"
        try:
            self._write(key, json.dumps(event.to_dict(), sort_keys=True).encode())
        except OSError as e:  # the event must not hide the restore
            log.error("could not record artifact event: %s", e)
        if self.on_event is not None:
            self.on_event(event)


class LocalArtifactStore(_ObjectArtifactStore):
    """Artifacts in a local (or shared, e.g. NFS) directory. Directories are made by the first
    write under them, by the writer: a reader (the control plane listing a tenant's checkpoints)
    leaves none behind that a job running as another OS user could not write in."""

    def __init__(
        self, root: str | Path, *, clock: Clock | None = None, on_event: EventSink | None = None
    ) -> None:
        super().__init__(clock=clock, on_event=on_event)
        self.root = Path(root).expanduser().resolve()
        self.uri = f"file://{self.root}"

    def path_of(self, key: str) -> Path:
        """Where ``key`` lives on disk (tests corrupt blobs through it)."""
        return self.root / key

    def _write(self, key: str, data: bytes) -> None:
        dest = self.path_of(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def _read(self, key: str) -> bytes:
        return self.path_of(key).read_bytes()

    def _keys(self, prefix: str) -> Iterator[str]:
        base = self.path_of(prefix)
        if not base.is_dir():
            return
        for p in sorted(base.rglob("*")):
            if p.is_file() and not p.name.startswith("."):
                yield p.relative_to(self.root).as_posix()

    def _delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path_of(key).unlink()

    def _exists(self, key: str) -> bool:
        return self.path_of(key).is_file()


class S3ArtifactStore(_ObjectArtifactStore):
    """Artifacts in an S3 bucket (``endpoint_url`` for GCS interoperability, MinIO, moto).

    Small objects are one PUT (atomic in S3); objects over :data:`MULTIPART_THRESHOLD` go up as
    a multipart upload that becomes visible only on ``CompleteMultipartUpload`` and is aborted on
    any failure, so no reader sees a partial blob.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        client: Any = None,
        clock: Clock | None = None,
        on_event: EventSink | None = None,
        part_size: int = MULTIPART_THRESHOLD,
    ) -> None:
        super().__init__(clock=clock, on_event=on_event)
        if not bucket:
            raise InvalidInput(
                "bucket", "is empty", fix="name the S3 bucket that holds the artifacts"
            )
        if part_size < 5 * 1024 * 1024:
            raise InvalidInput(
                "part_size", f"{part_size} bytes is below S3's 5 MiB minimum part size"
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self.part_size = part_size
        if client is None:
            import boto3

            client = boto3.client("s3", endpoint_url=endpoint_url, region_name=region_name)
        self.s3 = client
        self.uri = f"s3://{bucket}/{self.prefix}"

    def _k(self, key: str) -> str:
        return self.prefix + key

    def _write(self, key: str, data: bytes) -> None:
        if len(data) <= self.part_size:
            self.s3.put_object(Bucket=self.bucket, Key=self._k(key), Body=data)
            return
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key=self._k(key))
        upload_id = up["UploadId"]
        try:
            parts = []
            for n, start in enumerate(range(0, len(data), self.part_size), start=1):
                r = self.s3.upload_part(
                    Bucket=self.bucket,
                    Key=self._k(key),
                    UploadId=upload_id,
                    PartNumber=n,
                    Body=data[start : start + self.part_size],
                )
                parts.append({"ETag": r["ETag"], "PartNumber": n})
            self.s3.complete_multipart_upload(
                Bucket=self.bucket,
                Key=self._k(key),
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        except BaseException:
            with contextlib.suppress(Exception):
                self.s3.abort_multipart_upload(
                    Bucket=self.bucket, Key=self._k(key), UploadId=upload_id
                )
            raise

    def _read(self, key: str) -> bytes:
        try:
            obj = self.s3.get_object(Bucket=self.bucket, Key=self._k(key))
        except self.s3.exceptions.NoSuchKey as e:
            raise FileNotFoundError(key) from e
        return bytes(obj["Body"].read())

    def _keys(self, prefix: str) -> Iterator[str]:
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._k(prefix)):
            for obj in page.get("Contents", []):
                yield str(obj["Key"])[len(self.prefix) :]

    def _delete(self, key: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=self._k(key))

    def _exists(self, key: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.bucket, Key=self._k(key))
        except Exception as e:  # botocore ClientError 404
            code = getattr(e, "response", {}).get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True


# scheme -> its default endpoint (None: the SDK's own); Cloud Storage's XML API speaks S3's calls
OBJECT_SCHEMES: dict[str, str | None] = {"s3": None, "gs": "https://storage.googleapis.com"}


def open_store(
    uri: str | Path,
    *,
    endpoint_url: str | None = None,
    clock: Clock | None = None,
    on_event: EventSink | None = None,
) -> LocalArtifactStore | S3ArtifactStore:
    """The store behind ``uri``: ``s3://bucket/prefix``, ``gs://bucket/prefix`` or ``file:///dir``
    / a plain path.

    ``endpoint_url`` defaults to ``SPOTPLANE_S3_ENDPOINT_URL``, else the scheme's own endpoint
    (:data:`OBJECT_SCHEMES`). A ``gs://`` bucket is reached through Cloud Storage's XML API in
    interoperability mode: the same S3 calls, signed with an HMAC key of a service account
    (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``).
    """
    text = str(uri)
    parsed = urlparse(text)
    if parsed.scheme in OBJECT_SCHEMES:
        endpoint = endpoint_url or load_settings().s3_endpoint_url or OBJECT_SCHEMES[parsed.scheme]
        store = S3ArtifactStore(
            parsed.netloc,
            parsed.path.lstrip("/"),
            endpoint_url=endpoint,
            clock=clock,
            on_event=on_event,
        )
        store.uri = f"{parsed.scheme}://{store.bucket}/{store.prefix}"
        return store
    if parsed.scheme in ("", "file"):
        return LocalArtifactStore(
            parsed.path if parsed.scheme == "file" else text, clock=clock, on_event=on_event
        )
    raise InvalidInput(
        "artifact_uri",
        f"unsupported scheme {parsed.scheme!r} in {text!r}",
        fix="use s3://bucket/prefix, gs://bucket/prefix or a local path",
    )


def newest(refs: Iterable[ArtifactRef]) -> ArtifactRef | None:
    """The freshest of ``refs`` (same order as :meth:`ArtifactStore.list`)."""
    return max(refs, key=_order, default=None)
