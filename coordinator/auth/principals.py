"""Who a call comes from: a client certificate's subject, a bearer token's name, or nobody.

Principals are strings in Kafka's form, ``User:NAME``. With mTLS, ``NAME`` is the certificate's
subject as gRPC reports it (RFC 4514 order, e.g. ``CN=worker-shop,O=Example``), as Kafka's default
SSL principal builder does; with tokens it is the name on the token's line. Without either, every
caller is ``User:ANONYMOUS`` (Kafka's name for the same thing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from groupcoord.coordinator.auth.tokens import TokenTable

__all__ = ["ANONYMOUS", "Authenticated", "Refused", "authenticate"]

ANONYMOUS = "User:ANONYMOUS"
_BEARER = "bearer "


@dataclass(frozen=True)
class Authenticated:
    principal: str


@dataclass(frozen=True)
class Refused:
    """No credential, or one that does not verify: gRPC UNAUTHENTICATED with ``reason``."""

    reason: str


def authenticate(
    auth_context: Mapping[str, Sequence[bytes]],
    metadata: Iterable[tuple[str, str | bytes]],
    *,
    mtls: bool,
    tokens: TokenTable | None,
) -> Authenticated | Refused:
    """The principal of one call. ``auth_context`` is gRPC's (``x509_subject`` when the client sent a
    certificate the server verified); ``metadata`` the call's metadata (``authorization: Bearer T``)."""
    if mtls:
        subject = b"".join(auth_context.get("x509_subject", [])).decode(errors="replace")
        if not subject:  # the handshake requires a verified certificate, so this is not expected
            return Refused("no verified client certificate")
        return Authenticated(f"User:{subject}")
    if tokens is None:
        return Authenticated(ANONYMOUS)
    presented = [value for key, value in metadata if key == "authorization"]
    if not presented:
        return Refused("no credentials: send 'authorization: Bearer <token>' (--token-file)")
    if len(presented) > 1:
        return Refused("more than one authorization header")
    value = presented[0].decode(errors="replace") if isinstance(presented[0], bytes) else presented[0]
    if not value.lower().startswith(_BEARER):
        return Refused("the authorization header is not 'Bearer <token>'")
    principal = tokens.principal_for(value[len(_BEARER):].strip())
    if principal is None:
        return Refused("invalid token")
    return Authenticated(principal)
