"""One exception hierarchy for spotplane.

Every message says what was wrong and how to fix it. The CLI prints ``str(error)`` without a
traceback (``--debug`` shows it) and exits with :attr:`SpotplaneError.exit_code`: 2 for bad input,
1 for failures of the world outside (a cloud, a missing dataset, a crash).
"""

from __future__ import annotations


class SpotplaneError(Exception):
    """Base of every error spotplane raises on purpose."""

    exit_code: int = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(message if fix is None else f"{message} — {fix}")

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle by state, so an error raised in a worker process reaches the parent intact."""
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[SpotplaneError], args: tuple[object, ...], state: dict[str, object]) -> SpotplaneError:
    err = cls.__new__(cls, *args)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class InvalidInput(SpotplaneError, ValueError):
    """The caller passed something that cannot be right (a negative duration, R < C, ...)."""

    exit_code = 2

    def __init__(self, field: str, message: str, *, fix: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}", fix=fix)


class DataNotFound(SpotplaneError, FileNotFoundError):
    """A dataset the command needs is not in the data directory."""

    def __init__(self, what: str, looked_in: str, *, fetch: str = "spotplane data fetch") -> None:
        self.what = what
        self.looked_in = looked_in
        super().__init__(f"{what} not found in {looked_in}", fix=f"run `{fetch}` to download it")


class DataCorrupt(SpotplaneError):
    """A file exists but does not hold what its format promises (bad checksum, bad column)."""


class BadDataFile(InvalidInput, DataCorrupt):
    """An input file a loader cannot use: names the file, the line or column, and the fix."""

    def __init__(self, path: object, message: str, *, line: int | None = None, column: str | None = None,
                 fix: str | None = None, flag: str | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.column = column
        self.detail = message
        where = (f"{flag} " if flag else "") + self.path + (f", line {line}" if line is not None else "") + (
            f", column {column!r}" if column is not None else "")
        super().__init__(where, message, fix=fix)

    def given_as(self, flag: str) -> BadDataFile:
        """The same error naming the command-line flag that gave the file (``--pods FILE: ...``)."""
        return BadDataFile(self.path, self.detail, line=self.line, column=self.column, fix=self.fix, flag=flag)


class ConfigError(SpotplaneError):
    """The configuration is incomplete or contradictory."""

    exit_code = 2


class NotFound(SpotplaneError, LookupError):
    """A tenant, job, node or artifact that does not exist (or that the caller may not see)."""

    exit_code = 2


class UnknownReference(NotFound):
    """A well-formed value that names nothing the caller can see (a page cursor past a deleted
    or another tenant's item): not found, naming the field that named it."""

    def __init__(self, field: str, message: str, *, fix: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}", fix=fix)


class Conflict(SpotplaneError):
    """The request contradicts the current state (cancel a finished job, a duplicate name)."""

    exit_code = 2


class Unauthorized(SpotplaneError):
    """Missing or wrong credentials."""

    exit_code = 2


class Forbidden(SpotplaneError):
    """An admin-only action called with a tenant's token."""

    exit_code = 2


class RateLimited(SpotplaneError):
    """Too many requests, or too much work in flight: retry after ``retry_after_s`` seconds."""

    exit_code = 1

    def __init__(self, message: str, *, retry_after_s: float, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.retry_after_s = retry_after_s


class Unavailable(SpotplaneError):
    """A service the control plane drives (the workload cluster's job API) did not answer or
    answered "try again later": nothing was started, and the same step is retried next tick."""


class CloudError(SpotplaneError):
    """A cloud provider refused or failed a call in a way the caller cannot fix by retrying."""


class CapacityUnavailable(CloudError):
    """No spot (or on-demand) capacity in that zone right now: try the next zone."""

    def __init__(self, zone: str, instance_type: str, reason: str) -> None:
        self.zone = zone
        self.instance_type = instance_type
        self.reason = reason
        super().__init__(
            f"no capacity for {instance_type} in {zone} ({reason})",
            fix="another zone, on-demand, or waiting will do",
        )


class CredentialsError(CloudError):
    """Cloud credentials, region or project are missing or rejected."""

    exit_code = 2
