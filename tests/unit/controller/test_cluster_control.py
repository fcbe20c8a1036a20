"""Broker membership on a real one-voter quorum: registration, unfencing by heartbeat, fencing when
heartbeats stop, shutdown, and Kafka's refusals (controller/cluster_control.py)."""

from __future__ import annotations

import uuid

import trio

from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors, KafkaError

from .quorum_harness import CLUSTER_ID, WAIT_S, one_voter_quorum


def registration(broker_id: int, incarnation: bytes | None = None, **fields) -> m.BrokerRegistrationRequest:
    req = m.BrokerRegistrationRequest(
        broker_id=broker_id, cluster_id=CLUSTER_ID, incarnation_id=incarnation or uuid.uuid4().bytes,
        listeners=[m.BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="h", port=1, security_protocol=0)],
        features=[m.BrokerRegistrationRequest.Feature(name="metadata.version", min_supported_version=1,
                                                      max_supported_version=29),
                  m.BrokerRegistrationRequest.Feature(name="group.version", min_supported_version=0,
                                                      max_supported_version=1),
                  m.BrokerRegistrationRequest.Feature(name="eligible.leader.replicas.version",
                                                      min_supported_version=0, max_supported_version=1),
                  m.BrokerRegistrationRequest.Feature(name="share.version", min_supported_version=0,
                                                      max_supported_version=1)],
        rack=None, log_dirs=[uuid.uuid4().bytes])
    for k, v in fields.items():
        setattr(req, k, v)
    return req


def test_a_new_broker_is_fenced_until_its_heartbeat_shows_it_caught_up(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            error, epoch, _ = await q.controller.register_broker(registration(7))
            assert error == 0
            reg = q.image.brokers[7]
            # Kafka: the broker epoch is the offset of the RegisterBrokerRecord
            assert reg.fenced and reg.epoch == epoch == reg.register_offset
            # a heartbeat from behind the registration is not caught up and stays fenced
            behind = await q.controller.broker_heartbeat(m.BrokerHeartbeatRequest(
                broker_id=7, broker_epoch=epoch, current_metadata_offset=epoch - 1, want_fence=False))
            assert behind == (0, False, True, False) and q.image.brokers[7].fenced
            # wanting to stay fenced (still recovering) keeps it fenced, but caught up
            assert await q.heartbeat(7, epoch, want_fence=True) == (0, True, True, False)
            assert await q.heartbeat(7, epoch) == (0, True, False, False)
            assert not q.image.brokers[7].fenced

    trio.run(main)


def test_heartbeats_that_stop_fence_the_broker_and_the_next_one_unfences_it(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, {"broker.session.timeout.ms": "400"}, brokers={}) as q:
            epoch = await q.register(3)
            assert not q.image.brokers[3].fenced
            with trio.fail_after(WAIT_S):
                await q.loader.wait_for(lambda: q.image.brokers[3].fenced)  # no heartbeat for 400 ms
            assert await q.heartbeat(3, epoch) == (0, True, False, False)
            assert not q.image.brokers[3].fenced

    trio.run(main)


def test_registration_refusals(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            ctl = q.controller
            incarnation = uuid.uuid4().bytes
            error, epoch, _ = await ctl.register_broker(registration(4, incarnation))
            await q.heartbeat(4, epoch)
            # another process claiming broker 4 while it heartbeats
            error, _, message = await ctl.register_broker(registration(4))
            assert error == Errors.DUPLICATE_BROKER_REGISTRATION
            assert message == "Another broker is registered with that broker id."
            # the same incarnation again: an amended registration keeps its epoch and state
            error, again, _ = await ctl.register_broker(registration(4, incarnation))
            assert (error, again) == (0, epoch) and not q.image.brokers[4].fenced
            # the wrong cluster, missing or reused log dirs, a finalized level it cannot run
            bad = [(registration(5, cluster_id="AAAAAAAAAAAAAAAAAAAAAA"), Errors.INCONSISTENT_CLUSTER_ID),
                   (registration(5, log_dirs=[]), Errors.INVALID_REGISTRATION),
                   (registration(5, log_dirs=q.image.brokers[4].log_dirs), Errors.INVALID_REGISTRATION),
                   (registration(5, features=[]), Errors.UNSUPPORTED_VERSION)]
            for req, code in bad:
                assert (await ctl.register_broker(req))[0] == code
            # a heartbeat with an old epoch
            assert (await q.heartbeat(4, epoch - 1))[0] == Errors.STALE_BROKER_EPOCH

    trio.run(main)


def test_a_broker_shutting_down_is_fenced_at_once(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            epoch = await q.register(2)
            assert await q.heartbeat(2, epoch, want_shut_down=True) == (0, True, True, True)
            assert q.image.brokers[2].fenced

    trio.run(main)


def test_a_controller_that_loses_leadership_answers_not_controller_until_elected_again(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, {"controller.quorum.election.timeout.ms": "2000"}) as q:
            epoch = q.controller.epoch
            q.manager.driver.resign()  # resigned until its election timeout (2 s) passes
            with trio.fail_after(WAIT_S):
                await q.loader.wait_for(lambda: not q.controller.active)
            try:
                await q.controller.create_topics([("t", 1, 1, {}, {})])
                raise AssertionError("an inactive controller accepted a change")
            except KafkaError as exc:
                assert exc.code == Errors.NOT_CONTROLLER
            with trio.fail_after(WAIT_S):  # the lone voter wins the next epoch and activates again
                while not q.controller.active:
                    await q.controller.activated.wait()
            assert q.controller.epoch > epoch
            assert (await q.controller.create_topics([("t", 1, 1, {}, {})]))[0].error == 0

    trio.run(main)


def test_the_broker_in_the_controllers_own_process_replaces_its_crashed_incarnation_at_once(tmp_path):
    """A crashed combined node restarts: its old incarnation still has a session, but it ran in
    the process that now runs the controller, so it cannot be alive."""
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            old = await q.register(1)
            restarted = uuid.uuid4().bytes
            q.controller.local_incarnation = (1, restarted)
            error, epoch, _ = await q.controller.register_broker(registration(1, restarted))
            assert error == 0 and epoch > old and q.image.brokers[1].fenced
            # a remote broker with a live session is still refused, as in Kafka
            other = await q.register(2)
            assert (await q.controller.register_broker(registration(2)))[0] == Errors.DUPLICATE_BROKER_REGISTRATION
            assert other > 0

    trio.run(main)
