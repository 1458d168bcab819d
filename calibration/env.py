"""What a measurement ran on: device, driver, torch/FlashInfer versions, date (stored in the profile)."""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EnvInfo:
    device: str  # "cpu" or "cuda[:N]"
    device_name: str  # e.g. "NVIDIA H100 80GB HBM3" or the CPU model
    torch: str | None
    cuda: str | None
    driver: str | None
    flashinfer: str | None
    date: str  # ISO date
    threads: int | None = None
    clocks: str | None = None  # nvidia-smi clocks/power at the start, when available


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (
        out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    )


def flashinfer_version() -> str | None:
    try:
        import flashinfer  # noqa: F401  (optional)
    except Exception:  # not installed, or broken against this torch
        return None
    import flashinfer as fi

    return getattr(fi, "__version__", "unknown")


def collect(device: str) -> EnvInfo:
    import torch

    today = _dt.date.today().isoformat()
    if device == "cpu":
        return EnvInfo(
            "cpu",
            _cpu_name(),
            str(torch.__version__),
            None,
            None,
            None,
            today,
            threads=torch.get_num_threads(),
        )
    # GPU-only branch.
    idx = torch.device(device).index or 0
    return EnvInfo(
        device,
        torch.cuda.get_device_name(idx),
        str(torch.__version__),
        torch.version.cuda,
        _nvidia_smi("driver_version"),
        flashinfer_version(),
        today,
        clocks=_nvidia_smi("clocks.sm,clocks.max.sm,power.draw,temperature.gpu"),
    )
