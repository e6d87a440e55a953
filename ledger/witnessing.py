"""The notary's side of C2SP tlog-witness: each signed checkpoint goes to every configured
witness with a consistency proof from the size that witness cosigned last, and the cosignature
it answers with is kept once it verifies under the witness's configured key.

A witness that refuses is evidence, never noise: a 422 (the proof does not verify, a split
view) or a witness that holds a larger tree than the log has signed means the log's history
disagrees with what the witness saw, and is logged as critical on "ledger.alerts". Being down is
only a warning; the beat's witness-checkpoints task sends the latest checkpoint again."""

from __future__ import annotations

import enum
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from django.conf import settings
from django.db.models import Max

from ledger import selectors, services
from ledger.core.checkpoint import CheckpointError, add_checkpoint_request, open_checkpoint
from ledger.core.cosignature import CosignatureError, CosignerVerifier, cosigners
from ledger.core.note import Verifier
from ledger.keys import configured_witness_keys
from ledger.memory import SignedHead
from ledger.models import Checkpoint, Cosignature, Log

SIZE_CONTENT_TYPE = "text/x.tlog.size"

alerts = logging.getLogger("ledger.alerts")
logger = logging.getLogger("ledger.witnessing")


@dataclass(frozen=True)
class WitnessEndpoint:
    url: str
    verifier: CosignerVerifier

    @property
    def key_id(self) -> str:
        return f"{self.verifier.key_id:08x}"


class Outcome(enum.StrEnum):
    COSIGNED = "cosigned"
    ALREADY = "already"  # this witness cosigned the checkpoint, within the refresh interval
    SUPERSEDED = "superseded"  # the witness cosigned a larger checkpoint of this log already
    REFUSED = "refused"  # the witness refused it, or answered with no valid cosignature
    UNREACHABLE = "unreachable"


def configured_witnesses() -> list[WitnessEndpoint]:
    keys = configured_witness_keys()
    return [
        WitnessEndpoint(url, key)
        for (url, _), key in zip(settings.LEDGER_WITNESSES, keys, strict=True)
    ]


def witnessed_heads(*, log: Log, verifiers: Sequence[Verifier]) -> list[tuple[str, SignedHead]]:
    """The latest checkpoint of the log each configured witness holds, as signing checks it.

    C2SP tlog-witness has no call for it: our witness serves it on its monitoring path
    (GET /<origin hash>/checkpoint), a signed note that must carry the log's signature under
    one of `verifiers` and the witness's cosignature, or it tells nothing. A witness that is
    down or answers with nothing usable is logged and skipped: it refuses a checkpoint
    inconsistent with what it holds when it is sent one, so signing need not wait for it."""
    heads: list[tuple[str, SignedHead]] = []
    witnesses = configured_witnesses()
    if not witnesses:
        return heads
    with httpx.Client(timeout=settings.LEDGER_WITNESS_TIMEOUT_SECONDS) as client:
        for witness in witnesses:
            name = witness.verifier.name
            path = hashlib.sha256(log.origin.encode()).hexdigest()
            try:
                reply = client.get(f"{witness.url}/{path}/checkpoint")
            except httpx.HTTPError as exc:
                logger.warning("witness %s at %s unreachable: %s", name, witness.url, exc)
                continue
            if reply.status_code == 404:
                continue  # it has cosigned nothing of this log
            try:
                if reply.status_code != 200:
                    raise CheckpointError(f"answered {reply.status_code}")
                held = open_checkpoint(reply.text, verifiers, origin=log.origin)
                if name not in cosigners(reply.text, [witness.verifier]):
                    raise CheckpointError("the checkpoint it holds carries no cosignature by it")
            except (CheckpointError, CosignatureError) as exc:
                logger.error("witness %s: no usable latest checkpoint of %s: %s", name, log, exc)
                continue
            heads.append((f"witness {name}", SignedHead(held.size, held.root)))
    return heads


