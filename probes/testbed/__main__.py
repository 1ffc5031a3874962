"""`python -m probes.testbed`: the same command as `gwctl testbed`."""

import sys

from gateway.cli.testbed import main

sys.exit(main())
