"""Who is on the other end of a request: the peer's address, or, when the peer is one of the
proxies settings.NOTARY_TRUSTED_PROXIES names, the client its X-Forwarded-For says it served.

The header is read right to left: each trusted proxy appends the address it was connected from,
so the first address that is not a trusted proxy is the client. What lies left of it was
written by the client and means nothing. A peer that is not a trusted proxy is the client, and
its X-Forwarded-For is ignored."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from functools import lru_cache

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# An IPv6 client is usually given a whole /64: a throttle counting addresses counts those.
_IPV6_CLIENT_PREFIX = 64


def client_address(*, meta: Mapping[str, object]) -> str:
    """The client's address for a request's META, as text ("" when the peer has none)."""
    peer_text = str(meta.get("REMOTE_ADDR", "") or "")
    peer = _parse(peer_text)
    if peer is None:
        return peer_text
    trusted = _trusted_networks(tuple(settings.NOTARY_TRUSTED_PROXIES))
    if not _is_trusted(peer, trusted):
        return str(peer)
    client = peer
    hops = str(meta.get("HTTP_X_FORWARDED_FOR", "") or "").split(",")
    for hop in reversed(hops):
        address = _parse(hop.strip())
        if address is None:  # not an address a proxy writes: trust nothing left of it
            break
        client = address
        if not _is_trusted(address, trusted):
            break
    return str(client)


def client_throttle_key(*, meta: Mapping[str, object]) -> str:
    """What a per-client throttle counts under: the client's address, or its /64 for IPv6."""
    text = client_address(meta=meta)
    address = _parse(text)
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, _IPV6_CLIENT_PREFIX), strict=False))
    return text


def _parse(text: str) -> Address | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_trusted(address: Address, trusted: tuple[Network, ...]) -> bool:
    return any(address.version == network.version and address in network for network in trusted)


@lru_cache(maxsize=8)
def _trusted_networks(cidrs: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)
