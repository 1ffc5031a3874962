#!/usr/bin/env bash
# Install everything (gateway, local engine, models, test tools), make sure Redis and
# PostgreSQL answer, then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
GW_EXTRAS=test bash scripts/install.sh
bash scripts/services.sh
exec .venv/bin/python -m pytest "$@"
