"""The fair shares of queue slots, exactly: water-filling, the one-slot floor, who hands back
what when the slots are full, and the message a tenant held at its share reads."""

from __future__ import annotations

from policies.admission import fair_shares, held_back, plan_slots, reclaim


def test_shares_are_max_min_fair_and_the_remainder_goes_to_the_first_given() -> None:
    assert fair_shares({"a": 10, "b": 10, "c": 10}, 5) == {"a": 2, "b": 2, "c": 1}
    # a tenant asking for less than its share leaves the rest to the others
    assert fair_shares({"a": 1000, "b": 5}, 1000) == {"a": 995, "b": 5}
    assert fair_shares({"a": 1000, "b": 300, "c": 1000}, 1000) == {"a": 350, "b": 300, "c": 350}
    assert fair_shares({"a": 3, "b": 0}, 10) == {"a": 3}  # no demand, no share
    # more tenants with work than slots: each still gets one
    assert fair_shares({t: 5 for t in "abcd"}, 2) == dict.fromkeys("abcd", 1)
    assert fair_shares({t: 5 for t in "abcd"}, 2, floor=0) == {"a": 1, "b": 1, "c": 0, "d": 0}


def test_a_tenant_holding_every_slot_hands_back_what_the_newcomer_needs() -> None:
    # A holds all 1000 slots with a deep backlog; B asks for 3: B gets 3 now, A gives 3 back
    plan = plan_slots({"a": 1000}, {"a": 0, "b": 3}, total=1000, batch=1000)
    assert plan.admit == {"b": 3} and plan.evict == {"a": 3}
    assert plan.holds({"a": 1000}, "a") == 997 and plan.holds({"a": 1000}, "b") == 3
    # B asks for more than its share: it gets its half, A keeps its half
    plan = plan_slots({"a": 1000}, {"a": 10**6, "b": 10**6}, total=1000, batch=1000)
    assert plan.shares == {"a": 500, "b": 500}
    assert plan.admit == {"b": 500} and plan.evict == {"a": 500}


def test_the_batch_is_split_fairly_and_only_the_overflow_is_handed_back() -> None:
    plan = plan_slots({"a": 600}, {"b": 900, "c": 900}, total=1000, batch=100)
    assert plan.admit == {"b": 50, "c": 50}
    assert plan.evict == {}  # 600 of 1000 held: room for all 100
    plan = plan_slots({"a": 950}, {"b": 900, "c": 900}, total=1000, batch=100)
    assert plan.admit == {"b": 50, "c": 50} and plan.evict == {"a": 50}


def test_only_tenants_over_their_share_hand_back_the_most_over_first() -> None:
    held = {"a": 6, "b": 3, "c": 1}
    shares = {"a": 2, "b": 2, "c": 2, "d": 2}
    assert reclaim(held, shares, coming=2, total=12) == {}  # it fits
    assert reclaim(held, shares, coming=3, total=10) == {"a": 3}  # a is 4 over, b only 1
    assert reclaim(held, shares, coming=6, total=10) == {"a": 4, "b": 1}  # never below a share


def test_a_tenant_at_its_share_is_told_which_setting_holds_it_and_the_fix() -> None:
    held, asking = {"a": 1000}, {"a": 10**6, "b": 10**6}
    plan = plan_slots(held, asking, total=1000, batch=1000)
    assert held_back(plan, held, asking, "a", per_tenant=10**7) == (
        "queued_total: tenant a holds 500 of the 1000 queue slots, its fair share with 2 tenants "
        "waiting; the rest wait PENDING until its queued jobs are placed or fewer tenants wait "
        "(the operator raises ControllerSettings.queued_total)")
    assert held_back(plan, held, asking, "b", per_tenant=10**7) == (
        "queued_total: tenant b holds 500 of the 1000 queue slots, its fair share with 2 tenants "
        "waiting; the rest wait PENDING until its queued jobs are placed or fewer tenants wait "
        "(the operator raises ControllerSettings.queued_total)")
    plan = plan_slots({"a": 10}, {}, total=1000, batch=1000)
    assert held_back(plan, {"a": 10}, {}, "a", per_tenant=10) == (
        "queued_per_tenant: tenant a holds 10 queued jobs, the cap of 10; the rest wait PENDING "
        "until its queued jobs are placed (the operator raises ControllerSettings.queued_per_tenant)")
    plan = plan_slots({}, {"a": 5}, total=1000, batch=1000)  # all it asks for comes in
    assert held_back(plan, {}, {"a": 5}, "a", per_tenant=10) is None
    plan = plan_slots({}, {"a": 5}, total=1000, batch=2)  # only the batch holds it back
    assert held_back(plan, {}, {"a": 5}, "a", per_tenant=10) is None
