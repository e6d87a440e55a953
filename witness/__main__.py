"""`python -m witness --key FILE --state FILE --log ORIGIN=VKEY ... [--log-family PREFIX=VKEY ...]
--listen HOST:PORT` serves a witness; `python -m witness keygen --name NAME --key FILE` writes a
new key and prints its vkey; `python -m witness vkey --key FILE` prints the vkey of a key file;
`python -m witness init --state FILE` creates a new witness's empty state, once: a witness never
starts on a missing state, nor on one rolled back."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ledger.core.cosignature import CosignatureError, CosignerKey, parse_cosigner_skey
from ledger.core.note import NoteError, Verifier, parse_vkey
from witness.server import make_server
from witness.service import Witness
from witness.state import StateError, StateStore


class UsageError(ValueError):
    pass


def parse_log(text: str) -> tuple[str, Verifier]:
    """`ORIGIN=VKEY`: the log's note key, which must be named after its origin."""
    origin, sep, vkey = text.partition("=")
    if not sep or not origin:
        raise UsageError(f"--log {text!r}: expected ORIGIN=VKEY")
    try:
        verifier = parse_vkey(vkey)
    except NoteError as exc:
        raise UsageError(f"--log {origin}: {exc}") from exc
    if verifier.name != origin:
        raise UsageError(
            f"--log {origin}: the vkey is named {verifier.name!r}; a log's checkpoints are "
            "signed under a key named after its origin (ledger.core.checkpoint.log_verifier)"
        )
    return origin, verifier


def parse_family(text: str) -> tuple[str, Verifier]:
    """`PREFIX=VKEY`: a notary's key (as `GET /v1/keys` lists it), trusted for every log
    `PREFIX/<tenant>`, each under its own origin."""
    prefix, sep, vkey = text.partition("=")
    if not sep or not prefix.strip("/"):
        raise UsageError(f"--log-family {text!r}: expected PREFIX=VKEY")
    try:
        return prefix, parse_vkey(vkey)
    except NoteError as exc:
        raise UsageError(f"--log-family {prefix}: {exc}") from exc


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--listen {text!r}: expected HOST:PORT")
    return host, int(port)


def load_key(path: Path) -> CosignerKey:
    try:
        return parse_cosigner_skey(path.read_text())
    except (OSError, CosignatureError) as exc:
        raise UsageError(f"--key {path}: {exc}") from exc


def serve(args: argparse.Namespace) -> int:
    key = load_key(args.key)
    logs: dict[str, list[Verifier]] = {}
    for text in args.log:
        origin, verifier = parse_log(text)
        logs.setdefault(origin, []).append(verifier)
    families: dict[str, list[Verifier]] = {}
    for text in args.log_family:
        prefix, verifier = parse_family(text)
        families.setdefault(prefix, []).append(verifier)
    if not logs and not families:
        raise UsageError("at least one --log ORIGIN=VKEY or --log-family PREFIX=VKEY is required")
    host, port = parse_listen(args.listen)
    logging.basicConfig(level=logging.INFO, format="witness: %(levelname)s %(message)s")
    store = StateStore(args.state)
    witness = Witness(key=key, logs=logs, families=families, store=store)
    server = make_server(witness, host, port)
    bound_host, bound_port = server.server_address[:2]
    print(f"witness {key.verifier.vkey} listening on http://{bound_host!s}:{bound_port}")
    names = [*sorted(logs), *(f"{prefix.rstrip('/')}/*" for prefix in sorted(families))]
    print(f"witness logs: {', '.join(names)}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        store.close()
    return 0


def keygen(args: argparse.Namespace) -> int:
    try:
        key = CosignerKey.generate(args.name)
    except CosignatureError as exc:
        raise UsageError(str(exc)) from exc
    try:
        fd = os.open(args.key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise UsageError(f"{args.key} exists; not overwriting a witness key") from exc
    with os.fdopen(fd, "w") as out:
        out.write(key.skey + "\n")
        out.flush()
        os.fsync(out.fileno())
    print(key.verifier.vkey)
    return 0


def vkey(args: argparse.Namespace) -> int:
    print(load_key(args.key).verifier.vkey)
    return 0


def init(args: argparse.Namespace) -> int:
    StateStore.initialise(args.state)
    print(f"witness state {args.state} initialised, holding no checkpoint")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m witness", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    generate = commands.add_parser("keygen", help="write a new witness key, print its vkey")
    generate.add_argument("--name", required=True, help="the witness's name, e.g. w1.example")
    generate.add_argument("--key", required=True, type=Path)
    generate.set_defaults(run=keygen)
    show = commands.add_parser("vkey", help="print the vkey of a witness key file")
    show.add_argument("--key", required=True, type=Path)
    show.set_defaults(run=vkey)
    start = commands.add_parser(
        "init", help="create a new witness's empty state file (never over an existing one)"
    )
    start.add_argument("--state", required=True, type=Path)
    start.set_defaults(run=init)
    return parser


def build_serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m witness", description=__doc__)
    parser.add_argument("--key", required=True, type=Path, help="the witness key file")
    parser.add_argument("--state", required=True, type=Path, help="the witness's state file")
    parser.add_argument("--log", action="append", default=[], metavar="ORIGIN=VKEY")
    parser.add_argument(
        "--log-family",
        action="append",
        default=[],
        metavar="PREFIX=VKEY",
        help="a notary's key, for each of its logs PREFIX/<tenant> (repeatable)",
    )
    parser.add_argument("--listen", default="127.0.0.1:8700", metavar="HOST:PORT")
    parser.set_defaults(run=serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("keygen", "vkey", "init"):
        args = build_parser().parse_args(argv)
    else:
        args = build_serve_parser().parse_args(argv[1:] if argv[:1] == ["serve"] else argv)
    try:
        return int(args.run(args))
    except (UsageError, StateError) as exc:
        print(f"witness: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
