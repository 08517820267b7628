"""prep: prepare, verify and size LeRobot datasets for VLA pre-training."""

__version__ = "0.1.0"
# The distribution name (pyproject.toml): `prep` on the package index is an unrelated project, so every install hint
# names this one. The command is `prep` and the import package `pipeline`.
DISTRIBUTION = "lerobot-prep"
