"""The API's views: validate, call a service or selector, serialize."""

from __future__ import annotations

import itertools

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger.api.schema import error_response
from notary import selectors, services
from notary.authentication import ApiKeyPrincipal, role_required
from notary.exports import export_receipts
from notary.models import Role
from notary.serializers import (
    AttestationInput,
    AttestationOutput,
    ConflictOutput,
    EffectDetailOutput,
    EffectDispatchInput,
    EffectOutcomeInput,
    EffectOutput,
    EffectProposeInput,
    EntryOutput,
    EvidenceOutput,
    ExportQueryInput,
    LeaseGrantInput,
    LeaseOutput,
    LeaseRequestInput,
    LeaseRequestOutput,
    LeaseRevokeInput,
    LimitInput,
    ProposeOutput,
    ReceiptOutput,
    ReceiptQueryInput,
    RecordedEntryOutput,
    TargetInput,
    TargetOutput,
    WhoAmIOutput,
)

# The refusals particular to an operation; those of its kind (401, 403 by role, 400/413/415 for
# a body, 404 for a path's record, 429) come from notary.schema.AutoSchema.
GRANT_FORBIDDEN = error_response(
    "`permission_denied` (not a role that may), or `beyond_policy`: the lease is past the "
    "tenant's policy (its longest duration, its largest amount)"
)
REQUEST_NOT_FOUND = error_response("`not_found`: no such lease request for this tenant")
ALREADY_GRANTED = error_response(
    "`already_granted`: the request was granted already (`lease_id` names the lease)",
    ConflictOutput,
)
DISPATCH_CONFLICT = error_response(
    "`attempt_taken` (another process recorded this attempt; `current` is the last recorded), "
    "`already_settled` (the effect has a verdict; `current`), or `lease_refused` (the lease "
    "does not cover it now; `reason` says how)",
    ConflictOutput,
)
OUTCOME_CONFLICT = error_response(
    "`evidence_arrived`: evidence settled the effect while the agent waited; read it",
    ConflictOutput,
)
ATTESTATION_FORBIDDEN = error_response(
    "`permission_denied`: not a service key, or the effect's target is outside the key's scope"
)
ATTESTATION_CONFLICT = error_response(
    "`not_acknowledged`: a write-ahead attestation refused; the service must not act",
    ConflictOutput,
)
ATTESTATION_NOT_FOUND = error_response("`not_found`: no such effect for this tenant")
NO_CHECKPOINT = error_response(
    "`no_checkpoint`: the tenant's log has no signed checkpoint yet, or none with the witness "
    "cosignatures it requires; `detail` says which (how many cosignatures the latest has) and "
    "what gives it one",
    ConflictOutput,
)
RECEIPT_NOT_FOUND = error_response(
    "`not_found`: no such effect, or no refused re-decided payload with this `payload_hash`"
)


def _principal(request: Request) -> ApiKeyPrincipal:
    principal = request.user
    assert isinstance(principal, ApiKeyPrincipal)  # the authentication class guarantees it
    return principal


class WhoAmIView(APIView):
    """Which tenant and role a key acts as: how a client checks its credentials."""

    @extend_schema(responses=WhoAmIOutput)
    def get(self, request: Request) -> Response:
        principal = _principal(request)
        return Response(
            {
                "tenant": principal.tenant.slug,
                "role": principal.role,
                "key_id": principal.api_key.key_id,
                "holder": principal.api_key.holder,
                "log": principal.tenant.log.origin,
            }
        )


class LeaseGrantView(APIView):
    permission_classes = [role_required(Role.APPROVER)]

    @extend_schema(
        request=LeaseGrantInput,
        responses={
            201: LeaseOutput,
            403: GRANT_FORBIDDEN,
            404: REQUEST_NOT_FOUND,
            409: ALREADY_GRANTED,
        },
    )
    def post(self, request: Request) -> Response:
        given = LeaseGrantInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        if "request_id" in given.validated_data:
            lease = services.lease_request_grant(
                tenant=principal.tenant, approver=principal.api_key, **given.validated_data
            )
        else:
            lease = services.lease_grant(
                tenant=principal.tenant, approver=principal.api_key, **given.validated_data
            )
        return Response(LeaseOutput(lease).data, status=201)


class LeaseRequestView(APIView):
    """An agent asks for a lease; an approver who holds none of its holder's keys grants it."""

    permission_classes = [role_required(Role.AGENT)]

    @extend_schema(request=LeaseRequestInput, responses={201: LeaseRequestOutput})
    def post(self, request: Request) -> Response:
        given = LeaseRequestInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        asked = services.lease_request(
            tenant=principal.tenant, requester=principal.api_key, **given.validated_data
        )
        return Response(LeaseRequestOutput(asked).data, status=201)


