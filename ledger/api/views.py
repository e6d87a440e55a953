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
from ledger.api.schema import error_response
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
# project's schema class (settings' DEFAULT_SCHEMA_CLASS); these are the ledger's own.
NO_CHECKPOINT = error_response(
    "`not_found`: the caller's log has no signed checkpoint yet (with the witness cosignatures "
    "it requires)"
)
NO_LOG = error_response("`not_found`: no log with that origin")
NO_PROOF = error_response(
    "`not_found`: no signed checkpoint of that size (or none yet), or no such entry in it"
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

    @extend_schema(auth=[], responses=SigningKeyOutput(many=True))
    def get(self, request: Request) -> Response:
        return Response(SigningKeyOutput(selectors.signing_keys(), many=True).data)


class LogVkeysView(APIView):
    """One log's verifier keys, exactly as a checkpoint of it is verified: every published key
    under the log's origin (the name, and so the key id, its checkpoints are signed under), so
    an outside tool (Go's note.Open, `python -m gate_client.verify --vkey`) takes them as
    given. Public, like the keys: a log's origin is in every checkpoint of it."""

    authentication_classes = []
    permission_classes = [AllowAny]

    @extend_schema(auth=[], responses={200: LogVkeysOutput, 404: NO_LOG})
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
    @extend_schema(responses={200: CheckpointOutput, 404: NO_CHECKPOINT})
    def get(self, request: Request) -> Response:
        log = _caller_log(request)
        checkpoint = selectors.published_checkpoint(log=log)
        if checkpoint is None:
            raise NotFound(f"log {log.origin} has {selectors.no_published_checkpoint(log)}")
        return Response(CheckpointOutput(checkpoint).data)


class InclusionProofView(APIView):
    @extend_schema(
        parameters=[InclusionProofQuery],
        responses={200: InclusionProofOutput, 404: NO_PROOF},
        description="`index` must be less than `size` (the checkpoint's, when `size` is left "
        "out): else 400 `invalid`.",
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
        responses={200: ConsistencyProofOutput, 404: NO_PROOF},
        description="`old` must not be greater than `new` (else 400 `invalid`); `new` a size "
        "the log has reached.",
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
