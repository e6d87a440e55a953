"""API input and output shapes; validation only, the rules live in services."""

from __future__ import annotations

from rest_framework import serializers

from notary.models import Lease


class LeaseGrantInput(serializers.Serializer):  # type: ignore[type-arg]
    case_id = serializers.CharField(max_length=200)
    action = serializers.CharField(max_length=100)
    expires_at = serializers.DateTimeField()
    requested_by = serializers.CharField(max_length=200)
    limits = serializers.DictField(child=serializers.IntegerField(min_value=0), required=False)
    payload_hash = serializers.CharField(max_length=64, required=False, allow_null=True)


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
