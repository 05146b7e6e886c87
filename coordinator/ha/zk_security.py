"""How the coordinator authenticates to ZooKeeper and protects the znodes it creates.

- **TLS**: ``zk_tls_ca`` (and, for client certificates, ``zk_tls_cert`` + ``zk_tls_key``) turn on
  kazoo's ``use_ssl``; the server's certificate is verified against the CA.
- **Credentials**: ``zk_auth = "digest"`` or ``"sasl"`` with ``zk_credentials_file`` holding one line
  ``USER:PASSWORD``. Digest goes through kazoo's ``auth_data``; SASL (DIGEST-MD5) through
  ``sasl_options`` and needs the ``pure-sasl`` package.
- **ACLs**: with credentials, every znode the coordinator creates (group records, the election and
  epoch nodes, their parents) gets an ACL granting everything to that identity and nothing to
  anyone else (digest: ``make_digest_acl``; SASL: the ``sasl`` scheme), so other ZooKeeper clients
  can neither read nor rewrite group records. Every coordinator of a cluster must use the same
  identity. Znodes that already exist keep their ACLs (set them with ``zkCli.sh setAcl``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.security import make_acl, make_digest_acl

__all__ = ["ZkSecurity", "load_zk_security"]


@dataclass(frozen=True, kw_only=True)
class ZkSecurity:
    auth_scheme: str = ""  # "", "digest" or "sasl"
    username: str = ""
    password: str = ""
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None

    def __repr__(self) -> str:  # never the password, in logs or tracebacks
        return f"ZkSecurity(auth_scheme={self.auth_scheme!r}, username={self.username!r}, tls={self.tls_ca is not None})"

    def kazoo_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``KazooClient``."""
        kwargs: dict[str, Any] = {}
        if self.tls_ca is not None:
            kwargs.update(use_ssl=True, verify_certs=True, ca=str(self.tls_ca))
            if self.tls_cert is not None and self.tls_key is not None:
                kwargs.update(certfile=str(self.tls_cert), keyfile=str(self.tls_key))
        if self.auth_scheme == "digest":
            kwargs["auth_data"] = [("digest", f"{self.username}:{self.password}")]
            kwargs["default_acl"] = [make_digest_acl(self.username, self.password, all=True)]
        elif self.auth_scheme == "sasl":
            kwargs["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": self.username, "password": self.password}
            kwargs["default_acl"] = [make_acl("sasl", self.username, all=True)]
        return kwargs


def load_zk_security(
    *, auth: str, credentials_file: Path | None, tls_ca: Path | None, tls_cert: Path | None, tls_key: Path | None
) -> ZkSecurity:
    """Read the credentials file; ``ValueError`` with one line when something does not fit."""
    if auth not in ("", "digest", "sasl"):
        raise ValueError(f"zk_auth must be digest or sasl, not {auth!r}")
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("zk_tls_cert and zk_tls_key go together")
    if tls_cert is not None and tls_ca is None:
        raise ValueError("zk_tls_cert needs zk_tls_ca (the CA that signed ZooKeeper's certificate)")
    username = password = ""
    if auth:
        if credentials_file is None:
            raise ValueError(f"zk_auth = {auth!r} needs zk_credentials_file (one line USER:PASSWORD)")
        try:
            line = credentials_file.read_text(encoding="utf-8").strip()
        except OSError as error:
            raise ValueError(f"cannot read zk_credentials_file {credentials_file}: {error.strerror}") from None
        username, sep, password = line.partition(":")
        if not sep or not username or not password or "\n" in line:
            raise ValueError(f"zk_credentials_file {credentials_file}: expected one line USER:PASSWORD")
        if auth == "sasl" and importlib.util.find_spec("puresasl") is None:  # kazoo needs it for SASL
            raise ValueError("zk_auth = 'sasl' needs the pure-sasl package (pip install pure-sasl)")
    elif credentials_file is not None:
        raise ValueError("zk_credentials_file needs zk_auth = 'digest' or 'sasl'")
    return ZkSecurity(auth_scheme=auth, username=username, password=password, tls_ca=tls_ca, tls_cert=tls_cert,
                      tls_key=tls_key)
