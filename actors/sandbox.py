"""The workload Ray's sandbox: tenants' code sees none of the control plane (docs/security.md).

The workload Ray (its raylet, dashboard agent, job supervisors and so every tenant's entrypoint)
runs inside bubblewrap (``bwrap``). Its root is a fresh tmpfs holding only read-only binds of
what a Ray worker needs (the system, the Python runtime, the venv, the checkout), a private
``/tmp`` and ``/dev``, its own PID namespace (the control plane's processes are not in its
``/proc``), and the few writable directories the workload owns (its ``HOME``, its Ray temp
dir, the artifact root). The state directory, the control plane's Ray token and every other
file of the host are simply not there. Run as root, the command inside drops to an unprivileged
account (:data:`WORKLOAD_USER`, created if missing) with ``setpriv(1)``: no capabilities, no
supplementary groups, no new privileges. The network namespace is shared: the control plane
reaches the workload's dashboard and GCS over loopback, and the control plane's own Ray refuses
the workload's token.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.core.errors import InvalidInput

WORKLOAD_USER = "spotplane-jobs"  # the account `spotplane up` creates for tenants' code when root
# the host's system directories a Python process and Ray need, bound read-only when present
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
               "/run/systemd/resolve")
GPU_DEVICES = ("/dev/nvidia*", "/dev/dri")
INSTALL_FIX = ("install bubblewrap (apt-get install bubblewrap; `make run` and `make test` do it), "
               "or pass --workload-address to run jobs on a cluster of your own")


@dataclass(frozen=True)
class OsUser:
    """Another OS account for the workload Ray's processes (its raylet, workers and every job)."""

    name: str
    uid: int
    gid: int

    @classmethod
    def named(cls, name: str) -> OsUser:
        """The account ``name``; switching to it needs root (CAP_SETUID/CAP_SETGID)."""
        import pwd

        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise InvalidInput("workload_user", f"no OS user named {name!r}",
                               fix="create it (useradd --system spotplane-jobs) or pass an existing one") from None
        if os.geteuid() != 0:
            raise InvalidInput("workload_user", f"running the workload Ray as {name!r} needs root "
                               f"(this process is uid {os.geteuid()})",
                               fix="start spotplane as root, or leave the workload user unset "
                                   "(the sandbox alone: docs/security.md)")
        if entry.pw_uid == os.geteuid():
            raise InvalidInput("workload_user", f"{name!r} is the control plane's own user",
                               fix="pass another account, e.g. nobody")
        return cls(name, entry.pw_uid, entry.pw_gid)

    @classmethod
    def ensure(cls, name: str = WORKLOAD_USER) -> OsUser:
        """The account ``name``, created first as a system user without a home or a shell."""
        import pwd

        try:
            pwd.getpwnam(name)
            return cls.named(name)
        except KeyError:
            pass
        done = subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                               "--shell", "/usr/sbin/nologin", "--user-group", name],
                              capture_output=True, text=True, check=False)
        if done.returncode not in (0, 9):  # 9: created meanwhile by another process
            raise InvalidInput("workload_user", f"could not create the OS user {name!r} "
                               f"({done.stderr.strip() or done.returncode})",
                               fix=f"create it yourself: useradd --system {name}")
        return cls.named(name)

    def check_runs(self, python: str) -> None:
        """Refuse (naming the fix) when the account cannot run ``python`` with Ray outside a
        sandbox: an interpreter installed under a 0700 home (pyenv in /root, say) is out of its reach."""
        try:
            probe = subprocess.run([python, "-c", "import ray"], user=self.uid, group=self.gid,
                                   extra_groups=[], cwd="/", env={"PATH": "/usr/bin:/bin"},
                                   capture_output=True, text=True, timeout=120, check=False)
            why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
            ok = probe.returncode == 0
        except OSError as exc:  # the interpreter itself is out of reach
            why, ok = str(exc), False
        if not ok:
            raise InvalidInput("workload_user", f"{self.name!r} cannot run {python} with Ray ({why})",
                               fix="install Python and the venv where that user can read them "
                                   "(not under a 0700 home), or run it in the sandbox")

    def give(self, path: str | Path, *, tree: bool = False) -> None:
        """Hand ``path`` (a directory the workload writes: its HOME, an artifact root) to the
        user; with ``tree``, everything under it too."""
        os.chown(path, self.uid, self.gid)
        if tree:
            for root, dirs, files in os.walk(path):
                for name in (*dirs, *files):
                    os.chown(os.path.join(root, name), self.uid, self.gid, follow_symlinks=False)


def find_bwrap() -> str | None:
    """The ``bwrap`` executable on ``PATH`` (or the standard locations), if installed."""
    return shutil.which("bwrap") or shutil.which("bwrap", path="/usr/bin:/usr/local/bin")


