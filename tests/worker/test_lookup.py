"""worker.lookup.Route: the decisions both transports carry out to find a group's coordinator.

Pure: the answers are built by hand, as FindCoordinator and the group RPCs give them
(docs/sharding-protocol.md, "What a client does")."""

from __future__ import annotations

import pytest

from groupcoord import errors
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.lookup import Location, Route

A, B, C, L = "10.0.0.1:9400", "10.0.0.2:9400", "10.0.0.3:9400", "10.0.0.9:9400"


def at(address: str, *, shard: int = 3, epoch: int = 5) -> pb.CoordinatorLocation:
    return pb.CoordinatorLocation(group_id="g", address=address, shard=shard, epoch=epoch)


def refused(code: int) -> pb.CoordinatorLocation:
    return pb.CoordinatorLocation(group_id="g", shard=3, error=pb.Error(code=code, message="no"))


def found(bootstrap: tuple[str, ...] = (A, B), where: str = L) -> Route:
    route = Route(bootstrap)
    asked = route.ask_order()[0]
    assert route.answered(asked, at(where)) is True
    return route


def test_the_first_request_asks_the_bootstrap_list_and_goes_where_the_answer_says() -> None:
    route = Route((A, B))
    assert route.lookup_needed() and route.address == A
    assert route.ask_order() == [A, B] and route.lookups == 1
    assert route.answered(A, at(L)) is True
    assert route.address == L and route.location == Location(L, 3, 5)
    assert not route.lookup_needed()


def test_the_next_round_starts_at_the_bootstrap_address_that_answered_last() -> None:
    route = Route((A, B, C))
    route.ask_order()
    assert route.answered(B, at(L)) is True
    route.moved(None)  # L is gone
    assert route.lookup_needed() and route.ask_order() == [B, C, A] and route.lookups == 2


@pytest.mark.parametrize("failure", [None, errors.NotCoordinatorError("moved"),
                                     errors.CoordinatorNotAvailableError("stopping")])
def test_a_transport_error_a_bare_not_coordinator_or_not_available_asks_again(
        failure: errors.CoordinatorMovedError | None) -> None:
    route = found()
    assert route.moved(failure) is False  # the address stays until the lookup says otherwise
    assert route.lookup_needed()


def test_a_hint_is_followed_at_once_and_confirmed_with_find_coordinator_when_it_fails_too() -> None:
    route = found()
    assert route.moved(errors.NotCoordinatorError("moved", coordinator_hint=C), C) is True
    assert route.address == C and not route.lookup_needed()
    route.succeeded()  # C answered: the next move may follow a hint again
    assert route.moved(errors.NotCoordinatorError("moved", coordinator_hint=B), B) is True
    assert route.address == B and not route.lookup_needed()
    route.moved(errors.NotCoordinatorError("moved again", coordinator_hint=A), A)  # the hint failed
    assert route.address == B and route.lookup_needed()


def test_load_in_progress_retries_the_same_address_without_a_lookup() -> None:
    route = found()
    assert route.moved(errors.CoordinatorLoadInProgressError("loading"), "") is False
    assert route.address == L and not route.lookup_needed()


def test_a_shard_without_leader_everywhere_is_the_error_the_caller_raises() -> None:
    route = Route((A, B))
    route.ask_order()
    assert route.answered(A, refused(pb.COORDINATOR_NOT_AVAILABLE)) is False  # B may know better
    assert route.answered(B, refused(pb.COORDINATOR_NOT_AVAILABLE)) is False
    failure = route.round_failed([])
    assert isinstance(failure, errors.CoordinatorNotAvailableError) and "no" in str(failure)
    assert route.lookup_needed()  # asked again after the caller's backoff


def test_one_address_that_sees_no_leader_does_not_hide_the_leader_the_next_one_names() -> None:
    """A coordinator cut off from ZooKeeper answers "no leader" for the shards it lost, for as long
    as it is cut off; the worker asked it first (it answered last) and never asked the others, and
    its sessions ran out (the sharded cut-off test, once, on a loaded CI machine)."""
    route = found((A, B))
    route.moved(None)
    assert route.ask_order() == [A, B]
    assert route.answered(A, refused(pb.COORDINATOR_NOT_AVAILABLE)) is False
    assert route.answered(B, at(C, epoch=6)) is True
    assert route.location == Location(C, 3, 6) and not route.lookup_needed()


def test_a_group_the_caller_may_not_describe_is_asked_where_the_lookup_was_refused() -> None:
    route = Route((A, B))
    route.ask_order()
    assert route.answered(B, refused(pb.GROUP_AUTHORIZATION_FAILED)) is True  # its request's refusal says why
    assert route.address == B and not route.lookup_needed()


def test_a_lower_epoch_for_the_shard_is_a_stale_view_the_next_address_may_beat() -> None:
    route = found()
    route.moved(None)
    route.ask_order()
    assert route.answered(A, at(C, epoch=4)) is False  # A's watches lag: it still names the old leader
    assert route.answered(B, at(B, epoch=6)) is True
    assert route.location == Location(B, 3, 6)


