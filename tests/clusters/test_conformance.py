"""The contract of ``clusters/fleet.py``, checked once for every fleet provider (see conformance.py).

Launch is idempotent on ``intent_id``; terminate ignores unknown and gone ids; describe shows
all of ours or exactly the ids asked for; poll_events returns each event once, oldest first;
offers are well formed; a spot refusal is ``CapacityUnavailable`` and creates nothing; the
optional methods either keep the base class's defaults or honour the same promises.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from clusters.fleet import EventKind, FleetProvider, Instance, InstanceState, Offer
from controlplane.core.errors import CapacityUnavailable, InvalidInput
from controlplane.core.models import Market
from tests.clusters import conformance
from tests.clusters.conformance import Harness, MemoryFleet

provider = conformance.provider  # each fleet provider in turn
moto_port, proxy, aws_env = conformance.moto_port, conformance.proxy, conformance.aws_env


def ids(instances: list[Instance]) -> list[str]:
    return sorted(i.instance_id for i in instances)


def test_speaks_the_protocol(provider: Harness) -> None:
    assert isinstance(provider.fleet, FleetProvider)
    assert isinstance(provider.fleet.name, str) and provider.fleet.name


def test_offers_are_well_formed(provider: Harness) -> None:
    offers = provider.fleet.offers()
    assert offers and all(isinstance(o, Offer) for o in offers)
    assert len({(o.zone, o.instance_type) for o in offers}) == len(offers)  # no duplicates
    for o in offers:
        assert o.cloud and o.zone and o.instance_type
        assert isinstance(o.accelerator_count, int) and o.accelerator_count >= 0
        prices = (o.spot_price, o.on_demand_price)  # NaN: not sold on that market
        assert all(math.isnan(p) or p >= 0 for p in prices) and not all(math.isnan(p) for p in prices)
        assert isinstance(provider.fleet.spot_available(o.zone, o.instance_type), bool)


def test_launch_returns_what_was_asked(provider: Harness) -> None:
    req = provider.request("shape", count=2)
    got = provider.fleet.launch(req)
    assert len(got) == 2 and len(set(ids(got))) == 2
    for inst in got:
        assert (inst.intent_id, inst.zone, inst.instance_type, inst.market) == (
            req.intent_id, req.zone, req.instance_type, req.market)
        assert inst.state in (InstanceState.PENDING, InstanceState.RUNNING)
        assert req.tags.items() <= inst.tags.items()
    with pytest.raises(InvalidInput, match="count"):
        provider.fleet.launch(provider.request("none", count=0))


@pytest.mark.parametrize("market", [Market.SPOT, Market.ON_DEMAND])
def test_launch_is_idempotent_on_the_intent(provider: Harness, market: Market) -> None:
    fleet = provider.fleet
    first = fleet.launch(provider.request("again", count=2, market=market))
    seen = ids(fleet.describe())
    again = fleet.launch(provider.request("again", count=2, market=market))
    assert ids(again) == ids(first)  # the same instances back
    assert ids(fleet.describe()) == seen  # and no new ones
    provider.boot(ids(first))
    late = fleet.launch(provider.request("again", count=2, market=market))  # retried once up
    assert ids(late) == ids(first) and ids(fleet.describe()) == seen


def test_terminate_ignores_unknown_and_gone_ids(provider: Harness) -> None:
    fleet = provider.fleet
    fleet.terminate([])
    fleet.terminate([provider.unknown_id])
    assert fleet.describe() == []
    [inst] = fleet.launch(provider.request("end"))
    assert ids(fleet.describe()) == [inst.instance_id]
    fleet.terminate([inst.instance_id, provider.unknown_id])
    [gone] = fleet.describe([inst.instance_id])
    assert gone.state is InstanceState.TERMINATED
    fleet.terminate([inst.instance_id])  # already gone
    assert fleet.describe([inst.instance_id])[0].state is InstanceState.TERMINATED


def test_describe_all_and_given_ids(provider: Harness) -> None:
    fleet = provider.fleet
    a = ids(fleet.launch(provider.request("a", count=2)))
    b = ids(fleet.launch(provider.request("b", market=Market.ON_DEMAND)))
    assert ids(fleet.describe()) == sorted(a + b) == ids(fleet.describe(None))
    assert ids(fleet.describe(b)) == b
    assert ids(fleet.describe([a[1], provider.unknown_id])) == [a[1]]
    assert fleet.describe([]) == [] and fleet.describe([provider.unknown_id]) == []
    [one] = fleet.describe(b)
    assert (one.intent_id, one.market) == ("b", Market.ON_DEMAND)


def test_poll_events_oldest_first_and_once(provider: Harness) -> None:
    fleet = provider.fleet
    mine = ids(fleet.launch(provider.request("ev", count=2)))
    ready = fleet.poll_events()  # moto, for one, runs an instance at once
    provider.boot(mine)
    fleet.describe()  # the controller describes, then polls: no event is lost or doubled
    ready += fleet.poll_events()
    assert sorted((e.kind, e.instance_id) for e in ready) == [(EventKind.READY, i) for i in mine]
    assert [e.at for e in ready] == sorted(e.at for e in ready)  # oldest first, across polls
    assert all(e.at <= provider.clock.now() for e in ready)
    assert fleet.poll_events() == []  # not repeated
    fleet.terminate([mine[0]])
    [ended] = fleet.poll_events()
    assert (ended.kind, ended.instance_id) == (EventKind.TERMINATED, mine[0])
    assert ended.at >= ready[-1].at
    assert fleet.poll_events() == []


def test_a_spot_refusal_is_capacity_unavailable(provider: Harness) -> None:
    fleet = provider.fleet
    req = provider.refused("refused")
    before = ids(fleet.describe())
    with pytest.raises(CapacityUnavailable) as err:
        fleet.launch(req)
    assert (err.value.zone, err.value.instance_type) == (req.zone, req.instance_type)
    assert ids(fleet.describe()) == before  # nothing made


def test_optional_methods_keep_their_promises(provider: Harness) -> None:
    fleet = provider.fleet
    launched = fleet.launch(provider.request("opt", count=2))
    avail = fleet.spot_availability()
    if avail is not None:  # one call for every zone: open when one of its offers' probes is
        offers = fleet.offers()
        assert {o.zone for o in offers} <= set(avail)
        assert all(avail[o.zone] == any(fleet.spot_available(o.zone, p.instance_type)
                                        for p in offers if p.zone == o.zone) for o in offers)
    if fleet.lifetimes is not None:  # the model spot lifetimes are drawn from, in hours
        drawn = fleet.lifetimes.sample(50, np.random.default_rng(0))
        assert len(drawn) == 50 and np.all(np.asarray(drawn) > 0)
    per = fleet.instances_per_intent()
    assert per in ({}, {"opt": len(launched)})


def test_from_options_builds_the_provider(provider: Harness) -> None:
    rebuilt = provider.rebuilt()
    if rebuilt is None:
        pytest.skip(f"{provider.fleet.name}: from_options joins a running cluster")
    assert type(rebuilt) is type(provider.fleet) and rebuilt.name == provider.fleet.name
    assert rebuilt.offers()


def test_the_defaults_of_the_optional_methods() -> None:
    from controlplane.core.clock import SimClock

    fleet = MemoryFleet.from_options(clock=SimClock(), zones=["z"])
    assert isinstance(fleet, MemoryFleet) and fleet.zones == ["z"]  # from_options: cls(**options)
    assert fleet.spot_availability() is None  # probe each zone
    assert fleet.lifetimes is None and fleet.instances_per_intent() == {}
