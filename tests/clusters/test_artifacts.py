"""One test suite for every artifact backend: a local directory and S3 (moto's real HTTP server)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.artifacts import (
    ArtifactEvent,
    ArtifactStore,
    LocalArtifactStore,
    RetentionRule,
    S3ArtifactStore,
    open_store,
    sha256_hex,
)
from controlplane.core.clock import SimClock
from controlplane.core.errors import DataCorrupt, InvalidInput, NotFound
from tests.support import free_port


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


class Corruptor:
    """Damages a stored blob behind the store's back, the way a backend might."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store

    def corrupt(self, blob_key: str) -> None:
        if isinstance(self.store, LocalArtifactStore):
            p = self.store.path_of(blob_key)
            data = bytearray(p.read_bytes())
            data[len(data) // 2] ^= 0xFF
            p.write_bytes(bytes(data))
        else:
            assert isinstance(self.store, S3ArtifactStore)
            self.store.s3.put_object(
                Bucket=self.store.bucket, Key=self.store.prefix + blob_key, Body=b"garbage"
            )

    def remove(self, blob_key: str) -> None:
        if isinstance(self.store, LocalArtifactStore):
            self.store.path_of(blob_key).unlink()
        else:
            assert isinstance(self.store, S3ArtifactStore)
            self.store.s3.delete_object(Bucket=self.store.bucket, Key=self.store.prefix + blob_key)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ArtifactStore]:
    clock = SimClock(start=1_000.0)
    events: list[ArtifactEvent] = []
    if request.param == "local":
        st: ArtifactStore = LocalArtifactStore(
            tmp_path / "artifacts", clock=clock, on_event=events.append
        )
    else:
        endpoint = request.getfixturevalue("moto_endpoint")
        request.getfixturevalue("aws_env")
        import boto3

        bucket = f"ckpt-{uuid.uuid4().hex[:10]}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        st = S3ArtifactStore(
            bucket,
            "spotplane/artifacts",
            endpoint_url=endpoint,
            clock=clock,
            on_event=events.append,
        )
    st.seen_events = events  # type: ignore[attr-defined]
    st.sim_clock = clock  # type: ignore[attr-defined]
    yield st


def _advance(store: ArtifactStore, seconds: float) -> None:
    store.sim_clock.advance(seconds)  # type: ignore[attr-defined]


def test_put_get_roundtrip_records_hash_size_time_progress(store: ArtifactStore) -> None:
    data = b"weights" * 1000
    ref = store.put("job-1", "r0", data, progress=0.25, meta={"step": 10})
    assert ref.sha256 == sha256_hex(data) and ref.size == len(data)
    assert ref.t == pytest.approx(1_000.0) and ref.progress == 0.25 and ref.meta == {"step": 10}
    assert store.get(ref) == data
    (listed,) = store.list("job-1")
    assert listed == ref


def test_versions_are_ordered_and_identical_content_is_stored_once(store: ArtifactStore) -> None:
    a = store.put("job-1", "r0", b"same", progress=0.1)
    _advance(store, 60)
    b = store.put("job-1", "r0", b"same", progress=0.2)
    _advance(store, 60)
    c = store.put("job-1", "r1", b"other", progress=0.3)
    assert [r.progress for r in store.list("job-1")] == [0.1, 0.2, 0.3]
    assert [r.seq for r in store.list("job-1", "r0")] == [1, 2]
    assert a.blob_key == b.blob_key != c.blob_key
    assert store.restore_latest("job-1").ref == c  # type: ignore[union-attr]


def test_corrupt_newest_artifact_falls_back_to_previous_with_event(store: ArtifactStore) -> None:
    old = store.put("job-2", "r0", b"state at step 10", progress=0.4)
    _advance(store, 30)
    new = store.put("job-2", "r0", b"state at step 20", progress=0.8)
    Corruptor(store).corrupt(new.blob_key)
    with pytest.raises(DataCorrupt, match="sha256"):
        store.get(new)
    restored = store.restore_latest("job-2")
    assert restored is not None and restored.ref == old and restored.data == b"state at step 10"
    assert restored.skipped == (new,)
    kinds = [e.kind for e in store.events("job-2")]
    assert kinds == ["corrupt", "fallback"]
    assert [e.kind for e in store.seen_events] == ["corrupt", "fallback"]  # type: ignore[attr-defined]
    assert store.events("job-2")[0].artifact_key == new.key
    # the bad one is out of the restore path: the next restore is quiet and a re-save works
    assert store.restore_latest("job-2").ref == old  # type: ignore[union-attr]
    assert len(store.events("job-2")) == 2
    assert store.quarantined("job-2")  # type: ignore[attr-defined]
    again = store.put("job-2", "r0", b"state at step 20", progress=0.8)
    assert store.restore_latest("job-2").data == b"state at step 20"  # type: ignore[union-attr]
    assert again.seq == 3


def test_missing_blob_falls_back_and_no_valid_artifact_means_fresh_start(
    store: ArtifactStore,
) -> None:
    only = store.put("job-3", "r0", b"x", progress=0.5)
    Corruptor(store).remove(only.blob_key)
    with pytest.raises(NotFound, match="missing"):
        store.get(only)
    assert store.restore_latest("job-3") is None
    assert [e.kind for e in store.events("job-3")] == ["missing", "fallback"]


