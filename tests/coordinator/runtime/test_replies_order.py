"""A group's answers leave the runtime in the model's order, a completed one (the leader's JoinGroup answer,
built on a checker thread) included, and the ones behind it go out a few hundred per turn of a real event
loop, so the streams' readers and writers run between them (one member joining 10,000)."""

from __future__ import annotations

import asyncio

from groupcoord.coordinator.model.effects import Reply
from groupcoord.coordinator.runtime.checkers import CheckerPool
from groupcoord.coordinator.runtime.replies import RELEASE_PER_TURN, Replies
from groupcoord.v1 import groupcoord_pb2 as pb

FOLLOWERS = 3 * RELEASE_PER_TURN + 7


def _answered_in_turns(sent: list[tuple[str, bool]]) -> tuple[list[int], dict[int, int], list[int]]:
    """Replies delivered in the order of ``sent`` (group, completed off the loop): the order of the answers
    (by token, from 1), the loop turn each came in, and the completions that ran before their answer."""
    order: list[int] = []
    turn_of: dict[int, int] = {}
    completed_first: list[int] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        checkers = CheckerPool()
        replies = Replies(checkers)
        replies.attach(loop)
        turns = 0
        done = asyncio.Event()

        def tick() -> None:  # one call a turn: the turn each answer came in
            nonlocal turns
            turns += 1
            if not done.is_set():
                loop.call_soon(tick)

        def answer(token_of: list[int]) -> object:
            def answered(_: object) -> None:
                order.append(token_of[0])
                turn_of[token_of[0]] = turns
                if len(order) == len(sent):
                    done.set()
            return answered

        def reply(group_id: str, completed: bool) -> Reply:
            box: list[int] = []
            token = replies.take(answer(box))  # type: ignore[arg-type]
            box.append(token)

            def complete() -> None:
                if token not in order:
                    completed_first.append(token)

            return Reply(token, group_id, pb.JoinGroupResponse(), complete if completed else None)

        tick()
        for group_id, completed in sent:
            replies.deliver(reply(group_id, completed))
        await asyncio.wait_for(done.wait(), 10)
        checkers.close()

    asyncio.run(run())
    return order, turn_of, completed_first


def test_a_groups_answers_keep_their_order_and_go_out_a_share_per_turn() -> None:
    # the leader's (completed off the loop), its followers, and another group's answer
    order, turn_of, completed = _answered_in_turns([("g", True), *[("g", False)] * FOLLOWERS, ("h", False)])
    assert completed == [1]
    leader, other = 1, FOLLOWERS + 2
    assert order[0] == other  # h's answer did not wait for g's completion
    assert order[1:] == list(range(leader, leader + FOLLOWERS + 1))  # the leader's, then its followers in order
    followers = [turn_of[token] for token in range(leader + 1, leader + FOLLOWERS + 1)]
    assert min(followers) > turn_of[leader]  # a turn after the leader's: its answer is written first
    per_turn = {turn: followers.count(turn) for turn in set(followers)}
    assert len(per_turn) == 4 and max(per_turn.values()) == RELEASE_PER_TURN, per_turn


def test_answers_behind_a_second_completion_wait_for_it_too() -> None:
    sent = [("g", True), ("g", False), ("g", False), ("g", True), ("g", False), ("g", False)]
    order, _, completed = _answered_in_turns(sent)
    assert order == [1, 2, 3, 4, 5, 6]
    assert completed == [1, 4]  # each completed before its answer went out
