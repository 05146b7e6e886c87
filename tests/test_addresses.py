"""Coordinator addresses: the learnt set of coordinators a client may ask, and the one-line reasons."""

from __future__ import annotations

import socket

import grpc

from groupcoord.addresses import KnownCoordinators, unreachable_by_tcp, unresolved_hosts
from groupcoord.channels import failure_reason


def test_the_bootstrap_list_comes_first_and_describe_cluster_replaces_what_was_learnt() -> None:
    known = KnownCoordinators(["a:1", "b:1"])
    known.learn(["c:1", "a:1", ""], every_live=False)  # FindCoordinator: c is a live one
    assert known.candidates() == ["a:1", "b:1", "c:1"]
    known.learn(["d:1"], every_live=False)
    assert known.learnt == ("c:1", "a:1", "d:1")
    known.learn(["e:1", "b:1"], every_live=True)  # DescribeCluster: every live coordinator, c and d are gone
    assert known.candidates() == ["a:1", "b:1", "e:1"]  # the bootstrap list is kept: it may come back


def test_reasons_in_a_few_words() -> None:
    unavailable = grpc.StatusCode.UNAVAILABLE
    assert failure_reason(unavailable, "ipv4:127.0.0.1:9: Failed to connect to remote host: Connection refused") \
        == "connection refused"
    assert failure_reason(unavailable, "errors resolving x.invalid:1: Domain name not found") == "name not resolved"
    assert failure_reason(unavailable, "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: "
                                       "error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER") \
        == "TLS handshake failed (WRONG_VERSION_NUMBER)"
    assert failure_reason(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") == "timed out"
    assert failure_reason(unavailable, "something else") == "unavailable: something else"


def test_tcp_and_name_checks_on_loopback() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        open_address = f"127.0.0.1:{listening.getsockname()[1]}"
        assert unreachable_by_tcp([address, open_address]) == {address: "connection refused"}
    assert unresolved_hosts(["localhost:1", "no-such-host.invalid:1"]).keys() == {"no-such-host.invalid:1"}