def test_gc_keeps_newest_per_replica_and_drops_unreferenced_blobs(store: ArtifactStore) -> None:
    for i in range(5):
        store.put("job-4", "r0", f"r0-{i}".encode(), progress=i / 10)
        store.put("job-4", "r1", f"r1-{i}".encode(), progress=i / 10 + 0.01)
        _advance(store, 100)
    removed = store.gc("job-4", RetentionRule(keep_last=2))
    assert len(removed) == 6
    left = store.list("job-4")
    assert sorted((r.replica_id, r.seq) for r in left) == [
        ("r0", 4),
        ("r0", 5),
        ("r1", 4),
        ("r1", 5),
    ]
    for r in removed:
        with pytest.raises(NotFound):
            store.get(r)
    for r in left:
        assert store.get(r)
    # keep_within_s keeps young ones beyond keep_last
    assert store.gc("job-4", RetentionRule(keep_last=1, keep_within_s=250)) == []
    assert len(store.gc("job-4", RetentionRule(keep_last=1, keep_within_s=150))) == 2
    assert "gc" in [e.kind for e in store.events("job-4")]


def test_jobs_are_isolated_and_delete_job_removes_everything(store: ArtifactStore) -> None:
    store.put("job-a", "r0", b"a", progress=0.1)
    store.put("job-b", "r0", b"b", progress=0.1)
    store.delete_job("job-a")
    assert store.list("job-a") == [] and store.restore_latest("job-a") is None
    assert len(store.list("job-b")) == 1


def test_bad_input_is_refused_with_the_field_named(store: ArtifactStore) -> None:
    with pytest.raises(InvalidInput, match="job_id"):
        store.put("../etc", "r0", b"x", progress=0.1)
    with pytest.raises(InvalidInput, match="progress"):
        store.put("job", "r0", b"x", progress=1.5)
    with pytest.raises(InvalidInput, match="data"):
        store.put("job", "r0", "not bytes", progress=0.1)  # type: ignore[arg-type]


def test_concurrent_writers_never_expose_partial_artifacts(store: ArtifactStore) -> None:
    payloads = [bytes([i]) * 200_000 for i in range(6)]
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            store.put("job-5", f"r{i}", payloads[i], progress=0.1 * (i + 1))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    seen = 0
    while any(t.is_alive() for t in threads):
        for ref in store.list("job-5"):  # every listed artifact is complete
            assert store.get(ref) in payloads
            seen += 1
    for t in threads:
        t.join()
    assert not errors
    assert len(store.list("job-5")) == 6


def test_local_write_is_atomic_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalArtifactStore(tmp_path)
    import os as _os

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(_os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        store.put("job", "r0", b"data", progress=0.1)
    monkeypatch.undo()
    assert store.list("job") == []
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no temp files left behind


@pytest.mark.slow
def test_s3_multipart_upload_for_large_blobs(moto_endpoint: str, aws_env: None) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket="big")
    store = S3ArtifactStore("big", endpoint_url=moto_endpoint, part_size=5 * 1024 * 1024)
    data = bytes(range(256)) * (11 * 1024 * 1024 // 256)  # 11 MiB -> 3 parts
    ref = store.put("job", "r0", data, progress=1.0)
    assert store.get(ref) == data
    assert s3.list_multipart_uploads(Bucket="big").get("Uploads", []) == []


def test_open_store_understands_uris(tmp_path: Path, moto_endpoint: str, aws_env: None) -> None:
    local = open_store(tmp_path / "a")
    assert isinstance(local, LocalArtifactStore)
    assert isinstance(open_store(f"file://{tmp_path}/b"), LocalArtifactStore)
    s3 = open_store("s3://bucket/some/prefix", endpoint_url=moto_endpoint)
    assert (
        isinstance(s3, S3ArtifactStore)
        and s3.prefix == "some/prefix/"
        and s3.endpoint_url == moto_endpoint
    )
    with pytest.raises(InvalidInput, match="artifact_uri: unsupported scheme 'ftp'.*use s3://bucket/prefix, gs://"):
        open_store("ftp://bucket")


def test_a_gs_bucket_is_reached_through_the_xml_api(moto_endpoint: str, aws_env: None) -> None:
    """gs:// speaks S3's calls to Cloud Storage's XML API (interoperability): by default at
    storage.googleapis.com; here the same calls go to moto's server, as an HMAC key would sign."""
    import boto3

    assert open_store("gs://ckpt/team-a").endpoint_url == "https://storage.googleapis.com"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket="gcs-ckpt")
    store = open_store("gs://gcs-ckpt/team-a", endpoint_url=moto_endpoint)
    assert store.uri == "gs://gcs-ckpt/team-a/"
    ref = store.put("job-1", "r0", b"weights", progress=0.5, t=1.0)
    assert open_store("gs://gcs-ckpt/team-a", endpoint_url=moto_endpoint).get(ref) == b"weights"
