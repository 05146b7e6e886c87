"""Coordinator addresses as users write them: ``HOST:PORT`` or a comma-separated list.

Ground floor, next to the errors: the worker client and the admin client both
parse the same ``--coordinator`` strings, and neither may import the other.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence

__all__ = [
    "KnownCoordinators",
    "is_loopback_host",
    "parse_addresses",
    "reachable_address",
    "unreachable_by_tcp",
    "unresolved_hosts",
]


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


def unresolved_hosts(addresses: Sequence[str]) -> dict[str, str]:
    """Those of ``addresses`` (``HOST:PORT``) whose host does not resolve -> why (the resolver's words)."""
    failed: dict[str, str] = {}
    for address in addresses:
        host, _, port = address.rpartition(":")
        try:
            socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            failed[address] = f"name not resolved ({reason})"
    return failed


def unreachable_by_tcp(addresses: Sequence[str], timeout_s: float = 1.0) -> dict[str, str]:
    """Those of ``addresses`` (``HOST:PORT``) where a TCP connection fails -> why, in a few words
    (connection refused, name not resolved, timed out): a service whose client library only says
    "time-out" after its own long retries (kazoo) is told apart from one that is down, at once."""
    failed: dict[str, str] = {}
    for address in addresses:
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except ConnectionRefusedError:
            failed[address] = "connection refused"
        except socket.gaierror:
            failed[address] = "name not resolved"
        except TimeoutError:
            failed[address] = f"timed out ({timeout_s:g} s)"
        except (OSError, ValueError) as error:
            failed[address] = getattr(error, "strerror", None) or str(error)
    return failed


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


class KnownCoordinators:
    """The coordinators a client may ask: the bootstrap list first, then every live one the cluster's
    answers named (as Kafka's clients learn brokers from metadata), so losing every bootstrap address
    does not lose the cluster. A DescribeCluster answer lists every live coordinator and replaces what
    was learnt; a FindCoordinator answer names some and adds them."""

    def __init__(self, bootstrap: Sequence[str]) -> None:
        self.bootstrap = tuple(bootstrap)
        self._learnt: list[str] = []

    def learn(self, addresses: Iterable[str], *, every_live: bool) -> None:
        """``addresses`` are live coordinators; ``every_live``: they are all of them (DescribeCluster)."""
        named = [a for a in dict.fromkeys(addresses) if a]
        if every_live:
            self._learnt = named
        else:
            self._learnt += [a for a in named if a not in self._learnt]

    @property
    def learnt(self) -> tuple[str, ...]:
        return tuple(self._learnt)

    def candidates(self) -> list[str]:
        """Every address to try, in order: the bootstrap list, then the learnt ones not in it."""
        return list(dict.fromkeys([*self.bootstrap, *self._learnt]))
