"""The script's settings, kept in a module of their own as real projects do."""

FUSED_ATTENTION = False
