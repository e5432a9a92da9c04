"""``spotplane submit --working-dir DIR``: zip a directory as Ray does and upload it once.

Ray's own helpers name and build the package (``ray._private.runtime_env.packaging``):
``get_uri_for_directory`` hashes the tree (``excludes`` and ``.gitignore`` rules applied) into
``gcs://_ray_pkg_<hash>.zip`` and ``create_package`` writes the zip. The client asks the API
whether the tenant holds that name first, so the same tree is zipped and uploaded once.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clusters.packages import DEFAULT_MAX_PACKAGE_BYTES, package_name
from controlplane.client import SpotplaneClient
from controlplane.core.errors import InvalidInput


@dataclass(frozen=True)
class Upload:
    """One working directory as a package: its URI and the bytes this call sent (0: known)."""

    uri: str
    sent_bytes: int


def package_uri(directory: Path, excludes: Sequence[str] = (), include_gitignore: bool = True) -> str:
    """Ray's content-addressed URI of ``directory`` (``gcs://_ray_pkg_<hash>.zip``)."""
    from ray._private.runtime_env.packaging import get_uri_for_directory

    return str(get_uri_for_directory(str(directory), include_gitignore, excludes=list(excludes)))


def upload_working_dir(client: SpotplaneClient, directory: str | Path,
                       excludes: Sequence[str] = (), *, include_gitignore: bool = True,
                       max_bytes: int = DEFAULT_MAX_PACKAGE_BYTES) -> Upload:
    """Zip ``directory`` as Ray does and upload it unless the tenant already holds it."""
    from ray._private.runtime_env.packaging import create_package

    root = Path(directory).expanduser().resolve()
    if not root.is_dir():
        raise InvalidInput("--working-dir", f"{directory} is not a directory",
                           fix="give the folder that holds your script")
    uri = package_uri(root, excludes, include_gitignore)
    name = package_name(uri)
    if client.package_exists(name):
        return Upload(uri, 0)
    with tempfile.TemporaryDirectory(prefix="spotplane-pkg-") as tmp:
        path = Path(tmp) / name
        create_package(str(root), path, include_gitignore=include_gitignore,
                       excludes=list(excludes))
        size = path.stat().st_size
        if size > max_bytes:
            raise InvalidInput(
                "--working-dir", f"{root} zips to {size / 2**20:.1f} MiB, more than the "
                f"{max_bytes / 2**20:.0f} MiB a package may hold",
                fix="leave data and outputs out (--exclude PATTERN, .gitignore) and fetch data "
                    "from the job")
        client.upload_package(name, path.read_bytes())
    return Upload(uri, size)
