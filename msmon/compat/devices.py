"""The peak dense FP16/BF16 throughput of the devices users train on, for model FLOPs utilisation (MFU).

Keyed by the device name MindSpore reports (``mindspore.hal.get_device_properties(0).name``, e.g. ``Ascend910``)
or the one ``monitor_config.device_name`` gives. Only figures with a published source are listed; for any other
device set ``monitor_config.peak_tflops`` (the value from its vendor's datasheet): without a peak no MFU is
recorded, the TFLOPS still are.
"""

from __future__ import annotations

#: device name -> peak dense FP16 TFLOPS
PEAK_TFLOPS: dict[str, float] = {
    # Huawei, "Ascend 910: A Fully Scalable AI Training Processor", Hot Chips 31 (2019): 256 TFLOPS FP16
    "Ascend910": 256.0,
    "Ascend910A": 256.0,
}


def peak_tflops(device: str | None) -> float | None:
    """The listed peak of ``device`` (its name as MindSpore reports it, case and spaces ignored), else None."""
    if not device:
        return None
    wanted = device.replace(" ", "").lower()
    return next((peak for name, peak in PEAK_TFLOPS.items() if name.lower() == wanted), None)
