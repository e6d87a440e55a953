"""Shapes of the ledger's read endpoints: query parameters in, keys, checkpoints and proofs out."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ledger.models import Checkpoint, SigningKey

MAX_TREE_SIZE = 2**63 - 1  # a log's size is a signed 64-bit column


class SigningKeyOutput(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = SigningKey
        fields = ["name", "key_id", "vkey", "valid_from", "valid_until"]


class LogVkeyOutput(serializers.Serializer):  # type: ignore[type-arg]
    vkey = serializers.CharField(help_text="<origin>+<key id>+<base64 key>: what note.Open takes")
    key_id = serializers.CharField(help_text="the signed-note key id under the origin, hex")
    valid_from = serializers.DateTimeField()
    valid_until = serializers.DateTimeField(allow_null=True)


class LogVkeysOutput(serializers.Serializer):  # type: ignore[type-arg]
    origin = serializers.CharField()
    vkeys = LogVkeyOutput(
        many=True, help_text="every key that has signed, as this log's verifier, oldest first"
    )


class CheckpointOutput(serializers.ModelSerializer):  # type: ignore[type-arg]
    origin = serializers.CharField(source="log.origin")
    note = serializers.CharField(
        source="published_note",
        help_text="the C2SP signed note of the tlog-checkpoint: the notary's signature, then "
        "each witness's cosignature/v1 (C2SP tlog-cosignature)",
    )
    cosigned_by = serializers.SerializerMethodField(help_text="the witnesses that cosigned it")

    class Meta:
        model = Checkpoint
        fields = ["origin", "size", "note", "cosigned_by"]

    def get_cosigned_by(self, checkpoint: Checkpoint) -> list[str]:
        return sorted({c.witness for c in checkpoint.verified_cosignatures})


class InclusionProofQuery(serializers.Serializer):  # type: ignore[type-arg]
    index = serializers.IntegerField(
        min_value=0, max_value=MAX_TREE_SIZE - 1, help_text="the entry's seq; less than size"
    )
    size = serializers.IntegerField(
        min_value=1,
        max_value=MAX_TREE_SIZE,
        required=False,
        help_text="the size of a signed checkpoint (default: the latest)",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "size" in attrs and attrs["index"] >= attrs["size"]:
            raise serializers.ValidationError({"index": "must be less than size"})
        return attrs


class ConsistencyProofQuery(serializers.Serializer):  # type: ignore[type-arg]
    old = serializers.IntegerField(
        min_value=1, max_value=MAX_TREE_SIZE, help_text="the older size; at most new"
    )
    new = serializers.IntegerField(
        min_value=1, max_value=MAX_TREE_SIZE, help_text="the newer size; at least old"
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["old"] > attrs["new"]:
            raise serializers.ValidationError({"old": "must not be greater than new"})
        return attrs


class InclusionProofOutput(serializers.Serializer):  # type: ignore[type-arg]
    index = serializers.IntegerField()
    size = serializers.IntegerField()
    hashes = serializers.ListField(child=serializers.CharField(), help_text="base64, leaf first")
    tlog_proof = serializers.CharField(help_text="C2SP tlog-proof@v1 with the signed checkpoint")


class ConsistencyProofOutput(serializers.Serializer):  # type: ignore[type-arg]
    old = serializers.IntegerField()
    new = serializers.IntegerField()
    hashes = serializers.ListField(child=serializers.CharField(), help_text="base64 (RFC 6962)")
