"""Child processes armed with a crash point: the one place a test or an experiment sets
INTERLOCK_CRASH_AT (gate_client.faults), so no child inherits a crash point it was not given."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from gate_client.faults import CrashPoint
from testkit.paths import REPO_ROOT

CRASH_VARIABLE = "INTERLOCK_CRASH_AT"


def armed_env(
    crash: CrashPoint | None,
    *,
    base: Mapping[str, str] | None = None,
    drop: Iterable[str] = (),
    **extra: str,
) -> dict[str, str]:
    """`base` (this process's environment by default) without `drop`, with `extra`, armed to
    SIGKILL itself at `crash` or unarmed when it is None."""
    dropped = {CRASH_VARIABLE, *drop}
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in dropped}
    env.update(extra)
    if crash is not None:
        env[CRASH_VARIABLE] = crash.value
    return env


def spawn_armed(
    module: str,
    args: Iterable[str],
    crash: CrashPoint | None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path = REPO_ROOT,
    stdin: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m module args` to its end, or to `crash` where it SIGKILLs itself."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=armed_env(crash, base=env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
