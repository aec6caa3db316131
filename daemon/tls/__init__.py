"""TLS on the HTTP port: which listeners have it, the certificate and its fingerprint, and the
one SSLContext every such listener is handed (daemon.service gives `Tls.context` to
daemon.transports.limits.CappedSite; transports never see a certificate).

- Which listeners (policy.secured): [server].tls "auto" (every listen address but loopback:
  `make run` stays plain HTTP), "on" (all of them) or "off" (none: a warning at start and in
  health_check).
- Which certificate (service.Tls): [server].tls_cert and tls_key (the user's own, from their CA
  or `tailscale cert`), else one the board makes for itself in the state folder (store): ECDSA
  P-256, self-signed, the board's names and addresses as subject alternative names
  (certinfo.certificate_names), files 0600. It is kept across restarts and deploys and made
  again, with the same key, when it comes within RENEW_DAYS of its end or its names change (a
  listen address added).
- The fingerprint (certinfo.pin) is the SHA-256 of the certificate's public key
  (SubjectPublicKeyInfo), in curl's --pinnedpubkey form `sha256//<base64>`. It pins the key, as
  SSH does: a renewed certificate keeps it. (`certificate_sha256`, what a browser's certificate
  viewer shows, changes with every renewal.)
- Memory: `cryptography` costs a process about 9 MB. The certificate is made or read by a
  short-lived child (`python -m daemon.tls`, daemon.tls.child) and what it found is cached
  beside the certificate, keyed by the file's SHA-256 (store): the daemon never imports
  `cryptography`, and on an ordinary start it runs no child either.
- Reload (SIGHUP, and the renewal check every CHECK_INTERVAL_S): a new SSLContext is built whole
  and swapped in through the SNI callback, which every handshake runs; one that cannot be built
  leaves the old one serving and is logged.
- TLS 1.2 at least (1.3 preferred by every client that has it); 1.2's suites are ECDHE with
  AES-GCM or ChaCha20-Poly1305 only (policy.server_context).
- A connection's first byte (TLS or plain HTTP) is the listener's business:
  daemon.transports.tls_gate.

The modules, each importing only those above it: certinfo, policy, child, store, service.
"""

from daemon.tls.certinfo import MAX_PEM_BYTES, CertInfo, TlsError, certificate_names, pin
from daemon.tls.child import child_main, run_child
from daemon.tls.policy import MODES, secured, server_context
from daemon.tls.service import RENEW_DAYS, Tls
from daemon.tls.store import CERT_FILE, INFO_FILE, KEY_FILE, read_info

__all__ = [
    "CERT_FILE",
    "INFO_FILE",
    "KEY_FILE",
    "MAX_PEM_BYTES",
    "MODES",
    "RENEW_DAYS",
    "CertInfo",
    "Tls",
    "TlsError",
    "certificate_names",
    "child_main",
    "pin",
    "read_info",
    "run_child",
    "secured",
    "server_context",
]
