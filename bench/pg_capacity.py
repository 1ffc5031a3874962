"""How many request records one PostgreSQL takes a second, through the gateway's own write path
(`gateway.persistence.requests.write_batch`: the records and the spend table, one transaction a
batch), on a private cluster it starts itself (fsync on) (initdb in a temporary directory, never the
machine's shared one). Batches of 5 are what a replica at ~25 req/s writes (flush every 0.2 s);
busier replicas write bigger ones (up to `persistence.batch_size`, 500).

    python bench/pg_capacity.py [--records 20000] [--batches 5,50,500]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config import DatabaseConfig  # noqa: E402
from gateway.persistence import migrate  # noqa: E402
from gateway.persistence.engine import make_engine  # noqa: E402
from gateway.persistence.requests import write_batch  # noqa: E402
from tests.gateway.persistence.factories import record  # noqa: E402
from tests.ops.cluster import Postgres, free_port  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20000, help="records per batch size")
    parser.add_argument("--batches", default="5,50,500")
    args = parser.parse_args()
    pg = Postgres(free_port(), fsync=True)  # durable commits, as in production
    try:
        pg.init().start()
        engine = make_engine(DatabaseConfig(url=pg.url))
        migrate.upgrade(engine, "head")
        print(f"{'batch':>6} {'records/s':>10} {'commits/s':>10} {'WAL B/record':>13}")
        for size in (int(b) for b in args.batches.split(",")):
            n = args.records - args.records % size
            wal0 = float(pg.psql("select pg_current_wal_lsn() - '0/0'"))
            start = time.perf_counter()
            for i in range(0, n, size):
                batch = [(time.time(), record(f"cap-{size}-{j}")) for j in range(i, i + size)]
                assert not write_batch(engine, batch)
            took = time.perf_counter() - start
            wal = float(pg.psql("select pg_current_wal_lsn() - '0/0'")) - wal0
            print(f"{size:>6} {n / took:>10.0f} {n / size / took:>10.0f} {wal / n:>13.0f}")
        engine.dispose()
    finally:
        pg.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
