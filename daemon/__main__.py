import sys

from daemon.service import main

sys.exit(main())
