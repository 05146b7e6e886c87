"""``groupcoord serve``: options from flags and a config file, store choice, start-up, shutdown.

One start-up path for the memory, SQLite and ZooKeeper stores (``run_coordinator``).

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
import asyncio
import logging
import os
import signal
import stat
import sys
import tomllib
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from groupcoord.addresses import unreachable_by_tcp
from groupcoord.coordinator.auth.files import PolicyFileError, load_policy, load_tokens
from groupcoord.coordinator.auth.guard import Guard
from groupcoord.coordinator.auth.prefix_owner import accounts_of
from groupcoord.coordinator.auth.tls import is_loopback, server_credentials
from groupcoord.coordinator.config import ConfigError, CoordinatorConfig
from groupcoord.coordinator.ha.elected_office import ElectedOffice
from groupcoord.coordinator.ha.election import LeaderElection, connect
from groupcoord.coordinator.ha.shard_election import ShardElections, ensure_cluster
from groupcoord.coordinator.ha.zk_rights import check_rights
from groupcoord.coordinator.ha.zk_security import load_zk_security
from groupcoord.coordinator.ha.zk_store import ZooKeeperStore
from groupcoord.coordinator.ha.zk_trust import check_znodes, own_identity
from groupcoord.coordinator.process import stderr_relay
from groupcoord.coordinator.process.load_reports import sample_sink
from groupcoord.coordinator.process.process_tuning import tune_process
from groupcoord.coordinator.process.snapshot_watch import watch_snapshots
from groupcoord.coordinator.rpc.server import RunningServer, serve_forever
from groupcoord.coordinator.runtime.metrics import MetricsEndpoint, MetricsTls, serve_metrics
from groupcoord.coordinator.runtime.office import Office
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime, SampleSink
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.storage.store import GroupStore, MemoryStore, StoreError
from groupcoord.loadstats.sample_log import DEFAULT_RETENTION_BYTES, DEFAULT_RETENTION_S, SampleLog

__all__ = ["ServeOptions", "run_coordinator"]

log = logging.getLogger("groupcoord.serve")
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


def tighten_data_dir(data_dir: Path) -> None:
    """An existing data directory others can enter (0755 from an older version or a careless mkdir),
    and files in it others can read (groups.db and its WAL at 0644), are made the operator's only
    (0700, 0600), with one line saying what changed: they hold every group's record and every
    worker's load reports. What cannot be changed (owned by someone else) is left, with a warning."""
    said, failed = [], []
    files = [p for p in sorted(data_dir.iterdir()) if p.is_file() and not p.is_symlink()]
    for path, most in [(data_dir, 0o700), *((p, 0o600) for p in files)]:
        mode = stat.S_IMODE(path.stat().st_mode)
        if not mode & 0o077:
            continue
        try:
            path.chmod(mode & most)
        except OSError as error:
            failed.append(f"{path} ({mode:04o}: {error.strerror})")
            continue
        said.append(f"was mode {mode:04o}: tightened to {mode & most:04o}" if path == data_dir
                    else f"{path.name} {mode:04o} -> {mode & most:04o}")
    if failed:
        print(f"groupcoord serve: WARNING: others may read group records and load reports, and these cannot be "
              f"tightened: {', '.join(failed)}", file=sys.stderr, flush=True)
    if said:
        print(f"groupcoord serve: data directory {data_dir} {'; '.join(said)} (group records and load reports "
              f"are the operator's only)", file=sys.stderr, flush=True)


def run_coordinator(options: ServeOptions) -> int:
    """Run until SIGINT/SIGTERM; returns the exit status. One path for every store: the store and
    the office differ (ZooKeeper brings an election), the runtime and the server do not."""
    tune_process()  # GIL switch interval, malloc arenas (coordinator.process.process_tuning)
    try:
        options.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # group records and load samples
    except OSError as error:
        raise ValueError(f"cannot create data directory {options.data_dir}: {error.strerror}") from None
    if not os.access(options.data_dir, os.W_OK):
        raise ValueError(f"data directory {options.data_dir} is not writable")
    credentials = None
    if options.tls_cert is not None and options.tls_key is not None:
        credentials = server_credentials(options.tls_cert, options.tls_key, options.tls_client_ca)
    try:
        policy = load_policy(mtls=options.tls_client_ca is not None, token_file=options.token_file,
                             acl_file=options.acl_file)
    except PolicyFileError as error:
        raise ValueError(str(error)) from None
    host = options.listen.rpartition(":")[0]
    if credentials is None and not is_loopback(host):
        print(f"groupcoord serve: WARNING: listening on {options.listen} without TLS: anyone who can reach it can "
              f"read and change every group (use --tls-cert/--tls-key)", file=sys.stderr, flush=True)
    with ExitStack() as resources:
        backing = _open_backing(options, resources)
        tighten_data_dir(options.data_dir)  # once the start can go on (a refused start says one line only)
        samples = SampleLog(options.data_dir / "samples", retention_s=options.sample_retention_s or None,
                            retention_bytes=options.sample_retention_bytes or None)
        resources.callback(samples.close)
        guard: Guard | None = None
        if policy.enabled:  # its owner lookups go to the router built next, in the group's shard
            guard = Guard(policy, owner_of=lambda *member: router.member_principal(*member))
        router = _router(options, backing, sample_sink(samples), guard)
        relay = stderr_relay.current()
        if relay is not None:  # `groupcoord serve` reads its own stderr: count what it finds there
            relay.count_in(router.metrics.registry)
        try:
            asyncio.run(_serve(router, options, backing, credentials, guard))
        except OSError as error:
            raise ValueError(f"cannot serve on {options.listen}: {error}") from None
    return 0


