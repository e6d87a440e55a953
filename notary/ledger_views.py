"""The ledger's read endpoints: the signing keys (public), and, for the caller's tenant, its own
log's latest checkpoint, inclusion proofs and consistency proofs."""

from __future__ import annotations

import base64
from collections.abc import Iterable

from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger import selectors
from ledger.models import Log
from notary.authentication import ApiKeyPrincipal, role_required
from notary.ledger_serializers import (
    CheckpointOutput,
    ConsistencyProofOutput,
    ConsistencyProofQuery,
    InclusionProofOutput,
    InclusionProofQuery,
    SigningKeyOutput,
)
from notary.models import Role

ANY_ROLE = role_required(Role.AGENT, Role.SERVICE, Role.APPROVER, Role.AUDITOR)


def _tenant_log(request: Request) -> Log:
    principal = request.user
    assert isinstance(principal, ApiKeyPrincipal)  # the permission class guarantees it
    return principal.tenant.log


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


class LatestCheckpointView(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(responses=CheckpointOutput)
    def get(self, request: Request) -> Response:
        log = _tenant_log(request)
        checkpoint = selectors.latest_checkpoint(log=log)
        if checkpoint is None:
            raise NotFound(f"log {log.origin} has no signed checkpoint yet")
        return Response(CheckpointOutput(checkpoint).data)


class InclusionProofView(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(parameters=[InclusionProofQuery], responses=InclusionProofOutput)
    def get(self, request: Request) -> Response:
        given = InclusionProofQuery(data=request.query_params)
        given.is_valid(raise_exception=True)
        log, index = _tenant_log(request), given.validated_data["index"]
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
    permission_classes = [ANY_ROLE]

    @extend_schema(parameters=[ConsistencyProofQuery], responses=ConsistencyProofOutput)
    def get(self, request: Request) -> Response:
        given = ConsistencyProofQuery(data=request.query_params)
        given.is_valid(raise_exception=True)
        old, new = given.validated_data["old"], given.validated_data["new"]
        try:
            hashes = selectors.consistency_proof(
                log=_tenant_log(request), old_size=old, new_size=new
            )
        except selectors.LedgerLookupError as exc:
            raise NotFound(str(exc)) from exc
        body = {"old": old, "new": new, "hashes": _b64(hashes)}
        return Response(ConsistencyProofOutput(body).data)
