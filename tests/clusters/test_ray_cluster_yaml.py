"""Both cluster-launcher configs pass Ray's own validation and say what spotplane's placement needs."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
AWS_YAML = ROOT / "ray-cluster.yaml"
GCP_YAML = ROOT / "clusters" / "ray-cluster-gcp.yaml"


def load(path: Path) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    return config


def ray_validated(config: dict[str, Any]) -> dict[str, Any]:
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared: dict[str, Any] = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


@pytest.mark.parametrize("path", [AWS_YAML, GCP_YAML], ids=["aws", "gcp"])
def test_ray_accepts_the_config(path: Path) -> None:
    prepared = ray_validated(load(path))
    head = prepared["head_node_type"]
    assert prepared["available_node_types"][head]["max_workers"] == 0  # filled in by Ray
    assert "ray start --head" in " ".join(prepared["head_start_ray_commands"])
    assert any("spotplane up --fleet ray" in c for c in prepared["head_start_ray_commands"])
    # the control plane's actors on the head at normal priority, not Ray's background nice 15
    config = re.search(r"--system-config='([^']*)'", " ".join(prepared["head_start_ray_commands"]))
    assert config is not None and json.loads(config.group(1))["worker_niceness"] == 0


@pytest.mark.parametrize("path", [AWS_YAML, GCP_YAML], ids=["aws", "gcp"])
def test_ray_rejects_a_broken_copy(path: Path) -> None:
    import jsonschema

    config = load(path)
    config["available_node_types"]["head"]["node_confg"] = config["available_node_types"]["head"].pop("node_config")
    with pytest.raises(jsonschema.ValidationError):
        ray_validated(config)


@pytest.mark.parametrize("path", [AWS_YAML, GCP_YAML], ids=["aws", "gcp"])
def test_markets_and_custom_resources(path: Path) -> None:
    config = load(path)
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"].get("on_demand") == 1 and "spot" not in head["resources"]
    workers = {k: v for k, v in types.items() if k != config["head_node_type"]}
    spot = {k for k, v in workers.items() if v["resources"].get("spot") == 1}
    on_demand = {k for k, v in workers.items() if v["resources"].get("on_demand") == 1}
    assert len(spot) >= 2 and len(on_demand) >= 1 and not spot & on_demand
    for name, node in workers.items():
        accel = [r for r in node["resources"] if r.startswith("accelerator_type:")]
        assert len(accel) == 1, name
        assert is_spot(path, node["node_config"]) == (name in spot), name
    # the on-demand fallback offers a GPU some spot type offers too
    spot_gpus = {r for k in spot for r in workers[k]["resources"] if r.startswith("accelerator_type:")}
    assert any(r in spot_gpus for k in on_demand for r in workers[k]["resources"])


def is_spot(path: Path, node_config: dict[str, Any]) -> bool:
    if path == AWS_YAML:
        market = node_config.get("InstanceMarketOptions")
        return market is not None and market["MarketType"] == "spot"
    return bool(node_config["scheduling"]["provisioningModel"] == "SPOT")


def test_aws_spot_in_several_zones_and_node_configs_are_run_instances_input() -> None:
    import boto3
    from botocore.validate import validate_parameters

    config = load(AWS_YAML)
    zones = config["provider"]["availability_zone"].split(",")
    assert len(zones) >= 3 and all(z.startswith(config["provider"]["region"]) for z in zones)
    assert config["provider"]["cache_stopped_nodes"] is False
    model = boto3.client("ec2", region_name="us-east-1").meta.service_model
    shape = model.operation_model("RunInstances").input_shape
    gpu_of = aws_gpus()
    checked = 0
    for name, node in config["available_node_types"].items():
        params = {**node["node_config"], "MinCount": 1, "MaxCount": 1}
        validate_parameters(params, shape)  # raises ParamValidationError on a wrong key or type
        market = node["node_config"].get("InstanceMarketOptions")
        if market:
            assert market["SpotOptions"] == {"SpotInstanceType": "one-time",
                                             "InstanceInterruptionBehavior": "terminate"}
        accel = [r.split(":", 1)[1] for r in node["resources"] if r.startswith("accelerator_type:")]
        itype = node["node_config"]["InstanceType"]
        if itype in gpu_of:  # moto's catalogue lacks some older types (p3)
            assert accel == gpu_of[itype], name
            checked += 1
    assert checked >= 4


def aws_gpus() -> dict[str, list[str]]:
    """GPU model per instance type, from the EC2 instance-type catalogue moto ships."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    return {name: [g["Name"] for g in info.get("GpuInfo", {}).get("Gpus", [])]
            for name, info in INSTANCE_TYPES.items()}


def test_gcp_node_configs_are_compute_instance_fields() -> None:
    from google.cloud import compute_v1

    config = load(GCP_YAML)
    assert config["provider"]["availability_zone"].startswith(config["provider"]["region"])
    for name, node in config["available_node_types"].items():
        nc = node["node_config"]
        # strict parsing into the Compute API's own message: a misspelt field fails here
        compute_v1.Instance.from_json(json.dumps(nc), ignore_unknown_fields=False)
        sched = nc["scheduling"]
        if sched["provisioningModel"] == "SPOT":
            assert sched["instanceTerminationAction"] == "DELETE" and sched["onHostMaintenance"] == "TERMINATE"
        if nc["machineType"].startswith("n1-") and name != "head":
            assert nc["guestAccelerators"][0]["acceleratorCount"] >= 1
