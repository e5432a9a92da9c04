"""GCP prices and GPUs the Compute API does not give: list prices and N1's attached GPUs."""

from __future__ import annotations

# Machine types whose GPUs must be attached explicitly (N1): name -> (accelerator type, count).
ATTACHED_GPUS: dict[str, tuple[str, int]] = {
    "n1-standard-8": ("nvidia-tesla-t4", 1),
    "n1-standard-16": ("nvidia-tesla-v100", 2),
}
# USD/hour in us-central1 (public price list): machine type -> (spot, standard). Override per run.
PRICES: dict[str, tuple[float, float]] = {
    "g2-standard-4": (0.2824, 0.7068), "a2-highgpu-1g": (1.1028, 3.6731),
    "a2-highgpu-8g": (8.8224, 29.3872), "a3-highgpu-8g": (29.7858, 88.2494),
    "n1-standard-8": (0.2310, 0.7300), "n1-standard-16": (1.9040, 5.7600),
}

# GCE accelerator type -> the short GPU name the rest of spotplane uses (AWS GpuInfo, Ray, the data).
GPU_NAMES: dict[str, str] = {
    "nvidia-tesla-k80": "K80", "nvidia-tesla-p100": "P100", "nvidia-tesla-v100": "V100",
    "nvidia-tesla-t4": "T4", "nvidia-l4": "L4", "nvidia-tesla-a100": "A100",
    "nvidia-a100-80gb": "A100-80GB", "nvidia-h100-80gb": "H100", "nvidia-h100-mega-80gb": "H100",
    "nvidia-h200-141gb": "H200",
}


def gpu_name(accelerator_type: str) -> str:
    """``nvidia-h100-80gb`` (or its URL) -> ``H100``; unknown types pass through."""
    short = url_name(accelerator_type)
    return GPU_NAMES.get(short, short)


def list_prices(machine_type: str) -> tuple[float | None, float] | None:
    """(spot, standard) USD/hour of a GCE machine type; None if unknown."""
    return PRICES.get(machine_type)


def url_name(url: str) -> str:
    """The last segment of a GCE resource URL (``zones/us-central1-a`` -> ``us-central1-a``)."""
    return url.rsplit("/", 1)[-1]
