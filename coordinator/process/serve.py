"""``groupcoord serve``: store choice, start-up and shutdown, from its options
(``coordinator.process.options.ServeOptions``: the config file and the flags over it).

One start-up path for the memory, SQLite and ZooKeeper stores (``run_coordinator``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import stat
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from groupcoord.addresses import unreachable_by_tcp
from groupcoord.coordinator.auth.files import PolicyFileError, load_policy, load_tokens
from groupcoord.coordinator.auth.guard import Guard
from groupcoord.coordinator.auth.prefix_owner import accounts_of
from groupcoord.coordinator.auth.tls import is_loopback, server_credentials
from groupcoord.coordinator.ha.elected_office import ElectedOffice
from groupcoord.coordinator.ha.election import LeaderElection, connect
from groupcoord.coordinator.ha.shard_election import ShardElections, ensure_cluster
from groupcoord.coordinator.ha.zk_rights import check_rights
from groupcoord.coordinator.ha.zk_security import load_zk_security
from groupcoord.coordinator.ha.zk_store import ZooKeeperStore
from groupcoord.coordinator.ha.zk_trust import check_znodes, own_identity
from groupcoord.coordinator.process import stderr_relay
from groupcoord.coordinator.process.load_reports import sample_sink
from groupcoord.coordinator.process.options import ServeOptions
from groupcoord.coordinator.process.process_tuning import tune_process
from groupcoord.coordinator.process.snapshot_watch import watch_snapshots
from groupcoord.coordinator.rpc.server import RunningServer, serve_forever
from groupcoord.coordinator.runtime.metrics import MetricsEndpoint, MetricsTls, serve_metrics
from groupcoord.coordinator.runtime.office import Office
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime, SampleSink
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.storage.store import GroupStore, MemoryStore, StoreError
from groupcoord.loadstats.sample_log import SampleLog

__all__ = ["ServeOptions", "run_coordinator"]
log = logging.getLogger("groupcoord.serve")


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
