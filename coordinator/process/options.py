"""``groupcoord serve``'s options: the ``[server]`` and ``[coordinator]`` tables of a config file
with the flags over them, checked together (``ServeOptions.from_args``).

Config file (TOML)::

    [server]
    listen = "127.0.0.1:9400"
    data_dir = "groupcoord-data"
    store = "sqlite"            # sqlite | memory | zookeeper
    zk = "127.0.0.1:2181"       # for store = "zookeeper"
    advertise = "127.0.0.1:9400"
    zk_root = "/groupcoord/default"
    zk_session_timeout_s = 10
    sharded = false             # with store = "zookeeper": spread groups over every coordinator by shard
    shards = 64                 # sharded: the cluster's shard count (fixed at its first start)
    snapshots = "/mnt/shared/snapshot"   # pick up load snapshots written here (optional)
    snapshot_poll_s = 10
    sample_retention_s = 604800          # drop sample files older than this (default 7 days; 0: keep)
    sample_retention_bytes = 10737418240 # and the oldest beyond this total (default 10 GiB; 0: no limit)
    tls_cert = "server.pem"              # TLS for every service (with tls_key); beyond loopback, always
    tls_key = "server.key"
    tls_client_ca = "ca.pem"             # mTLS: the certificate subject is the principal
    token_file = "tokens"                # or bearer tokens, hashed (coordinator.auth.tokens); SIGHUP reloads
    acl_file = "acls.toml"               # per-group ACLs (coordinator.auth.acl); SIGHUP reloads
    zk_auth = "digest"                   # ZooKeeper credentials and znode ACLs (coordinator.ha.zk_security)
    zk_credentials_file = "zk.creds"
    zk_tls_ca = "zk-ca.pem"
    metrics_listen = "127.0.0.1:9401"    # serve Prometheus metrics at http://HOST:PORT/metrics (default: off)
    metrics_group_labels = true          # false: no per-group series (a scraper learns no group names)
    metrics_tls = false                  # true: /metrics over HTTPS with tls_cert/tls_key (tls_client_ca: mTLS)
    metrics_token_file = "metrics.tokens"  # scrapers send a bearer token listed here ('NAME sha256:HEX' lines)
    log_format = "text"                  # text | json (one JSON object per line)

    [coordinator]               # any CoordinatorConfig field
    group_initial_rebalance_delay_ms = 3000

Flags override the file. Problems are ``ValueError`` with one readable line.
"""

from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupcoord.coordinator.auth.tls import is_loopback
from groupcoord.coordinator.config import ConfigError, CoordinatorConfig
from groupcoord.loadstats.sample_log import DEFAULT_RETENTION_BYTES, DEFAULT_RETENTION_S

__all__ = ["MAX_SHARDS", "ServeOptions"]

