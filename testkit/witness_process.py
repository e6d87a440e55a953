"""A witness as a real process on a free port (`python -m witness`), and a C2SP
tlog-cosignature verifier written from the spec's text, independent of ledger.core.cosignature,
that tests check every cosignature with."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from testkit.notary_server import free_port, wait_until_answering
from testkit.paths import REPO_ROOT

# --- C2SP tlog-cosignature, cosignature/v1 (Ed25519), from the spec text -----------------------


def spec_parse_vkey(vkey: str) -> tuple[str, bytes, bytes]:
    """`<name>+<hex key id>+base64(0x04 || 32-byte Ed25519 public key)`: (name, key id, key)."""
    name, key_id_hex, encoded = vkey.strip().split("+", 2)  # base64 may hold "+"
    material = base64.b64decode(encoded)
    if material[0] != 0x04 or len(material) != 33:
        raise ValueError("not a cosignature/v1 vkey")
    public_key = material[1:]
    # "SHA-256(<name> || "\n" || 0x04 || 32-byte Ed25519 cosigner public key)[:4]"
    expected_id = hashlib.sha256(name.encode() + b"\n" + b"\x04" + public_key).digest()[:4]
    if bytes.fromhex(key_id_hex) != expected_id:
        raise ValueError("the vkey's key id is not SHA-256(name, 0x0A, 0x04, key)[:4]")
    return name, expected_id, public_key


def spec_cosignature_timestamp(line: str, note_body: str, vkey: str) -> int:
    """Verify one note signature line `— <name> base64(key id || timestamped_signature)` as a
    cosignature/v1 over `note_body`; return its timestamp. The signed message is the line
    `cosignature/v1`, the line `time <timestamp>`, then the whole note body. Raises on any
    mismatch (cryptography's InvalidSignature for a bad signature)."""
    name, key_id, public_key = spec_parse_vkey(vkey)
    if not (line.startswith("\u2014 ") and line.endswith("\n")):
        raise ValueError(f"not a signature line: {line!r}")
    line_name, encoded = line[2:-1].split(" ")
    blob = base64.b64decode(encoded, validate=True)
    if line_name != name or blob[:4] != key_id:
        raise ValueError(f"the line is not by {name}")
    if len(blob) != 4 + 8 + 64:  # key id, u64 timestamp, Ed25519 signature
        raise ValueError("a cosignature/v1 is 76 bytes")
    timestamp = int.from_bytes(blob[4:12], "big")
    if not 0 < timestamp <= 2**63 - 1:
        raise ValueError(f"timestamp {timestamp} out of range")
    message = b"cosignature/v1\n" + f"time {timestamp}\n".encode() + note_body.encode()
    Ed25519PublicKey.from_public_bytes(public_key).verify(blob[12:], message)
    return timestamp


def spec_cosigned_by(note: str, vkey: str) -> int | None:
    """The timestamp of the note's cosignature by the witness of `vkey`, or None if it has none."""
    name = vkey.split("+", 1)[0]
    body = note[: note.rfind("\n\n") + 1]
    for line in note[note.rfind("\n\n") + 2 :].splitlines(keepends=True):
        if line.startswith(f"\u2014 {name} "):
            return spec_cosignature_timestamp(line, body, vkey)
    return None


# --- The witness process ----------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    content_type: str
    text: str


@dataclass
class RunningWitness:
    url: str
    vkey: str
    process: subprocess.Popen[bytes]

    def add_checkpoint(self, *, old: int, proof: Sequence[bytes], note: str) -> Answer:
        lines = [f"old {old}\n", *(base64.b64encode(h).decode() + "\n" for h in proof), "\n"]
        return self.request("POST", "/add-checkpoint", ("".join(lines) + note).encode())

    def held(self, origin: str) -> Answer:
        return self.request("GET", f"/{hashlib.sha256(origin.encode()).hexdigest()}/checkpoint")

    def request(self, method: str, path: str, body: bytes | None = None) -> Answer:
        request = urllib.request.Request(self.url + path, data=body, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return Answer(reply.status, reply.headers["Content-Type"], reply.read().decode())
        except urllib.error.HTTPError as error:
            return Answer(error.code, error.headers["Content-Type"], error.read().decode())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


def witness_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "witness", *args]


def witness_keygen(path: Path, name: str) -> str:
    """Write a witness key with the witness's own keygen; the vkey it printed."""
    made = subprocess.run(
        witness_command("keygen", "--name", name, "--key", str(path)),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return made.stdout.strip()


def witness_init(state: Path) -> None:
    """Create a new witness's state with the witness's own `init`."""
    subprocess.run(
        witness_command("init", "--state", str(state)),
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    )


def spawn_witness(
    *, key: Path, vkey: str, state: Path, logs: Sequence[str], init: bool = False
) -> RunningWitness:
    """Start a witness on a free port with `--log`/`--log-family` arguments `logs`, e.g.
    ["--log-family", "PREFIX=VKEY"], on a new state first if `init`; return once it answers
    /healthz. Its stderr goes to the state file's name with the suffix `.stderr`."""
    if init:
        witness_init(state)
    port = free_port()
    stderr = state.with_suffix(".stderr")
    process = subprocess.Popen(
        witness_command(
            "--key", str(key), "--state", str(state), *logs, "--listen", f"127.0.0.1:{port}"
        ),
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=stderr.open("ab"),
    )
    running = RunningWitness(f"http://127.0.0.1:{port}", vkey, process)

    def healthz() -> None:
        if running.request("GET", "/healthz").status != 200:
            raise OSError("not healthy yet")

    wait_until_answering(healthz, process, stderr, "the witness", OSError)
    return running


class WitnessSet:
    """Named witness processes for one notary's logs (`--log-family`), each listed in
    `settings.LEDGER_WITNESSES` (a test's settings) once it answers. A restarted witness keeps
    its key and, unless told otherwise, its state."""

    def __init__(self, folder: Path, settings: Any, *, family: str) -> None:
        self.folder, self.settings, self.family = folder, settings, family
        self.running: dict[str, RunningWitness] = {}
        settings.LEDGER_WITNESSES = []

    def start(self, name: str, *, fresh_state: bool = False) -> RunningWitness:
        """Start the witness `name` (key name `<name>.witness.example`) on a new state, or
        restart it; `fresh_state`: its operator deletes the state and initialises a new one."""
        key, state = self.folder / f"{name}.key", self.folder / f"{name}.state"
        if name in self.running:
            vkey = self.running[name].vkey
            self.stop(name)
        else:
            vkey = witness_keygen(key, f"{name}.witness.example")
        if fresh_state:
            state.unlink()
        running = spawn_witness(
            key=key,
            vkey=vkey,
            state=state,
            logs=["--log-family", self.family],
            init=not state.exists(),
        )
        self.running[name] = running
        listed = [(u, v) for u, v in self.settings.LEDGER_WITNESSES if v != vkey]
        self.settings.LEDGER_WITNESSES = [*listed, (running.url, vkey)]
        return running

    def stop(self, name: str) -> None:
        """Kill the witness; it stays listed, as a witness that is down does."""
        self.running[name].stop()

    def stop_all(self) -> None:
        for running in self.running.values():
            running.stop()
