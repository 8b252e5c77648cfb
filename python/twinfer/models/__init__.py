"""Ready-made real models twinfer can fetch from installed packages (offline)."""
