"""The screen pipeline: capture (V4L2), encoding, the structural change detector, stability."""