def send_to_witnesses(*, checkpoint: Checkpoint) -> dict[str, Outcome]:
    """Send the checkpoint to every configured witness; what each did, by witness name."""
    witnesses = configured_witnesses()
    with httpx.Client(timeout=settings.LEDGER_WITNESS_TIMEOUT_SECONDS) as client:
        return {
            w.verifier.name: send_to_witness(checkpoint=checkpoint, witness=w, client=client)
            for w in witnesses
        }


def send_to_witness(
    *, checkpoint: Checkpoint, witness: WitnessEndpoint, client: httpx.Client
) -> Outcome:
    """One add-checkpoint exchange, from the size the witness last cosigned; when the witness
    answers 409 with the size it holds (it lost or skipped a cosignature), once more from it.
    A checkpoint the witness cosigned is sent again (from its own size, with an empty proof)
    once its newest cosignature is LEDGER_COSIGNATURE_REFRESH_SECONDS old: an idle log's
    published checkpoint then carries cosignatures fresh enough for verifiers' bounds."""
    name, log = witness.verifier.name, checkpoint.log
    newest = Cosignature.objects.filter(
        checkpoint=checkpoint, witness=name, key_id=witness.key_id
    ).aggregate(newest=Max("timestamp"))["newest"]
    if newest is not None and time.time() - newest < settings.LEDGER_COSIGNATURE_REFRESH_SECONDS:
        return Outcome.ALREADY
    old_size = selectors.witnessed_size(log=log, witness=name, key_id=witness.key_id)
    for _ in range(2):
        if old_size > checkpoint.size:
            return Outcome.SUPERSEDED
        proof = (
            selectors.consistency_proof(log=log, old_size=old_size, new_size=checkpoint.size)
            if 0 < old_size < checkpoint.size
            else []  # from nothing, or the same tree again: the spec's empty proof
        )
        body = add_checkpoint_request(
            old_size=old_size, proof=proof, signed_checkpoint=checkpoint.note
        )
        try:
            reply = client.post(f"{witness.url}/add-checkpoint", content=body)
        except httpx.HTTPError as exc:
            logger.warning("witness %s at %s unreachable: %s", name, witness.url, exc)
            return Outcome.UNREACHABLE
        if reply.status_code == 200:
            return _keep(checkpoint, witness, reply.text)
        held = _held_size(reply)
        if held is None:
            return _refused(checkpoint, witness, reply)
        if held > log.size:
            alerts.critical(
                "ledger %s: witness %s holds a cosigned tree of size %d, larger than the log "
                "(%d): the log was rolled back",
                log.origin,
                name,
                held,
                log.size,
            )
            return Outcome.REFUSED
        old_size = held
    return Outcome.REFUSED


def _held_size(reply: httpx.Response) -> int | None:
    """The size a 409 names as the witness's, or None for any other answer."""
    if reply.status_code != 409 or reply.headers.get("content-type") != SIZE_CONTENT_TYPE:
        return None
    text = reply.text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def _keep(checkpoint: Checkpoint, witness: WitnessEndpoint, text: str) -> Outcome:
    try:
        services.record_cosignature(checkpoint=checkpoint, witness=witness.verifier, line=text)
    except CosignatureError as exc:
        logger.error(
            "witness %s answered %s with no valid cosignature: %s",
            witness.verifier.name,
            checkpoint,
            exc,
        )
        return Outcome.REFUSED
    return Outcome.COSIGNED


def _refused(checkpoint: Checkpoint, witness: WitnessEndpoint, reply: httpx.Response) -> Outcome:
    inconsistent = reply.status_code == 422
    (alerts.critical if inconsistent else logger.error)(
        "ledger %s: witness %s refused the checkpoint of size %d (%d): %s",
        checkpoint.log.origin,
        witness.verifier.name,
        checkpoint.size,
        reply.status_code,
        reply.text.strip()[:2000],
    )
    return Outcome.REFUSED
