"""``python -m dagster_project``: print what the example pipelines hold (checkpoint and sums)."""

import ops
from state import CheckpointLog, resolve_warehouse

from .pipelines import EXAMPLES


def main() -> None:
    spark = ops.spark_session()
    for pipeline in EXAMPLES:
        layout = pipeline.layout()
        last = CheckpointLog(spark, layout).latest()
        sums = pipeline.read_sink(spark, "sums")
        if last is None or sums.empty:
            print(f"{pipeline.name}: no checkpoint yet")
            continue
        print(f"{pipeline.name}: checkpoint {last.checkpoint_id} (batch {last.batch_id}), "
              f"totals in order: {' '.join(str(int(v)) for v in sums['total'])}")
    print(f"tables under {resolve_warehouse()}")


if __name__ == "__main__":
    main()
