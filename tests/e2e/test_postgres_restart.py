"""PostgreSQL restarted under the notary while eight agents submit: no effect is dispatched
without a durable record, none acts twice, and after recover() every effect is final.

The restart is of a private PostgreSQL cluster this test creates (initdb in a temporary
directory, its own port and socket directory), never of the shared server other tests use. On
it: the migrated notary schema, a tenant with a tier-1 target (dedupes on a key, can be looked
up) and a tier-2 target (can only be looked up), each a real service process with its own store
of what it really did; gunicorn serving the notary; eight agent processes (Gate + NotaryJournal)
submitting refunds. Mid-stream the cluster is stopped in immediate mode (a crash: in-flight
transactions are lost), kept down for a moment, and started again. The agents fail closed while
the notary cannot record, then each runs recover() and submits again what failed. The truth is
read from the services' stores and from the ledger itself, dumped whole and chain-checked."""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gate_client.receipts import check_chain, derive_receipt, verify_receipt
from ledger.core.entries import Entry, EntryKind, entry_from_leaf
from testkit.notary_server import free_port, running_notary
from testkit.paths import REPO_ROOT
from testkit.peers.reference_service import RunningServer, read_acts, running_server
from testkit.processes import armed_env

pytestmark = pytest.mark.slow

AGENTS = 8
CASES = 40  # per agent: an upper bound; agents stop when told
PROGRESS_ACTS = 16  # acts seen before the crash, and again after the restart
OUTAGE_SECONDS = 1.5
STEP_TIMEOUT = 60
IN_FLIGHT = frozenset({"PROPOSED", "DISPATCHED"})


