"""Transports: thin codecs over the one catalog (HTTP, WebSocket, msgpack IPC)."""
