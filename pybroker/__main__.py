import logging
import os
import sys

from pybroker.cli.main import ADMIN_TOOLS, NODE_TOOLS, main

code = main()
if not (len(sys.argv) > 1 and sys.argv[1] in (*ADMIN_TOOLS, *NODE_TOOLS)):
    # A node that has shut down (its logs closed, checkpoints and the clean-shutdown marker
    # written) skips the interpreter's teardown of its heap, which took 1-2 s: `pybroker cluster`
    # and the test fixtures wait for the process to end.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
raise SystemExit(code)