def postgres_bin_dir() -> Path | None:
    """The newest Debian PostgreSQL server binaries, if installed."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


def as_postgres_prefix() -> list[str] | None:
    """How to run server binaries: PostgreSQL refuses to run as root, so root runs them as the
    postgres user; None if that is not possible here."""
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser") is None:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return None
    return ["runuser", "-u", "postgres", "--"]


@dataclass
class Cluster:
    bin_dir: Path
    root: Path
    port: int
    as_postgres: list[str]

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/interlock"

    def run(self, program: str, *args: str) -> None:
        command = [*self.as_postgres, str(self.bin_dir / program), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=STEP_TIMEOUT)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{program} {args} failed:\n{done.stdout}{done.stderr}\n{log}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self.run("pg_ctl", "start", "-D", str(self.data), "-l", str(self.log), "-w", "-o", options)

    def stop(self, mode: str) -> None:
        self.run("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w")


@contextmanager
def private_cluster() -> Iterator[Cluster]:
    bin_dir = postgres_bin_dir()
    as_postgres = as_postgres_prefix()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql/<version>/bin")
    if as_postgres is None:
        pytest.skip("running as root without runuser or a postgres user to run PostgreSQL as")
    # Short and outside pytest's root-only tmp tree: the postgres user must reach it, and the
    # socket path must fit in a sockaddr_un.
    root = Path(tempfile.mkdtemp(prefix="interlock-pg-"))
    if as_postgres:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
    cluster = Cluster(bin_dir, root, free_port(), as_postgres)
    try:
        cluster.run(
            "initdb", "-D", str(cluster.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--locale=C", "--no-sync",
        )  # fmt: skip
        cluster.start()
        createdb = [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(cluster.port)]
        subprocess.run([*createdb, "-U", "postgres", "interlock"], check=True, timeout=30)
        yield cluster
    finally:
        with suppress(RuntimeError, subprocess.TimeoutExpired):
            cluster.stop("immediate")  # unless it never started or is already down
        shutil.rmtree(root, ignore_errors=True)


def django_env(database_url: str, var_dir: Path) -> dict[str, str]:
    env = armed_env(None, drop=("REDIS_URL",))
    env.update(
        DJANGO_SETTINGS_MODULE="notary.settings",
        DATABASE_URL=database_url,
        NOTARY_VAR_DIR=str(var_dir),
    )
    return env


def django_child(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT * 2,
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


@dataclass
class Agents:
    children: list[subprocess.Popen[str]]
    stderr: list[Path]

    def errors(self, index: int) -> str:
        return self.stderr[index].read_text()

    def stop_and_recover(self, stop_file: Path) -> list[dict[str, Any]]:
        """Stop every agent; once all have stopped, let all recover at once; their reports."""
        stop_file.touch()
        for index, child in enumerate(self.children):
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line == "stopped\n", (index, line, self.errors(index))
        for child in self.children:
            assert child.stdin is not None
            child.stdin.write("recover\n")
            child.stdin.flush()
        reports = []
        for index, child in enumerate(self.children):
            out, _ = child.communicate(timeout=STEP_TIMEOUT * 2)
            assert child.returncode == 0, (index, self.errors(index))
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return reports

    def kill(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()


@contextmanager
def started_agents(
    setup: dict[str, Any], url: str, refunds: RunningServer, notes: RunningServer, work: Path
) -> Iterator[Agents]:
    env = armed_env(None)
    agents = Agents([], [])
    try:
        for index in range(AGENTS):
            leases = work / f"leases-{index}.json"
            leases.write_text(json.dumps(setup["leases"][index]))
            stderr = work / f"agent-{index}.err"
            agents.stderr.append(stderr)
            command = [
                sys.executable, "-m", "testkit.agents.restart_agent", "agent",
                "--index", str(index), "--notary", url, "--token", setup["tokens"][index],
                "--tenant", setup["tenant"], "--refunds-url", refunds.url,
                "--notes-url", notes.url, "--leases", str(leases),
                "--stop-file", str(work / "stop"),
            ]  # fmt: skip
            agents.children.append(
                subprocess.Popen(
                    command,
                    cwd=REPO_ROOT,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr.open("w"),
                    text=True,
                )
            )
        yield agents
    finally:
        agents.kill()


def all_acts(*servers: RunningServer) -> list[dict[str, Any]]:
    return [act for server in servers for act in read_acts(server.store)]


def test_a_postgres_restart_mid_stream_loses_nothing_and_acts_nothing_twice(
    tmp_path: Path,
) -> None:
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    started = time.monotonic()
    with private_cluster() as cluster:
        env = django_env(cluster.url, var_dir)
        django_child(env, "manage.py", "migrate", "--noinput")
        setup = json.loads(
            django_child(
                env,
                *("-m", "testkit.agents.restart_agent", "setup"),
                *("--agents", str(AGENTS), "--cases", str(CASES)),
            )
        )
        with ExitStack() as stack:
            refunds = stack.enter_context(
                running_server(tmp_path / "refunds.jsonl", dedupe=True, lookup=True)
            )
            notes = stack.enter_context(
                running_server(tmp_path / "notes.jsonl", dedupe=False, lookup=True)
            )
            url = stack.enter_context(running_notary(cluster.url, var_dir))
            agents = stack.enter_context(started_agents(setup, url, refunds, notes, tmp_path))

            wait_until(
                lambda: len(all_acts(refunds, notes)) >= PROGRESS_ACTS,
                STEP_TIMEOUT,
                "the agents did not get going",
            )
            before_crash = len(all_acts(refunds, notes))
            cluster.stop("immediate")  # a crash: in-flight transactions are lost
            time.sleep(OUTAGE_SECONDS)
            during_outage = len(all_acts(refunds, notes))
            cluster.start()
            restarted = time.monotonic()
            wait_until(
                lambda: len(all_acts(refunds, notes)) >= during_outage + PROGRESS_ACTS,
                STEP_TIMEOUT,
                "the agents did not resume after the restart",
            )
            resumed_after = time.monotonic() - restarted
            reports = agents.stop_and_recover(tmp_path / "stop")
            acts = {"refunds": read_acts(refunds.store), "notes": read_acts(notes.store)}

        dumped = json.loads(django_child(env, "-m", "testkit.agents.restart_agent", "dump",
                                         "--tenant", setup["tenant"]))  # fmt: skip

    ledger = [entry_from_leaf(base64.b64decode(leaf)) for leaf in dumped["leaves"]]
    origin = dumped["origin"]
    check_chain(ledger, origin=origin)
    summary = check_outcome(ledger, origin, reports, acts)
    print(
        f"\n{AGENTS} agents, {summary['effects']} effects in {time.monotonic() - started:.1f} s; "
        f"acts before the crash {before_crash}, by the end of the outage {during_outage}; "
        f"resumed {resumed_after:.1f} s after the restart; "
        f"failed closed {summary['failed_closed']}; final states {summary['states']}"
    )


def check_outcome(
    ledger: list[Entry],
    origin: str,
    reports: list[dict[str, Any]],
    acts: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    for index, report in enumerate(reports):
        assert report["unexpected"] == [], (index, report["unexpected"])
        assert report["left_pending"] == [], (index, report)
    failed_closed = sum(len(r["failed_closed"]) for r in reports)
    # The crash was felt: some submits could not be recorded, and the gates refused to act.
    assert failed_closed > 0, reports

    proposed = {e.effect_id: e for e in ledger if e.kind == EntryKind.PROPOSED}
    dispatches: dict[str, list[Entry]] = {}
    for entry in ledger:
        if entry.kind == EntryKind.DISPATCHED:
            dispatches.setdefault(entry.effect_id, []).append(entry)
    planned = [effect_id for report in reports for effect_id in report["effects"]]
    assert len(planned) == len(set(planned))
    # Every effect an agent submitted is in the ledger, the ones that failed closed included.
    assert set(planned) <= set(proposed), set(planned) - set(proposed)

    # No dispatch without a durable record: every act follows a DISPATCHED of its effect, and
    # nothing acted twice (tier 1 replays a known key without acting; tier 2 has no key at all).
    acted: dict[str, list[dict[str, Any]]] = {}
    for target, target_acts in acts.items():
        for act in target_acts:
            effect_id = act["effect_id"]
            assert act["idempotency_key"] == effect_id, act
            assert proposed[effect_id].body_value()["target"] == target, act
            recorded = dispatches.get(effect_id, [])
            assert recorded, f"{target} acted on {effect_id} with no DISPATCHED in the ledger"
            assert _seconds(recorded[0].created_at) <= act["at"], (act, recorded[0])
            acted.setdefault(effect_id, []).append(act)
    twice = {effect_id: len(a) for effect_id, a in acted.items() if len(a) > 1}
    assert not twice, f"acted more than once: {twice}"

    states: Counter[str] = Counter()
    for effect_id in proposed:
        receipt = derive_receipt(ledger, effect_id)
        verify_receipt(receipt, ledger, origin=origin)
        states[receipt.final_state] += 1
        assert receipt.final_state not in IN_FLIGHT, (effect_id, receipt)
        # What the receipt says happened is what the service's store says happened.
        assert receipt.happened is (effect_id in acted), (effect_id, receipt, acted.get(effect_id))
        if receipt.happened:
            assert receipt.authorized_when_fired is True, receipt
    return {"effects": len(proposed), "failed_closed": failed_closed, "states": dict(states)}


def _seconds(moment: datetime) -> float:
    return moment.timestamp()