def _router(options: ServeOptions, backing: _Backing, on_load_report: SampleSink,
            guard: Guard | None) -> ShardRouter:
    """Every shard's runtime (one, unsharded), built with what it needs: quotas count against the
    principal administering a group's name when a guard is on."""
    account_of = accounts_of(guard) if guard is not None else None
    if backing.shards is not None:
        elections = backing.shards
        stores: list[GroupStore] = [ZooKeeperStore(backing.client, elections.groups_path(s), elections.fencer(s))
                                    for s in range(elections.shards)]
        return ShardRouter.build(elections.offices, stores, view=elections, config=options.coordinator,
                                 on_load_report=on_load_report, account_of=account_of)
    return ShardRouter([CoordinatorRuntime(options.coordinator, store=backing.store, office=backing.office,
                                           on_load_report=on_load_report, account_of=account_of)])


@dataclass
class _Backing:
    """Where groups are kept, and who decides whether this process is the active coordinator."""

    store: GroupStore
    office: Office | None = None  # None: standalone
    election: LeaderElection | None = None  # ZooKeeper: started once the server knows its address
    shards: ShardElections | None = None  # sharded: every shard's election, started likewise
    client: Any = None  # the kazoo client (ZooKeeper modes)


def _open_backing(options: ServeOptions, resources: ExitStack) -> _Backing:
    if options.store == "memory":
        return _Backing(MemoryStore())
    if options.store == "sqlite":
        path = options.data_dir / "groups.db"
        try:
            if not path.exists():  # the operator's only from the start (SQLite gives its WAL the same mode)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            store = SqliteStore(path)
        except (StoreError, OSError) as error:
            raise ValueError(str(error)) from None
        resources.callback(store.close)
        return _Backing(store)
    security = load_zk_security(auth=options.zk_auth, credentials_file=options.zk_credentials_file,
                                tls_ca=options.zk_tls_ca, tls_cert=options.zk_tls_cert, tls_key=options.zk_tls_key)
    zk_hosts = [h if ":" in h else f"{h}:2181" for h in options.zk.split("/", 1)[0].split(",") if h]
    down = unreachable_by_tcp(zk_hosts)
    if len(down) == len(zk_hosts):  # none takes a connection: say why now, not kazoo's time-out 15 s later
        raise ValueError("cannot reach ZooKeeper: " + ", ".join(f"{h} ({why})" for h, why in down.items()))
    try:
        client = connect(options.zk, session_timeout=options.zk_session_timeout_s, security=security)
    except Exception as error:  # noqa: BLE001 - kazoo raises its own timeout types
        raise ValueError(f"cannot reach ZooKeeper at {options.zk}: {error}") from None
    resources.callback(client.close)
    resources.callback(client.stop)
    own = own_identity(security)
    rights = check_rights(client, options.zk_root, {("world", "anyone"), *([own] if own else [])},
                          options.shards if options.sharded else None)
    if rights is not None:
        raise ValueError(rights)
    if own is None:
        print(f"groupcoord serve: WARNING: ZooKeeper without --zk-auth: any client of {options.zk} can read and "
              f"change the group records under {options.zk_root}", file=sys.stderr, flush=True)
    elif not options.zk_trust_existing:
        problem = check_znodes(client, options.zk_root, own)
        if problem is not None:
            raise ValueError(problem)
    if options.sharded:
        try:
            ensure_cluster(client, options.zk_root, options.shards)
        except ValueError:
            raise
        except Exception as error:  # noqa: BLE001 - kazoo's own errors (ACLs, connection)
            raise ValueError(f"cannot read the cluster record under {options.zk_root} in ZooKeeper: {error!r}") from None
        elections = ShardElections(client, options.zk_root, options.advertise or options.listen, options.shards,
                                   session_timeout=options.zk_session_timeout_s)
        return _Backing(MemoryStore(), shards=elections, client=client)
    office = ElectedOffice()
    election = LeaderElection(client, f"{options.zk_root}/election", options.advertise or options.listen,
                              on_elected=office.on_elected, on_lost=office.on_lost,
                              session_timeout=options.zk_session_timeout_s)
    office.bind(election)
    return _Backing(ZooKeeperStore(client, f"{options.zk_root}/groups", election), office, election, client=client)


