"""API input and output shapes; validation only, the rules live in services."""

from __future__ import annotations

import base64
import math
from datetime import timedelta
from typing import Any

from rest_framework import serializers

from gate_client.protocol import AGENT_VERDICT_KINDS
from ledger.core.canonical import MAX_SAFE_INTEGER, CanonicalJSONError, check_depth
from ledger.core.entries import MAX_EFFECT_ID_LENGTH, format_timestamp
from ledger.core.entries import Entry as LedgerEntry
from notary.models import Effect, Lease, LeaseRequest, Target
from notary.services import MAX_PREMISE_NAME, MAX_PREMISES


def bounded_depth(value: Any) -> None:
    """A JSON value nested no deeper than the ledger's one limit (canonical.MAX_DEPTH)."""
    try:
        check_depth(value)
    except CanonicalJSONError as exc:
        raise serializers.ValidationError(str(exc)) from exc


class LimitsField(serializers.DictField):
    """Numeric payload fields and their maxima: amounts, so positive integers that a double
    holds exactly (the ledger's canonical JSON); the names are checked by the service."""

    child = serializers.IntegerField(min_value=1, max_value=MAX_SAFE_INTEGER)


class LeaseRequestInput(serializers.Serializer):  # type: ignore[type-arg]
    """What an agent asks for; the requester is its key's holder."""

    case_id = serializers.CharField(max_length=200)
    action = serializers.CharField(max_length=100)
    expires_at = serializers.DateTimeField()
    limits = LimitsField(required=False)
    payload_hash = serializers.CharField(max_length=64, required=False, allow_null=True)


class LeaseGrantInput(serializers.Serializer):  # type: ignore[type-arg]
    """Either `request_id` alone (grant that request on its terms), or the terms with
    `requested_by`, the holder of an agent key of the tenant."""

    request_id = serializers.CharField(
        max_length=40, required=False, help_text="a lease request, granted on its own terms"
    )
    case_id = serializers.CharField(max_length=200, required=False)
    action = serializers.CharField(max_length=100, required=False)
    expires_at = serializers.DateTimeField(required=False)
    requested_by = serializers.CharField(
        max_length=200, required=False, help_text="the holder of an agent key of this tenant"
    )
    limits = LimitsField(required=False)
    payload_hash = serializers.CharField(max_length=64, required=False, allow_null=True)

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if "request_id" in data:
            if len(data) > 1:
                raise serializers.ValidationError(
                    "a grant of a request_id takes its terms from the request: give nothing else"
                )
            return data
        missing = [f for f in ("case_id", "action", "expires_at", "requested_by") if f not in data]
        if missing:
            raise serializers.ValidationError({name: "This field is required." for name in missing})
        return data


class LeaseRequestOutput(serializers.ModelSerializer):  # type: ignore[type-arg]
    requested_key = serializers.CharField(source="requested_key.key_id", read_only=True)
    lease_id = serializers.SerializerMethodField()

    class Meta:
        model = LeaseRequest
        fields = [
            "request_id",
            "case_id",
            "action",
            "limits",
            "payload_hash",
            "expires_at",
            "requested_by",
            "requested_key",
            "created_at",
            "lease_id",
        ]

    def get_lease_id(self, request: LeaseRequest) -> str | None:
        return request.lease.lease_id if request.lease is not None else None


class TargetInput(serializers.Serializer):  # type: ignore[type-arg]
    """A target's declaration; the windows in seconds. Claims that contradict each other are
    refused by the service, not stored."""

    name = serializers.CharField(max_length=63)
    tier = serializers.IntegerField()
    queryable = serializers.BooleanField()
    max_inflight_seconds = serializers.FloatField(
        help_text="the longest a request may still be in flight"
    )
    key_window_seconds = serializers.FloatField(required=False, allow_null=True, default=None)
    evidence_window_seconds = serializers.FloatField(required=False, allow_null=True, default=None)
    attests_before_acting = serializers.BooleanField(required=False, default=False)
    lookup_needs_key = serializers.BooleanField(required=False, default=False)
    lookup_url = serializers.URLField(required=False, default="", allow_blank=True)

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        """Seconds in, durations out, as the service takes them."""
        windows = {}
        for name in ("max_inflight", "key_window", "evidence_window"):
            seconds = data.pop(f"{name}_seconds")
            if seconds is not None and not math.isfinite(seconds):
                raise serializers.ValidationError({f"{name}_seconds": "a finite number"})
            if seconds is not None and abs(seconds) > _MAX_WINDOW_SECONDS:
                raise serializers.ValidationError({f"{name}_seconds": "at most 10 years"})
            windows[name] = timedelta(seconds=seconds) if seconds is not None else None
        return {**data, **windows}


