"""The ledger's read endpoints: the signing keys and each log's verifier keys (public), and,
for an authenticated caller, its own log's latest checkpoint, inclusion proofs and consistency
proofs.

The ledger knows no tenants or API keys: who may call is the project's REST_FRAMEWORK defaults
(authentication and permission classes), and which log a caller reads is the function that
settings.LEDGER_API_CALLER_LOG names."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable

from django.conf import settings
from django.utils.module_loading import import_string
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger import selectors
from ledger.api.schema import error_responses, input_refusal, refusal
from ledger.api.serializers import (
    CheckpointOutput,
    ConsistencyProofOutput,
    ConsistencyProofQuery,
    InclusionProofOutput,
    InclusionProofQuery,
    LogVkeysOutput,
    SigningKeyOutput,
)
from ledger.core.checkpoint import log_verifier
from ledger.core.note import parse_vkey
from ledger.models import Log

# Refusals of an authenticated caller (401, 429) and of a query (400) are added by the
# project's schema class (settings' DEFAULT_SCHEMA_CLASS); these are the ledger's own, as its
# views raise them (a LedgerLookupError is answered as NotFound).
EXAMPLE_ORIGIN = "log.example.com/shop"
NO_CHECKPOINT = refusal(
    NotFound(f"log {EXAMPLE_ORIGIN} has no signed checkpoint yet cosigned by 2 witnesses"),
    "the caller's log has no signed checkpoint yet (with the witness cosignatures it requires)",
)
NO_LOG = refusal(
    NotFound(str(selectors.LedgerLookupError(f"no log with origin {EXAMPLE_ORIGIN + '-x'!r}"))),
    "no log with that origin",
)
NO_PROOF = [
    refusal(
        NotFound(f"log {EXAMPLE_ORIGIN} has no signed checkpoint of size 7"),
        "no signed checkpoint of that `size` (or, without `size`, none yet)",
    ),
    refusal(
        NotFound("entry 12 is not covered by the checkpoint of size 12"),
        "without `size`: `index` is not below the latest checkpoint's size",
        name="not_covered",
    ),
]
NO_TREE = refusal(
    NotFound(f"log {EXAMPLE_ORIGIN} has 12 entries; no tree of size 20"),
    "`new` is larger than the log",
)
INCLUSION_INVALID = input_refusal(
    InclusionProofQuery, {"index": "12", "size": "12"}, "`index` is not less than `size`"
)
CONSISTENCY_INVALID = input_refusal(
    ConsistencyProofQuery, {"old": "20", "new": "12"}, "`old` is greater than `new`"
)


def _caller_log(request: Request) -> Log:
    caller_log: Callable[[Request], Log] = import_string(settings.LEDGER_API_CALLER_LOG)
    return caller_log(request)


def _b64(hashes: Iterable[bytes]) -> list[str]:
    return [base64.b64encode(node).decode() for node in hashes]


class SigningKeysView(APIView):
    """Every key the notary has signed checkpoints with, and when; no credentials needed.

    A log's checkpoints are signed under the log's origin: its verifier key is the same public
    key under that name (ledger.core.checkpoint.log_verifier)."""

    authentication_classes = []
    permission_classes = [AllowAny]

    @extend_schema(
        summary="List the signing keys",
        description="Every key the notary has signed checkpoints with, and when it took over "
        "(`valid_from`) and was replaced (`valid_until`). Public: no credentials needed. A "
        "log's checkpoints are signed under the log's origin: its verifier key is the same "
        "public key under that name (`GET /v1/logs/{origin}/vkey` gives it so).",
        auth=[],
        responses=SigningKeyOutput(many=True),
    )
    def get(self, request: Request) -> Response:
        return Response(SigningKeyOutput(selectors.signing_keys(), many=True).data)


class LogVkeysView(APIView):
    """One log's verifier keys, exactly as a checkpoint of it is verified: every published key
    under the log's origin (the name, and so the key id, its checkpoints are signed under), so
    an outside tool (Go's note.Open, `python -m gate_client.verify --vkey`) takes them as
    given. Public, like the keys: a log's origin is in every checkpoint of it."""

    authentication_classes = []
    permission_classes = [AllowAny]

    @extend_schema(
        summary="A log's verifier keys",
        description="One log's verifier keys, exactly as a checkpoint of it is verified: "
        "every published key under the log's origin (the name, and so the key id, its "
        "checkpoints are signed under), so an outside tool (Go's note.Open, `python -m "
        "gate_client.verify --vkey`) takes them as given. Public, like the keys: a log's "
        "origin is in every checkpoint of it.",
        auth=[],
        responses={200: LogVkeysOutput, **error_responses(NO_LOG)},
    )
    def get(self, request: Request, origin: str) -> Response:
        try:
            log = selectors.get_log(origin=origin)
        except selectors.LedgerLookupError as exc:
            raise NotFound(str(exc)) from exc
        vkeys = []
        for key in selectors.signing_keys():
            verifier = log_verifier(log.origin, parse_vkey(key.vkey))
            vkeys.append(
                {
                    "vkey": verifier.vkey,
                    "key_id": f"{verifier.key_id:08x}",
                    "valid_from": key.valid_from,
                    "valid_until": key.valid_until,
                }
            )
        return Response(LogVkeysOutput({"origin": log.origin, "vkeys": vkeys}).data)


class LatestCheckpointView(APIView):
    @extend_schema(
        summary="The latest checkpoint",
        description="The caller's log's latest published checkpoint: a C2SP signed note of "
        "its size and root hash, signed by the notary and cosigned by the witnesses the log "
        "requires. A client keeps the last one it accepted and checks that each new one "
        "extends it (`GET /v1/proofs/consistency`): a notary cannot then rewrite or fork the "
        "history it showed.",
        responses={200: CheckpointOutput, **error_responses(NO_CHECKPOINT)},
    )
    def get(self, request: Request) -> Response:
        log = _caller_log(request)
        checkpoint = selectors.published_checkpoint(log=log)
        if checkpoint is None:
            raise NotFound(f"log {log.origin} has {selectors.no_published_checkpoint(log)}")
        return Response(CheckpointOutput(checkpoint).data)


class InclusionProofView(APIView):
    @extend_schema(
        parameters=[InclusionProofQuery],
        responses={
            200: InclusionProofOutput,
            **error_responses(INCLUSION_INVALID, *NO_PROOF),
        },
        summary="Prove an entry is in the log",
        description="The RFC 6962 audit path of entry `index` in the tree of a signed "
        "checkpoint (of `size`, or the latest), and the same as a C2SP tlog-proof carrying "
        "that checkpoint: what shows an entry is in the history every client and witness saw. "
        "`index` must be less than `size`: else 400 `invalid`; with `size` left out, an "
        "`index` the latest checkpoint does not cover is a 404 `not_found`.",
    )
    def get(self, request: Request) -> Response:
        given = InclusionProofQuery(data=request.query_params.dict())
        given.is_valid(raise_exception=True)
        log, index = _caller_log(request), given.validated_data["index"]
        try:
            checkpoint = selectors.checkpoint_for_proof(
                log=log, index=index, size=given.validated_data.get("size")
            )
            proof = selectors.tlog_proof(log=log, index=index, size=checkpoint.size)
        except selectors.LedgerLookupError as exc:
            raise NotFound(str(exc)) from exc
        body = {
            "index": index,
            "size": checkpoint.size,
            "hashes": _b64(proof.hashes),
            "tlog_proof": proof.text(),
        }
        return Response(InclusionProofOutput(body).data)


class ConsistencyProofView(APIView):
    @extend_schema(
        parameters=[ConsistencyProofQuery],
        responses={
            200: ConsistencyProofOutput,
            **error_responses(CONSISTENCY_INVALID, NO_TREE),
        },
        summary="Prove the log only grew",
        description="The RFC 6962 consistency proof that the tree of size `new` extends the "
        "tree of size `old`: how a client holding an older checkpoint checks a newer one, "
        "and so that the notary neither rewrote nor forked the history. `old` must not be "
        "greater than `new` (else 400 `invalid`); `new` a size the log has reached (else 404 "
        "`not_found`).",
    )
    def get(self, request: Request) -> Response:
        given = ConsistencyProofQuery(data=request.query_params.dict())
        given.is_valid(raise_exception=True)
        old, new = given.validated_data["old"], given.validated_data["new"]
        try:
            hashes = selectors.consistency_proof(
                log=_caller_log(request), old_size=old, new_size=new
            )
        except selectors.LedgerLookupError as exc:
            raise NotFound(str(exc)) from exc
        body = {"old": old, "new": new, "hashes": _b64(hashes)}
        return Response(ConsistencyProofOutput(body).data)
