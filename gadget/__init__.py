"""The USB device side of the cable: descriptors, keymaps, profiles, configfs, writers."""
