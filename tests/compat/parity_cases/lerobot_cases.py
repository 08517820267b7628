"""LeRobot-written cases (placeholder)."""
