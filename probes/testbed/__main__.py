"""`python -m probes.testbed`: the same command as `gwctl testbed`."""

import sys

from probes.testbed.cli import main

sys.exit(main())
