"""The checkpoint contract (gpujobs.checkpoints): a job's prefix, checkpoint URIs, the layout
under a prefix and the manifest, as the worker, the trainer and the API all read them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpujobs.checkpoints import (
    MANIFEST_FILE,
    FileEntry,
    LocalLocation,
    Manifest,
    S3Location,
    job_checkpoint_uri,
    listed_files,
    manifest_key,
    parse_uri,
    rank_file,
    rank_record,
    step_dir,
    step_of,
    steps_in,
)

SHA = "ab" * 32


@pytest.mark.parametrize(
    ("uri", "location"),
    [
        ("s3://bucket/some/prefix", S3Location("bucket", "some/prefix")),
        ("s3://bucket/some/prefix/", S3Location("bucket", "some/prefix")),
        ("s3://bucket", S3Location("bucket", "")),
        ("s3://bucket/", S3Location("bucket", "")),
        ("file:///var/ckpt", LocalLocation(Path("/var/ckpt"))),
        ("/var/ckpt", LocalLocation(Path("/var/ckpt"))),
        ("relative/ckpt", LocalLocation(Path("relative/ckpt"))),
        ("C:\\ckpt", LocalLocation(Path("C:\\ckpt"))),  # a Windows drive letter is no scheme
    ],
)
def test_a_uri_names_an_s3_prefix_or_a_directory(
    uri: str, location: S3Location | LocalLocation
) -> None:
    assert parse_uri(uri) == location


def test_an_s3_uri_without_a_bucket_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^checkpoint URI 's3:///prefix' has no bucket$"):
        parse_uri("s3:///prefix")


def test_another_scheme_is_refused_saying_what_is_accepted() -> None:
    message = "checkpoint URI 'gs://b/p': use a directory, file:///dir or s3://bucket/prefix"
    with pytest.raises(ValueError) as refused:
        parse_uri("gs://b/p")
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("root", "job_uri", "location"),
    [
        ("s3://ckpt/gpujobs", "s3://ckpt/gpujobs/job-1", S3Location("ckpt", "gpujobs/job-1")),
        ("s3://ckpt/gpujobs/", "s3://ckpt/gpujobs/job-1", S3Location("ckpt", "gpujobs/job-1")),
        ("s3://ckpt", "s3://ckpt/job-1", S3Location("ckpt", "job-1")),
        ("/srv/ckpt/", "/srv/ckpt/job-1", LocalLocation(Path("/srv/ckpt/job-1"))),
        ("/", "/job-1", LocalLocation(Path("/job-1"))),
        ("file:///srv/ckpt", "file:///srv/ckpt/job-1", LocalLocation(Path("/srv/ckpt/job-1"))),
    ],
)
def test_a_jobs_prefix_is_its_id_under_the_root(
    root: str, job_uri: str, location: S3Location | LocalLocation
) -> None:
    assert job_checkpoint_uri(root, "job-1") == job_uri
    assert parse_uri(job_uri) == location


@pytest.mark.parametrize("step", [0, 1, 200, 10**12 - 1])
def test_a_step_directory_round_trips(step: int) -> None:
    assert len(step_dir(step)) == len("step-") + 12
    assert step_of(step_dir(step)) == step
    assert manifest_key(step) == f"{step_dir(step)}/{MANIFEST_FILE}"


@pytest.mark.parametrize(
    "name", ["step-1", "step-0000000000001", "step-00000000000a", "x-000000000001", "step-"]
)
def test_other_names_are_no_step_directory(name: str) -> None:
    assert step_of(name) is None


def test_keys_are_grouped_by_step() -> None:
    keys = [
        f"{step_dir(2)}/{MANIFEST_FILE}",
        f"{step_dir(2)}/{rank_file(0)}",
        f"{step_dir(2)}/{rank_record(0)}",
        f"{step_dir(5)}/{rank_file(1)}",
        f"{step_dir(7)}",  # a directory marker, no file
        "notes/readme.txt",
    ]
    assert steps_in(keys) == {
        2: {MANIFEST_FILE, "rank-00000.pt", "rank-00000.json"},
        5: {"rank-00001.pt"},
    }


def test_a_manifest_round_trips_and_vouches_for_its_files() -> None:
    data = b"weights"
    manifest = Manifest(
        step=8, world_size=2, files={"model.pt": FileEntry.of(data)}, meta={"seed": 1}
    )
    read = Manifest.loads(manifest.dumps())
    assert read == manifest
    assert read.files["model.pt"].matches(data)
    assert not read.files["model.pt"].matches(data + b"!")
    assert listed_files(manifest.dumps()) == manifest.files  # the API reads what it wrote


def test_a_manifest_of_another_format_is_not_loaded() -> None:
    body = json.dumps({"format": 2, "step": 1, "world_size": 1, "files": {}}).encode()
    with pytest.raises(ValueError, match="unknown checkpoint format 2"):
        Manifest.loads(body)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "it is not JSON"),
        (b"[" * 100_000, "it is not JSON"),
        (b"[]", "it has no `files` object"),
        (b'{"files": []}', "it has no `files` object"),
        (b'{"files": {"../x": {}}}', "it lists '../x', which is not a plain file name"),
        (b'{"files": {".model.pt.tmp": {}}}', "which is not a plain file name"),
        (b'{"files": {"manifest.json": {}}}', "which is not a plain file name"),
        (b'{"files": {"model.pt": 1}}', "its entry for model.pt is not an object"),
        (
            b'{"files": {"model.pt": {"size": true, "sha256": "%s"}}}' % SHA.encode(),
            "its size for model.pt is not a whole number of bytes",
        ),
        (
            b'{"files": {"model.pt": {"size": -1, "sha256": "%s"}}}' % SHA.encode(),
            "its size for model.pt is not a whole number of bytes",
        ),
        (
            b'{"files": {"model.pt": {"size": 1, "sha256": "AB"}}}',
            "its sha256 for model.pt is not 64 hex digits",
        ),
    ],
)
def test_an_untrusted_manifest_lists_only_plain_names_sizes_and_digests(
    body: bytes, reason: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        listed_files(body)
