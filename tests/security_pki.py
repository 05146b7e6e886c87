"""Certificates and tokens for the security tests: a trustme CA, PEM files on disk, token files."""

from __future__ import annotations

import datetime
import hashlib
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import trustme


@dataclass
class Pki:
    """A CA that signed the server's certificate and some clients', plus a stranger CA."""

    root: Path
    ca: trustme.CA = field(default_factory=trustme.CA)
    other_ca: trustme.CA = field(default_factory=trustme.CA)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.other_ca.cert_pem.write_to_path(str(self.other_ca_file))
        server = self.ca.issue_cert("localhost", "127.0.0.1", "::1")
        server.private_key_pem.write_to_path(str(self.root / "server.key"))
        (self.root / "server.key").chmod(0o600)  # a key others can read is refused, as ssh does
        server.cert_chain_pems[0].write_to_path(str(self.root / "server.pem"))

    @property
    def ca_file(self) -> Path:
        return self.root / "ca.pem"

    @property
    def other_ca_file(self) -> Path:
        return self.root / "other-ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.root / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.root / "server.key"

    def client(self, name: str, *, ca: trustme.CA | None = None, expired: bool = False) -> tuple[Path, Path]:
        """(cert, key) files of a client certificate with subject CN=<name>,OU=shop,O=Example."""
        kwargs = {}
        if expired:
            now = datetime.datetime.now(datetime.UTC)
            kwargs = {"not_before": now - datetime.timedelta(days=30), "not_after": now - datetime.timedelta(days=1)}
        issued = (ca or self.ca).issue_cert(f"{name}.example", common_name=name, organization_name="Example",
                                            organization_unit_name="shop", **kwargs)
        cert, key = self.root / f"{name}{'-expired' if expired else ''}.pem", self.root / f"{name}.key"
        issued.cert_chain_pems[0].write_to_path(str(cert))
        issued.private_key_pem.write_to_path(str(key))
        key.chmod(0o600)
        return cert, key

    def server_credentials(self, *, mtls: bool) -> grpc.ServerCredentials:
        pair = (self.server_key.read_bytes(), self.server_cert.read_bytes())
        if mtls:
            return grpc.ssl_server_credentials([pair], root_certificates=self.ca_file.read_bytes(),
                                               require_client_auth=True)
        return grpc.ssl_server_credentials([pair])


def subject(name: str) -> str:
    """The principal a certificate of ``Pki.client(name)`` authenticates as."""
    return f"User:CN={name},OU=shop,O=Example"


@dataclass
class Tokens:
    """Random tokens per name, written as the server's hashed token file and as clients' token files."""

    root: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def new(self, name: str) -> Path:
        self.tokens[name] = secrets.token_hex(16)
        path = self.root / f"{name}.token"
        path.write_text(self.tokens[name] + "\n")
        path.chmod(0o600)  # a token file others can read is refused
        return path

    def server_file(self, names: list[str] | None = None) -> Path:
        path = self.root / "tokens"
        lines = [f"{n} sha256:{hashlib.sha256(t.encode()).hexdigest()}" for n, t in self.tokens.items()
                 if names is None or n in names]
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)
        return path
