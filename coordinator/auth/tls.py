"""Server TLS credentials from PEM files (the I/O edge); loopback detection for the plaintext warning."""

from __future__ import annotations

from pathlib import Path

import grpc

from groupcoord.addresses import is_loopback_host
from groupcoord.channels import unsafe_file

__all__ = ["is_loopback", "server_credentials"]


def _read(path: Path, what: str, *, secret: bool = False) -> bytes:
    problem = unsafe_file(path, what) if secret else None
    if problem is not None:
        raise ValueError(problem)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ValueError(f"cannot read {what} {path}: {error.strerror}") from None
    if b"-----BEGIN" not in data:
        raise ValueError(f"{what} {path} is not a PEM file")
    return data


def server_credentials(cert: Path, key: Path, client_ca: Path | None) -> grpc.ServerCredentials:
    """TLS with ``cert``/``key``; with ``client_ca``, clients must present a certificate it signed."""
    pair = (_read(key, "--tls-key", secret=True), _read(cert, "--tls-cert"))
    if client_ca is None:
        return grpc.ssl_server_credentials([pair])
    return grpc.ssl_server_credentials([pair], root_certificates=_read(client_ca, "--tls-client-ca"),
                                       require_client_auth=True)


def is_loopback(host: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ::1 (the only addresses plaintext is fine on)."""
    return is_loopback_host(host)