_MAX_WINDOW_SECONDS = 10 * 365 * 24 * 3600


class TargetOutput(serializers.ModelSerializer):  # type: ignore[type-arg]
    max_inflight_seconds = serializers.SerializerMethodField()
    key_window_seconds = serializers.SerializerMethodField()
    evidence_window_seconds = serializers.SerializerMethodField()

    class Meta:
        model = Target
        fields = [
            "name",
            "tier",
            "queryable",
            "max_inflight_seconds",
            "key_window_seconds",
            "evidence_window_seconds",
            "attests_before_acting",
            "lookup_needs_key",
            "lookup_url",
            "created_at",
        ]

    def get_max_inflight_seconds(self, target: Target) -> float:
        return target.max_inflight.total_seconds()

    def get_key_window_seconds(self, target: Target) -> float | None:
        return target.key_window.total_seconds() if target.key_window is not None else None

    def get_evidence_window_seconds(self, target: Target) -> float | None:
        window = target.evidence_window
        return window.total_seconds() if window is not None else None


class LeaseRevokeInput(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.CharField(max_length=500)


class LeaseOutput(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Lease
        fields = [
            "lease_id",
            "case_id",
            "action",
            "limits",
            "payload_hash",
            "expires_at",
            "requested_by",
            "granted_by",
            "granted_seq",
            "revoked_at",
            "revoked_by",
            "revoked_seq",
        ]


class PremiseInput(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField(max_length=MAX_PREMISE_NAME)
    holds = serializers.BooleanField()
    observed = serializers.JSONField(allow_null=True, validators=[bounded_depth])


class FirstDispatchInput(serializers.Serializer):  # type: ignore[type-arg]
    premises: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=PremiseInput(),
        max_length=MAX_PREMISES,
        help_text="as observed just now; every one must hold",
    )


class EffectProposeInput(serializers.Serializer):  # type: ignore[type-arg]
    effect_id = serializers.CharField(max_length=MAX_EFFECT_ID_LENGTH)
    proposal = serializers.DictField(
        help_text="The PROPOSED entry's body, as the gate writes it", validators=[bounded_depth]
    )
    dispatch = FirstDispatchInput(
        required=False,
        help_text="Also dispatch attempt 1 in the same transaction, if nothing was dispatched",
    )


class EffectDispatchInput(serializers.Serializer):  # type: ignore[type-arg]
    attempt = serializers.IntegerField(min_value=1, max_value=1_000_000)
    premises: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=PremiseInput(), max_length=MAX_PREMISES
    )
    recovery = serializers.BooleanField(default=False)


class EffectOutcomeInput(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.ChoiceField(choices=sorted(AGENT_VERDICT_KINDS))
    body = serializers.DictField(validators=[bounded_depth])


class EntryOutput(serializers.Serializer):  # type: ignore[type-arg]
    """One ledger entry. `leaf` is its exact bytes (base64): what the hash and proofs cover."""

    seq = serializers.IntegerField()
    kind = serializers.CharField()
    effect_id = serializers.CharField()
    created_at = serializers.DateTimeField()
    body = serializers.JSONField()
    leaf = serializers.CharField()
    entry_hash = serializers.CharField()

    def to_representation(self, instance: LedgerEntry) -> dict[str, Any]:
        return {
            "seq": instance.seq,
            "kind": instance.kind,
            "effect_id": instance.effect_id,
            "created_at": format_timestamp(instance.created_at),
            "body": instance.body_value(),
            "leaf": base64.b64encode(instance.leaf_bytes()).decode("ascii"),
            "entry_hash": instance.entry_hash.hex(),
        }


class EffectOutput(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Effect
        fields = [
            "effect_id",
            "case_id",
            "target",
            "action",
            "lease_id",
            "payload_hash",
            "state",
            "attempts",
            "proposed_seq",
            "last_seq",
            "proposed_at",
            "dispatched_at",
            "settled_at",
            "result_ref",
        ]


class EffectDetailOutput(serializers.Serializer):  # type: ignore[type-arg]
    effect = EffectOutput()
    entries = EntryOutput(many=True)
    lease_entries = EntryOutput(many=True, help_text="The lease's grant and revocation")


class DispatchRefusedOutput(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.CharField()
    detail = serializers.CharField()


class ProposeOutput(serializers.Serializer):  # type: ignore[type-arg]
    created = serializers.BooleanField()
    effect = EffectOutput()
    entries = EntryOutput(many=True)
    dispatched = EntryOutput(allow_null=True, help_text="attempt 1, if this request recorded it")
    dispatch_refused = DispatchRefusedOutput(
        allow_null=True, help_text="the lease did not cover attempt 1: nothing was dispatched"
    )


class RecordedEntryOutput(serializers.Serializer):  # type: ignore[type-arg]
    recorded = serializers.BooleanField(help_text="false: an earlier verdict stands")
    entry = EntryOutput()
    receipt_entries = EntryOutput(
        many=True, help_text="the effect's entries and its lease's, as of this outcome"
    )


class ReceiptOutput(serializers.Serializer):  # type: ignore[type-arg]
    receipt = serializers.DictField()
    entries = EntryOutput(many=True)
    checkpoint = serializers.CharField(allow_null=True)
    proofs = serializers.DictField(
        child=serializers.CharField(allow_null=True),
        help_text="C2SP tlog-proof per entry seq against `checkpoint`; null until one covers it",
    )


class LimitInput(serializers.Serializer):  # type: ignore[type-arg]
    limit = serializers.IntegerField(min_value=1, max_value=10_000, default=1000)


class ReceiptQueryInput(serializers.Serializer):  # type: ignore[type-arg]
    payload_hash = serializers.RegexField(r"^[0-9a-f]{64}$", required=False)


class WhoAmIOutput(serializers.Serializer):  # type: ignore[type-arg]
    tenant = serializers.CharField()
    role = serializers.CharField()
    key_id = serializers.CharField()
    holder = serializers.CharField(help_text="who holds the key, in canonical form")
    log = serializers.CharField(help_text="the origin of the tenant's ledger log")


class AttestationInput(serializers.Serializer):  # type: ignore[type-arg]
    effect_id = serializers.CharField(max_length=MAX_EFFECT_ID_LENGTH)
    stage = serializers.ChoiceField(
        choices=["before_acting", "performed", "not_performed"],
        required=False,
        help_text="before_acting: the write-ahead attestation, acknowledged (201) or refused "
        "(409) before the service may act; default: from `performed`",
    )
    performed = serializers.BooleanField(
        required=False, help_text="true: the service did it; false: it did not"
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if "stage" not in data and "performed" not in data:
            raise serializers.ValidationError("give stage, or performed")
        stage = data.pop("stage", None)
        performed = data.pop("performed", None)
        if stage is None:
            stage = "performed" if performed else "not_performed"
        elif performed is not None and stage != ("performed" if performed else "not_performed"):
            raise serializers.ValidationError("stage and performed disagree")
        return {**data, "stage": stage}

    reference = serializers.CharField(max_length=255, required=False, default="")
    detail = serializers.CharField(max_length=2000, required=False, default="")


class AttestationOutput(serializers.Serializer):  # type: ignore[type-arg]
    settled = serializers.CharField(
        help_text="committed_on_evidence, failed_on_evidence, or recorded (nothing to settle)"
    )
    entry = EntryOutput()


class EvidenceOutput(serializers.Serializer):  # type: ignore[type-arg]
    """What the notary holds, as facts; whether nothing seen counts is the protocol's call,
    by the target's declaration (silence is never "not sent" for webhooks)."""

    seen = serializers.ChoiceField(choices=["performed", "not_performed", "intent", "nothing"])
    result_ref = serializers.CharField(allow_blank=True)
    code = serializers.CharField(allow_blank=True, help_text="not_performed: evidence:<type>")
    evidence_seq = serializers.IntegerField(allow_null=True)


class ExportQueryInput(serializers.Serializer):  # type: ignore[type-arg]
    from_ = serializers.DateTimeField(required=False, help_text="proposed at or after")
    to = serializers.DateTimeField(required=False, help_text="proposed before")
    state = serializers.CharField(max_length=100, required=False, help_text="or a prefix + *")

    def to_internal_value(self, data: Any) -> Any:
        """`from` is a Python keyword: read it into from_."""
        renamed = {("from_" if key == "from" else key): value for key, value in data.items()}
        return super().to_internal_value(renamed)
