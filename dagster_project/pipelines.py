"""The example pipelines: the KX documentation's running sum, keyed on ``y`` and unkeyed."""


import pandas as pd

import ops as sp

SCHEMA = {"x": "long", "y": "long"}
# The seed example's input: x,y = 1,0 2,0 3,0 1,1 2,1 3,1 4,0
SEED_ROWS = [{"x": x, "y": y} for x, y in [(1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (3, 1), (4, 0)]]


def running_sum(op: sp.Op, md: sp.Metadata, data: pd.DataFrame) -> pd.DataFrame:
    """Add ``x`` to the previous sum of the key (or of the whole stream when unkeyed)."""
    total = sp.get(op, md) + data["x"].cumsum()
    sp.set(op, md, int(total.iloc[-1]))
    return data.assign(total=total)


running_sum_keyed = (sp.read.from_callback("publish", key="y", schema=SCHEMA)
                     .map(running_sum, state=0)
                     .write.to_console()
                     .write.to_delta("sums")).named("running_sum")

running_sum_unkeyed = (sp.read.from_callback("publish", schema=SCHEMA)
                       .map(running_sum, state=0)
                       .write.to_console()
                       .write.to_delta("sums")).named("running_sum_unkeyed")

EXAMPLES = (running_sum_keyed, running_sum_unkeyed)
