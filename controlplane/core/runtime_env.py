"""A job's Ray ``runtime_env``: the user's own code (uploaded or remote packages), pip, variables."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from controlplane.core.inputs import (
    MAX_ENV_VARS,
    EnvKey,
    EnvValue,
    Printable,
    StrictBool,
    StrictInt,
    env_schema,
    printable,
)

# --------------------------------------------------------------------------------------------
MAX_PACKAGE_URIS = 32
MAX_PIP_SPECS = 256
MAX_EXCLUDES = 256
MAX_METADATA = 32
# a package spotplane holds (uploaded with `spotplane submit --working-dir` or `ray job submit`):
# Ray's own content-addressed name, ``gcs://_ray_pkg_<hash>.zip``
PACKAGE_URI = r"^gcs://_ray_pkg_[0-9a-f]{16,64}\.zip$"
PACKAGE_NAME = r"^_ray_pkg_[0-9a-f]{16,64}\.zip$"
REMOTE_SCHEMES = ("s3://", "gs://", "https://")  # Ray downloads these on each node itself
# what check_package_uri accepts, as a JSON Schema pattern
PACKAGE_URI_PATTERN = r"^(gcs://_ray_pkg_[0-9a-f]{16,64}\.zip|(s3|gs|https)://[\s\S]*\.(zip|whl))$"
UPLOAD_FIX = ("upload the directory first: `spotplane submit --working-dir DIR` or "
              "`ray job submit --working-dir DIR` zip and upload it and send its gcs:// URI")


def check_package_uri(field: str, uri: str) -> str:
    """A package URI every node of a workload cluster can fetch: an uploaded ``gcs://_ray_pkg_*``
    package, or a remote ``.zip`` (``s3://``, ``gs://``, ``https://``); never a local path."""
    if uri.startswith("gcs://"):
        if not re.match(PACKAGE_URI, uri):
            raise ValueError(f"{field}: {uri!r} is not an uploaded package URI; {UPLOAD_FIX}")
        return uri
    if uri.startswith(REMOTE_SCHEMES):
        if not uri.endswith((".zip", ".whl")):
            raise ValueError(f"{field}: remote package {uri!r} must be a .zip (or a .whl "
                             "for py_modules); zip the directory and upload that")
        return uri
    raise ValueError(f"{field}: {uri!r} is a local path the server cannot see; {UPLOAD_FIX}")


PipSpec = Annotated[str, Field(min_length=1, max_length=512), AfterValidator(printable), Printable]
Pattern = Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(printable), Printable]
PipList = Annotated[list[PipSpec], Field(max_length=MAX_PIP_SPECS)]


class PipConfig(BaseModel):
    """``pip`` / ``uv`` in its dict form: the packages and the installer's options."""

    model_config = ConfigDict(extra="forbid")

    packages: list[PipSpec] = Field(max_length=MAX_PIP_SPECS)
    pip_check: StrictBool | None = None
    pip_version: Annotated[str, Field(max_length=64)] | None = None
    uv_version: Annotated[str, Field(max_length=64)] | None = None
    uv_pip_install_options: list[PipSpec] | None = Field(default=None, max_length=32)
    pip_install_options: list[PipSpec] | None = Field(default=None, max_length=32)


class RuntimeEnvConfig(BaseModel):
    """``runtime_env.config``: Ray's setup options."""

    model_config = ConfigDict(extra="forbid")

    setup_timeout_seconds: StrictInt | None = Field(default=None, ge=-1, le=86_400)
    eager_install: StrictBool | None = None


class RuntimeEnv(BaseModel):
    """A job's Ray ``runtime_env``: only what runs the same on every node and every attempt."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={  # pip or uv, not both
        "not": {"required": ["pip", "uv"], "properties": {
            "pip": {"not": {"type": "null"}}, "uv": {"not": {"type": "null"}}}}})

    working_dir: Annotated[str, Field(max_length=1024, json_schema_extra={
        "pattern": PACKAGE_URI_PATTERN})] | None = Field(
        default=None, description="gcs://_ray_pkg_<hash>.zip (uploaded) or an s3://, gs://, https:// .zip")
    py_modules: list[Annotated[str, Field(max_length=1024, json_schema_extra={
        "pattern": PACKAGE_URI_PATTERN})]] | None = Field(
        default=None, max_length=MAX_PACKAGE_URIS, description="package URIs, as working_dir")
    pip: PipList | PipConfig | None = Field(default=None, description="pip requirements")
    uv: PipList | PipConfig | None = Field(default=None, description="uv requirements")
    env_vars: dict[EnvKey, EnvValue] = Field(
        default_factory=dict, max_length=MAX_ENV_VARS, json_schema_extra=env_schema,
        description="the job's own variables (SPOTPLANE_* names are dropped, as in `env`)")
    excludes: list[Pattern] | None = Field(
        default=None, max_length=MAX_EXCLUDES, description="patterns left out when zipping (client side)")
    config: RuntimeEnvConfig | None = None

    @model_validator(mode="after")
    def _check(self) -> RuntimeEnv:
        if self.working_dir is not None:
            check_package_uri("working_dir", self.working_dir)
        for i, uri in enumerate(self.py_modules or []):
            check_package_uri(f"py_modules[{i}]", uri)
        if self.pip is not None and self.uv is not None:
            raise ValueError("uv: give either pip or uv, not both")
        return self

    def packages(self) -> list[str]:
        """Every uploaded (``gcs://``) package the job needs."""
        uris = [self.working_dir, *(self.py_modules or [])]
        return [u for u in uris if u is not None and u.startswith("gcs://")]

    def for_ray(self) -> dict[str, Any]:
        """The fields Ray's runtime_env takes from it (env_vars are the executor's to build)."""
        return self.model_dump(exclude_none=True, exclude={"env_vars", "excludes"})
