"""`python -m daemon.tls REQUEST`: the certificate helper (daemon.tls.child)."""

import sys

from daemon.tls.child import child_main

sys.exit(child_main(sys.argv[1:]))
