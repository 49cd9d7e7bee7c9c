"""The synthetic cluster: raw logs in the real formats from a calibrated failure model."""

from __future__ import annotations

from faultlens.synth.config import SynthConfig
from faultlens.synth.generate import SynthResult, generate, simulate

__all__ = ["SynthConfig", "SynthResult", "generate", "simulate"]
