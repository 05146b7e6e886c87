"""Coordinator addresses as users write them: ``HOST:PORT`` or a comma-separated list.

Ground floor, next to the errors: the worker client and the admin client both
parse the same ``--coordinator`` strings, and neither may import the other.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

__all__ = ["is_loopback_host", "parse_addresses", "reachable_address"]


def parse_addresses(addresses: str | Sequence[str]) -> tuple[str, ...]:
    """'h1:p1,h2:p2' or a sequence -> ('h1:p1', 'h2:p2'); raises ValueError on a bad one."""
    items = addresses.split(",") if isinstance(addresses, str) else list(addresses)
    result = tuple(a.strip() for a in items if a.strip())
    if not result:
        raise ValueError("at least one coordinator address (HOST:PORT) is needed")
    for address in result:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"coordinator address {address!r} is not HOST:PORT")
    return result


def is_loopback_host(host: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ::1 (brackets allowed): the only hosts plaintext is fine on."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})


def reachable_address(address: str, asked: str) -> str:
    """``address`` as a coordinator named it, or, when its host is a wildcard (a coordinator listening
    on every interface that advertises nothing else), the same port on the host of ``asked``, the
    address that named it."""
    host, _, port = address.rpartition(":")
    if host in _WILDCARD_HOSTS:
        return f"{asked.rpartition(':')[0]}:{port}"
    return address