def runtime_paths() -> tuple[str, ...]:
    """What a Ray worker of this interpreter needs read-only: the Python installation, the venv
    and the checkout that ``python -m actors.raylocal`` and ``controlplane.jobenv`` run from."""
    repo = Path(__file__).resolve().parents[1]
    python = Path(sys.executable)
    paths = {sys.base_prefix, sys.prefix, str(repo), str(python.parent), str(python.resolve().parent)}
    return tuple(sorted(p for p in paths if p and p != "/"))


@dataclass(frozen=True)
class Sandbox:
    """A bubblewrap sandbox: ``readonly`` and ``writable`` paths bound at the same place,
    ``hidden`` paths (inside a bound one) masked by an empty tmpfs, run as ``user`` when set."""

    readonly: tuple[str, ...]
    writable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    user: OsUser | None = None
    bwrap: str = "bwrap"
    system: tuple[str, ...] = field(default=SYSTEM_DIRS)

    @classmethod
    def for_workload(cls, *, writable: Iterable[str | Path], hidden: Iterable[str | Path] = (),
                     user: OsUser | None = None, readonly: Iterable[str | Path] = ()) -> Sandbox:
        """The workload Ray's sandbox over this interpreter (:func:`runtime_paths`); refuses,
        naming the fix, where bubblewrap is not installed."""
        bwrap = find_bwrap()
        if bwrap is None:
            raise InvalidInput("sandbox", "bubblewrap (bwrap) is not installed: tenants' jobs would "
                               "run with the control plane's view of this machine", fix=INSTALL_FIX)
        return cls(readonly=tuple(dict.fromkeys([*runtime_paths(), *map(str, readonly)])),
                   writable=tuple(map(str, writable)), hidden=tuple(map(str, hidden)),
                   user=user, bwrap=bwrap)

    def command(self, argv: Sequence[str], cwd: str | Path) -> list[str]:
        """``argv`` run inside the sandbox with ``cwd`` as its working directory."""
        # no --die-with-parent: Linux signals a child when the *thread* that started it ends,
        # and `up` starts the workload from a worker thread; the workload stops on stdin's EOF
        args = [self.bwrap, "--unshare-pid", "--new-session",
                "--tmpfs", "/", "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm",
                "--perms", "1777", "--tmpfs", "/tmp",
                "--ro-bind-try", "/sys", "/sys"]
        args += self._system_binds()
        for pattern in GPU_DEVICES:
            for dev in sorted(glob.glob(pattern)):
                args += ["--dev-bind", dev, dev]
        args += self._mounts()
        args += ["--chdir", str(cwd)]
        if self.user is not None and os.geteuid() == 0:
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                     "setpriv", f"--reuid={self.user.uid}", f"--regid={self.user.gid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        else:
            args += ["--"]
        return args + list(argv)

    def _system_binds(self) -> list[str]:
        """The system directories, as symlinks where the host has them as symlinks (merged /usr)."""
        args: list[str] = []
        for path in self.system:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        return args

    def _mounts(self) -> list[str]:
        """Every bind and mask, parents before children, each missing parent made traversable."""
        made: set[str] = {"/", "/tmp", "/dev", "/proc", "/sys"}
        host: set[str] = {p for p in self.system if os.path.isdir(p)}  # the host's own tree below
        mounts = sorted([(p, "--ro-bind") for p in self.readonly]
                        + [(p, "--bind") for p in self.writable]
                        + [(p, "--tmpfs") for p in self.hidden],
                        key=lambda m: (len(Path(m[0]).parts), m[0]))
        args: list[str] = []
        for path, how in mounts:
            for parent in reversed(Path(path).parents):
                p = str(parent)
                if p not in made and p not in host and not any(p.startswith(h + "/") for h in host):
                    args += ["--perms", "0755", "--dir", p]
                    made.add(p)
            args += [how, path] if how == "--tmpfs" else [how, path, path]
            (made if how == "--tmpfs" else host).add(path)
        return args

    def check(self, python: str = sys.executable) -> None:
        """Refuse (naming the fix) when ``python`` cannot import Ray inside this sandbox."""
        cmd = self.command([python, "-c", "import ray"], cwd="/")
        try:
            probe = subprocess.run(cmd, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
                                   capture_output=True, text=True, timeout=120, check=False)
            why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
            ok = probe.returncode == 0
        except OSError as exc:
            why, ok = str(exc), False
        if not ok:
            who = f" as {self.user.name!r}" if self.user else ""
            raise InvalidInput("sandbox", f"{python} cannot run with Ray inside the sandbox{who} ({why})",
                               fix=INSTALL_FIX if "bwrap" in why else
                               "check that the Python installation and the venv are readable")
