"""The Fingertip service. Kept light: the one-shot CLI imports daemon.cli and must stay fast."""

# The daemon's version, here so any layer (transports, tools) can name it without importing
# the tools layer or the composition root.
VERSION = "0.1.0"