class LeaseDetailView(APIView):
    permission_classes = [role_required(Role.APPROVER, Role.AGENT, Role.AUDITOR)]

    @extend_schema(responses=LeaseOutput)
    def get(self, request: Request, lease_id: str) -> Response:
        lease = selectors.lease_get(tenant=_principal(request).tenant, lease_id=lease_id)
        return Response(LeaseOutput(lease).data)


class LeaseRevokeView(APIView):
    permission_classes = [role_required(Role.APPROVER)]

    @extend_schema(request=LeaseRevokeInput, responses=LeaseOutput)
    def post(self, request: Request, lease_id: str) -> Response:
        given = LeaseRevokeInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        selectors.lease_get(tenant=principal.tenant, lease_id=lease_id)
        lease = services.lease_revoke(
            tenant=principal.tenant,
            lease_id=lease_id,
            by=principal.api_key.holder,
            reason=given.validated_data["reason"],
        )
        return Response(LeaseOutput(lease).data)


class TargetListView(APIView):
    """The tenant's targets and what each declares: the one declaration the gate and the
    notary's recovery both go by. Approvers register; agents and auditors read."""

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method == "POST":
            return [role_required(Role.APPROVER)()]
        return [role_required(Role.APPROVER, Role.AGENT, Role.AUDITOR)()]

    @extend_schema(responses=TargetOutput(many=True))
    def get(self, request: Request) -> Response:
        targets = selectors.targets_of(tenant=_principal(request).tenant)
        return Response(TargetOutput(targets, many=True).data)

    @extend_schema(request=TargetInput, responses={201: TargetOutput})
    def post(self, request: Request) -> Response:
        given = TargetInput(data=request.data)
        given.is_valid(raise_exception=True)
        target = services.target_register(tenant=_principal(request).tenant, **given.validated_data)
        return Response(TargetOutput(target).data, status=201)


class TargetDetailView(APIView):
    permission_classes = [role_required(Role.APPROVER, Role.AGENT, Role.AUDITOR)]

    @extend_schema(responses=TargetOutput)
    def get(self, request: Request, name: str) -> Response:
        target = selectors.target_get(tenant=_principal(request).tenant, name=name)
        return Response(TargetOutput(target).data)


class EffectProposeView(APIView):
    permission_classes = [role_required(Role.AGENT)]

    @extend_schema(request=EffectProposeInput, responses={200: ProposeOutput, 201: ProposeOutput})
    def post(self, request: Request) -> Response:
        given = EffectProposeInput(data=request.data)
        given.is_valid(raise_exception=True)
        tenant = _principal(request).tenant
        dispatch = given.validated_data.get("dispatch")
        proposed = services.effect_propose(
            tenant=tenant,
            effect_id=given.validated_data["effect_id"],
            proposal=given.validated_data["proposal"],
            dispatch_premises=dispatch["premises"] if dispatch is not None else None,
            dispatcher=_principal(request).api_key,
        )
        refusal = proposed.refusal
        body = {
            "created": proposed.created,
            "effect": selectors.effect_get(
                tenant=tenant, effect_id=given.validated_data["effect_id"]
            ),
            "entries": proposed.entries,
            "dispatched": proposed.dispatched,
            "dispatch_refused": (
                {"reason": refusal.extra["reason"], "detail": refusal.detail} if refusal else None
            ),
        }
        return Response(ProposeOutput(body).data, status=201 if proposed.created else 200)


class EffectUnsettledView(APIView):
    permission_classes = [role_required(Role.AGENT, Role.AUDITOR)]

    @extend_schema(parameters=[LimitInput], responses=EffectOutput(many=True))
    def get(self, request: Request) -> Response:
        given = LimitInput(data=request.query_params.dict())
        given.is_valid(raise_exception=True)
        effects = selectors.unsettled_effects(
            tenant=_principal(request).tenant, limit=given.validated_data["limit"]
        )
        return Response(EffectOutput(effects, many=True).data)


class EffectDetailView(APIView):
    permission_classes = [role_required(Role.AGENT, Role.AUDITOR)]

    @extend_schema(responses=EffectDetailOutput)
    def get(self, request: Request, effect_id: str) -> Response:
        tenant = _principal(request).tenant
        effect = selectors.effect_get(tenant=tenant, effect_id=effect_id)
        history, lease_entries = selectors.effect_entries_for_receipt(tenant=tenant, effect=effect)
        body = {"effect": effect, "entries": history, "lease_entries": lease_entries}
        return Response(EffectDetailOutput(body).data)


