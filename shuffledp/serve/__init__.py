"""Network services (optional extra ``shuffledp[serve]``)."""