def test_stale_views_only_are_still_used_rather_than_none() -> None:
    route = found()
    route.moved(None)
    route.ask_order()
    assert route.answered(A, at(C, epoch=4)) is False
    assert route.answered(B, at(B, epoch=3)) is False
    assert route.round_failed([]) is None and route.address == C  # the first stale answer


def test_no_answer_at_all_names_every_address_tried() -> None:
    route = Route((A, B))
    route.ask_order()
    failure = route.round_failed([f"{A}: UNAVAILABLE", f"{B}: DEADLINE_EXCEEDED"])
    assert isinstance(failure, errors.CoordinatorNotAvailableError)
    assert A in str(failure) and "DEADLINE_EXCEEDED" in str(failure)


def test_an_older_coordinator_without_find_coordinator_walks_the_list_as_before() -> None:
    route = Route((A, B, C))
    route.ask_order()
    route.lookup_unsupported(A)
    assert not route.lookup_needed() and route.address == A
    assert route.moved(None) is True and route.address == B  # transport error: the next address
    assert route.moved(errors.NotCoordinatorError("standby", coordinator_hint=L), L) is True and route.address == L
    assert route.moved(errors.NotCoordinatorError("standby"), "") is True and route.address == C
    assert not route.lookup_needed()


def test_a_bootstrap_address_that_reaches_the_coordinator_under_another_name_is_kept() -> None:
    proxy, real = "127.0.0.1:7000", "127.0.0.1:9400"
    route = Route((proxy,))
    route.ask_order()
    assert route.wants_identity(proxy, at(real))
    route.identified(proxy, real)  # DescribeCluster at the proxy: "I am 127.0.0.1:9400"
    assert route.answered(proxy, at(real)) is True and route.address == proxy
    assert not route.wants_identity(proxy, at(real))  # asked once
    route.moved(errors.NotCoordinatorError("moved", coordinator_hint=real), real)  # a hint naming it: still the proxy
    assert route.address == proxy


def test_a_coordinator_elsewhere_is_not_mistaken_for_the_bootstrap_one() -> None:
    route = Route((A,))
    route.ask_order()
    assert route.wants_identity(A, at(L))
    route.identified(A, A)  # A is itself, and leads nothing of ours
    assert route.answered(A, at(L)) is True and route.address == L


def test_a_wildcard_answer_is_reached_at_the_host_that_was_asked() -> None:
    route = Route(("coord.example:9400",))
    route.ask_order()
    assert not route.wants_identity("coord.example:9400", at("0.0.0.0:9400"))
    assert route.answered("coord.example:9400", at("0.0.0.0:9400")) is True
    assert route.address == "coord.example:9400"


def cluster_of(*addresses: str) -> pb.DescribeClusterResponse:
    return pb.DescribeClusterResponse(coordinators=[pb.ClusterCoordinator(address=a) for a in addresses])


def test_the_bootstrap_list_is_a_starting_point_the_cluster_answer_adds_the_rest() -> None:
    route = found((A, B), where=A)
    assert route.wants_cluster()
    route.learn(A, cluster_of(A, B, C))
    assert not route.wants_cluster()  # once a round
    assert route.known == (A, B, C)
    route.moved(None)  # A died
    assert route.ask_order() == [A, B, C] and route.wants_cluster()
    route.learn(B, cluster_of(B, C))  # a later answer replaces the view: A is gone, the bootstrap list stays
    assert route.known == (A, B, C)
    route.learn(C, cluster_of(C, L))
    assert route.known == (A, B, C, L)
    route.learn(C, cluster_of())  # an answer naming nobody teaches nothing
    assert route.known == (A, B, C, L)


def test_a_learned_coordinator_is_found_when_every_bootstrap_address_is_gone() -> None:
    route = found((A, B), where=A)
    route.learn(A, cluster_of(A, B, C))
    route.moved(None)
    order = route.ask_order()
    assert order == [A, B, C]
    assert route.answered(C, at(C)) is True and route.address == C
    route.moved(None)
    assert route.ask_order()[0] == C  # the one that answered last is asked first


def test_an_answer_naming_an_address_that_never_answered_sends_the_worker_back_to_the_others() -> None:
    route = found((A, B), where=L)  # A names L; L never answers
    route.moved(None)
    assert route.ask_order() == [A, B]
    assert route.answered(A, at(L)) is False  # A names L again: ask B before following it
    assert route.answered(B, at(B)) is True and route.address == B
    route.succeeded()
    route.moved(None)  # B fails too: L has still not answered, B is the same case now
    route.ask_order()
    assert route.answered(B, at(L)) is False and route.answered(A, at(L)) is False
    assert route.round_failed([]) is None and route.address == L  # no one names another: L again, once a round


def test_an_address_that_answers_again_is_followed_again() -> None:
    route = found((A, B), where=L)
    route.moved(None)
    route.ask_order()
    assert route.answered(A, at(L)) is False and route.answered(B, at(L)) is False
    assert route.round_failed([]) is None and route.address == L
    route.succeeded()  # L is back
    route.moved(errors.NotCoordinatorError("moved"))
    route.ask_order()
    assert route.answered(A, at(L)) is True