#: Most shards a cluster may have: each coordinator reads every shard's leader node when the cluster
#: changes, so this bounds one look at ZooKeeper (Kafka's __consumer_offsets has 50 partitions).
MAX_SHARDS = 1024
# files the security options name (paths, never their contents; ``--print-config`` shows the paths)
_PATH_KEYS = (
    "tls_cert", "tls_key", "tls_client_ca", "token_file", "acl_file", "metrics_token_file",
    "zk_credentials_file", "zk_tls_ca", "zk_tls_cert", "zk_tls_key",
)
_SERVER_KEYS = {
    "listen", "data_dir", "store", "zk", "advertise", "zk_root", "zk_session_timeout_s", "snapshots", "snapshot_poll_s",
    "sharded", "shards",
    "sample_retention_s", "sample_retention_bytes", "metrics_listen", "log_format", "zk_auth", *_PATH_KEYS,
    "metrics_group_labels", "metrics_tls", "zk_trust_existing", "metrics_public",
}


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """``groupcoord serve``'s options: the ``[server]`` table of the config file (flags override it) and
    the ``[coordinator]`` table. The attribute docstrings are the help of the generated config reference."""

    listen: str = "127.0.0.1:9400"
    """HOST:PORT the gRPC server listens on (coordinator, admin, health and reflection services)."""
    data_dir: Path = Path("groupcoord-data")
    """Where the SQLite group database and the load sample log live (created 0700)."""
    store: str = "sqlite"
    """Group store: sqlite (one coordinator), memory (nothing survives a restart) or zookeeper (HA)."""
    zk: str = ""
    """ZooKeeper HOST:PORT[,HOST:PORT...], for store = "zookeeper"."""
    advertise: str = ""
    """HOST:PORT other coordinators and workers reach this one at (told to clients by NOT_COORDINATOR)."""
    zk_root: str = "/groupcoord/default"
    """The znode under which this cluster keeps its election and groups."""
    zk_session_timeout_s: float = 10.0
    """ZooKeeper session timeout: a coordinator that loses its session loses office (seconds)."""
    sharded: bool = False
    """With store = "zookeeper": spread the groups over every coordinator of the cluster by shard (each shard
    elected and fenced on its own); false: active/standby, one coordinator holds every group."""
    shards: int = 64
    """Sharded: the cluster's number of shards, written to ZooKeeper at its first start; setting it implies
    ``sharded``. A coordinator configured with another number refuses to start."""
    snapshots: str = ""
    """A load snapshot path to watch (the --out of ``groupcoord stats``); "" = none, snapshots then
    arrive by PublishLoadSnapshot."""
    snapshot_poll_s: float = 10.0
    """How often to look at ``snapshots`` for a new snapshot (seconds)."""
    sample_retention_s: float = DEFAULT_RETENTION_S
    """Sample log files older than this are deleted (seconds; 0: no age limit)."""
    sample_retention_bytes: int = DEFAULT_RETENTION_BYTES
    """The oldest sample log files beyond this total are deleted (bytes; 0: no size limit)."""
    tls_cert: Path | None = None
    """PEM server certificate: turns TLS on for every service of the port (with ``tls_key``)."""
    tls_key: Path | None = None
    """PEM private key of ``tls_cert``."""
    tls_client_ca: Path | None = None
    """PEM CA: clients must present a certificate it signed (mTLS); its subject is their principal."""
    token_file: Path | None = None
    """Bearer tokens, one ``NAME sha256:HEX`` line each (coordinator.auth.tokens); reloaded on SIGHUP."""
    acl_file: Path | None = None
    """Per-group ACLs, TOML (coordinator.auth.acl); reloaded on SIGHUP; none: every principal may do everything."""
    zk_auth: str = ""
    """Authenticate to ZooKeeper and put ACLs on the znodes: "digest" or "sasl" ("" = none;
    coordinator.ha.zk_security)."""
    zk_credentials_file: Path | None = None
    """One line USER:PASSWORD, for ``zk_auth``."""
    zk_tls_ca: Path | None = None
    """TLS to ZooKeeper: the PEM CA of its certificate."""
    zk_tls_cert: Path | None = None
    """PEM client certificate for ZooKeeper (with ``zk_tls_key``)."""
    zk_tls_key: Path | None = None
    """PEM private key of ``zk_tls_cert``."""
    metrics_listen: str = ""
    """HOST:PORT of the Prometheus endpoint, http://HOST:PORT/metrics ("" = off)."""
    zk_trust_existing: bool = False
    """Start even if znodes under ``zk_root`` may be changed by others than the ``zk_auth`` identity
    (coordinator.ha.zk_trust); without it such a znode stops the start with one line naming it."""
    metrics_group_labels: bool = True
    """Per-group series (group names, member counts, generations); false for a coordinator whose metrics
    are scraped by someone who may not learn every tenant's group names."""
    metrics_tls: bool = False
    """Serve /metrics over HTTPS with ``tls_cert``/``tls_key`` (with ``tls_client_ca``: scrapers need a certificate)."""
    metrics_public: bool = False
    """Serve /metrics beyond loopback to anyone who can reach it. Without it, a ``metrics_listen`` that is
    not a loopback address needs a scraper credential (``metrics_token_file``, or ``metrics_tls`` with
    ``tls_client_ca``) or ``serve`` refuses to start: the metrics name every tenant's groups."""
    metrics_token_file: Path | None = None
    """Scrapers of /metrics must send ``Authorization: Bearer TOKEN`` with a token listed here (the token
    file's format, ``NAME sha256:HEX`` lines; read at start). Others get 401."""
    log_format: str = "text"
    """text, or json: one JSON object per line."""
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    """The ``[coordinator]`` table: the group protocol's settings and bounds."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeOptions:
        """The options of the config file (``--config``) with the flags over it; ``ValueError``: one line."""
        server, coordinator = _read_config(args.config) if args.config else ({}, {})
        for key in ("listen", "data_dir", "store", "zk", "advertise", "zk_root", "zk_trust_existing", "metrics_public",
                    "zk_session_timeout_s", "sharded", "shards", "snapshots", "snapshot_poll_s",
                    "sample_retention_s", "sample_retention_bytes", "metrics_listen", "log_format", "zk_auth",
                    *_PATH_KEYS):
            value = getattr(args, key, None)
            if value is not None:
                server[key] = value
        if getattr(args, "initial_rebalance_delay_ms", None) is not None:
            coordinator["group_initial_rebalance_delay_ms"] = args.initial_rebalance_delay_ms
        try:
            config = CoordinatorConfig.from_mapping(coordinator)
        except ConfigError as error:
            raise ValueError(str(error)) from None
        paths: dict[str, Any] = {key: _path(key, server.get(key)) for key in _PATH_KEYS}
        _check_security(paths)
        flags: dict[str, Any] = _switches(server, paths)
        metrics_listen = _host_port(server, "metrics_listen", "", "--metrics-listen") if server.get(
            "metrics_listen") else ""
        _check_metrics_exposure(metrics_listen, paths, flags)
        return cls(
            listen=_host_port(server, "listen", cls.listen, "--listen"),
            data_dir=Path(server.get("data_dir", "groupcoord-data")),
            zk=str(server.get("zk", "")),
            advertise=str(server.get("advertise", "")),
            zk_root=_zk_root(server.get("zk_root", cls.zk_root)),
            snapshots=str(server.get("snapshots", "")),
            zk_auth=str(server.get("zk_auth", "")),
            metrics_listen=metrics_listen,
            log_format=_log_format(server.get("log_format", cls.log_format)),
            coordinator=config,
            **_store_and_shards(server, cls.shards),
            **_durations(server),
            **flags,
            **paths,
        )


def _read_config(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``[server]`` and ``[coordinator]`` tables of the TOML file at ``path`` (unknown ones refused)."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as error:
        raise ValueError(f"cannot read config file {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"config file {path} is not valid TOML: {error}") from None
    unknown_sections = sorted(set(document) - {"server", "coordinator"})
    if unknown_sections:
        raise ValueError(f"config file {path}: unknown section(s) {', '.join(unknown_sections)}")
    server = dict(document.get("server", {}))
    unknown = sorted(set(server) - _SERVER_KEYS)
    if unknown:
        raise ValueError(f"config file {path}: unknown [server] key(s) {', '.join(unknown)}")
    return server, dict(document.get("coordinator", {}))


def _store_and_shards(server: dict[str, Any], default_shards: int) -> dict[str, Any]:
    """``store``, ``sharded`` and ``shards``, checked together (sharding needs ZooKeeper)."""
    store = server.get("store", "sqlite")
    if store not in ("sqlite", "memory", "zookeeper"):
        raise ValueError(f"store must be sqlite, memory or zookeeper, not {store!r}")
    if store == "zookeeper" and not server.get("zk"):
        raise ValueError("--store zookeeper needs --zk HOST:PORT[,...]")
    shards = server.get("shards", default_shards)
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be a whole number from 1 to {MAX_SHARDS}, not {shards!r}")
    sharded = server.get("sharded", "shards" in server)
    if not isinstance(sharded, bool):
        raise ValueError(f"sharded must be true or false, not {sharded!r}")  # noqa: TRY004 - a config error: exit 2
    if sharded and store != "zookeeper":
        raise ValueError("a sharded cluster keeps its groups in ZooKeeper: add --store zookeeper --zk HOST:PORT")
    return {"store": store, "sharded": sharded, "shards": shards}


def _positive_s(server: dict[str, Any], key: str) -> float:
    try:
        value = float(server.get(key, getattr(ServeOptions, key)))
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number, not {server.get(key)!r}") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"{key} must be > 0, not {value}")
    return value


def _durations(server: dict[str, Any]) -> dict[str, Any]:
    """The session and poll intervals (> 0) and the sample log's retention (>= 0; 0: no limit)."""
    try:
        retention_s = float(server.get("sample_retention_s", ServeOptions.sample_retention_s))
        retention_bytes = int(server.get("sample_retention_bytes", ServeOptions.sample_retention_bytes))
    except (TypeError, ValueError):
        raise ValueError("sample_retention_s and sample_retention_bytes must be numbers") from None
    if not (0 <= retention_s < float("inf") and retention_bytes >= 0):
        raise ValueError("sample_retention_s and sample_retention_bytes must be >= 0 (0: no limit)")
    return {"zk_session_timeout_s": _positive_s(server, "zk_session_timeout_s"),
            "snapshot_poll_s": _positive_s(server, "snapshot_poll_s"),
            "sample_retention_s": retention_s, "sample_retention_bytes": retention_bytes}