async def _serve(router: ShardRouter, options: ServeOptions, backing: _Backing,
                 credentials: grpc.ServerCredentials | None = None, guard: Guard | None = None) -> None:
    election: LeaderElection | ShardElections | None = backing.election or backing.shards
    if options.advertise:
        router.advertised = options.advertise  # FindCoordinator's answer; else the listen address
    if guard is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, lambda: _reload(guard, options))
    if election is None:
        # Load right before serving: restored sessions and join timers start now, not at some
        # earlier point of a slow start-up.
        router.load()

    def started(running: RunningServer) -> None:
        host = options.listen.rpartition(":")[0]
        if election is None:
            print(f"groupcoord coordinator listening on {host}:{running.port} (store {options.store}, "
                  f"data dir {options.data_dir}, {len(running.runtime.groups)} group(s) loaded)",
                  file=sys.stderr, flush=True)
            return
        advertise = options.advertise or f"{host}:{running.port}"
        running.router.advertised = advertise
        if isinstance(election, ShardElections):
            print(f"groupcoord coordinator listening on {advertise} (ZooKeeper {options.zk}{options.zk_root}, "
                  f"sharded: {election.shards} shards, taking its share)", file=sys.stderr, flush=True)
        else:
            print(f"groupcoord coordinator listening on {advertise} (ZooKeeper {options.zk}, standby until elected)",
                  file=sys.stderr, flush=True)
        election.start(advertise)

    metrics = start_metrics(router, options)
    watching = start_snapshot_watch(router, options)
    try:
        await serve_forever(router, options.listen, on_started=started, credentials=credentials,
                            interceptors=[guard] if guard is not None else None)
    finally:
        if watching is not None:
            watching.cancel()
        if metrics is not None:
            metrics.close()
        if election is not None:
            await asyncio.get_running_loop().run_in_executor(None, election.stop)


def _reload(guard: Guard, options: ServeOptions) -> None:
    """SIGHUP: read the token and ACL files again; a broken file keeps the policy in force."""
    try:
        policy = load_policy(mtls=guard.policy.mtls, token_file=options.token_file, acl_file=options.acl_file)
    except PolicyFileError as error:
        log.error("reload failed, the policy in force stays: %s", error)
        print(f"groupcoord serve: reload failed, the policy in force stays: {error}", file=sys.stderr, flush=True)
        return
    guard.policy = policy
    tokens = "-" if policy.tokens is None else str(len(policy.tokens))
    acls = "-" if policy.acls is None else str(len(policy.acls.entries))
    log.info("reloaded: %s token(s), %s ACL entries", tokens, acls)
    print(f"groupcoord serve: reloaded: {tokens} token(s), {acls} ACL entries", file=sys.stderr, flush=True)
def start_metrics(router: ShardRouter, options: ServeOptions) -> MetricsEndpoint | None:
    """With ``--metrics-listen``: the runtime's registry over HTTP, on a thread of its own."""
    if not options.metrics_listen:
        return None
    router.metrics.attach(asyncio.get_running_loop())  # scrapes read the groups on this loop, from the start
    router.metrics.group_labels = options.metrics_group_labels
    tls = None
    if options.metrics_tls and options.tls_cert is not None and options.tls_key is not None:
        tls = MetricsTls(cert=str(options.tls_cert), key=str(options.tls_key),
                         client_ca=str(options.tls_client_ca) if options.tls_client_ca is not None else "")
    authorized = None
    if options.metrics_token_file is not None:
        scrapers = load_tokens(options.metrics_token_file, what="metrics token file")  # PolicyFileError: one line

        def authorized(token: str) -> bool:
            return scrapers.principal_for(token) is not None
    try:
        endpoint = serve_metrics(router.metrics.registry, options.metrics_listen, tls=tls, authorized=authorized)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot serve metrics on {options.metrics_listen}: {error}") from None
    host = options.metrics_listen.rpartition(":")[0]
    if tls is None and not is_loopback(host.strip("[]")):
        if authorized is not None:
            risk = "scrapers' bearer tokens cross the network in clear"
        else:
            risk = "anyone who can reach it reads " + ("every group's name, member count and generation"
                                                       if options.metrics_group_labels else "group counts and request figures")
        print(f"groupcoord serve: WARNING: metrics on {options.metrics_listen} over plain HTTP: {risk} (use a "
              "loopback address, metrics_tls = true, metrics_token_file, or metrics_group_labels = false)",
              file=sys.stderr, flush=True)
    scheme = "https" if tls is not None else "http"
    print(f"groupcoord metrics on {scheme}://{host}:{endpoint.port}/metrics", file=sys.stderr, flush=True)
    return endpoint


def start_snapshot_watch(router: ShardRouter, options: ServeOptions) -> asyncio.Task[None] | None:
    """With ``--snapshots``: poll that path on the running loop (see ``coordinator.process.snapshot_watch``)."""
    if not options.snapshots:
        return None
    return asyncio.get_running_loop().create_task(
        watch_snapshots(router, options.snapshots, options.snapshot_poll_s), name="snapshot-watch"
    )
