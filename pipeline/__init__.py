"""prep: prepare, verify and size LeRobot datasets for VLA pre-training."""

__version__ = "0.1.0"