def _host_port(server: dict[str, Any], key: str, default: str, flag: str) -> str:
    """``HOST:PORT`` with a port from 0 to 65535 (0: any free port); a wrapped port is never bound."""
    value = str(server.get(key, default))
    _host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{flag} {value!r} is not HOST:PORT with a port from 0 to 65535")
    return value


def _switches(server: dict[str, Any], paths: dict[str, Path | None]) -> dict[str, bool]:
    flags = {key: server.get(key, getattr(ServeOptions, key))
             for key in ("metrics_group_labels", "metrics_tls", "zk_trust_existing", "metrics_public")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false, not {str(value)[:40]!r}")  # noqa: TRY004 - a config error: one line, exit 2
    if flags["metrics_tls"] and paths["tls_cert"] is None:
        raise ValueError("metrics_tls needs tls_cert and tls_key")
    return flags


def _zk_root(value: Any) -> str:
    zk_root = str(value)
    if not zk_root.startswith("/") or zk_root.endswith("/") or "//" in zk_root or not zk_root.isprintable():
        raise ValueError(f"zk_root must be an absolute znode path like /groupcoord/default, not {zk_root[:80]!r}")
    return zk_root


def _log_format(value: Any) -> str:
    if value not in ("text", "json"):
        raise ValueError(f"log_format must be text or json, not {value!r}")
    return str(value)


def _path(key: str, value: Any) -> Path | None:
    if value is None or value == "":
        return None
    if not isinstance(value, (str, Path)):
        raise ValueError(f"{key} must be a file path, not {value!r}")  # noqa: TRY004 - a config error: exit 2
    return Path(value)


def _check_metrics_exposure(metrics_listen: str, paths: dict[str, Path | None], flags: dict[str, bool]) -> None:
    """/metrics beyond loopback needs a scraper credential, or the operator's explicit ``metrics_public``:
    it names every tenant's groups (issue 38: served to anyone unless a token file was given)."""
    host = metrics_listen.rpartition(":")[0].strip("[]")
    credential = paths["metrics_token_file"] is not None or (flags["metrics_tls"] and paths["tls_client_ca"] is not None)
    if metrics_listen and not is_loopback(host) and not credential and not flags["metrics_public"]:
        raise ValueError(f"metrics on {metrics_listen} would be open to anyone who can reach it: give "
                         f"metrics_token_file (--metrics-token-file), use a loopback address, or set "
                         f"metrics_public = true (--metrics-public) to serve them so")


def _check_security(paths: dict[str, Path | None]) -> None:
    """Relations between the TLS and token options (the files themselves are read at start-up)."""
    if (paths["tls_cert"] is None) != (paths["tls_key"] is None):
        raise ValueError("--tls-cert and --tls-key go together")
    if paths["tls_client_ca"] is not None and paths["tls_cert"] is None:
        raise ValueError("--tls-client-ca (mTLS) needs --tls-cert and --tls-key")
    if paths["tls_client_ca"] is not None and paths["token_file"] is not None:
        raise ValueError("choose one way to authenticate clients: --tls-client-ca (certificates) or --token-file")