class EffectDispatchView(APIView):
    permission_classes = [role_required(Role.AGENT)]

    @extend_schema(
        request=EffectDispatchInput, responses={201: EntryOutput, 409: DISPATCH_CONFLICT}
    )
    def post(self, request: Request, effect_id: str) -> Response:
        given = EffectDispatchInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        entry = services.effect_dispatch(
            tenant=principal.tenant,
            effect_id=effect_id,
            dispatcher=principal.api_key,
            **given.validated_data,
        )
        return Response(EntryOutput(entry).data, status=201)


class EffectOutcomeView(APIView):
    permission_classes = [role_required(Role.AGENT)]

    @extend_schema(
        request=EffectOutcomeInput,
        responses={
            200: RecordedEntryOutput,
            201: RecordedEntryOutput,
            409: OUTCOME_CONFLICT,
        },
    )
    def post(self, request: Request, effect_id: str) -> Response:
        given = EffectOutcomeInput(data=request.data)
        given.is_valid(raise_exception=True)
        tenant = _principal(request).tenant
        entry, recorded, history = services.effect_record_outcome(
            tenant=tenant, effect_id=effect_id, **given.validated_data
        )
        lease_id = next(e for e in history if e.kind == "PROPOSED").body_value()["lease_id"]
        lease_entries = selectors.lease_entries(tenant=tenant, lease_id=lease_id)
        receipt_entries = sorted([*history, *lease_entries], key=lambda e: e.seq)
        body = {"recorded": recorded, "entry": entry, "receipt_entries": receipt_entries}
        return Response(RecordedEntryOutput(body).data, status=201 if recorded else 200)


class EffectReceiptView(APIView):
    permission_classes = [role_required(Role.AGENT, Role.AUDITOR)]

    @extend_schema(
        parameters=[ReceiptQueryInput], responses={200: ReceiptOutput, 404: RECEIPT_NOT_FOUND}
    )
    def get(self, request: Request, effect_id: str) -> Response:
        given = ReceiptQueryInput(data=request.query_params.dict())
        given.is_valid(raise_exception=True)
        proved = selectors.effect_receipt(
            tenant=_principal(request).tenant,
            effect_id=effect_id,
            payload_hash=given.validated_data.get("payload_hash"),
        )
        body = {
            "receipt": proved.receipt.to_dict(),
            "entries": proved.entries,
            "checkpoint": proved.checkpoint,
            "proofs": {str(seq): proof for seq, proof in proved.proofs.items()},
        }
        return Response(ReceiptOutput(body).data)


class AttestationView(APIView):
    permission_classes = [role_required(Role.SERVICE)]

    @extend_schema(
        request=AttestationInput,
        responses={
            201: AttestationOutput,
            403: ATTESTATION_FORBIDDEN,
            404: ATTESTATION_NOT_FOUND,
            409: ATTESTATION_CONFLICT,
        },
    )
    def post(self, request: Request) -> Response:
        given = AttestationInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        entry, settled = services.attestation_record(
            tenant=principal.tenant,
            by=principal.api_key.holder,
            service_key=principal.api_key,
            **given.validated_data,
        )
        return Response(AttestationOutput({"settled": settled, "entry": entry}).data, status=201)


class EffectEvidenceView(APIView):
    permission_classes = [role_required(Role.AGENT, Role.AUDITOR)]

    @extend_schema(responses=EvidenceOutput)
    def get(self, request: Request, effect_id: str) -> Response:
        evidence = selectors.effect_evidence(tenant=_principal(request).tenant, effect_id=effect_id)
        return Response(EvidenceOutput(evidence).data)


class ExportReceiptsView(APIView):
    permission_classes = [role_required(Role.AUDITOR)]

    @extend_schema(
        parameters=[
            OpenApiParameter("from", OpenApiTypes.DATETIME, description="proposed at or after"),
            OpenApiParameter("to", OpenApiTypes.DATETIME, description="proposed before"),
            OpenApiParameter(
                "state",
                {"type": "string", "maxLength": 100},
                description="final state (e.g. AMBIGUOUS, FAILED:card_declined), or a prefix "
                "ending in * (COMMITTED*); a state no receipt can have is refused (400)",
            ),
        ],
        responses={
            (200, "application/x-ndjson"): OpenApiTypes.STR,
            409: NO_CHECKPOINT,
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        """The tenant's receipts as an interlock-receipts-export/v1 stream (JSON Lines)."""
        given = ExportQueryInput(data=request.query_params.dict())
        given.is_valid(raise_exception=True)
        lines = export_receipts(
            tenant=_principal(request).tenant,
            since=given.validated_data.get("from_"),
            until=given.validated_data.get("to"),
            state=given.validated_data.get("state"),
        )
        first = next(lines)  # the header: a bad state, or no checkpoint, is refused before it
        return StreamingHttpResponse(
            itertools.chain([first], lines), content_type="application/x-ndjson"
        )
