"""Each fleet provider's options are a typed dataclass: a misspelt option is refused, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters.aws.fleet import AwsLaunchTemplate, AwsOptions
from clusters.fleet import typed_options
from clusters.gcp.fleet import GcpLaunchTemplate, GcpOptions
from clusters.providers import make_provider
from clusters.sim.fleet import SimOptions
from controlplane.core.clock import SimClock
from controlplane.core.errors import InvalidInput


@pytest.mark.parametrize(("fleet", "one_it_takes"), [("sim", "zones"), ("aws", "zones"),
                                                    ("gcp", "zones"), ("ray", "config")])
def test_a_misspelt_option_is_refused_naming_it_and_the_choices(fleet: str, one_it_takes: str) -> None:
    """Refused before any cloud is called or any file read."""
    with pytest.raises(InvalidInput) as err:
        make_provider(fleet, zonez=["a"])
    assert err.value.field == "fleet_options.zonez"
    assert f"not an option of the {'simulated' if fleet == 'sim' else fleet} fleet" in err.value.message
    assert one_it_takes in (err.value.fix or "")


def test_the_aws_template_takes_the_given_fields_then_the_settings_image() -> None:
    opts = typed_options(AwsOptions, "aws", {"key_name": "ops", "security_group_ids": ("sg-1",)})
    template = opts.template(default_image="ami-settings")
    assert template == AwsLaunchTemplate(image_id="ami-settings", key_name="ops",
                                         security_group_ids=("sg-1",))
    assert opts.template(default_image=None).image_id == AwsLaunchTemplate().image_id
    given = typed_options(AwsOptions, "aws", {"image_id": "ami-given"})
    assert given.template(default_image="ami-settings").image_id == "ami-given"


def test_the_gcp_template_keeps_its_defaults_for_what_is_not_given() -> None:
    opts = typed_options(GcpOptions, "gcp", {"disk_size_gb": 200})
    assert opts.template() == GcpLaunchTemplate(disk_size_gb=200)


def test_the_simulated_fleet_builds_from_typed_options(data_root: Path) -> None:
    opts = SimOptions(clock=SimClock(), data_dir=data_root, gcp=False, spot_capacity=3)
    fleet = make_provider("sim", **{k: getattr(opts, k) for k in ("clock", "data_dir", "gcp",
                                                                  "spot_capacity")})
    assert fleet.offers() and all(o.cloud == "aws" for o in fleet.offers())
