"""The Fingertip service. Kept empty: the one-shot CLI imports daemon.cli and must stay light."""
