"""The peak dense FP16 and BF16 throughput of the devices users train on, for model FLOPs utilisation (MFU).

Keyed by the device name MindSpore reports (``mindspore.hal.get_device_properties(0).name``, e.g. ``Ascend910B3``)
or the one ``monitor_config.device_name`` gives, which may also name a Huawei product tier (``A2-313T``,
``A3-752T``). Only figures with a published source are listed; for any other device set
``monitor_config.peak_tflops`` (the value from its vendor's datasheet): without a peak no MFU is recorded, the
TFLOPS still are. One MindSpore device is one die: an Ascend 910C (A3) package holds two, and its peak here is a
die's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PeakTflops:
    """A device's peak dense TFLOPS at FP16 and, where its source gives one, at BF16."""

    float16: float
    bfloat16: float | None = None

    def at(self, compute_dtype: str | None) -> float:
        """The peak at the run's compute dtype: the BF16 figure for ``bfloat16`` (where known), else FP16."""
        if compute_dtype is not None and "bfloat16" in compute_dtype.lower() and self.bfloat16 is not None:
            return self.bfloat16
        return self.float16


# Huawei's device profiles of the Atlas 800 A2 and A3 servers (github.com/Ascend/msmodeling, tensor_cast/device.py,
# vendor "HUAWEI"): ATLAS_800_A2_376T_64G fp16 376 / bf16 353.9, ATLAS_800_A2_313T_64G 313 / 294.9,
# ATLAS_800_A2_280T_64G (and the PCIe and 32G cards) 280 / 245.8; ATLAS_800_A3_752T_128G_DIE and
# ATLAS_800_A3_560T_128G_DIE ("one die of A3") 376 / 353.9 and 280 / 245.8. The BF16 figures are AI cores x 8192
# FLOP per cycle x clock: 24 cores at 1.8 GHz (376T), 20 at 1.8 GHz (313T), 20 at 1.5 GHz (280T).
DIE_376T = PeakTflops(376.0, 353.9)
DIE_313T = PeakTflops(313.0, 294.9)
DIE_280T = PeakTflops(280.0, 245.8)

#: device name -> its peak. The chip names map to the tiers by their AI cores and clock (the 910B3's 20 cores at
#: 1.8 GHz: the 313T servers, vllm-ascend's "A2-313T"; the 910B4's 20 at 1.5 GHz: the 280T cards; the 910B2's 24:
#: 376T). The 910B1 is left out (no sourced figure), as are the A3 chip names (Ascend910_93xx), which do not say
#: their tier: name it with ``device_name: A3-752T`` or ``A3-560T``.
PEAKS: dict[str, PeakTflops] = {
    # Huawei, "Ascend 910: A Fully Scalable AI Training Processor", Hot Chips 31 (2019): 256 TFLOPS FP16, no BF16
    "Ascend910": PeakTflops(256.0),
    "Ascend910A": PeakTflops(256.0),
    "Ascend910B2": DIE_376T,
    "Ascend910B2C": DIE_376T,
    "Ascend910B3": DIE_313T,
    "Ascend910B4": DIE_280T,
    "A2-376T": DIE_376T,
    "A2-313T": DIE_313T,
    "A2-280T": DIE_280T,
    "A3-752T": DIE_376T,
    "A3-560T": DIE_280T,
}


def peak_tflops(device: str | None, compute_dtype: str | None = None) -> float | None:
    """The listed peak of ``device`` (its name as MindSpore reports it or a tier, case and spaces ignored) at
    ``compute_dtype`` (``model_config.compute_dtype``), else None."""
    if not device:
        return None
    wanted = device.replace(" ", "").lower()
    return next((peak.at(compute_dtype) for name, peak in PEAKS.items() if name.lower() == wanted), None)
