"""What the sensor tests share: one tick of a sensor, and a job to point sensors at."""

import dagster as dg

from assets import WarehouseResource


def tick(sensor, instance, cursor, warehouse):
    """Evaluate one tick of ``sensor`` with ``cursor``, as the daemon would."""
    context = dg.build_sensor_context(instance=instance, cursor=cursor,
                                      resources={"warehouse": WarehouseResource(path=warehouse)})
    return sensor.evaluate_tick(context)


@dg.op
def _noop():
    pass


@dg.job
def placeholder_job():
    """What the sensors under test request (never run)."""
    _noop()
